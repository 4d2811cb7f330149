#!/usr/bin/env bash
# Accuracy of quantized PaddleOCR rec and cls on rendered text lines with labels:
#   bash bench/ocr_accuracy.sh [QPLACE] [THREADS]
# QPLACE defaults to build/qplace, THREADS to 2. Renders OCR_EVAL_LINES evaluation lines
# (default 400) and OCR_CALIB_LINES calibration lines (default 100, distinct strings) from text
# on this machine (bench/ocr_accuracy.py says which files), quantizes each model per
# configuration with `qplace quantize` calibrated on the calibration lines, and runs every
# file in qplace's engine (`qplace run`, OCR_BATCH lines per run, default 50) and in ONNX
# Runtime (bench/ocr_ort.js). Prints a markdown table and writes it with the numbers as JSON to
# OCR_OUT (default build/bench/ocr): ocr_accuracy.md, ocr_accuracy.json.
#
# QUANT_CONFIGS  rows (default "float default fp16 auto auto16 max percentile"); NAME=FLAGS adds a row of
#                your own, entries then separated by ';':
#                QUANT_CONFIGS='float;default;mine=--calibration_method max --high_precision_dtype fp32'
# QP_INT8_MODES  one qplace row per value, run with --int8 VALUE ("off auto"; default empty:
#                one row, no flag)
# QPLACE_RUN_FLAGS appended to every `qplace run`
# OCR_SEED (1), OCR_WIDTH (320, the recognizer's input width), OCR_MODELS (rec,cls)
# OCR_JITTER     N > 0 also reads N copies of each quantized file whose activation scales are
#                each multiplied by a random factor within 1 +- OCR_JITTER_REL (default 5e-4),
#                with `qplace run --int8 off`: mean, min and max accuracy (how much a figure
#                owes to where one calibration's rounding ties fall)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QPLACE="${1:-$ROOT/build/qplace}"
THREADS="${2:-2}"
[ -x "$QPLACE" ] || { echo "bench: $QPLACE missing (bash scripts/build.sh)" >&2; exit 1; }
[ -f "$ROOT/.cache/npm/node_modules/onnxruntime-node/package.json" ] ||
    { echo "bench: onnxruntime-node missing (bash scripts/setup.sh)" >&2; exit 1; }
echo "OpenMP: OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-unset};" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exec /usr/bin/python3 "$ROOT/bench/ocr_accuracy.py" bench --qplace "$QPLACE" \
    --models "$ROOT/.cache/models" --npm "$ROOT/.cache/npm" --work "${OCR_OUT:-$ROOT/build/bench/ocr}" \
    --threads "$THREADS" --batch "${OCR_BATCH:-50}" --n_eval "${OCR_EVAL_LINES:-400}" \
    --n_calib "${OCR_CALIB_LINES:-100}" --seed "${OCR_SEED:-1}" --width "${OCR_WIDTH:-320}" \
    --configs "${QUANT_CONFIGS:-float default fp16 auto auto16 max percentile}" \
    --int8_modes "${QP_INT8_MODES:-}" --run_flags "${QPLACE_RUN_FLAGS:-}" \
    --which "${OCR_MODELS:-rec,cls}" --jitter "${OCR_JITTER:-0}" --jitter_rel "${OCR_JITTER_REL:-5e-4}"
