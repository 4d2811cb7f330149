#!/usr/bin/env bash
# Engine speed against ONNX Runtime, batch 1, on the models and shapes of the speed targets:
#   bash bench/engine.sh [QPLACE] [THREADS] [ITERATIONS]
# QPLACE defaults to build/qplace, THREADS to 2, ITERATIONS to 20 (after 3 warm-up runs).
# ResNet-50 and ViT-tiny are generated (tests/models/gen_*.py) into .cache/models/generated;
# the PaddleOCR models come from scripts/setup.sh (.cache/models). Each model runs through
# `qplace bench --compare-ort` (qplace first, then ORT in a child process: same inputs, threads,
# warm-up and iterations) and the table shows median and min latency, their ratios qplace/ORT,
# peak RSS (whole process, including load; ORT's includes node itself) and whether the outputs
# agree (rtol 1e-3, atol 1e-4).
# The ISA column says what each engine ran with: qplace's kernels follow oneDNN's ISA, which
# ONEDNN_MAX_CPU_ISA caps (ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 machine runs what an AVX2-only
# machine runs); ONNX Runtime's MLAS dispatches on the CPU alone, so its ISA is the CPU's.
# ENGINE_BENCH_PAIRS (default 3) repeats each same-run pair: the VM's own speed drifts by up to
# 25% from minute to minute, so a row shows the median over the pairs of each figure and the
# latency ratio of every pair.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QPLACE="${1:-$ROOT/build/qplace}"
THREADS="${2:-2}"
ITERS="${3:-20}"
PAIRS="${ENGINE_BENCH_PAIRS:-3}"
GEN="$ROOT/.cache/models/generated"
MODELS="$ROOT/.cache/models"
mkdir -p "$GEN"
. "$ROOT/bench/lib.sh"
for m in resnet50 vit_tiny; do
    generate "$ROOT/tests/models/gen_$m.py" "$GEN/$m.onnx"
done

rows=(
    "ResNet-50|$GEN/resnet50.onnx|input=1x3x224x224"
    "ViT-tiny|$GEN/vit_tiny.onnx|input=1x3x224x224"
    "PaddleOCR det|$MODELS/ch_PP-OCRv4_det_infer.onnx|x=1x3x640x640"
    "PaddleOCR rec|$MODELS/ch_PP-OCRv4_rec_infer.onnx|x=1x3x48x320"
)
printf '| model | input | ISA qplace / ORT | qplace median / min ms | ORT median / min ms | ratio median (min) | ratio of each pair | peak RSS qplace / ORT MB | RSS ratio | outputs |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for row in "${rows[@]}"; do
    IFS='|' read -r name model shape <<<"$row"
    if [ ! -s "$model" ]; then
        printf '| %s | %s | | missing %s | | | | | | |\n' "$name" "${shape#*=}" "$model"
        continue
    fi
    runs=()
    for ((k = 0; k < PAIRS; k++)); do
        runs+=("$("$QPLACE" bench "$model" --shape "$shape" --threads "$THREADS" \
            --iterations "$ITERS" --warmup 3 --compare-ort --json \
            --ort-script "$ROOT/bench/ort_bench.js" --ort-npm "$ROOT/.cache/npm")")
    done
    /usr/bin/python3 -c '
import json, statistics as st, sys
rs = [json.loads(x) for x in sys.argv[3:]]
def med(f): return st.median(f(r) for r in rs)
pairs = ", ".join("%.2f%s" % (r["qplace"]["median_ms"] / r["ort"]["median_ms"],
                               "" if "passive" not in r.get("omp_wait", "") else " (passive)")
                  for r in rs)
isas = "/".join(sorted({r.get("isa", "?") for r in rs})) + " / " + \
    "/".join(sorted({r.get("cpu_isa", "?") for r in rs}))
print("| %s | %s | %s | %.1f / %.1f | %.1f / %.1f | %.2f (%.2f) | %s | %.0f / %.0f | %.2f | %s |" % (
    sys.argv[1], sys.argv[2], isas, med(lambda r: r["qplace"]["median_ms"]),
    med(lambda r: r["qplace"]["min_ms"]), med(lambda r: r["ort"]["median_ms"]),
    med(lambda r: r["ort"]["min_ms"]),
    med(lambda r: r["qplace"]["median_ms"] / r["ort"]["median_ms"]),
    med(lambda r: r["qplace"]["min_ms"] / r["ort"]["min_ms"]), pairs,
    med(lambda r: r["qplace"]["peak_rss_kb"]) / 1024, med(lambda r: r["ort"]["peak_rss_kb"]) / 1024,
    med(lambda r: r["ratio"]["rss"]),
    "agree" if all(r["outputs_match"] for r in rs) else "DIFFER"))
' "$name" "${shape#*=}" "${runs[@]}"
done
echo
echo "threads $THREADS${ONEDNN_MAX_CPU_ISA:+, ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA}, $PAIRS same-run pairs of $ITERS timed runs after 3 warm-up each, onnxruntime-node $(node -p "require('$ROOT/.cache/npm/node_modules/onnxruntime-node/package.json').version"), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
