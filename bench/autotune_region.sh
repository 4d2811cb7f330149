#!/usr/bin/env bash
# Region-local against whole-model timing in `qplace autotune` (docs/autotune.md "Region-local
# timing"), in one run:
#   bash bench/autotune_region.sh [QPLACE] [THREADS] [MODE] [REPEATS]
# For the generated ResNet-50 and ViT-tiny (1x3x224x224, synthetic calibration, builtin
# backend): `qplace autotune --mode MODE` (default quick) with --timing whole and with --timing
# region, REPEATS times each (default 1), printing per run the wall seconds, races measured and
# adopted, and per model whether the final placements are equal (`qplace diff` of the two
# placement.json files, every whole run against every region run) and the ratio of the median
# wall times (whole / region). Prints the ISA line of the backend. Minutes per model.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QPLACE="${1:-$ROOT/build/qplace}"
THREADS="${2:-2}"
MODE="${3:-quick}"
REPEATS="${4:-1}"
GEN="$ROOT/.cache/models/generated"
OUT="${AUTOTUNE_REGION_BENCH_DIR:-$ROOT/.cache/autotune-region-bench}"
mkdir -p "$GEN" "$OUT"
. "$ROOT/bench/lib.sh"
for m in resnet50 vit_tiny; do
    generate "$ROOT/tests/models/gen_$m.py" "$GEN/$m.onnx"
done

median() { # median X... (numbers)
    printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
}

isa=""
printf '%-9s %-7s %3s %9s %7s %8s %9s %9s\n' model timing run "wall s" races adopted \
    "seed ms" "best ms"
for m in resnet50 vit_tiny; do
    declare -A walls=()
    for timing in whole region; do
        for r in $(seq 1 "$REPEATS"); do
            dir="$OUT/$m.$timing.$r"
            rm -rf "$dir"
            t0=$(date +%s.%N)
            "$QPLACE" autotune --onnx_path "$GEN/$m.onnx" --mode "$MODE" --timing "$timing" \
                --calibration_shapes input:1x3x224x224 --threads "$THREADS" \
                --output_dir "$dir" >"$dir.txt" 2>"$dir.err"
            t1=$(date +%s.%N)
            wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
            walls[$timing]+="$wall "
            races=$(sed -n 's/^  schemes *\([0-9]*\) measured.*/\1/p' "$dir.txt")
            adopted=$(sed -n 's/^  schemes.*, \([0-9]*\) adopted.*/\1/p' "$dir.txt")
            seed=$(sed -n 's/^  seed *\([0-9.]*\) ms.*/\1/p' "$dir.txt")
            best=$(sed -n 's/^  best .*(\([0-9.]*\) ms median.*/\1/p; s/^  best *\([0-9.]*\) ms.*/\1/p' "$dir.txt")
            [ -n "$isa" ] || isa=$(sed -n 's/^  backend *//p' "$dir.txt")
            printf '%-9s %-7s %3s %9s %7s %8s %9s %9s\n' "$m" "$timing" "$r" "$wall" "$races" \
                "$adopted" "$seed" "$best"
        done
    done
    same=0
    total=0
    for a in $(seq 1 "$REPEATS"); do
        for b in $(seq 1 "$REPEATS"); do
            total=$((total + 1))
            if "$QPLACE" diff "$OUT/$m.whole.$a/placement.json" \
                "$OUT/$m.region.$b/placement.json" | grep -q '^result: SAME'; then
                same=$((same + 1))
            fi
        done
    done
    # shellcheck disable=SC2086
    w=$(median ${walls[whole]})
    # shellcheck disable=SC2086
    g=$(median ${walls[region]})
    echo "$m: final placements equal in $same of $total whole/region pairs;" \
        "median wall $w s whole, $g s region: $(awk -v a="$w" -v b="$g" \
            'BEGIN {printf "%.2f", b > 0 ? a / b : 0}')x"
    unset walls
done
echo "backend: $isa; mode $MODE, $THREADS threads"
