#!/usr/bin/env bash
# check_install.sh BUILD_DIR SOURCE_DIR MODEL SHAPE WANT CALIB.npz [CFLAGS...]
# `cmake --install` of BUILD_DIR into a fresh prefix, then, against the installed tree only (never
# the build or source tree): the headers, both libraries (soname libqplace.so.0, only qp_ symbols
# exported), qplace.pc, and examples/run_model.c built with `pkg-config --cflags --libs qplace`
# (shared) and `--static`, each run on MODEL with input shape SHAPE, printing WANT; then
# tests/install/public_placement.c on what the installed CLI's quantize writes;
# examples/quantize_model.c (6 random rows from memory) against the CLI's bytes on the same npz;
# then examples/rank_nodes.c on MODEL and CALIB.npz, whose top ten must be the installed CLI's
# (check_rank_nodes.sh). CFLAGS (the sanitizer flags of an ASan build) go to the compiler. Exit 0
# when all holds.
set -uo pipefail
build="$1" src="$2" model="$3" shape="$4" want="$5" calib="$6"
shift 6
extra=("$@")
prefix="$(mktemp -d "${TMPDIR:-/tmp}/qplace-install.XXXXXX")"
trap 'rm -rf "$prefix"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}

cmake --install "$build" --prefix "$prefix" >"$prefix/install.log" 2>&1 ||
    { cat "$prefix/install.log"; fail "cmake --install"; }
libdir="$prefix/lib"
[ -d "$libdir/pkgconfig" ] || libdir="$(dirname "$(find "$prefix" -name qplace.pc | head -1)")/.."
for f in include/qplace.h include/qplace/session.h include/qplace/model.h bin/qplace; do
    [ -e "$prefix/$f" ] || fail "not installed: $f"
done
for f in libqplace.a libqplace.so libqplace.so.0 pkgconfig/qplace.pc; do
    [ -e "$libdir/$f" ] || fail "not installed: lib/$f"
done
soname="$(readelf -d "$libdir/libqplace.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
[ "$soname" = libqplace.so.0 ] || fail "soname '$soname', expected libqplace.so.0"
others="$(nm -D --defined-only "$libdir/libqplace.so" | awk '$3 !~ /^qp_/ && $3 != "QPLACE_0" {print $3}')"
[ -z "$others" ] || fail "exported symbols without the qp_ prefix: $(echo "$others" | head -5 | tr '\n' ' ')"
n_sym="$(nm -D --defined-only "$libdir/libqplace.so" | grep -c ' qp_')"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
cflags="$(pkg-config --cflags qplace)" || fail "pkg-config --cflags qplace"
case "$cflags" in *"$prefix"*) ;; *) fail "pkg-config --cflags '$cflags' does not point into the prefix" ;; esac
case "$cflags" in *"$src"*) fail "pkg-config --cflags '$cflags' points into the source tree" ;; esac
# shellcheck disable=SC2046 # pkg-config output is a word list
cc -std=c11 -Wall -Wextra -Werror "${extra[@]}" "$src/examples/run_model.c" \
    $(pkg-config --cflags --libs qplace) -o "$prefix/run_model" || fail "build against libqplace.so"
# The static build: --static's private dependencies, with the archive itself for -lqplace (the
# linker would take the .so beside it).
static_libs="$(pkg-config --static --libs qplace)" || fail "pkg-config --static --libs qplace"
static_libs="${static_libs/-lqplace/$libdir/libqplace.a}"
# shellcheck disable=SC2086 # a word list
cc -std=c11 -Wall -Wextra -Werror "${extra[@]}" "$src/examples/run_model.c" $cflags $static_libs \
    -o "$prefix/run_model_static" 2>"$prefix/static.log" ||
    { cat "$prefix/static.log"; fail "build against libqplace.a"; }
