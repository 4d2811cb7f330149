#!/bin/bash
# qplace quantize --autotune end to end (docs/autotune.md, "Integrated: quantize --autotune"):
# the written model holds exactly the search's placement (diff SAME against placement.json and
# --placement_out), the search's folder is kept and resumable with --autotune_output_dir and
# gone without it, conflicting flags are usage errors that write nothing, Ctrl-C exits 130
# with nothing written; and ModelOpt #2123's ViT case: a Q/DQ baseline with edges into
# LayerNormalization, Softmax, Sqrt and Div, one of them on a plan-time tensor (the Cast of a
# shape value feeding Sqrt), seeds the search and comes out of quantize --autotune SAME.
# Usage: quantize_autotune_cli.sh QPLACE
set -u
Q=$1
HERE=$(cd "$(dirname "$0")" && pwd)
M=$HERE/quantize_models/resnet_like.onnx
V=$(cd "$HERE/../unit/autotune/data" && pwd)/vit_sdpa.onnx
PY=/usr/bin/python3
# T, fail, expect
. "$HERE/lib/cli_checks.sh"
export TMPDIR=$T/tmp # the search's temporary folders go here, so leftovers can be seen
mkdir -p "$TMPDIR"
sum_before=$(md5sum "$M" "$V")
same() { # same A B: qplace diff A B reports SAME
    expect 0 "$Q" diff "$1" "$2"
    grep -q '^result: SAME' "$T/out" || { fail "diff $1 $2 not SAME"; cat "$T/out"; }
}
QUICK=(--autotune_schemes_per_region 2 --autotune_timing_runs 5 --threads 2)

# 1. A quick search with a kept folder, the placement written too.
expect 0 "$Q" quantize --onnx_path "$M" --output_path "$T/q.onnx" --autotune=quick "${QUICK[@]}" \
    --autotune_output_dir "$T/at" --placement_out "$T/p.json"
for f in placement.json log.jsonl pattern_cache.json autotune_state.json; do
    [ -s "$T/at/$f" ] || fail "$f missing or empty"
done
grep -q '^qplace quantize --autotune: [0-9]* regions, [0-9]* patterns' "$T/out" || fail "summary: search"
grep -Eq '^  races  *[1-9][0-9]* measured \(0 from the state file\), [0-9]* adopted' "$T/out" ||
    fail "summary: races"
grep -Eq '^  guard  *(passed|FAILED): ' "$T/out" || fail "summary: guard"
guard1=$(grep -Ec '^  guard  *passed' "$T/out")
grep -q '^qplace quantize: .* -> .*q.onnx$' "$T/out" || fail "summary: quantize"
grep -q 'placement: autotune' "$T/out" || fail "summary: placement source"
grep -q '^autotune: pattern 1/[0-9]*, scheme [0-9]*/2: ' "$T/err" || fail "progress line"
same "$T/q.onnx" "$T/at/placement.json"
same "$T/p.json" "$T/at/placement.json"
n1=$(grep -c '"resumed":false' "$T/at/log.jsonl")

# 2. The same command again replays every race from the kept state: the same placement.
cp "$T/at/placement.json" "$T/placement1.json"
expect 0 "$Q" quantize --onnx_path "$M" --output_path "$T/q.onnx" --autotune=quick "${QUICK[@]}" \
    --autotune_output_dir "$T/at"
grep -Eq "^  races  *$n1 measured \($n1 from the state file\)" "$T/out" || fail "rerun: not replayed"
# The guard race is measured again, so its verdict may differ from the first run's on a noisy
# machine (a failed guard writes the model without Q/DQ); where both passed, the same placement.
if [ "$guard1" = 1 ] && grep -q '^  guard  *passed' "$T/out"; then
    same "$T/q.onnx" "$T/placement1.json"
fi

