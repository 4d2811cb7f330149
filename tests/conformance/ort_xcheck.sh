#!/usr/bin/env bash
# The engine against ONNX Runtime on one-node models of the index, space, matrix, channel,
# detect, sample, mvn, qlinear and rnn kernels, with random inputs (ort_xcheck.py generates
# them, ort_xcheck.js runs ORT, qp_conformance compares: rtol 1e-3, atol 1e-7, integers exact).
#   ort_xcheck.sh QP_CONFORMANCE NPM_DIR WORK_DIR [PYTHON]
# Exits 77 (skipped) when node, onnxruntime-node or python's onnx is missing, 1 instead when
# QP_REQUIRE_REAL_MODELS=1 (scripts/test.sh sets it: CI must not skip silently).
set -uo pipefail
BIN=${1:?usage: ort_xcheck.sh QP_CONFORMANCE NPM_DIR WORK_DIR [PYTHON]}
NPM=${2:?}
WORK=${3:?}
PY=${4:-/usr/bin/python3}
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
skip() {
    echo "$1: skipped"
    [ "${QP_REQUIRE_REAL_MODELS:-0}" = 1 ] && { echo "QP_REQUIRE_REAL_MODELS=1: failing"; exit 1; }
    exit 77
}
command -v node >/dev/null || skip "node not found"
[ -d "$NPM/node_modules/onnxruntime-node" ] || skip "onnxruntime-node not in $NPM"
"$PY" -c 'import onnx, numpy' 2>/dev/null || skip "$PY lacks onnx/numpy"
rm -rf "$WORK"
"$PY" "$HERE/ort_xcheck.py" gen "$WORK" || exit 1
node "$HERE/ort_xcheck.js" "$NPM" "$WORK" || exit 1
"$PY" "$HERE/ort_xcheck.py" fin "$WORK" || exit 1
pass=0
fail=0
for dir in "$WORK"/*/; do
    name=$(basename "$dir")
    out=$("$BIN" "$dir" 2>&1)
    if [ $? -eq 0 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL $name: $out"
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
