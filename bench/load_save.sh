#!/usr/bin/env bash
# Load + save benchmark: how close qplace's model I/O comes to copying the file.
#   bash bench/load_save.sh [MODEL.onnx]     (default: a generated ~100 MB MLP)
# Measures, in one run, on a warm page cache, best of RUNS (default 3):
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
    if [ ! -s "$model" ] || [ "$ROOT/bench/gen_big_model.py" -nt "$model" ]; then
        echo "bench: generating $model" >&2
        /usr/bin/python3 "$ROOT/bench/gen_big_model.py" "$model"
    fi
fi
size=$(stat -c %s "$model")
out="$WORK/out.onnx"

# Best wall time of RUNS runs of a command (seconds, 3 decimals).
best_of() {
    local best="" t0 t1 dt k
    for ((k = 0; k < RUNS; k++)); do
        rm -f "$out"
        t0=$(date +%s.%N)
        "$@" >/dev/null
        t1=$(date +%s.%N)
        dt=$(awk -v a="$t1" -v b="$t0" 'BEGIN{print a-b}')
        if [ -z "$best" ] || awk -v a="$dt" -v b="$best" 'BEGIN{exit !(a<b)}'; then best="$dt"; fi
    done
    printf '%.3f' "$best"
}
cp_sync() { cp "$1" "$2" && sync "$2"; }

cat "$model" >/dev/null # warm the page cache for every contender alike
t_cp=$(best_of cp "$model" "$out")
t_cp_sync=$(best_of cp_sync "$model" "$out")
t_qp=$(best_of "$RESAVE" "$model" "$out")

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
    -v load="$load_s" -v save="$save_s" -v rss="$rss_kb" -v same="$same" -v runs="$RUNS" \
    -v model="${model#"$ROOT"/}" 'BEGIN {
    mb = size / 1e6
    printf "model            %s (%.1f MB)\n", model, mb
    printf "output           %.1f MB, %s\n", out_size / 1e6, same
    printf "cp               %.3f s (best of %d)\n", cp, runs
    printf "cp + sync        %.3f s\n", cps
    printf "qplace load+save %.3f s (load %.3f s, save %.3f s incl. fsync)\n", qp, load, save
    printf "peak RSS         %.1f MB\n", rss * 1024 / 1e6
    printf "time ratio       %.2fx cp+sync, %.2fx plain cp   (target < 2x)\n", qp / cps, qp / cp
    printf "RSS ratio        %.2fx file size                (target < 2.5x)\n", rss * 1024 / size
}'
