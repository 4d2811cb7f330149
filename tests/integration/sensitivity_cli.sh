#!/bin/bash
# qplace sensitivity end to end on tests/unit/sensitivity/data/sens_small.onnx: the table and
# JSON, unprobed and failed targets, incremental == --no_incremental, probe workers, the
# exclusions file taken as is by qplace quantize --nodes_to_exclude @FILE, blocks, the accuracy
# budget, bad input.
# Usage: sensitivity_cli.sh QPLACE
set -u
Q=$1
D=$(cd "$(dirname "$0")/../unit/sensitivity/data" && pwd)
PY=/usr/bin/python3
# T, fail, expect
. "$(dirname "$0")/lib/cli_checks.sh"
py() { "$PY" -c "$@" || fail "python check: $1"; }

M=$D/sens_small.onnx
CAL=$D/sens_small.calib.npz
sum_before=$(md5sum "$M" | cut -d' ' -f1)

# 1. Node granularity over the trt policy extended with ln/sm/sig1: ln first, table on stderr.
expect 0 "$Q" sensitivity --onnx_path "$M" --placement_in "$D/sens_small.failing.placement.json" \
    --calibration_data_path "$CAL" --granularity node --metric mse --output_json "$T/a.json"
grep -q 'Sensitivity scan (int8 / mse / node' "$T/err" || fail "table header"
grep -E '^ +1 +ln +LayerNormalization .*<-- highest impact' "$T/err" >/dev/null || fail "ln first"
grep -q '<-- lowest impact' "$T/err" || fail "lowest marked"
grep -q "failed (1):" "$T/err" || fail "failed footer"
grep -q "cast_idx: tensor 'idx'" "$T/err" || fail "failed reason"
py "
import json; d = json.load(open('$T/a.json'))
assert d['onnx_path'] == '$M', d['onnx_path']
assert d['calibration_source'] == 'real' and d['num_calibration_samples'] == 6
assert d['metric'] == 'mse' and d['granularity'] == 'node' and d['target_precision'] == 'int8'
assert d['probe'] == 'quantize_one' and d['incremental'] is True
assert [t['name'] for t in d['targets']][0] == 'ln'
assert set(d['scores']) == {'conv1', 'sig1', 'conv2', 'mm', 'ln', 'sm'}, d['scores']
assert all(v > 0 for v in d['scores'].values())
assert [f['name'] for f in d['failed']] == ['cast_idx'] and 'no calibrated range' in d['failed'][0]['error']
assert d['unprobed'] == []
assert 'cast_idx' not in d['scores']
assert d['timings']['probes_s'] >= 0 and d['timings']['nodes_executed'] > 0
tm = d['timings']
assert 0 < tm['probes_cpu_s'] and 0 < tm['reference_cpu_s'] and tm['probes_cpu_s'] + tm['reference_cpu_s'] <= tm['total_cpu_s'], tm
assert 'exclusions' not in d
"
# 2. Incremental and full-pass probes give the same scores.
expect 0 "$Q" sensitivity --onnx_path "$M" --placement_in "$D/sens_small.placement.json" \
    --calibration_data_path "$CAL" --granularity node --output_json "$T/inc.json" --quiet
expect 0 "$Q" sensitivity --onnx_path "$M" --placement_in "$D/sens_small.placement.json" \
    --calibration_data_path "$CAL" --granularity node --output_json "$T/naive.json" --quiet \
    --no-incremental
py "
import json; a = json.load(open('$T/inc.json'))['scores']; b = json.load(open('$T/naive.json'))['scores']
assert a.keys() == b.keys() and len(a) == 6
for k in a: assert abs(a[k] - b[k]) <= 1e-9 * abs(b[k]), (k, a[k], b[k])
"
# 2a. --weight_clipping absmax scores the weights with absmax scales: the targets holding
# weights (conv1, conv2, mm) score otherwise than with the default clipping, the rest the same;
# the JSON names it; another value is a usage error naming the flag.
expect 0 "$Q" sensitivity --onnx_path "$M" --placement_in "$D/sens_small.placement.json" \
    --calibration_data_path "$CAL" --granularity node --output_json "$T/abs.json" --quiet \
    --weight_clipping absmax
py "
import json; a = json.load(open('$T/inc.json')); b = json.load(open('$T/abs.json'))
assert a['weight_clipping'] == 'mse' and b['weight_clipping'] == 'absmax', (a['weight_clipping'], b['weight_clipping'])
w = {t['name'] for t in a['targets'] if t['weights']}
assert w == {'conv1', 'conv2', 'mm'}, w
for k in a['scores']: assert (a['scores'][k] != b['scores'][k]) == (k in w), (k, a['scores'][k], b['scores'][k])
"
expect 1 "$Q" sensitivity --onnx_path "$M" --calibration_data_path "$CAL" --weight_clipping median
grep -q -- "--weight_clipping must be absmax or mse, not 'median'" "$T/err" || fail "weight_clipping usage"
# 2b. Probes on 3 workers (3 threads) give the one-worker scores bit for bit; bad counts are usage
# errors that name the flag.
expect 0 "$Q" sensitivity --onnx_path "$M" --placement_in "$D/sens_small.placement.json" \
    --calibration_data_path "$CAL" --granularity node --output_json "$T/w1.json" --quiet \
    --threads 3 --probe_workers 1
