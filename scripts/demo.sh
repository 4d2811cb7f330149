#!/usr/bin/env bash
# The main job, end to end: sets up the machine, builds qplace, renders real-looking text lines
# (tests/data/ocr/gen_ocr_data.py) and quantizes PaddleOCR's text recognizer (fetched by setup into
# .cache/models) to INT8 Q/DQ with them, printing the summary: what was quantized, how it was
# calibrated, and how far the quantized model's outputs drift from the float model's on held-out
# lines. Then checks the written model's Q/DQ topology against the placement it was made from.
#   bash scripts/demo.sh [MODEL.onnx]    (a model taking 1x3x48x320 text lines)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
model="${1:-.cache/models/ch_PP-OCRv4_rec_infer.onnx}"
out=.cache/demo
stem="$(basename "${model%.onnx}")"

bash scripts/setup.sh
bash scripts/build.sh
mkdir -p "$out"
echo
echo "\$ /usr/bin/python3 tests/data/ocr/gen_ocr_data.py --kind rec ..."
/usr/bin/python3 tests/data/ocr/gen_ocr_data.py --kind rec --n 16 --seed 1 --out "$out/rec_calib.npz"
/usr/bin/python3 tests/data/ocr/gen_ocr_data.py --kind rec --n 8 --seed 2 --out "$out/rec_eval.npz"
echo
cmd=(build/qplace quantize --onnx_path "$model" --calibration_data_path "$out/rec_calib.npz"
     --eval_data_path "$out/rec_eval.npz" --calibration_method entropy
     --placement_out "$out/$stem.placement.json" --output_path "$out/$stem.quant.onnx")
echo "\$ ${cmd[*]}"
"${cmd[@]}"
echo
echo "\$ build/qplace diff $out/$stem.quant.onnx $out/$stem.placement.json"
build/qplace diff "$out/$stem.quant.onnx" "$out/$stem.placement.json"
