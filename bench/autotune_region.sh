#!/usr/bin/env bash
# Region-local against whole-model timing in `qplace autotune` (docs/autotune.md "Region-local
# timing"), in one run:
#   bash bench/autotune_region.sh [QPLACE] [THREADS] [MODE] [REPEATS]
# For the generated ResNet-50 and ViT-tiny (1x3x224x224, synthetic calibration, builtin
# backend; see AUTOTUNE_REGION_MODELS below): `qplace autotune --mode MODE` (default quick) with --timing whole and with --timing
# region, REPEATS times each (default 1), printing per run the wall seconds, the search's
# seconds (the pattern loop, as the summary's `time` line gives it: without loading and
# calibration, which both timings share), races measured and adopted, and per model whether
# the final placements are equal (`qplace diff` of the two placement.json files, every whole
# run against every region run) and the ratios of the median times (whole / region). Prints the
# ISA line of the backend, and the two timings' chosen models (the first run of each) benched in
# turn, BENCH_ROUNDS rounds (default 4): the results compared as latencies, since whole-model
# races on a noisy machine adopt schemes of 1-3% that do not reproduce. Minutes per model.
# AUTOTUNE_REGION_MODELS picks the models (default "resnet50 vit_tiny"; also det, rec and cls,
# PaddleOCR's, fetched by scripts/setup.sh); AUTOTUNE_REGION_SCHEMES N adds
# --schemes_per_region N; AUTOTUNE_REGION_TIMINGS the sub-model timings compared with whole
# (default "region region_all": representatives, every instance). Runs alternate: whole, then
# each region timing, REPEATS times.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QPLACE="${1:-$ROOT/build/qplace}"
THREADS="${2:-2}"
MODE="${3:-quick}"
REPEATS="${4:-1}"
GEN="$ROOT/.cache/models/generated"
MODELS="$ROOT/.cache/models"
OUT="${AUTOTUNE_REGION_BENCH_DIR:-$ROOT/.cache/autotune-region-bench}"
mkdir -p "$GEN" "$OUT"
. "$ROOT/bench/lib.sh"
declare -A path=(
    [resnet50]="$GEN/resnet50.onnx" [vit_tiny]="$GEN/vit_tiny.onnx"
    [det]="$MODELS/ch_PP-OCRv4_det_infer.onnx" [rec]="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
    [cls]="$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx"
)
declare -A shape=(
    [resnet50]=input:1x3x224x224 [vit_tiny]=input:1x3x224x224 [det]=x:1x3x640x640
    [rec]=x:1x3x48x320 [cls]=x:1x3x48x192
)
read -r -a models <<<"${AUTOTUNE_REGION_MODELS:-resnet50 vit_tiny}"
read -r -a subs <<<"${AUTOTUNE_REGION_TIMINGS:-region region_all}"
extra=()
[ -z "${AUTOTUNE_REGION_SCHEMES:-}" ] || extra=(--schemes_per_region "$AUTOTUNE_REGION_SCHEMES")
for m in "${models[@]}"; do
    [ -n "${path[$m]:-}" ] || { echo "autotune_region.sh: unknown model '$m'" >&2; exit 2; }
    case "$m" in
    resnet50 | vit_tiny) generate "$ROOT/tests/models/gen_$m.py" "$GEN/$m.onnx" ;;
    *) [ -f "${path[$m]}" ] || { echo "autotune_region.sh: ${path[$m]} missing (scripts/setup.sh fetches it)" >&2; exit 2; } ;;
    esac
done

median() { # median X... (numbers)
    printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
}

isa=""
printf '%-9s %-10s %3s %8s %9s %9s %6s %8s %9s %9s %s\n' model timing run "wall s" "search s" \
    "timing s" races \
    adopted "seed ms" "best ms" "region check"
