#!/usr/bin/env bash
# Issue 19's time bound: `qplace quantize` with every accuracy method on against a baseline
# quantize, on PaddleOCR rec with 100 rendered calibration lines (bench/ocr_accuracy.py render),
# alternating the two commands so that both meet the same machine speed:
#   bash bench/quantize_time.sh [QPLACE] [BASELINE_QPLACE] [ROUNDS]
# QPLACE defaults to build/qplace; BASELINE_QPLACE (default: QPLACE) runs the baseline command,
# `quantize` with its defaults; the issue's bound is against the binary it was filed on, built
# with
#   git worktree add /tmp/filing 736ae54 && cmake -S /tmp/filing -B /tmp/filing/build -G Ninja \
#       -DCMAKE_BUILD_TYPE=Release && ninja -C /tmp/filing/build qplace
# ROUNDS (default 3): each round sleeps QT_IDLE seconds (default 20), runs the baseline
# QT_BASE_RUNS times (default 3) back to back, sleeps again and runs every method once.
# Prints each time, the CPU and its ISA, and the ratios of the minima and of the medians
# (every method / baseline); the issue asks for at most 3x. QPLACE_VERBOSE=1 in the
# environment adds quantize's step times to QT_OUT (default build/bench/quantize_time).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QPLACE="${1:-$ROOT/build/qplace}"
BASE="${2:-$QPLACE}"
ROUNDS="${3:-3}"
OUT="${QT_OUT:-$ROOT/build/bench/quantize_time}"
MODEL="$ROOT/.cache/models/ch_PP-OCRv4_rec_infer.onnx"
for b in "$QPLACE" "$BASE"; do
    [ -x "$b" ] || { echo "bench: $b missing (bash scripts/build.sh)" >&2; exit 1; }
done
[ -s "$MODEL" ] || { echo "bench: $MODEL missing (bash scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$OUT"
DATA="$OUT/data"
[ -s "$DATA/rec_calib.npz" ] ||
    /usr/bin/python3 "$ROOT/bench/ocr_accuracy.py" render --out "$DATA" --n_eval 1 \
        --n_calib 100 --seed 1 --width 320 --models "$ROOT/.cache/models" >/dev/null
EVERY=(--calibration_method auto --equalization all --bias_correction --weight_clipping mse)
timed() { # timed LOG BINARY ARGS...: seconds of one quantize
    local log="$1" bin="$2" s e
    shift 2
    s=$(date +%s.%N)
    "$bin" quantize --onnx_path "$MODEL" --calibration_data_path "$DATA/rec_calib.npz" "$@" \
        >"$log" 2>&1 || { echo "bench: quantize failed, see $log" >&2; exit 1; }
    e=$(date +%s.%N)
    /usr/bin/python3 -c "print(f'{$e - $s:.2f}')"
}
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
isa=$("$QPLACE" bench "$MODEL" --shape x=1x3x48x320 --iterations 1 --warmup 0 --json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["isa"])')
echo "cpu: $cpu; isa: $isa; $(nproc) cores; baseline: $BASE; every method: $QPLACE"
base=() every=()
for r in $(seq "$ROUNDS"); do
    sleep "${QT_IDLE:-20}"
    for i in $(seq "${QT_BASE_RUNS:-3}"); do
        t=$(timed "$OUT/base.log" "$BASE" --output_path "$OUT/base.onnx")
        base+=("$t")
        echo "round $r: baseline $t s"
    done
    sleep "${QT_IDLE:-20}"
    t=$(timed "$OUT/every.log" "$QPLACE" --output_path "$OUT/every.onnx" "${EVERY[@]}")
    every+=("$t")
    echo "round $r: every method $t s"
done
/usr/bin/python3 - "${base[*]}" "${every[*]}" <<'PY'
import statistics, sys
b = [float(x) for x in sys.argv[1].split()]
e = [float(x) for x in sys.argv[2].split()]
print(f"baseline     min {min(b):.2f} s, median {statistics.median(b):.2f} s ({len(b)} runs)")
print(f"every method min {min(e):.2f} s, median {statistics.median(e):.2f} s ({len(e)} runs)")
print(f"every method / baseline: {min(e) / min(b):.2f}x of the minima, "
      f"{statistics.median(e) / statistics.median(b):.2f}x of the medians (bound: 3x)")
PY
