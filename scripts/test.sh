#!/usr/bin/env bash
# Sets up the machine and runs every test qplace has; what CI runs (.ci/run).
#   0. prints the CPU model and ISA (AVX2 / AVX-512 / VNNI): oneDNN picks kernels and layouts by it
#   1. scripts/setup.sh (Debian packages, ONNX Runtime for Node.js, real models), then the module
#      layering check (scripts/check_layering.py, the order in src/modules.txt)
#   2. release build (build/) + ctest
#   3. ASan+UBSan build (build-asan/) + ctest
#   4. clang-format check of src include tests fuzz bench examples python
#   5. each libFuzzer harness (build-fuzz/) for FUZZ_SECONDS (default 60) seconds
# Every step runs even when an earlier one failed; the run exits non-zero if any did, and ends
# with the steps' results and ctest's summary lines.
# Environment: FUZZ_SECONDS (0 skips fuzzing), JOBS (default 2), QP_SKIP_SETUP=1 (skip step 1).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
export JOBS="${JOBS:-2}"
# Real models are fetched by setup; their absence is a failure here, never a skip.
export QP_REQUIRE_REAL_MODELS=1
# Every CI build treats warnings as errors (STYLE.md's flags, CMakeLists.txt QP_WARNINGS).
export QP_WERROR=1
export CTEST_OUTPUT_ON_FAILURE=1
# Test programs link libgomp directly (not through the CLI, which picks passive waiting itself):
# spinning OpenMP threads slow every test on a shared 2-core machine.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
LOGS="$ROOT/build/test-logs"

start_all=$(date +%s)
results=()
failures=0

step() { printf '\n==== %s ====\n' "$*"; }
record() { # record NAME STATUS SECONDS
    local verdict=ok
    [ "$2" -ne 0 ] && verdict="FAILED (exit $2)" && failures=$((failures + 1))
    results+=("$(printf '%-28s %-16s %5ss' "$1" "$verdict" "$3")")
}
run_step() { # run_step NAME CMD...: runs CMD, records the result
    local name="$1" t0 rc
    shift
    t0=$(date +%s)
    "$@"
    rc=$?
    record "$name" "$rc" $(($(date +%s) - t0))
    return "$rc"
}

# ---- 0. the CPU ------------------------------------------------------------------------------
# Machines of this kind differ (AVX2-only, AVX-512 with VNNI, or with AMX too), and oneDNN picks
# its kernels and layouts by the ISA: say which one this run had, first.
cpu_isa() {
    local flags isa
    flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    case "$flags" in
    *" avx512f "*) isa="AVX-512" ;;
    *" avx2 "*) isa="AVX2" ;;
    *) isa="no AVX2" ;;
    esac
    case "$flags" in *" avx512_vnni "*) isa="$isa VNNI" ;; esac
    case "$flags" in *" avx_vnni "*) isa="$isa AVX-VNNI" ;; esac
    case "$flags" in *" avx512_bf16 "*) isa="$isa BF16" ;; esac
    case "$flags" in *" amx_int8 "*) isa="$isa AMX" ;; esac
    printf 'cpu: %s; isa: %s; %s cores%s\n' \
        "$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//')" \
        "$isa" "$(nproc)" "${ONEDNN_MAX_CPU_ISA:+; ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA}"
}
step "cpu"
cpu_isa

# ---- 1. setup ----------------------------------------------------------------------------------
if [ "${QP_SKIP_SETUP:-0}" != 1 ]; then
    step "setup"
    if ! run_step setup bash scripts/setup.sh; then
        echo "test: setup failed; continuing so the other failures show too" >&2
    fi
fi
mkdir -p "$LOGS"

# ---- module layering ---------------------------------------------------------------------------
# No #include points up or sideways in src/modules.txt's order; only src/onnx sees protobuf.
step "layering"
run_step layering python3 scripts/check_layering.py

# ---- 2./3. builds + ctest ----------------------------------------------------------------------
ctest_summaries=()
ctest_logged() { # ctest_logged BUILD_DIR LOG: ctest's status (pipefail), output also in LOG
    ctest --test-dir "$1" --output-on-failure -j "$JOBS" 2>&1 | tee "$2"
}
build_and_test() { # build_and_test VARIANT BUILD_DIR
    local variant="$1" dir="$2" log="$LOGS/ctest-$1.log"
    step "build ($variant)"
    run_step "build ($variant)" bash scripts/build.sh "$variant" || {
        ctest_summaries+=("ctest ($variant): not run, the build failed")
        return
    }
    step "ctest ($variant)"
    run_step "ctest ($variant)" ctest_logged "$dir" "$log"
    # The summary ctest prints at the end: "N% tests passed, N tests failed out of N", and the
    # list of failed tests after it.
    local summary
    summary="$(sed -n '/tests passed, .* tests\{0,1\} failed out of/,$p' "$log" |
        grep -v '^Label Time Summary:$' | grep -v 'sec\*proc' |
        awk 'length($0) == 0 { next } /^[ \t]+[0-9]+ - / && ++n > 40 { more++; next } { print }
             END { if (more) printf "\t... and %d more failed tests (%s)\n", more, logfile }' \
            logfile="$log")"
    ctest_summaries+=("ctest ($variant):" "${summary:-  (no summary: see $log)}")
}