for m in "${models[@]}"; do
    declare -A walls=() searches=() timeds=()
    for r in $(seq 1 "$REPEATS"); do
        for timing in whole "${subs[@]}"; do
            dir="$OUT/$m.$timing.$r"
            rm -rf "$dir"
            t0=$(date +%s.%N)
            "$QPLACE" autotune --onnx_path "${path[$m]}" --mode "$MODE" --timing "$timing" \
                --calibration_shapes "${shape[$m]}" --threads "$THREADS" "${extra[@]}" \
                --output_dir "$dir" >"$dir.txt" 2>"$dir.err"
            t1=$(date +%s.%N)
            wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
            walls[$timing]+="$wall "
            search=$(sed -n 's/^  time .*(the search: \([0-9.]*\) s[;)].*/\1/p' "$dir.txt")
            searches[$timing]+="${search:-0} "
            # the search less its drift measurements (item 8's, the same work in every timing)
            drift=$(sed -n 's/^  time .*measuring drift: \([0-9.]*\) s.*/\1/p' "$dir.txt")
            timed=$(awk -v a="${search:-0}" -v b="${drift:-0}" 'BEGIN {printf "%.1f", a - b}')
            timeds[$timing]+="$timed "
            races=$(sed -n 's/^  schemes *\([0-9]*\) measured.*/\1/p' "$dir.txt")
            adopted=$(sed -n 's/^  schemes.*, \([0-9]*\) adopted.*/\1/p' "$dir.txt")
            seed=$(sed -n 's/^  seed *\([0-9.]*\) ms.*/\1/p' "$dir.txt")
            best=$(sed -n 's/^  best .*(\([0-9.]*\) ms median.*/\1/p; s/^  best *\([0-9.]*\) ms.*/\1/p' "$dir.txt")
            [ -n "$isa" ] || isa=$(sed -n 's/^  backend *//p' "$dir.txt")
            check=$(sed -n 's/^  region check .* as whole models: \([a-z]*\).*/\1/p' "$dir.txt")
            grep -q "seed's placement is kept" "$dir.txt" && check="$check (seed kept)"
            printf '%-9s %-10s %3s %8s %9s %9s %6s %8s %9s %9s %s\n' "$m" "$timing" "$r" "$wall" \
                "${search:--}" "$timed" "$races" "$adopted" "$seed" "$best" "${check:--}"
        done
    done
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
    # shellcheck disable=SC2086
    w=$(median ${walls[whole]})
    # shellcheck disable=SC2086
    sw=$(median ${searches[whole]})
    # shellcheck disable=SC2086
    tw=$(median ${timeds[whole]})
    for sub in "${subs[@]}"; do
        same=0
        total=0
        for a in $(seq 1 "$REPEATS"); do
            for b in $(seq 1 "$REPEATS"); do
                total=$((total + 1))
                if "$QPLACE" diff "$OUT/$m.whole.$a/placement.json" \
                    "$OUT/$m.$sub.$b/placement.json" | grep -q '^result: SAME'; then
                    same=$((same + 1))
                fi
            done
        done
        # shellcheck disable=SC2086
        g=$(median ${walls[$sub]})
        # shellcheck disable=SC2086
        sg=$(median ${searches[$sub]})
        # shellcheck disable=SC2086
        tg=$(median ${timeds[$sub]})
        echo "$m: final placements equal in $same of $total whole/$sub pairs;" \
            "median wall $w s whole, $g s $sub: $(ratio "$w" "$g")x;" \
            "median search $sw s whole, $sg s $sub: $(ratio "$sw" "$sg")x;" \
            "less drift $tw s whole, $tg s $sub: $(ratio "$tw" "$tg")x"
    done
    # the results as latencies: the first run's optimized_final.onnx of each timing benched in
    # turn (BENCH_ROUNDS rounds of 40 runs), each the median of its rounds' medians
    declare -A rounds=()
    for _ in $(seq 1 "${BENCH_ROUNDS:-4}"); do
        for timing in whole "${subs[@]}"; do
            ms=$("$QPLACE" bench "$OUT/$m.$timing.1/optimized_final.onnx" \
                --shape "${shape[$m]/:/=}" --threads "$THREADS" --iterations 40 |
                awk '$1 == "qplace" {print $2}')
            rounds[$timing]+="$ms "
        done
    done
    line="$m: chosen placements benched in turn:"
    for timing in whole "${subs[@]}"; do
        # shellcheck disable=SC2086
        line+=" $timing's $(median ${rounds[$timing]}) ms (rounds ${rounds[$timing]% });"
    done
    echo "${line%;}"
    unset walls searches timeds rounds
done
echo "backend: $isa; mode $MODE, $THREADS threads"