# 3. Without --autotune_output_dir (bare --autotune: the default mode): no folder left behind.
expect 0 "$Q" quantize "$M" --output_path "$T/q2.onnx" --autotune "${QUICK[@]}"
[ -s "$T/q2.onnx" ] || fail "no output without --autotune_output_dir"
grep -q 'search folder   temporary, removed' "$T/out" || fail "summary: temporary folder"
[ -z "$(ls -A "$TMPDIR")" ] || fail "temporary folder left: $(ls -A "$TMPDIR")"
[ -e autotune_out ] && fail "autotune_out created in the working folder"

# 4. Flags that choose or trim the placement, bad values: exit 1, nothing written.
echo '{"format": "qplace.placement", "version": 1, "edges": [], "weights": []}' >"$T/empty.json"
bad=(
    "--placement_in $T/empty.json" "--rules $T/empty.json" "--nodes_to_exclude conv.*"
    "--op_types_to_quantize Conv" "--op_types_to_exclude Add" "--nodes_to_quantize x"
    "--disable_mha_qdq" "--max_output_drift 0.1" "--min_top1_agreement 0.9"
    "--autotune_backend foo" "--autotune_timing_cache t.cache" "--autotune_timing_runs 2"
    "--autotune_schemes_per_region 0" "--high_precision_dtype bf16"
    "--autotune_use_trtexec --autotune_backend ort" "--autotune_trtexec_args=-x"
)
for b in "${bad[@]}"; do
    # shellcheck disable=SC2086 # the words of $b are the flags
    expect 1 "$Q" quantize --onnx_path "$M" --output_path "$T/bad.onnx" --autotune=quick \
        --autotune_output_dir "$T/bad" --placement_out "$T/bad.json" $b
    [ -e "$T/bad.onnx" ] || [ -e "$T/bad.json" ] || [ -e "$T/bad" ] && fail "$b: something written"
    grep -q "^qplace quantize: " "$T/err" || fail "$b: no message"
done
expect 1 "$Q" quantize --onnx_path "$M" --output_path "$T/bad.onnx" --autotune=fast
grep -q "autotune=fast: the mode is quick, default or extensive" "$T/err" || fail "bad mode message"
expect 1 "$Q" quantize --onnx_path "$M" --output_path "$T/bad.onnx" --autotune quick
grep -q "takes a value only as --autotune=quick" "$T/err" || fail "--autotune quick message"
expect 1 "$Q" quantize --onnx_path "$M" --output_path "$T/bad.onnx" --autotune_state_file s.json
grep -q -- "--autotune_state_file needs --autotune" "$T/err" || fail "autotune_ flag alone"
expect 1 "$Q" quantize --onnx_path "$M" --output_path "$T/bad.onnx" --autotune --rules r.json
grep -q -- "--rules cannot be combined with --autotune" "$T/err" || fail "--rules message"
expect 2 "$Q" quantize --onnx_path "$T/missing.onnx" --output_path "$T/bad.onnx" --autotune \
    --autotune_output_dir "$T/bad"
[ -e "$T/bad.onnx" ] || [ -e "$T/bad" ] && fail "missing model: something written"
expect 2 "$Q" quantize --onnx_path "$M" --output_path "$T" --autotune --autotune_output_dir "$T/bad"
[ -e "$T/bad" ] && fail "output path a folder: the search ran"
[ -z "$(ls -A "$TMPDIR")" ] || fail "temporary folder left after errors"

# 5. ModelOpt #2123 on a two-block ViT: the trt placement plus every activation edge into
#    LayerNormalization, Softmax, Sqrt and Div (Cast -> Sqrt on a plan-time tensor among them)
#    gives the Q/DQ baseline that seeds the search; 1 scheme per pattern (the seed's own,
#    skipped unmeasured where it equals the seed) and fp32, as ModelOpt's integrated flow.
expect 0 "$Q" quantize --onnx_path "$V" --output_path "$T/vtrt.onnx" --placement_out "$T/vtrt.json" \
    --high_precision_dtype fp32