# ldd's output is taken whole first: `ldd | grep -q` under pipefail fails when grep stops reading
# early (SIGPIPE), which made these checks flaky.
deps="$(ldd "$prefix/run_model_static")"
case "$deps" in *libqplace*) fail "the --static build links libqplace.so" ;; esac
out="$(LD_LIBRARY_PATH="$libdir" "$prefix/run_model" "$model" "$shape")" || fail "run_model (shared): $out"
deps="$(LD_LIBRARY_PATH="$libdir" ldd "$prefix/run_model")"
case "$deps" in *"$libdir/libqplace.so.0"*) ;; *) fail "run_model does not load the installed libqplace.so.0" ;; esac
[ "$out" = "$want" ] || fail "run_model printed '$out', expected '$want'"
out="$("$prefix/run_model_static" "$model" "$shape")" || fail "run_model (static): $out"
[ "$out" = "$want" ] || fail "run_model_static printed '$out', expected '$want'"
# qplace/placement.h against what the installed CLI writes.
cc -std=c11 -Wall -Wextra -Werror "${extra[@]}" "$src/tests/install/public_placement.c" \
    $(pkg-config --cflags --libs qplace) -o "$prefix/public_placement" || fail "build public_placement"
"$prefix/bin/qplace" quantize --onnx_path "$model" --calibration_shapes "${shape/=/:}" \
    --output_path "$prefix/q.onnx" --placement_out "$prefix/q.json" >"$prefix/quantize.log" 2>&1 ||
    { cat "$prefix/quantize.log"; fail "installed qplace quantize"; }
LD_LIBRARY_PATH="$libdir" "$prefix/public_placement" "$model" "$prefix/q.onnx" "$prefix/q.json" ||
    fail "public_placement"
# examples/quantize_model.c: calibration rows handed from memory through the callback provider;
# the model it writes must be byte for byte what the installed CLI writes from the same file.
cc -std=c11 -Wall -Wextra -Werror "${extra[@]}" "$src/examples/quantize_model.c" \
    $(pkg-config --cflags --libs qplace) -o "$prefix/quantize_model" || fail "build quantize_model"
input="${shape%%=*}"
/usr/bin/python3 -c "
import sys, numpy as np
dims = [int(d) for d in sys.argv[2].split('x')]
dims[0] = 6
np.savez(sys.argv[1], **{sys.argv[3]: np.random.default_rng(7).random(dims, dtype=np.float32)})
" "$prefix/calib.npz" "${shape#*=}" "$input" || fail "writing the calibration npz"
LD_LIBRARY_PATH="$libdir" "$prefix/quantize_model" "$model" "$prefix/calib.npz" "$prefix/qm.onnx" \
    >"$prefix/qm.log" 2>&1 || { cat "$prefix/qm.log"; fail "quantize_model"; }
grep -q "calibrated on 6 samples (memory, entropy)" "$prefix/qm.log" ||
    { cat "$prefix/qm.log"; fail "quantize_model did not calibrate on all 6 rows from memory"; }
grep -q "(in-sample: the calibration rows)" "$prefix/qm.log" ||
    { cat "$prefix/qm.log"; fail "quantize_model did not say its drift is in-sample"; }
"$prefix/bin/qplace" quantize --onnx_path "$model" --calibration_data_path "$prefix/calib.npz" \
    --calibration_shapes "$input:1x${shape#*=1x}" --output_path "$prefix/qcli.onnx" \
    >"$prefix/qcli.log" 2>&1 || { cat "$prefix/qcli.log"; fail "installed qplace quantize (npz)"; }
cmp -s "$prefix/qm.onnx" "$prefix/qcli.onnx" ||
    fail "examples/quantize_model wrote other bytes than qplace quantize on the same data"
# qplace/sensitivity.h: examples/rank_nodes ranks as the installed CLI does.
# shellcheck disable=SC2046 # pkg-config output is a word list
cc -std=c11 -Wall -Wextra -Werror "${extra[@]}" "$src/examples/rank_nodes.c" \
    $(pkg-config --cflags --libs qplace) -o "$prefix/rank_nodes" || fail "build rank_nodes"
LD_LIBRARY_PATH="$libdir" bash "$src/tests/install/check_rank_nodes.sh" "$prefix/rank_nodes" \
    "$prefix/bin/qplace" "$model" "$calib" "$prefix/rank" || fail "rank_nodes"
echo "ok   installed into a fresh prefix: headers, libqplace.a, libqplace.so.0 ($n_sym qp_ symbols, nothing else exported), qplace.pc; examples/run_model built with pkg-config (shared and static) prints: $want; examples/quantize_model writes the CLI's bytes; examples/rank_nodes ranks as qplace sensitivity"
