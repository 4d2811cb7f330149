#!/usr/bin/env bash
# Regenerates expected_failures.txt from a build: runs every conformance model with --report and
# lists each failure with the engine's own message as the reason. Review the diff before keeping
# it: a reason must say why the test fails, and a fix should shrink the list.
#   tests/conformance/update_expected.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?usage: update_expected.sh BUILD_DIR}
DATA=${QP_ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$HERE/expected_failures.txt"
TMP="$(mktemp)"
{
    echo "# Conformance tests expected to fail: <group>/<name>  <reason>."
    echo "# A listed test that passes fails its ctest case (surprise pass): remove its line."
    echo "# Regenerate with tests/conformance/update_expected.sh BUILD_DIR, then review."
} > "$TMP"
for group in node simple pytorch-converted pytorch-operator; do
    for dir in "$DATA/$group"/*/; do
        name=$(basename "$dir")
        [ -f "$dir/model.onnx" ] || continue
        line=$(timeout 120 "$BUILD/tests/conformance/qp_conformance" --report "$dir" 2>&1 | head -n1 || true)
        case "$line" in
        PASS*) ;;
        FAIL*) printf '%s/%s  %s\n' "$group" "$name" "$(echo "${line#FAIL }" | cut -c1-300)" >> "$TMP" ;;
        *) printf '%s/%s  crashed or timed out\n' "$group" "$name" >> "$TMP" ;;
        esac
    done
done
mv "$TMP" "$OUT"
echo "update_expected: $(grep -vc '^#' "$OUT") expected failures written to $OUT"
