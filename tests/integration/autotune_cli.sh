#!/bin/bash
# qplace autotune end to end on tests/integration/quantize_models/resnet_like.onnx with synthetic
# data: the five outputs, placement.json taken by quantize --placement_in, optimized_final.onnx
# the same placement as placement.json (diff SAME), log.jsonl lines JSON, pareto.json's frontier,
# a rerun replaying autotune_state.json, the pattern cache reused, --max_output_drift rejecting
# schemes; bad input writes nothing.
# Usage: autotune_cli.sh QPLACE
set -u
Q=$1
M=$(cd "$(dirname "$0")/quantize_models" && pwd)/resnet_like.onnx
PY=/usr/bin/python3
# T, fail, expect
. "$(dirname "$0")/lib/cli_checks.sh"
sum_before=$(md5sum "$M" | cut -d' ' -f1)

# 1. A quick search, 2 schemes per pattern, 5 runs per round.
O=$T/out1
expect 0 "$Q" autotune --onnx_path "$M" --mode quick --schemes_per_region 2 --timing_runs 5 \
    --threads 2 --output_dir "$O"
for f in placement.json optimized_final.onnx log.jsonl pattern_cache.json autotune_state.json \
    pareto.json; do
    [ -s "$O/$f" ] || fail "$f missing or empty"
done
ls -A "$O" | grep -q '^\.autotune' && fail "temporary files left in the output folder"
grep -q '^autotune: pattern 1/[0-9]*, scheme [0-9]*/2: .* ETA' "$T/err" || fail "progress line"
grep -q '^  backend  *builtin (' "$T/out" || fail "summary: backend"
grep -Eq '^  schemes  *[1-9][0-9]* measured' "$T/out" || fail "summary: schemes measured"
grep -Eq '^  guard  *(passed|failed)' "$T/out" || fail "summary: guard"
"$PY" - "$O/log.jsonl" <<'PYEOF' || fail "log.jsonl"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines, "no line"
for l in lines:
    d = json.loads(l)
    for k in ("pattern", "signature", "regions", "points", "verdict", "adopted"):
        assert k in d, k
    if d["verdict"] != "error":
        assert len(d["candidate_ms"]) >= 5 and len(d["best_ms"]) >= 5
        assert d["candidate_median_ms"] > 0 and d["best_median_ms"] > 0
        assert d["verdict"] in ("faster", "slower", "unresolved")
        assert d["adopted"] == (d["verdict"] == "faster")
        assert d["drift"] >= 0, "drift of a raced scheme"
        assert d["stop"] in ("resolved", "max_rounds", "budget", "no_gain", "not_replicated"), d.get("stop")
        assert (d["stop"] == "resolved") == (d["verdict"] != "unresolved"), d["stop"]
PYEOF
"$PY" - "$O/pareto.json" <<'PYEOF' || fail "pareto.json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "qplace.autotune_pareto" and d["version"] == 1 and d["metric"] == "kl_div"
assert d["max_output_drift"] is None and d["evaluation"]["samples"] >= 1
fr, allm = d["frontier"], d["measured"]
labels = [e["label"] for e in allm]
assert labels.count("seed") == 1 and labels.count("best") == 1 and "without_qdq" in labels
def dom(b, a):
    return (b["median_ms"] <= a["median_ms"] and b["drift"] <= a["drift"] and
            (b["median_ms"] < a["median_ms"] or b["drift"] < a["drift"]))
assert fr and [e["median_ms"] for e in fr] == sorted(e["median_ms"] for e in fr)
for e in fr:
    assert e["median_ms"] > 0 and e["drift"] >= 0 and e in allm
    assert not any(dom(x, e) for x in allm), e
for x in allm:
    assert x in fr or any(dom(e, x) for e in fr), x
    if x["label"] == "scheme":
        assert isinstance(x["pattern"], int) and all(isinstance(k, int) for k in x["points"])
PYEOF
grep -q '^  frontier .*pareto.json' "$T/out" || fail "summary: frontier table"
grep -Eq '^  drift  *kl_div on [0-9]+ samples of the synthetic data' "$T/out" || fail "summary: drift"
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['format']=='qplace.pattern_cache' and d['patterns']" \
    "$O/pattern_cache.json" || fail "pattern_cache.json"
