#!/usr/bin/env bash
# Configures and builds qplace with CMake + Ninja.
#   bash scripts/build.sh            release build in build/
#   bash scripts/build.sh asan       ASan+UBSan build in build-asan/ (-DQP_SANITIZE=ON)
#   bash scripts/build.sh fuzz       libFuzzer harnesses in build-fuzz/ (clang, -DQP_FUZZ=ON)
# Extra arguments after the variant go to cmake's configure step (e.g. -DQP_TESTS=OFF).
# JOBS (default 2) sets ninja's parallelism; QP_WERROR=1 makes warnings errors (-DQP_WERROR=ON,
# as CI builds). Run scripts/setup.sh first on a new machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
variant="${1:-release}"
[ $# -gt 0 ] && shift
jobs="${JOBS:-2}"

case "$variant" in
release)
    dir="$ROOT/build"
    args=(-DCMAKE_BUILD_TYPE=Release)
    ;;
asan)
    dir="$ROOT/build-asan"
    args=(-DCMAKE_BUILD_TYPE=Debug -DQP_SANITIZE=ON)
    ;;
fuzz)
    dir="$ROOT/build-fuzz"
    # The harnesses only need the library; the unit and integration tests run in the other builds.
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DQP_FUZZ=ON -DQP_TESTS=OFF -DCMAKE_C_COMPILER=clang)
    ;;
*)
    echo "usage: scripts/build.sh [release|asan|fuzz] [cmake args...]" >&2
    exit 1
    ;;
esac

[ "${QP_WERROR:-0}" = 1 ] && args+=(-DQP_WERROR=ON)
echo "build: $variant in ${dir#"$ROOT"/}"
mkdir -p "$dir"
if ! cmake -S "$ROOT" -B "$dir" -G Ninja "${args[@]}" "$@" >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log" >&2
    echo "build: cmake configure failed ($variant)" >&2
    exit 1
fi
cmake --build "$dir" -j "$jobs"
