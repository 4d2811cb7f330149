#!/usr/bin/env bash
# Sensitivity speed (the sensitivity issue's targets):
#   bash bench/sensitivity.sh [QPLACE] [THREADS]
# Node-granularity sensitivity of the generated ResNet-50 at 224x224 (tests/models/gen_resnet50.py,
# symbolic batch) over SENS_BENCH_N synthetic samples (default 32) in batches of SENS_BENCH_BATCH
# rows (default 8: the session is planned once whatever the batch, and a batch of 8 keeps the
# reference activations (0.8 GiB) within the default --cache_bytes of 1 GiB; at batch 32 they
# take 3.15 GiB, so pass SENS_BENCH_CACHE=4G with SENS_BENCH_BATCH=32), calibration method max.
# Both paths run in one invocation of this script:
#   - incremental (default) against --no_incremental: probe time ratio, target >= 2x;
#   - incremental total time against (targets x one reference pass over the samples), target
#     <= 0.5x; the reference pass is the --no_incremental run's (a plain full pass of the scoring
#     session, fused like any session, every overlay bypassed: the incremental run's own
#     reference also fills the activation cache, so it is slower); compare it with a plain fused
#     pass without overlays (qplace bench MODEL --shape input=Bx3x224x224), which can fuse and
#     keep blocked more than a session holding every probe's edges;
#   - the floor: the mean share of the multiply-accumulates downstream of each target's edges
#     (what re-running only the downstream nodes must still compute);
#   - the scores of both paths agree (relative difference <= 1e-9);
#   - the two ratios again in process CPU time, which a shared machine's load disturbs less.
# Writes into build/bench/sensitivity/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QPLACE="${1:-$ROOT/build/qplace}"
THREADS="${2:-2}"
N="${SENS_BENCH_N:-32}"
B="${SENS_BENCH_BATCH:-8}"
CACHE="${SENS_BENCH_CACHE:-1G}"
WORK="$ROOT/build/bench/sensitivity"
GEN="$ROOT/.cache/models/generated"
MODEL="$GEN/resnet50.onnx"
mkdir -p "$WORK" "$GEN"
[ -x "$QPLACE" ] || { echo "bench: $QPLACE missing (bash scripts/build.sh)" >&2; exit 1; }
. "$ROOT/bench/lib.sh"
generate "$ROOT/tests/models/gen_resnet50.py" "$MODEL"
common=(sensitivity --onnx_path "$MODEL" --granularity node --calibration_method max
        --num_synthetic_samples "$N" --calibration_shapes "input:${B}x3x224x224"
        --threads "$THREADS" --cache_bytes "$CACHE" --quiet)
echo "bench: incremental ($N samples, batch $B, $THREADS threads, cache $CACHE)" >&2
"$QPLACE" "${common[@]}" --output_json "$WORK/incremental.json" 2>"$WORK/incremental.log"
echo "bench: --no_incremental" >&2
"$QPLACE" "${common[@]}" --no_incremental --output_json "$WORK/naive.json" 2>"$WORK/naive.log"
/usr/bin/python3 - "$WORK/incremental.json" "$WORK/naive.json" "$MODEL" <<'PY'
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
ta, tb = a['timings'], b['timings']
n = len(a['targets'])
worst = max(abs(a['scores'][k] - b['scores'][k]) / max(abs(b['scores'][k]), 1e-300)
            for k in a['scores'])
assert a['scores'].keys() == b['scores'].keys()
print(f"targets                          {n} (unprobed {len(a['unprobed'])}, failed {len(a['failed'])})")
print(f"samples                          {a['num_evaluation_samples']}")
print(f"reference pass over the samples  {ta['reference_s']:.2f} s (incremental run), {tb['reference_s']:.2f} s (naive run)")
print(f"probes: incremental              {ta['probes_s']:.2f} s, {ta['nodes_executed']} node runs")
print(f"probes: --no_incremental         {tb['probes_s']:.2f} s, {tb['nodes_executed']} node runs")
print(f"total: incremental               {ta['total_s']:.2f} s")
print(f"speed-up incremental vs naive    {tb['probes_s'] / ta['probes_s']:.2f}x (target >= 2x)")
print(f"total / (targets x ref pass)     {ta['total_s'] / (n * tb['reference_s']):.2f}x (target <= 0.5x; "
      f"{ta['total_s'] / (n * ta['reference_s']):.2f}x against the caching reference pass)")
print(f"node runs incremental / naive    {ta['nodes_executed'] / tb['nodes_executed']:.3f}")
# CPU time (all threads) of the same phases: on a shared machine the wall times follow the other
# jobs' load, which differs between the two runs; the CPU times follow the work (OpenMP
# spin-waiting counts in them: compare with OMP_WAIT_POLICY=passive, the CLI's choice on a busy
# machine).
print(f"CPU: probes incremental / naive  {ta['probes_cpu_s'] / tb['probes_cpu_s']:.3f} "
      f"({ta['probes_cpu_s']:.2f} s / {tb['probes_cpu_s']:.2f} s; speed-up "
      f"{tb['probes_cpu_s'] / ta['probes_cpu_s']:.2f}x)")
print(f"CPU: total / (targets x ref)     {ta['total_cpu_s'] / (n * tb['reference_cpu_s']):.3f} "
      f"(reference pass {tb['reference_cpu_s']:.2f} s CPU)")
print(f"max relative score difference    {worst:.3g} (must be <= 1e-9)")
try:  # the floor of incremental / naive: MACs downstream of each target (Conv and Gemm)
    import math, onnx
    from onnx import shape_inference
    m = onnx.load(sys.argv[3])
    rows = a['num_evaluation_samples']
    for i in m.graph.input:
        d = i.type.tensor_type.shape.dim
        if d and d[0].dim_param: d[0].dim_value = 1
    m = shape_inference.infer_shapes(m)
    shp = {v.name: [x.dim_value for x in v.type.tensor_type.shape.dim]
           for v in list(m.graph.value_info) + list(m.graph.output)}
    inits = {t.name: list(t.dims) for t in m.graph.initializer}
    mac, users = {}, {}
    for nd in m.graph.node:
        w = inits.get(nd.input[1], []) if nd.op_type in ('Conv', 'Gemm') and len(nd.input) > 1 else []
        mac[nd.name] = math.prod(shp.get(nd.output[0], [0])) * math.prod(w[1:]) if w else 0
        for x in nd.input: users.setdefault(x, []).append(nd)
    byname = {nd.name: nd for nd in m.graph.node}
    def down(t):
        seen, st = set(), [t]
        while st:
            x = st.pop()
            if x in seen: continue
            seen.add(x)
            st += [u.name for o in byname[x].output for u in users.get(o, [])]
        return seen
    tot = sum(mac.values())
    share = sum(sum(mac[x] for x in down(t['name'])) for t in a['targets']) / (tot * n)
    print(f"floor: MACs downstream / all     {share:.3f} (best speed-up {1 / share:.2f}x)")
except Exception as e:
    print(f"floor: not computed ({e})")
if worst > 1e-9: sys.exit(1)
PY