# ASan: fail on leaks, print stacks for UBSan reports (the build already makes them fatal).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

build_and_test release "$ROOT/build"
build_and_test asan "$ROOT/build-asan"

# ---- 4. clang-format ---------------------------------------------------------------------------
# Generated files (a "Generated by ..." or "do not edit" note in their first 3 lines) are skipped.
format_check() {
    local files=() f
    while IFS= read -r f; do
        head -n 3 "$f" | grep -qiE 'generated by|do not edit' || files+=("$f")
    done < <(find src include tests fuzz bench examples python -type f \( -name '*.c' -o -name '*.h' \) \
        -not -path 'fuzz/corpus/*' -not -name '*.pb-c.*' 2>/dev/null | LC_ALL=C sort)
    if [ "${#files[@]}" -eq 0 ]; then
        echo "format: no files"
        return 0
    fi
    echo "format: checking ${#files[@]} files"
    clang-format --dry-run -Werror "${files[@]}"
}
step "clang-format"
run_step clang-format format_check

# ---- 5. fuzzing --------------------------------------------------------------------------------
fuzz_one() { # fuzz_one NAME: runs build-fuzz/fuzz/fuzz_NAME for FUZZ_SECONDS
    local name="$1" bin="$ROOT/build-fuzz/fuzz/fuzz_$1"
    local work="$ROOT/build-fuzz/corpus/$name" art="$ROOT/build-fuzz/artifacts/$name/"
    local seeds=()
    rm -rf "$work" "$art"
    mkdir -p "$work" "$art"
    for d in "$ROOT/fuzz/corpus/$name" "$ROOT/tests/data/fuzz-regressions/$name"; do
        [ -d "$d" ] && seeds+=("$d")
    done
    if [ "$name" = model ]; then
        # The ONNX backend test models are seeds too (small, many operators and attributes).
        local testdata="$ROOT/build-fuzz/seeds-model"
        if [ ! -d "$testdata" ]; then
            mkdir -p "$testdata"
            local k=0 f
            while IFS= read -r f; do
                cp "$f" "$testdata/$k.onnx"
                k=$((k + 1))
            done < <(find /usr/share/libonnx-testdata/data -name '*.onnx' -size -64k 2>/dev/null |
                LC_ALL=C sort)
        fi
        seeds+=("$testdata")
    fi
    echo "fuzz: $name for ${FUZZ_SECONDS}s, seeds: ${seeds[*]:-none}"
    # -rss_limit_mb / -malloc_limit_mb: a single allocation over 2 GB is a finding (a size taken
    # from the input without checking it). The first corpus folder receives new inputs, so it is
    # a scratch folder; the committed seeds are only read.
    # Harnesses that write temporary files do it under TMPDIR: keep those in the build folder.
    mkdir -p "$ROOT/build-fuzz/tmp"
    TMPDIR="$ROOT/build-fuzz/tmp" "$bin" "$work" "${seeds[@]}" -max_total_time="$FUZZ_SECONDS" -timeout=25 \
        -rss_limit_mb=2560 -malloc_limit_mb=2048 -artifact_prefix="$art" -print_final_stats=1 \
        >"$LOGS/fuzz-$name.log" 2>&1
    local rc=$?
    tail -n 15 "$LOGS/fuzz-$name.log"
    if [ "$rc" -ne 0 ]; then
        echo "fuzz: $name FOUND A PROBLEM (exit $rc); log: $LOGS/fuzz-$name.log"
        ls -l "$art" 2>/dev/null
        echo "fuzz: reproduce with $bin ${art}<file>; once fixed, copy the input into" \
            "tests/data/fuzz-regressions/$name/ so ctest replays it forever"
    fi
    return "$rc"
}

if [ "$FUZZ_SECONDS" -gt 0 ]; then
    step "build (fuzz)"
    if run_step "build (fuzz)" bash scripts/build.sh fuzz; then
        for src in fuzz/fuzz_*.c; do
            [ -e "$src" ] || continue
            name="$(basename "$src" .c)"
            name="${name#fuzz_}"
            step "fuzz $name"
            run_step "fuzz $name" fuzz_one "$name"
        done
    fi
fi

# ---- summary -----------------------------------------------------------------------------------
total=$(($(date +%s) - start_all))
step "summary (${total}s)"
printf '%s\n' "${results[@]}"
if [ "$failures" -ne 0 ]; then
    echo "test: $failures step(s) failed"
else
    echo "test: all steps passed"
fi
echo
printf '%s\n' "${ctest_summaries[@]}"
[ "$failures" -eq 0 ]