expect 0 "$Q" diff "$O/optimized_final.onnx" "$O/placement.json"
grep -q '^result: SAME' "$T/out" || fail "optimized_final.onnx vs placement.json not SAME"
expect 0 "$Q" quantize --onnx_path "$M" --placement_in "$O/placement.json" \
    --output_path "$T/q.onnx"
expect 0 "$Q" diff "$T/q.onnx" "$O/placement.json"
grep -q '^result: SAME' "$T/out" || fail "quantize --placement_in vs placement.json not SAME"

# 2. The same command again replays every race from autotune_state.json: the same placement.
grep -o '"points":\[[0-9,]*\].*"adopted":[a-z]*' "$O/log.jsonl" | sed 's/"candidate_ms.*"adopted"/ /' >"$T/decisions1"
n1=$(grep -c '"resumed":false' "$O/log.jsonl")
expect 0 "$Q" autotune --onnx_path "$M" --mode quick --schemes_per_region 2 --timing_runs 5 \
    --threads 2 --output_dir "$O"
grep -Eq "^  schemes  *$n1 measured \($n1 from the state file\)" "$T/out" || fail "resume: not replayed"
grep -q '"resumed":false' "$O/log.jsonl" && fail "resume: a race was measured again"
grep -o '"points":\[[0-9,]*\].*"adopted":[a-z]*' "$O/log.jsonl" | sed 's/"candidate_ms.*"adopted"/ /' >"$T/decisions2"
[ -s "$T/decisions1" ] && cmp -s "$T/decisions1" "$T/decisions2" || fail "resume: other decisions"

# 2b. --max_output_drift 0: the seed is over the bound, said so; schemes over the seed's drift
#     are rejected unraced and logged with their drift.
expect 0 "$Q" autotune --onnx_path "$M" --mode quick --schemes_per_region 4 --timing_runs 5 \
    --threads 2 --output_dir "$T/drift" --max_output_drift 0
grep -q "WARNING: the seed's drift .* already exceeds --max_output_drift 0" "$T/out" ||
    fail "drift bound: seed over the bound not said"
grep -q '"verdict":"rejected_drift"' "$T/drift/log.jsonl" || fail "drift bound: no scheme rejected"
"$PY" - "$T/drift/log.jsonl" "$T/drift/pareto.json" <<'PYEOF' || fail "drift bound: log/pareto"
import json, sys
seed = [e for e in json.load(open(sys.argv[2]))["measured"] if e["label"] == "seed"][0]["drift"]
for l in open(sys.argv[1]).read().splitlines():
    d = json.loads(l)
    if d["verdict"] == "rejected_drift":
        assert d["drift"] > seed and not d["adopted"] and "candidate_ms" not in d
    elif d["verdict"] != "error":
        assert d["drift"] <= seed
PYEOF
# 2b. Timing: run 1 (builtin, auto) timed whole models; --timing region times sub-models, and
#     a bad --timing is a usage error that writes nothing.
grep -q '"timing":"whole"' "$O/log.jsonl" || fail "timing: the default is not whole-model"
grep -q '"timing":"region"' "$O/log.jsonl" && fail "timing: a sub-model race in a default run"
expect 0 "$Q" autotune --onnx_path "$M" --mode quick --schemes_per_region 2 --timing_runs 5 \
    --threads 2 --output_dir "$T/region" --timing region
grep -q '^  timing  *region' "$T/out" || fail "timing: summary line"
grep -q '"timing":"whole"' "$T/region/log.jsonl" && fail "timing: --timing region ran whole models"
grep -q '"timing":"region"' "$T/region/log.jsonl" || fail "timing: --timing region not logged"
expect 0 "$Q" autotune --onnx_path "$M" --mode quick --schemes_per_region 2 --timing_runs 5 \
    --threads 2 --output_dir "$T/region_all" --timing region_all
grep -q '"timing":"region_all"' "$T/region_all/log.jsonl" ||
    fail "timing: --timing region_all not logged"
grep -q '"weight":1,' "$T/region_all/log.jsonl" || fail "timing: region_all timed a subset"
expect 1 "$Q" autotune --onnx_path "$M" --timing fast --output_dir "$T/badtiming"
[ -e "$T/badtiming" ] && fail "timing: a bad --timing wrote the output folder"

