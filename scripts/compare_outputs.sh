#!/usr/bin/env bash
# compare_outputs.sh OLD_QPLACE NEW_QPLACE [WORKDIR]: the byte-identity check of a refactor.
# Runs both binaries on the same command lines over the real models (.cache/models: PaddleOCR
# cls/rec/det, the generated ResNet-50 and ViT-tiny) — quantize (synthetic and .npz data, fp16
# and fp32 high precision, placements written), calibrate (ranges JSON) and sensitivity (op type
# and node) — and compares every file written: models, placements and ranges byte for byte, the
# sensitivity JSON with its "timings" object (wall and CPU seconds) left out. Exit 0 when all
# are the same. Build the old binary from a worktree: `git worktree add /tmp/old REV`, then
# `cmake -S /tmp/old -B /tmp/old/build -G Ninja -DQP_TESTS=OFF && ninja -C /tmp/old/build qplace`.
set -uo pipefail
old="$1" new="$2"
work="${3:-$(mktemp -d "${TMPDIR:-/tmp}/qplace-compare.XXXXXX")}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
M="$ROOT/.cache/models"
export OMP_WAIT_POLICY=passive
mkdir -p "$work"
/usr/bin/python3 -c "
import numpy as np, sys
r = np.random.default_rng(3)
np.savez(sys.argv[1] + '/cls8.npz', x=r.random((8, 3, 48, 192), dtype=np.float32))
np.savez(sys.argv[1] + '/vit4.npz', input=r.random((4, 3, 224, 224), dtype=np.float32))
" "$work" || exit 2
cls="$M/ch_ppocr_mobile_v2.0_cls_infer.onnx" rec="$M/ch_PP-OCRv4_rec_infer.onnx"
det="$M/ch_PP-OCRv4_det_infer.onnx" r50="$M/generated/resnet50.onnx" vit="$M/generated/vit_tiny.onnx"
run() { # run BINARY OUTDIR
    local q="$1" d="$2"
    mkdir -p "$d"
    "$q" quantize --onnx_path "$cls" --calibration_shapes x:1x3x48x192 --output_path "$d/cls.onnx" --placement_out "$d/cls.json"
    "$q" quantize --onnx_path "$rec" --calibration_shapes x:1x3x48x320 --output_path "$d/rec.onnx" --placement_out "$d/rec.json"
    "$q" quantize --onnx_path "$rec" --calibration_shapes x:1x3x48x320 --high_precision_dtype fp32 --output_path "$d/rec32.onnx"
    "$q" quantize --onnx_path "$det" --calibration_shapes x:1x3x320x320 --output_path "$d/det.onnx" --placement_out "$d/det.json"
    "$q" quantize --onnx_path "$r50" --output_path "$d/r50.onnx" --placement_out "$d/r50.json"
    "$q" quantize --onnx_path "$cls" --calibration_data_path "$work/cls8.npz" --calibration_shapes x:2x3x48x192 --output_path "$d/cls_npz.onnx" --placement_out "$d/cls_npz.json"
    "$q" quantize --onnx_path "$vit" --calibration_data_path "$work/vit4.npz" --calibration_shapes input:1x3x224x224 --output_path "$d/vit.onnx" --placement_out "$d/vit.json"
    "$q" calibrate --onnx_path "$det" --calibration_shapes x:1x3x320x320 --output_path "$d/det.ranges.json"
    "$q" calibrate --onnx_path "$rec" --calibration_shapes x:1x3x48x320 --output_path "$d/rec.ranges.json"
    "$q" calibrate --onnx_path "$r50" --output_path "$d/r50.ranges.json"
    "$q" calibrate --onnx_path "$vit" --calibration_data_path "$work/vit4.npz" --calibration_shapes input:1x3x224x224 --output_path "$d/vit.ranges.json"
    "$q" calibrate --onnx_path "$cls" --calibration_data_path "$work/cls8.npz" --calibration_shapes x:2x3x48x192 --output_path "$d/cls.ranges.json"
    "$q" sensitivity --onnx_path "$cls" --calibration_shapes x:1x3x48x192 --output_json "$d/cls.sens.json"
    "$q" sensitivity --onnx_path "$cls" --calibration_data_path "$work/cls8.npz" --calibration_shapes x:2x3x48x192 --granularity node --output_json "$d/cls.node.sens.json"
}
run "$old" "$work/old" >"$work/old.log" 2>&1 || { echo "compare: the old binary failed (see $work/old.log)"; exit 2; }
run "$new" "$work/new" >"$work/new.log" 2>&1 || { echo "compare: the new binary failed (see $work/new.log)"; exit 2; }
rc=0
for f in $(cd "$work/old" && ls); do
    case "$f" in
    *.sens.json)
        /usr/bin/python3 -c "
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for x in (a, b): x.pop('timings', None)
sys.exit(a != b)" "$work/old/$f" "$work/new/$f" ;;
    *) cmp -s "$work/old/$f" "$work/new/$f" ;;
    esac
    if [ $? -eq 0 ]; then echo "same      $f"; else echo "DIFFERENT $f"; rc=1; fi
done
echo "compare: $(ls "$work/old" | wc -l) files in $work"
exit $rc
