#!/usr/bin/env bash
# Sensitivity speed (the sensitivity issue's targets):
#   bash bench/sensitivity.sh [QPLACE] [THREADS]
# Node-granularity sensitivity of the generated ResNet-50 at 224x224 (tests/models/gen_resnet50.py,
# symbolic batch) over SENS_BENCH_N synthetic samples (default 32) in batches of SENS_BENCH_BATCH
# rows (default 32: one batch, so the engine re-plans once per probe rather than once per probe
# and sample), calibration method max. Both paths run in one invocation of this script:
#   - incremental (default) against --no_incremental: probe time ratio, target >= 2x;
#   - incremental total time against (targets x one reference pass over the samples), target
#     <= 0.5x;
#   - the scores of both paths agree (relative difference <= 1e-9).
# Writes into build/bench/sensitivity/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QPLACE="${1:-$ROOT/build/qplace}"
THREADS="${2:-2}"
N="${SENS_BENCH_N:-32}"
B="${SENS_BENCH_BATCH:-32}"
WORK="$ROOT/build/bench/sensitivity"
GEN="$ROOT/.cache/models/generated"
MODEL="$GEN/resnet50.onnx"
mkdir -p "$WORK" "$GEN"
[ -x "$QPLACE" ] || { echo "bench: $QPLACE missing (bash scripts/build.sh)" >&2; exit 1; }
if [ ! -s "$MODEL" ] || [ "$ROOT/tests/models/gen_resnet50.py" -nt "$MODEL" ]; then
    echo "bench: generating $MODEL" >&2
    /usr/bin/python3 "$ROOT/tests/models/gen_resnet50.py" "$MODEL"
fi
common=(sensitivity --onnx_path "$MODEL" --granularity node --calibration_method max
        --num_synthetic_samples "$N" --calibration_shapes "input:${B}x3x224x224"
        --threads "$THREADS" --quiet)
echo "bench: incremental ($N samples, batch $B, $THREADS threads)" >&2
"$QPLACE" "${common[@]}" --output_json "$WORK/incremental.json" 2>"$WORK/incremental.log"
echo "bench: --no_incremental" >&2
"$QPLACE" "${common[@]}" --no_incremental --output_json "$WORK/naive.json" 2>"$WORK/naive.log"
/usr/bin/python3 - "$WORK/incremental.json" "$WORK/naive.json" <<'PY'
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
print(f"total / (targets x ref pass)     {ta['total_s'] / (n * ta['reference_s']):.2f}x (target <= 0.5x)")
print(f"node runs incremental / naive    {ta['nodes_executed'] / tb['nodes_executed']:.3f}")
print(f"max relative score difference    {worst:.3g} (must be <= 1e-9)")
if worst > 1e-9: sys.exit(1)
PY