# 3. The pattern cache of run 1 seeds another run.
expect 0 "$Q" autotune --onnx_path "$M" --mode quick --schemes_per_region 2 --timing_runs 5 \
    --threads 2 --output_dir "$T/out2" --pattern_cache "$O/pattern_cache.json"
grep -q '"source":"cache"' "$T/out2/log.jsonl" || fail "no scheme from the pattern cache"

# 4. --use_trtexec on the fake trtexec of the unit tests (equal latencies: nothing adopted),
#    with the timing cache, plugins and extra arguments on its command line.
FAKE=$(cd "$(dirname "$0")/../unit/autotune/data" && pwd)/fake_trtexec.sh
TRTEXEC=$FAKE FAKE_TRTEXEC_ARGS=$T/trt_args expect 0 "$Q" autotune --onnx_path "$M" --use_trtexec \
    --schemes_per_region 2 --timing_runs 4 --timing_cache "$T/tc.cache" \
    --plugin_libraries libx.so --trtexec_benchmark_args="--memPoolSize=workspace:64MiB --noDataTransfers" \
    --output_dir "$T/trt"
grep -q '^  backend  *trtexec (' "$T/out" || fail "trtexec: backend line"
grep -Eq '^  schemes  *[1-9][0-9]* measured .*, 0 adopted' "$T/out" || fail "trtexec: adopted"
for a in --stronglyTyped "--timingCacheFile=$T/tc.cache" --staticPlugins=libx.so \
    --memPoolSize=workspace:64MiB --noDataTransfers; do
    grep -qxF -- "$a" "$T/trt_args" || fail "trtexec argument $a"
done

# 5. Ctrl-C: exit 130 after the race in flight, the state kept, no final file, no temporary.
V=$(dirname "$M")/vit_like.onnx
"$Q" autotune --onnx_path "$V" --timing_runs 5000 --threads 1 --output_dir "$T/int" \
    >"$T/int.out" 2>"$T/int.err" &
pid=$!
interrupt_when_racing "$pid" "$T/int.err"
wait "$pid"
rc=$?
[ "$rc" = 130 ] || { fail "Ctrl-C: exit $rc (want 130)"; cat "$T/int.err"; }
grep -q 'interrupted after [0-9]* races; the same command resumes' "$T/int.err" || fail "Ctrl-C message"
[ -e "$T/int/optimized_final.onnx" ] && fail "Ctrl-C: optimized_final.onnx written"
ls -A "$T/int" | grep -q '^\.autotune' && fail "Ctrl-C: temporary files left"

# 6. Bad input: exit 2 or 1, nothing written.
expect 2 "$Q" autotune --onnx_path "$T/missing.onnx" --output_dir "$T/bad1"
[ -e "$T/bad1" ] && fail "missing model: output folder created"
expect 1 "$Q" autotune --onnx_path "$M" --mode fast --output_dir "$T/bad2"
grep -q "mode must be quick, default or extensive" "$T/err" || fail "bad mode message"
[ -e "$T/bad2" ] && fail "bad mode: output folder created"
expect 1 "$Q" autotune --onnx_path "$M" --quant_type int4 --output_dir "$T/bad7"
[ -e "$T/bad7" ] && fail "bad quant type: output folder created"
expect 1 "$Q" autotune --onnx_path "$M" --timing_cache x.cache --output_dir "$T/bad3"
[ -e "$T/bad3" ] && fail "trtexec flag without trtexec: output folder created"
expect 0 "$Q" quantize --onnx_path "$M" --output_path "$T/trt.onnx"
expect 2 "$Q" autotune --onnx_path "$T/trt.onnx" --output_dir "$T/bad4"
grep -q "already holds Q/DQ" "$T/err" || fail "quantized model message"
[ -e "$T/bad4" ] && fail "quantized model: output folder created"
expect 2 "$Q" autotune --onnx_path "$M" --qdq_baseline "$M" --output_dir "$T/bad6"
grep -q "holds no Q/DQ node" "$T/err" || fail "float baseline message"
[ -e "$T/bad6" ] && fail "float baseline: output folder created"
expect 0 "$Q" autotune --onnx_path "$M" --qdq_baseline "$T/trt.onnx" --schemes_per_region 1 \
    --timing_runs 5 --output_dir "$T/base"
