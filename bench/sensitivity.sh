#!/usr/bin/env bash
# Sensitivity speed (the sensitivity issue's targets):
#   bash bench/sensitivity.sh [QPLACE] [THREADS]
# Node-granularity sensitivity of the generated ResNet-50 at 224x224 (tests/models/gen_resnet50.py,
# symbolic batch) over SENS_BENCH_N synthetic samples (default 32) in batches of SENS_BENCH_BATCH
# rows (default 8: the session is planned once whatever the batch, and a batch of 8 keeps the
# reference activations (0.8 GiB) within the default --cache_bytes of 1 GiB; at batch 32 they
# take 3.15 GiB, so pass SENS_BENCH_CACHE=4G with SENS_BENCH_BATCH=32), calibration method max.
# SENS_BENCH_ROUNDS rounds (default 3), each running both paths, in alternating order (round 1
# incremental first, round 2 naive first, ...) so that a machine that speeds up or slows down
# over minutes favours neither; each round's ratios are printed, then their medians. Both paths
# run in one invocation of this script:
#   - incremental (default) against --no_incremental: probe time ratio, target >= 2x;
#   - incremental total time against (targets x one reference pass over the samples), target
#     <= 0.5x; the reference pass is the --no_incremental run's (a plain full pass of the scoring
#     session, fused like any session, every overlay bypassed: the incremental run's own
#     reference also fills the activation cache, so it is slower); compare it with a plain fused
#     pass without overlays (qplace bench MODEL --shape input=Bx3x224x224), which can fuse and
#     keep blocked more than a session holding every probe's edges;
#   - the same total against the naive run's probes (72 full passes, each with its target
#     quantized, run side by side on the probe workers as the incremental probes are): a
#     stricter denominator, since one full pass on a worker costs less than the 2-thread
#     reference pass;
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
ROUNDS="${SENS_BENCH_ROUNDS:-3}"
WORK="$ROOT/build/bench/sensitivity"
GEN="$ROOT/.cache/models/generated"
MODEL="$GEN/resnet50.onnx"
mkdir -p "$WORK" "$GEN"
[ -x "$QPLACE" ] || { echo "bench: $QPLACE missing (bash scripts/build.sh)" >&2; exit 1; }
case "$ROUNDS" in '' | *[!0-9]* | 0) echo "bench: SENS_BENCH_ROUNDS must be >= 1" >&2; exit 2 ;; esac
. "$ROOT/bench/lib.sh"
generate "$ROOT/tests/models/gen_resnet50.py" "$MODEL"
common=(sensitivity --onnx_path "$MODEL" --granularity node --calibration_method max
        --num_synthetic_samples "$N" --calibration_shapes "input:${B}x3x224x224"
        --threads "$THREADS" --cache_bytes "$CACHE" --quiet)
run_path() { # run_path incremental|naive ROUND
    local extra=()
    [ "$1" = naive ] && extra=(--no_incremental)
    echo "bench: round $2, $1 ($N samples, batch $B, $THREADS threads, cache $CACHE)" >&2
    "$QPLACE" "${common[@]}" "${extra[@]}" --output_json "$WORK/$1.$2.json" 2>"$WORK/$1.$2.log"
}
rm -f "$WORK"/incremental.*.json "$WORK"/naive.*.json
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then run_path incremental "$r"; run_path naive "$r"
    else run_path naive "$r"; run_path incremental "$r"; fi
done
/usr/bin/python3 - "$WORK" "$ROUNDS" "$MODEL" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
rows, worst = [], 0.0
for r in range(1, rounds + 1):
    a = json.load(open(f"{work}/incremental.{r}.json")); b = json.load(open(f"{work}/naive.{r}.json"))
    assert a['scores'].keys() == b['scores'].keys()
    worst = max([worst] + [abs(a['scores'][k] - b['scores'][k]) / max(abs(b['scores'][k]), 1e-300)
                           for k in a['scores']])
    ta, tb = a['timings'], b['timings']
    n = len(a['targets'])
    rows.append(dict(
        speedup=tb['probes_s'] / ta['probes_s'], total=ta['total_s'] / (n * tb['reference_s']),
        total_cache=ta['total_s'] / (n * ta['reference_s']), strict=ta['total_s'] / tb['probes_s'],
        cpu_speedup=tb['probes_cpu_s'] / ta['probes_cpu_s'],
        cpu_total=ta['total_cpu_s'] / (n * tb['reference_cpu_s']), a=ta, b=tb))
    print(f"round {r}: targets {n} (unprobed {len(a['unprobed'])}, failed {len(a['failed'])}), "
          f"samples {a['num_evaluation_samples']}, probe workers {ta.get('probe_workers', 1)}")
    print(f"  reference pass          {ta['reference_s']:.2f} s (incremental run, fills the cache), "
          f"{tb['reference_s']:.2f} s (naive run)")
    print(f"  probes                  incremental {ta['probes_s']:.2f} s ({ta['nodes_executed']} node runs), "
          f"naive {tb['probes_s']:.2f} s ({tb['nodes_executed']} node runs)")
    print(f"  total incremental       {ta['total_s']:.2f} s (calibration {ta['calibration_s']:.2f} s)")
    x = rows[-1]
    print(f"  speed-up                {x['speedup']:.2f}x (CPU {x['cpu_speedup']:.2f}x)")
    print(f"  total / (targets x ref) {x['total']:.2f}x (CPU {x['cpu_total']:.3f}; "
          f"{x['total_cache']:.2f}x against the caching reference pass; "
          f"{x['strict']:.2f}x against the naive probes' {n} full passes)")
med = lambda k: statistics.median(x[k] for x in rows)
print(f"median of {rounds} round(s):")
print(f"speed-up incremental vs naive    {med('speedup'):.2f}x (target >= 2x; CPU {med('cpu_speedup'):.2f}x)")
print(f"total / (targets x ref pass)     {med('total'):.2f}x (target <= 0.5x; CPU {med('cpu_total'):.3f}; "
      f"{med('total_cache'):.2f}x against the caching reference pass)")
print(f"total / naive probes (stricter)  {med('strict'):.2f}x (against the naive run's full passes, "
      f"which the probe workers run side by side: each costs less than a reference pass)")
print(f"max relative score difference    {worst:.3g} (must be <= 1e-9)")
a = json.load(open(f"{work}/incremental.1.json"))
try:  # the floor of incremental / naive: MACs downstream of each target (Conv and Gemm)
    import math, onnx
    from onnx import shape_inference
    m = onnx.load(sys.argv[3])
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
    n = len(a['targets'])
    share = sum(sum(mac[x] for x in down(t['name'])) for t in a['targets']) / (tot * n)
    print(f"floor: MACs downstream / all     {share:.3f} (best speed-up {1 / share:.2f}x)")
except Exception as e:
    print(f"floor: not computed ({e})")
if worst > 1e-9: sys.exit(1)
PY
