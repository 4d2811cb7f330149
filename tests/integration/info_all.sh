#!/usr/bin/env bash
# info_all.sh QPLACE [--optional] DIR
# Runs `QPLACE info MODEL` on every *.onnx under DIR: each must exit 0 and print something.
# A missing or empty DIR fails, except with --optional, where it is skipped (exit 77) unless
# QP_REQUIRE_REAL_MODELS=1. Closes with "N passed, N failed".
set -u
qplace="$1"
shift
optional=0
if [ "${1:-}" = "--optional" ]; then
    optional=1
    shift
fi
dir="$1"
[ "${QP_REQUIRE_REAL_MODELS:-}" = "1" ] && optional=0

mapfile -t models < <(find "$dir" -name '*.onnx' -type f 2>/dev/null | LC_ALL=C sort)
if [ "${#models[@]}" -eq 0 ]; then
    if [ "$optional" = 1 ]; then
        echo "SKIP: no models under $dir (run scripts/setup.sh)"
        exit 77
    fi
    echo "FAIL $dir: no models found"
    echo "0 passed, 1 failed"
    exit 1
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/qplace-info-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
for m in "${models[@]}"; do
    "$qplace" info "$m" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "FAIL $m: exit $rc: $(head -c 400 "$tmp/err")"
        failed=$((failed + 1))
    elif [ ! -s "$tmp/out" ]; then
        echo "FAIL $m: exit 0 but printed nothing"
        failed=$((failed + 1))
    else
        passed=$((passed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