expect 0 "$Q" sensitivity --onnx_path "$M" --placement_in "$D/sens_small.placement.json" \
    --calibration_data_path "$CAL" --granularity node --output_json "$T/w3.json" --quiet \
    --threads 3 --probe_workers 3
py "
import json; a = json.load(open('$T/w1.json')); b = json.load(open('$T/w3.json'))
assert a['timings']['probe_workers'] == 1 and b['timings']['probe_workers'] == 3, (a['timings'], b['timings'])
assert a['scores'] == b['scores'], (a['scores'], b['scores'])
"
for bad in abc -1 2K; do
    expect 1 "$Q" sensitivity --onnx_path "$M" --calibration_data_path "$CAL" --probe_workers "$bad"
    grep -q -- "--probe_workers: '$bad' is not a worker count" "$T/err" || fail "bad --probe_workers $bad"
done
# 3. Unprobed (a scoped op type the placement never quantizes), zero scores hidden by default.
expect 0 "$Q" sensitivity --onnx_path "$M" --placement_in "$D/sens_small.placement.json" \
    --calibration_data_path "$CAL" --op_types_scope Conv,Relu --op_types_scope LayerNormalization \
    --output_json "$T/u.json"
grep -q "unprobed (1):" "$T/err" || fail "unprobed footer"
py "
import json; d = json.load(open('$T/u.json'))
assert [u['name'] for u in d['unprobed']] == ['Relu'], d['unprobed']
assert set(d['scores']) == {'Conv', 'LayerNormalization'}
assert d['targets'][0]['name'] == 'LayerNormalization' and d['targets'][1]['nodes'] == ['conv1', 'conv2']
"
# 4. The exclusions file goes into qplace quantize as is; its placement equals ours.
expect 0 "$Q" sensitivity --onnx_path "$M" --calibration_data_path "$CAL" --granularity node \
    --threshold 0 --max_nodes 1 --exclusions_out "$T/excl.txt" --placement_out "$T/ours.json" \
    --output_json "$T/x.json"
grep -qx '\^ln\$' "$T/excl.txt" || fail "exclusions file: $(cat "$T/excl.txt")"
expect 0 "$Q" quantize --onnx_path "$M" --calibration_data_path "$CAL" \
    --nodes_to_exclude "@$T/excl.txt" --placement_out "$T/theirs.json" --output_path "$T/q.onnx"
expect 0 "$Q" diff "$T/ours.json" "$T/theirs.json"
grep -q 'result: SAME' "$T/out" || fail "placements differ: $(cat "$T/out")"
grep -q '"node":"mm"' "$T/theirs.json" || fail "mm should stay quantized"
grep -q '"node":"ln"' "$T/theirs.json" && fail "ln should be excluded"
py "
import json; e = json.load(open('$T/x.json'))['exclusions']
assert e['mode'] == 'threshold' and e['excluded'] == ['ln'], e
s = e['summary']; assert s['num_excluded'] == 1 and s['num_previously_quantized'] == 2 and s['num_remaining_quantized'] == 1
assert e['by_op_type']['LayerNormalization']['excluded'] == 1 and e['by_op_type']['MatMul']['excluded'] == 0
"
# 5. Blocks: groups by regex, op-type granularity exclusions list member nodes.
printf '{"convs": ["conv"], "tail": ["ln", "sm"]}\n' >"$T/blocks.json"
expect 0 "$Q" sensitivity --onnx_path "$M" --placement_in "$D/sens_small.placement.json" \
    --calibration_data_path "$CAL" --granularity node --blocks "$T/blocks.json" --block_agg max \
    --threshold 0.001 --exclusions_out "$T/bx.txt" --output_json "$T/b.json" --quiet
py "
import json; e = json.load(open('$T/b.json'))['exclusions']
assert e['block_agg'] == 'max' and [g['name'] for g in e['groups']] == ['tail'], e
assert e['excluded'] == ['ln', 'sm'], e['excluded']
"
[ "$(grep -v '^#' "$T/bx.txt" | tr '\n' ' ')" = '^ln$ ^sm$ ' ] || fail "blocks exclusions: $(cat "$T/bx.txt")"
# 6. Accuracy budget: the highest targets out first, the whole model re-measured at the steps the
#    search tries (the last one holds, one fewer fails), placement written.
expect 0 "$Q" sensitivity --onnx_path "$M" --placement_in "$D/sens_small.placement.json" \
    --calibration_data_path "$CAL" --granularity node --max_output_drift 0.01 \
    --exclusions_out "$T/bud.txt" --placement_out "$T/bud.json" --output_json "$T/bj.json" --quiet
