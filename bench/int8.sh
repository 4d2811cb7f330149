#!/usr/bin/env bash
# The integer path against the float engine and ONNX Runtime, batch 1, in one run:
#   bash bench/int8.sh [QPLACE] [THREADS] [ITERATIONS]
# For ResNet-50 and ViT-tiny (generated), PaddleOCR det, rec and cls: the float model on
# qplace's float engine; `qplace quantize` output (trt policy, synthetic calibration) with
# --high_precision_dtype fp32 and with the default fp16, each on qplace --int8 auto, qplace --int8 off (the fake-quantization oracle) and ONNX Runtime on the
# same file (`bench --compare-ort`). Prints the ISA of the run and the ratios the issue's targets
# are stated in: float engine / int8 path, ORT on the Q/DQ file / int8 path, fp16 / fp32 output.
# This VM's speed drifts by 10-20% within minutes, more than some targets' margins, so each row
# runs INT8_BENCH_ROUNDS rounds (default 3) of float engine, fp32 file, fp16 file in turn:
# latencies are the median of the rounds' medians, each ratio the median of the rounds' own
# ratios (both sides of a ratio from one round, a minute apart at most), with the rounds'
# least and greatest in brackets.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QPLACE="${1:-$ROOT/build/qplace}"
THREADS="${2:-2}"
ITERS="${3:-20}"
ROUNDS="${INT8_BENCH_ROUNDS:-3}"
GEN="$ROOT/.cache/models/generated"
MODELS="$ROOT/.cache/models"
OUT="${INT8_BENCH_DIR:-$ROOT/.cache/int8-bench}"
mkdir -p "$GEN" "$OUT"
. "$ROOT/bench/lib.sh"
for m in resnet50 vit_tiny; do
    generate "$ROOT/tests/models/gen_$m.py" "$GEN/$m.onnx"
done
rows=(
    "resnet50|$GEN/resnet50.onnx|input=1x3x224x224"
    "vit_tiny|$GEN/vit_tiny.onnx|input=1x3x224x224"
    "det|$MODELS/ch_PP-OCRv4_det_infer.onnx|x=1x3x640x640"
    "rec|$MODELS/ch_PP-OCRv4_rec_infer.onnx|x=1x3x48x320"
    "cls|$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx|x=1x3x48x192"
)
med() { # med JSON KEY.PATH
    /usr/bin/python3 -c 'import json,sys; d=json.loads(sys.argv[1]); k=sys.argv[2].split(".")
for p in k: d=d[p]
print(d)' "$1" "$2"
}
bench() { # bench MODEL SHAPE EXTRA...
    local m="$1" sh="$2"
    shift 2
    "$QPLACE" bench "$m" --shape "$sh" --threads "$THREADS" --iterations "$ITERS" --warmup 3 \
        --json "$@"
}
isa=""
printf '| model | float engine ms | int8 path fp32 / fp16 ms | --int8 off fp32 ms | ORT on Q/DQ fp32 / fp16 ms | float / int8 | ORT / int8 | fp16 / fp32 int8 |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for row in "${rows[@]}"; do
    IFS='|' read -r name model shape <<<"$row"
    [ -s "$model" ] || { printf '| %s | missing %s |\n' "$name" "$model"; continue; }
    for hp in fp32 fp16; do
        q="$OUT/${name}_$hp.onnx"
        [ -s "$q" ] || "$QPLACE" quantize --onnx_path "$model" --output_path "$q" \
            --high_precision_dtype "$hp" --calibration_shapes "${shape/=/:}" >/dev/null
    done
    runs=()
    for ((k = 0; k < ROUNDS; k++)); do
        f=$(bench "$model" "$shape")
        isa=$(med "$f" isa)
        a32=$(bench "$OUT/${name}_fp32.onnx" "$shape" --compare-ort --ort-script "$ROOT/bench/ort_bench.js" --ort-npm "$ROOT/.cache/npm")
        a16=$(bench "$OUT/${name}_fp16.onnx" "$shape" --compare-ort --ort-script "$ROOT/bench/ort_bench.js" --ort-npm "$ROOT/.cache/npm")
        runs+=("[$f, $a32, $a16]")
    done
    o32=$(bench "$OUT/${name}_fp32.onnx" "$shape" --int8 off)
    /usr/bin/python3 - "$name" "$o32" "${runs[@]}" <<'PY'
import json, statistics, sys
name, off = sys.argv[1], json.loads(sys.argv[2])["qplace"]["median_ms"]
rounds = [json.loads(x) for x in sys.argv[3:]]
def lat(i, eng):
    return [r[i][eng]["median_ms"] for r in rounds]
def m(v):
    return statistics.median(v)
def ratio(num, den):
    v = [a / b for a, b in zip(num, den)]
    return "%.2fx (%.2f-%.2f)" % (m(v), min(v), max(v))
fm, i32, i16 = lat(0, "qplace"), lat(1, "qplace"), lat(2, "qplace")
r32, r16 = lat(1, "ort"), lat(2, "ort")
fp = [a / b for a, b in zip(i16, i32)]
print("| %s | %.1f | %.1f / %.1f | %.1f | %.1f / %.1f | %s | %s | %.2f (%.2f-%.2f) |" % (
    name, m(fm), m(i32), m(i16), off, m(r32), m(r16), ratio(fm, i32), ratio(r32, i32),
    m(fp), min(fp), max(fp)))
PY
done
printf '\nISA: %s, %s threads, %s iterations, %s rounds per row, batch 1 (qplace and ORT in the same run per row)\n' \
    "$isa" "$THREADS" "$ITERS" "$ROUNDS"
