#!/usr/bin/env bash
# Load + save benchmark: how close qplace's model I/O comes to copying the file.
#   bash bench/load_save.sh [MODEL.onnx]     (default: a generated ~100 MB MLP)
# Measures, in one run, on a warm page cache, the best wall time and the best CPU time (user +
# sys, less disturbed by a busy machine) of RUNS runs (default 3) each:
#   - `cp` of the file, and `cp` followed by `sync FILE` (qplace's save fsyncs before its atomic
#     rename, so the synced copy is the like-for-like baseline);
#   - qp_resave (tests/integration/resave.c: qp_model_load_file + qp_model_save_file), with its
#     load and save times, and its peak RSS from /usr/bin/time.
# Prints time and peak-RSS ratios against the targets (time < 2x copy, peak RSS < 2.5x size).
# Needs a release build (bash scripts/build.sh) and /usr/bin/time; writes into build/bench/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${RUNS:-3}"
WORK="$ROOT/build/bench"
RESAVE="${RESAVE:-$ROOT/build/tests/integration/qp_resave}"
mkdir -p "$WORK"

if [ ! -x "$RESAVE" ]; then
    echo "bench: $RESAVE missing, building" >&2
    bash "$ROOT/scripts/build.sh" >&2
fi
[ -x /usr/bin/time ] || {
    echo "bench: /usr/bin/time missing (Debian package 'time'; scripts/setup.sh installs it)" >&2
    exit 1
}

model="${1:-}"
if [ -z "$model" ]; then
    model="$WORK/mlp-100mb.onnx"
    . "$ROOT/bench/lib.sh"
    generate "$ROOT/bench/gen_big_model.py" "$model"
fi
size=$(stat -c %s "$model")
out="$WORK/out.onnx"

# Best wall time and best CPU time (user + sys, which a busy machine disturbs less) of RUNS runs
# of a command, as "WALL CPU" in seconds.
best_of() {
    local best_wall="" best_cpu="" k wall cpu
    for ((k = 0; k < RUNS; k++)); do
        rm -f "$out"
        /usr/bin/time -f '%e %U %S' -o "$WORK/t.txt" "$@" >/dev/null
        read -r wall cpu < <(awk '{ printf "%s %.3f\n", $1, $2 + $3 }' "$WORK/t.txt")
        if [ -z "$best_wall" ] || awk -v a="$wall" -v b="$best_wall" 'BEGIN{exit !(a<b)}'; then
            best_wall="$wall"
        fi
        if [ -z "$best_cpu" ] || awk -v a="$cpu" -v b="$best_cpu" 'BEGIN{exit !(a<b)}'; then
            best_cpu="$cpu"
        fi
    done
    echo "$best_wall $best_cpu"
}

cat "$model" >/dev/null # warm the page cache for every contender alike
read -r t_cp c_cp < <(best_of cp "$model" "$out")
read -r t_cp_sync c_cp_sync < <(best_of bash -c 'cp "$1" "$2" && sync "$2"' _ "$model" "$out")
read -r t_qp c_qp < <(best_of "$RESAVE" "$model" "$out")

# One more run for the breakdown and the peak RSS.
rm -f "$out"
/usr/bin/time -f 'time_rss_kb=%M' -o "$WORK/time.txt" "$RESAVE" --time "$model" "$out" >"$WORK/resave.txt"
load_s=$(sed -n 's/^load_s=//p' "$WORK/resave.txt")
save_s=$(sed -n 's/^save_s=//p' "$WORK/resave.txt")
rss_kb=$(sed -n 's/^time_rss_kb=//p' "$WORK/time.txt")
cmp -s "$model" "$out" && same="byte-identical to the input" || same="differs from the input bytes"
out_size=$(stat -c %s "$out")
rm -f "$out"

awk -v size="$size" -v out_size="$out_size" -v cp="$t_cp" -v cps="$t_cp_sync" -v qp="$t_qp" \
    -v ccp="$c_cp" -v ccps="$c_cp_sync" -v cqp="$c_qp" \
    -v load="$load_s" -v save="$save_s" -v rss="$rss_kb" -v same="$same" -v runs="$RUNS" \
    -v model="${model#"$ROOT"/}" 'function ratio(a, b) { return b > 0 ? sprintf("%.2fx", a / b) : "n/a" }
BEGIN {
    printf "model            %s (%.1f MB)\n", model, size / 1e6
    printf "output           %.1f MB, %s\n", out_size / 1e6, same
    printf "                 wall (best of %d)   cpu user+sys (best of %d)\n", runs, runs
    printf "cp               %6.3f s            %6.3f s\n", cp, ccp
    printf "cp + sync        %6.3f s            %6.3f s\n", cps, ccps
    printf "qplace load+save %6.3f s            %6.3f s\n", qp, cqp
    printf "  breakdown      load %.3f s, save %.3f s incl. fsync (one run)\n", load, save
    printf "peak RSS         %.1f MB\n", rss * 1024 / 1e6
    printf "time ratio       wall %s cp+sync, %s plain cp; cpu %s cp+sync   (target < 2x)\n",
           ratio(qp, cps), ratio(qp, cp), ratio(cqp, ccps)
    printf "RSS ratio        %.2fx file size                               (target < 2.5x)\n",
           rss * 1024 / size
}'