py "
import json; e = json.load(open('$T/bj.json'))['exclusions']
assert e['mode'] == 'max_output_drift' and e['budget_met'] is True, e
st = {s['excluded_groups']: s for s in e['budget_steps']}
k = len(e['excluded'])
assert e['excluded'][0] == 'ln' and st[k]['drift'] <= 0.01, e
assert k - 1 in st and st[k - 1]['drift'] > 0.01, e
assert all(s['drift'] > 0.01 for g, s in st.items() if g < k), e
assert 'top1_agreement' in st[0] and st[0]['top1_agreement'] < 1, e
p = json.load(open('$T/bud.json'))
assert all(x['node'] not in e['excluded'] for x in p['edges'] + p['weights'])
per = {'conv1': 2, 'conv2': 2, 'mm': 2, 'ln': 1, 'sm': 1, 'sig1': 1}
assert len(p['edges']) + len(p['weights']) == 9 - sum(per[n] for n in e['excluded'])
"
grep -qx '\^ln\$' "$T/bud.txt" || fail "budget exclusions"
# The top-1 bound: every class-score output (y, [N, 4, 16]) agreeing on all rows takes exclusions;
# both bounds at once must both hold; a model without class scores cannot take it.
expect 0 "$Q" sensitivity --onnx_path "$M" --placement_in "$D/sens_small.placement.json" \
    --calibration_data_path "$CAL" --granularity node --min_top1_agreement 1 \
    --max_output_drift 0.5 --output_json "$T/bt.json" --placement_out "$T/bt_pl.json" --quiet
py "
import json; e = json.load(open('$T/bt.json'))['exclusions']
assert e['mode'] == 'max_output_drift + min_top1_agreement' and e['budget_met'] is True, e
assert e['min_top1_agreement'] == 1 and e['max_output_drift'] == 0.5, e
st = {s['excluded_groups']: s for s in e['budget_steps']}
k = len(e['excluded'])
assert k >= 1 and st[k]['top1_agreement'] == 1 and st[k]['drift'] <= 0.5, e
assert st[k - 1]['top1_agreement'] < 1 or st[k - 1]['drift'] > 0.5, e
"
expect 1 "$Q" sensitivity --onnx_path "$M" --min_top1_agreement 1.5
grep -q 'min_top1_agreement' "$T/err" || fail "top-1 bound out of range"
expect 1 "$Q" sensitivity --onnx_path "$M" --min_top1_agreement 0.9 --coverage 0.5
grep -q 'excludes --coverage' "$T/err" || fail "budget with coverage"
# 7. Synthetic data is flagged.
expect 0 "$Q" sensitivity --onnx_path "$M" --num_synthetic_samples 2 --output_json "$T/syn.json" --quiet
grep -q 'synthetic' "$T/err" || fail "synthetic warning"
py "import json; d = json.load(open('$T/syn.json')); assert d['calibration_source'] == 'synthetic' and d['num_calibration_samples'] == 2"
# 8. Bad input: exit 1 for flags, 2 for files; nothing written; the model untouched.
rm -f "$T/bad.json"
expect 1 "$Q" sensitivity --onnx_path "$M" --metric l2 --output_json "$T/bad.json"
grep -q -- "--metric" "$T/err" || fail "metric message"
expect 1 "$Q" sensitivity --onnx_path "$M" --coverage 0.5 --threshold 1 --output_json "$T/bad.json"
expect 1 "$Q" sensitivity --onnx_path "$M" --coverage 1.5 --output_json "$T/bad.json"
expect 1 "$Q" sensitivity --onnx_path "$M" --block_agg median --output_json "$T/bad.json"
grep -q "block_agg" "$T/err" || fail "block_agg message"
expect 1 "$Q" sensitivity --onnx_path "$M" --granularity layer --output_json "$T/bad.json"
expect 1 "$Q" sensitivity --output_json "$T/bad.json"
expect 2 "$Q" sensitivity --onnx_path "$T/missing.onnx" --output_json "$T/bad.json"
printf '{"g": ["("]}' >"$T/badblocks.json"
expect 2 "$Q" sensitivity --onnx_path "$M" --blocks "$T/badblocks.json" --output_json "$T/bad.json"
grep -q "badblocks.json" "$T/err" || fail "blocks message"
printf '{"format": "qplace.placement", "version": 1, "edges": [{"tensor": "a", "node": "nope", "input": 0, "reason": "x"}], "weights": []}' >"$T/badpl.json"
expect 2 "$Q" sensitivity --onnx_path "$M" --placement_in "$T/badpl.json" --output_json "$T/bad.json"
grep -q "nope" "$T/err" || fail "placement message"
expect 2 "$Q" sensitivity --onnx_path "$M" --calibration_data_path "$D/sens_small.placement.json" \
    --output_json "$T/bad.json"
expect 2 "$Q" sensitivity --onnx_path "$M" --output_json "$M"
[ -e "$T/bad.json" ] && fail "an output was written on error"
case "$(ls "$T")" in *.tmp*) fail "temporary file left behind" ;; esac
[ "$(md5sum "$M" | cut -d' ' -f1)" = "$sum_before" ] || fail "the input model changed"

if [ $fails -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "sensitivity_cli: all checks passed"
