#!/usr/bin/env bash
# Calibration speed and memory (the calibration issue's targets):
#   bash bench/calib.sh [QPLACE] [THREADS]
# QPLACE defaults to build/qplace, THREADS to 2. On the generated ResNet-50 at 224x224
# (tests/models/gen_resnet50.py, batch 1), with entropy calibration over a folder of
# generated 224x224 PNG images (bench/calib_images.py; images are decoded one batch at a time):
#   - throughput: calibration samples/s (whole `qplace calibrate` run: model load, session,
#     decode, engine, statistics, entropy search, writing) against `qplace bench` throughput
#     (1000 / median ms) for the same model, shape and threads. Target >= 0.8x.
#   - memory: peak RSS (/usr/bin/time) of calibrating 200 samples against 20 samples.
#     Target <= 1.1x.
# Also reported, for the record: the same RSS ratio when the 200 vs 20 samples come as one .npz
# (the npz provider loads a file whole, so that ratio grows with the data).
# Writes into build/bench/calib/. CALIB_BENCH_NPZ=0 skips the .npz rows (another 220 runs).
# CALIB_BENCH_N sets the larger sample count (default 200; a smaller one for a busy machine).
# The OpenMP environment (OMP_WAIT_POLICY, GOMP_SPINCOUNT) is passed through and printed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QPLACE="${1:-$ROOT/build/qplace}"
THREADS="${2:-2}"
NBIG="${CALIB_BENCH_N:-200}"
WORK="$ROOT/build/bench/calib"
GEN="$ROOT/.cache/models/generated"
MODEL="$GEN/resnet50.onnx"
mkdir -p "$WORK" "$GEN"
[ -x "$QPLACE" ] || { echo "bench: $QPLACE missing (bash scripts/build.sh)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time missing (scripts/setup.sh)" >&2; exit 1; }
if [ ! -s "$MODEL" ] || [ "$ROOT/tests/models/gen_resnet50.py" -nt "$MODEL" ]; then
    echo "bench: generating $MODEL" >&2
    /usr/bin/python3 "$ROOT/tests/models/gen_resnet50.py" "$MODEL"
fi
for n in 20 "$NBIG"; do
    if [ ! -s "$WORK/img$n/img$(printf %04d $((n - 1))).png" ]; then
        rm -rf "$WORK/img$n"
        /usr/bin/python3 "$ROOT/bench/calib_images.py" "$WORK/img$n" "$n"
    fi
done

# calibrate N: prints "<samples/s> <peak RSS KB> <wall s>"
calibrate() {
    local data="$1" log="$WORK/calibrate.log"
    /usr/bin/time -f 'RSS_KB %M WALL %e' "$QPLACE" calibrate --onnx_path "$MODEL" \
        --calibration_data_path "$data" --calibration_method entropy \
        --calibration_shapes input:1x3x224x224 --threads "$THREADS" \
        --output_path "$WORK/resnet50.ranges.json" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
    local rate rss wall
    rate=$(sed -n 's/^calibrate: [0-9]* samples in .* s (\([0-9.]*\) samples\/s)$/\1/p' "$log")
    rss=$(sed -n 's/^RSS_KB \([0-9]*\) WALL .*/\1/p' "$log")
    wall=$(sed -n 's/^RSS_KB [0-9]* WALL \(.*\)/\1/p' "$log")
    echo "$rate $rss $wall"
}

bench_json=$("$QPLACE" bench "$MODEL" --shape input=1x3x224x224 --threads "$THREADS" \
    --iterations 20 --warmup 3 --json)
bench_ms=$(echo "$bench_json" | /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["qplace"]["median_ms"])')
bench_rate=$(/usr/bin/python3 -c "print(f'{1000.0 / $bench_ms:.2f}')")

read -r rate20 rss20 wall20 <<<"$(calibrate "$WORK/img20")"
read -r rate200 rss200 wall200 <<<"$(calibrate "$WORK/img$NBIG")"

# The same through .npz files (loaded whole by the npz provider); CALIB_BENCH_NPZ=0 skips it.
nrss20=0 nrss200=0 nrate200=0
if [ "${CALIB_BENCH_NPZ:-1}" = 1 ] && [ ! -s "$WORK/x200.npz" ]; then
    /usr/bin/python3 - "$WORK" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(1)
x = rng.normal(0, 1, (200, 3, 224, 224)).astype(np.float32)
np.savez(f"{sys.argv[1]}/x200.npz", input=x)
np.savez(f"{sys.argv[1]}/x20.npz", input=x[:20])
PY
fi
if [ "${CALIB_BENCH_NPZ:-1}" = 1 ]; then
    read -r _ nrss20 _ <<<"$(calibrate "$WORK/x20.npz")"
    read -r nrate200 nrss200 _ <<<"$(calibrate "$WORK/x200.npz")"
fi

/usr/bin/python3 - <<PY
br, r20, r200 = $bench_rate, $rate20, $rate200
print(f"model ResNet-50 (generated), 1x3x224x224, threads $THREADS, entropy")
print("OpenMP: OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-unset}")
print(f"qplace bench: median $bench_ms ms -> {br:.2f} samples/s")
print(f"calibrate  20 images: {r20:.2f} samples/s, wall ${wall20} s, peak RSS {$rss20/1024:.0f} MB")
print(f"calibrate $NBIG images: {r200:.2f} samples/s, wall ${wall200} s, peak RSS {$rss200/1024:.0f} MB")
print(f"throughput ratio calibrate($NBIG)/bench: {r200 / br:.2f}x (target >= 0.8x)")
print(f"peak RSS ratio $NBIG/20 images: {$rss200 / $rss20:.3f}x (target <= 1.1x)")
if $nrss20:
    print(f"for the record, .npz input: 20 -> {$nrss20/1024:.0f} MB, 200 -> {$nrss200/1024:.0f} MB, "
          f"ratio {$nrss200 / $nrss20:.2f}x ({$nrate200:.2f} samples/s)")
PY
