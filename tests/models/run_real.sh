#!/bin/bash
# run_real.sh QPLACE MODEL_NAME SHAPE
#
# Generates .cache/models/generated/MODEL_NAME.onnx with tests/models/gen_MODEL_NAME.py (again
# when the generator's content changed), then runs it through qplace and ONNX Runtime
# (`qplace bench --compare-ort --check`: same inputs, outputs within rtol 1e-3, atol 1e-4).
# Without /usr/bin/python3 + onnx, node or onnxruntime-node: skipped (exit 77), unless
# QP_REQUIRE_REAL_MODELS=1, then failed.
set -u
qplace=$1
name=$2
shape=$3
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out_dir=$root/.cache/models/generated
model=$out_dir/$name.onnx
npm=${QP_ORT_NPM:-$root/.cache/npm}

missing() {
    if [ "${QP_REQUIRE_REAL_MODELS:-0}" = 1 ]; then
        echo "FAIL: $1 (QP_REQUIRE_REAL_MODELS=1)" >&2
        exit 1
    fi
    echo "SKIP: $1" >&2
    exit 77
}

/usr/bin/python3 -c 'import onnx, numpy' 2>/dev/null || missing "/usr/bin/python3 with onnx and numpy"
command -v "${QP_NODE:-node}" >/dev/null || missing "node"
[ -d "$npm/node_modules/onnxruntime-node" ] || missing "onnxruntime-node in $npm"

mkdir -p "$out_dir" || exit 1
# Again when the generator's content changed (bench/lib.sh; concurrent tests may race to
# generate: the generators and the stamp replace their files atomically).
. "$root/bench/lib.sh"
generate "$here/gen_$name.py" "$model" || exit 1
exec "$qplace" bench "$model" --shape "$shape" --iterations 1 --warmup 0 --threads 2 \
    --compare-ort --check --ort-script "$root/bench/ort_bench.js" --ort-npm "$npm"