"$PY" - "$V" "$T/vtrt.json" "$T/vit.json" "$T/vit_edges.txt" <<'PYEOF' || fail "vit placement"
import json, sys, onnx
m = onnx.load(sys.argv[1]); p = json.load(open(sys.argv[2]))
inits = {i.name for i in m.graph.initializer}
prod = {o: n for n in m.graph.node for o in n.output}
want = [(t, n.name, k) for n in m.graph.node
        if n.op_type in ("LayerNormalization", "Softmax", "Sqrt", "Div")
        for k, t in enumerate(n.input) if t not in inits]
ops = {prod[t].op_type + "->" + n.split("_")[0] for t, n, k in want}
for need in ("Cast->sqrt", "Sqrt->div", "Div->softmax", "Add->layernormalization",
             "MatMul->div", "Add->div"):
    assert need in ops, (need, ops)
have = {(e["tensor"], e["node"], e["input"]) for e in p["edges"]}
p["edges"] += [{"tensor": t, "node": n, "input": k, "reason": "test.modelopt_2123"}
               for t, n, k in want if (t, n, k) not in have]
json.dump(p, open(sys.argv[3], "w"), indent=1)
open(sys.argv[4], "w").write("".join("%s %s %d\n" % w for w in want))
PYEOF
expect 0 "$Q" quantize --onnx_path "$V" --output_path "$T/vbase.onnx" --placement_in "$T/vit.json" \
    --high_precision_dtype fp32
same "$T/vbase.onnx" "$T/vit.json"
expect 0 "$Q" quantize --onnx_path "$V" --output_path "$T/vq.onnx" --autotune=quick \
    --autotune_qdq_baseline "$T/vbase.onnx" --autotune_schemes_per_region 1 \
    --autotune_timing_runs 4 --threads 2 --high_precision_dtype fp32 \
    --autotune_output_dir "$T/vd" --placement_out "$T/vq.json"
cp "$T/out" "$T/vq.out"
same "$T/vq.onnx" "$T/vd/placement.json"
same "$T/vq.json" "$T/vd/placement.json"
n_q=$("$PY" -c "import onnx,sys; print(sum(n.op_type=='QuantizeLinear' for n in onnx.load(sys.argv[1]).graph.node))" "$T/vq.onnx")
if grep -q '^  guard  *passed' "$T/vq.out"; then
    if grep -Eq '^  races .*, 0 adopted' "$T/vq.out"; then
        same "$T/vq.onnx" "$T/vit.json" # every #2123 edge kept through calibration and writing
    fi
    [ "$n_q" -gt 0 ] || fail "vit: guard passed but no Q/DQ written"
else
    # the model without Q/DQ was as fast (tiny tensors): the empty placement, said so
    grep -q 'placement: autotune (guard failed: the empty placement)' "$T/vq.out" ||
        fail "vit: guard failed but not said"
    [ "$n_q" = 0 ] || fail "vit: guard failed but $n_q QuantizeLinear written"
fi
# The search's seed is the baseline's placement: the state's first race, or none at all, and
# pattern_cache.json records it; the deterministic check of the kept edges is
# unit/pipeline/quantize_autotune (a backend that makes every Q/DQ model faster).

# 6. Ctrl-C during the search: exit 130, no model, the state kept in the folder.
VL=$HERE/quantize_models/vit_like.onnx
"$Q" quantize --onnx_path "$VL" --output_path "$T/int.onnx" --autotune --autotune_timing_runs 5000 \
    --threads 1 --autotune_output_dir "$T/int" >"$T/int.out" 2>"$T/int.err" &
pid=$!
interrupt_when_racing "$pid" "$T/int.err"
wait "$pid"
rc=$?
[ "$rc" = 130 ] || { fail "Ctrl-C: exit $rc (want 130)"; cat "$T/int.err"; }
grep -q 'interrupted during the autotune search; nothing written; the same command resumes' \
    "$T/int.err" || fail "Ctrl-C message"
[ -e "$T/int.onnx" ] && fail "Ctrl-C: model written"
[ -e "$T/int/autotune_state.json" ] || fail "Ctrl-C: state not kept"

[ "$(md5sum "$M" "$V")" = "$sum_before" ] || fail "input model changed"
[ $fails = 0 ] && echo "quantize_autotune_cli: all checks passed"
exit $((fails > 0))
