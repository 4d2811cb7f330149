#!/usr/bin/env bash
# The main job, end to end: sets up the machine, builds qplace, and runs it on a real model
# (PaddleOCR's text detector, fetched by setup into .cache/models).
#   bash scripts/demo.sh [MODEL.onnx]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
model="${1:-.cache/models/ch_PP-OCRv4_det_infer.onnx}"

bash scripts/setup.sh
bash scripts/build.sh
echo
echo "\$ build/qplace info $model"
build/qplace info "$model"