grep -Eq '^  schemes  *0 measured' "$T/out" || fail "trt baseline: schemes measured"
for d in -1 abc nan inf 1e999 ""; do
    expect 1 "$Q" autotune --onnx_path "$M" --max_output_drift "$d" --output_dir "$T/bad8"
    grep -q "max_output_drift: '.*' is not a non-negative number" "$T/err" ||
        fail "--max_output_drift $d: message"
    [ -e "$T/bad8" ] && fail "--max_output_drift $d: output folder created"
done
expect 1 "$Q" autotune --onnx_path "$M" --drift_samples many --output_dir "$T/bad9"
[ -e "$T/bad9" ] && fail "bad --drift_samples: output folder created"
expect 2 "$Q" autotune --onnx_path "$M" --eval_data_path "$T/missing.npz" --output_dir "$T/bad10"
[ -e "$T/bad10" ] && fail "missing --eval_data_path: output folder created"
echo '{"format": "qplace.pattern_cache", "version": 1, "patterns": 3}' >"$T/bad_cache.json"
expect 2 "$Q" autotune --onnx_path "$M" --pattern_cache "$T/bad_cache.json" --output_dir "$T/bad5"
[ -e "$T/bad5" ] && fail "bad pattern cache: output folder created"

# --node_filter_list (ModelOpt's implementation raises AttributeError on it), ModelOpt's short
# flags, -v, --default_dq_dtype
printf '# block 2 only\n\n  conv_b2_*  \n' >"$T/filter.txt"
expect 0 "$Q" autotune -m "$M" -o "$T/filt" --mode quick -s 2 --timing_runs 5 \
    --node_filter_list "$T/filter.txt" -v --default_dq_dtype float32
grep -Eq '^  node filter  *1 of [0-9]+ regions searched' "$T/out" || fail "filter: summary line"
grep -q "^qplace: debug: autotune: --node_filter_list '.*filter.txt': 1 of" "$T/err" ||
    fail "-v: no autotune debug line"
grep -Eq "^autotune: pattern 1/1 '.*' scheme [0-9]+/[0-9]+ points \{[0-9,]*\} of [0-9]+: candidate .* p .*: (faster|slower|unresolved)" \
    "$T/err" || fail "-v: no per-race line"
"$PY" - "$T/filt/log.jsonl" <<'PYEOF' || fail "filter: log.jsonl holds another pattern"
import json, sys
sigs = {json.loads(l)["signature"] for l in open(sys.argv[1])}
sys.exit(0 if len(sigs) == 1 else 1)
PYEOF
printf 'conv_b2_*\nconv_b3_a\n' >"$T/filter2.txt"
expect 2 "$Q" autotune --onnx_path "$M" --node_filter_list "$T/filter2.txt" --output_dir "$T/bad8"
grep -q "line 2: pattern 'conv_b3_a' matches no node of the model (nearest node: 'conv_b1_a')" \
    "$T/err" || fail "filter: no-match message"
[ -e "$T/bad8" ] && fail "filter without a match: output folder created"
printf '# nothing\n\n' >"$T/filter3.txt"
expect 2 "$Q" autotune --onnx_path "$M" --node_filter_list "$T/filter3.txt" --output_dir "$T/bad9"
grep -q "holds no pattern" "$T/err" || fail "filter: empty file message"
expect 2 "$Q" autotune --onnx_path "$M" --node_filter_list "$T/nofile.txt" --output_dir "$T/bad9"
grep -q "cannot read" "$T/err" || fail "filter: unreadable file message"
[ -e "$T/bad9" ] && fail "bad filter: output folder created"
expect 1 "$Q" autotune --onnx_path "$M" --default_dq_dtype bfloat16 --output_dir "$T/bad10"
grep -q "bfloat16 is not supported.*use float32 or float16" "$T/err" || fail "bfloat16 message"
expect 1 "$Q" autotune --onnx_path "$M" --default_dq_dtype float16 --high_precision_dtype fp32 \
    --output_dir "$T/bad10"
grep -q "disagree" "$T/err" || fail "--default_dq_dtype vs --high_precision_dtype message"
[ -e "$T/bad10" ] && fail "bad dq dtype: output folder created"

[ "$(md5sum "$M" | cut -d' ' -f1)" = "$sum_before" ] || fail "input model changed"
[ $fails = 0 ] && echo "autotune_cli: all checks passed"
exit $((fails > 0))
