#!/usr/bin/env bash
# check_rank_nodes.sh RANK_NODES QPLACE MODEL CALIB.npz WORKDIR
# examples/rank_nodes (the public sensitivity API) must print the same top ten nodes, in the same
# order and with the same scores (%.6g), as `qplace sensitivity --granularity node` on the same
# model and data. Exit 0 when it does.
set -uo pipefail
rank_nodes="$1" qplace="$2" model="$3" calib="$4" work="$5"
mkdir -p "$work"
fail() {
    echo "FAIL: $*"
    exit 1
}
"$rank_nodes" "$model" "$calib" >"$work/rank_nodes.out" 2>"$work/rank_nodes.err" ||
    { cat "$work/rank_nodes.err"; fail "rank_nodes $model $calib"; }
"$qplace" sensitivity --onnx_path "$model" --calibration_data_path "$calib" --granularity node \
    --quiet --output_json "$work/rank_nodes.sensitivity.json" >"$work/cli.log" 2>&1 ||
    { cat "$work/cli.log"; fail "qplace sensitivity"; }
/usr/bin/python3 - "$work/rank_nodes.out" "$work/rank_nodes.sensitivity.json" <<'PY' || exit 1
import json, sys
got = [line.split() for line in open(sys.argv[1]) if line.strip()]
targets = json.load(open(sys.argv[2]))["targets"][:10]
want = [[str(t["rank"]), t["name"], t["op_type"], "%.6g" % t["score"]] for t in targets]
if len(want) < 10 or got != want:
    print("FAIL: rank_nodes printed", got, "\n  qplace sensitivity ranks", want)
    sys.exit(1)
print("ok   rank_nodes top 10 = qplace sensitivity --granularity node:", " ".join(w[1] for w in want))
PY
