"""qplace.sensitivity: ModelOpt's sensitivity API (score, suggest_exclusion, summarize_exclusion).

    from qplace import sensitivity      # was: from modelopt.onnx.quantization import sensitivity
    result = sensitivity.score("model.onnx", calib, granularity="node", metric="kl_div")
    result["scores"]                     # {node: score}, highest first
    excluded = sensitivity.suggest_exclusion(result, coverage=0.9)
    sensitivity.summarize_exclusion(result["scores"], excluded)
    qplace.quantize(onnx_path="model.onnx", calibration_data=calib,
                    nodes_to_exclude=["^%s$" % re.escape(n) for n in excluded])

score() runs qplace's engine (fake quantization on each probe's tensors, partial re-runs from a
cached float reference), so it takes seconds where ModelOpt quantizes and re-runs the model per
probe. Its result is a dict with ModelOpt's keys (scores, calibration_source,
num_calibration_samples, metric, granularity, target_precision) plus unprobed, failed and
targets (rank, op type, edges, weights, nodes); it also holds the analysis, so
suggest_exclusion(result, max_output_drift=D) can run the accuracy budget. suggest_exclusion on
a plain {name: score} dict picks with the same C picker.
"""

import ctypes
import json
import math
import warnings

from . import _lib
from ._core import as_list, choice, float_arg, int_arg, model_arg
from ._data import open_data
from .errors import check, usage
from .placement import Placement
from .quantize import _CLIP
from .ranges import Ranges

_GRAN = {"op_type": 0, "node": 1}
_METRIC = {"kl_div": 0, "mse": 1, "cos": 2}
_PROBE = {"quantize_one": 0, "exclude_one": 1}
_PREC = {"int8": 0, "fp8": 1}
_AGG = {"sum": 0, "max": 1, "mean": 2}


class _Analysis:
    """A struct qp_sensitivity and what it borrows (model, data, ranges), freed together."""

    def __init__(self, model, data, ranges_handle):
        self.model, self.data, self.ranges = model, data, ranges_handle
        self.ptr = ctypes.c_void_p()

    def __del__(self):
        if getattr(self, "ptr", None):
            _lib.qp_sensitivity_free(self.ptr)
            self.ptr = None


class SensitivityResult(dict):
    """score()'s result: a dict with ModelOpt's keys; `.analysis` keeps the C analysis."""

    analysis = None


def score(onnx_path, calibration_data=None, *, num_synthetic_samples=100,
          target_precision="int8", granularity="op_type", metric="kl_div",
          calibration_method="entropy", calibration_eps=None, op_types_scope=None,
          work_dir=None, calibration_shapes=None, placement=None, ranges=None,
          probe="quantize_one", threads=0, probe_workers=0, progress=None,
          weight_clipping="mse"):
    """Ranks the placement's targets (op types or nodes) by output drift. `placement`: a
    Placement or file (default: the trt policy); `ranges`: a Ranges or file (default: an entropy
    calibration on the data). calibration_data None: num_synthetic_samples seeded random rows.
    weight_clipping: the weight scales of quantize's weight_clipping ("mse", its default, or
    "absmax")."""
    for k, v in (("calibration_eps", calibration_eps), ("work_dir", work_dir)):
        if v is not None:
            warnings.warn("qplace.sensitivity.score: %s: qplace scores in memory on its own CPU "
                          "engine; the value is ignored" % k, stacklevel=2)
    if calibration_method not in (None, "entropy") and ranges is None:
        raise usage("sensitivity.score: calibration_method %r: qplace calibrates the probes "
                    "with entropy; give ranges= from qplace.calibrate(...) for another method"
                    % calibration_method)
    model = model_arg(onnx_path)
    o = _lib.SensitivityOptions()
    o.granularity = choice(granularity, _GRAN, "granularity")
    o.metric = choice(metric, _METRIC, "metric")
    o.probe = choice(probe, _PROBE, "probe")
    clip = choice(weight_clipping or "mse", _CLIP, "weight_clipping")
    o.absmax_weights = int(clip == _CLIP["absmax"])
    o.quantize_mode = choice(target_precision, _PREC, "target_precision")
    scope = _lib.StrArray(as_list(op_types_scope, "op_types_scope"))
    o.op_types_scope = scope.ptr
    o.n_op_types_scope = len(scope)
    o.n_threads = int_arg(threads, "threads")
    o.probe_workers = int_arg(probe_workers, "probe_workers")
    fn = _lib.ProgressFn()
    if progress is not None:
        def call(done, total, user):
            try:
                progress(done, total)
            except Exception:
                pass
        fn = _lib.ProgressFn(call)
    o.progress = fn
    if calibration_data is None:
        n = int_arg(num_synthetic_samples, "num_synthetic_samples", 1)
        data = _synthetic(model, n, calibration_shapes)
    else:
        data = open_data(model, calibration_data, calibration_shapes)
    pl = None
    if placement is not None:
        pl = (placement if isinstance(placement, Placement) else Placement.load(placement))
        pl = pl._handle()
    rg = None
    if ranges is not None:
        rg = (ranges if isinstance(ranges, Ranges) else Ranges.load(ranges))._handle()
    a = _Analysis(model, data, rg)
    err = _lib.Error()
    try:
        check(_lib.qp_sensitivity_score(model.ptr, pl.ptr if pl else None, data.ptr,
                                        rg.ptr if rg else None, ctypes.byref(o),
                                        ctypes.byref(a.ptr), ctypes.byref(err)), err)
    except Exception as ex:
        if data.failure is not None:
            raise ex from data.failure
        raise
    del scope, pl
    return _result(a, granularity, metric, target_precision, data)


def _synthetic(model, n, calibration_shapes):
    """Seeded synthetic data of n samples (ModelOpt's num_synthetic_samples), in batches of the
    first input's batch dim, as `qplace sensitivity --num_synthetic_samples` makes them."""
    from ._data import Provider, _input_specs, _parse_shapes, data_options, shapes_arg
    shapes = shapes_arg(calibration_shapes)
    specs = _input_specs(model)
    rows = 1
    if specs:
        name, _, _, dims = specs[0]
        given = _parse_shapes(shapes).get(name)
        rows = given[0] if given else dims[0] if dims and dims[0] > 0 else 1
    p = Provider()
    o = data_options()
    o.synthetic_batches = max(1, n // max(1, rows))
    err = _lib.Error()
    check(_lib.qp_provider_open_model(model.ptr, None, _lib.enc(shapes), ctypes.byref(o),
                                      ctypes.byref(p.ptr), ctypes.byref(err)), err)
    return p


def _result(a, granularity, metric, target_precision, data):
    summ = _lib.SensitivitySummary()
    _lib.qp_sensitivity_get_summary(a.ptr, ctypes.byref(summ))
    scores, targets, unprobed, failed = {}, [], [], []
    t = _lib.SensitivityTarget()
    for i in range(_lib.qp_sensitivity_n_targets(a.ptr)):
        _lib.qp_sensitivity_target(a.ptr, i, ctypes.byref(t))
        name, op = _lib.dec(t.name), _lib.dec(t.op_type)
        if t.state == 0:
            scores[name] = t.score
            targets.append({"rank": t.rank, "name": name, "op_type": op, "score": t.score,
                            "edges": t.n_edges, "weights": t.n_weights,
                            "nodes": [_lib.dec(_lib.qp_sensitivity_target_node(a.ptr, i, k))
                                      for k in range(t.n_nodes)]})
        else:
            (unprobed if t.state == 1 else failed).append(
                {"name": name, "op_type": op, ("reason" if t.state == 1 else "error"):
                 _lib.dec(t.error)})
    r = SensitivityResult(
        scores=scores, calibration_source="synthetic" if _lib.dec(_lib.qp_provider_source(
            data.ptr)) == "synthetic" else "real",
        num_calibration_samples=summ.n_calibration_samples or summ.n_samples,
        metric=metric, granularity=granularity, target_precision=target_precision,
        targets=targets, unprobed=unprobed, failed=failed, num_samples=summ.n_samples,
        total_score=summ.total_score)
    r.analysis = a
    return r


def _scores_of(scores):
    if isinstance(scores, dict) and "scores" in scores and isinstance(scores["scores"], dict):
        return scores["scores"]
    if not isinstance(scores, dict):
        raise usage("suggest_exclusion: expected score()'s result or a {name: score} dict, "
                    "not %s" % type(scores).__name__)
    return scores


def _pick_options(coverage, threshold, max_nodes, min_score_floor, near_tie_ratio, block_agg,
                  max_output_drift, min_top1_agreement=None):
    o = _lib.PickOptions()
    _lib.qp_sensitivity_pick_options_default(ctypes.byref(o))
    if max_output_drift is not None or min_top1_agreement is not None:
        o.mode = 2
        if max_output_drift is not None:
            o.max_output_drift = float_arg(max_output_drift, "max_output_drift")
            if not o.max_output_drift >= 0:
                raise usage("suggest_exclusion: max_output_drift must be >= 0, not %r"
                            % max_output_drift)
        if min_top1_agreement is not None:
            o.min_top1_agreement = float_arg(min_top1_agreement, "min_top1_agreement")
            if not 0 < o.min_top1_agreement <= 1:
                raise usage("suggest_exclusion: min_top1_agreement must be in (0, 1], not %r"
                            % min_top1_agreement)
    elif threshold is not None:
        o.mode = 1
        o.threshold = float_arg(threshold, "threshold")
    o.coverage = float_arg(coverage, "coverage")
    o.max_targets = 0 if max_nodes is None else int_arg(max_nodes, "max_nodes")
    o.min_score_floor = float_arg(min_score_floor, "min_score_floor")
    o.near_tie_ratio = 0.0 if near_tie_ratio is None else float_arg(near_tie_ratio,
                                                                    "near_tie_ratio")
    o.block_agg = choice(block_agg, _AGG, "block_agg")
    return o


def _blocks_json(blocks):
    if blocks is None:
        return None
    if not isinstance(blocks, dict):
        raise usage("suggest_exclusion: blocks must be a dict {group: [regex, ...]}")
    out = {}
    for g, pats in blocks.items():
        items = [pats] if isinstance(pats, str) or hasattr(pats, "pattern") else list(pats)
        out[str(g)] = [p.pattern if hasattr(p, "pattern") else p for p in items]
    return json.dumps(out).encode()


def suggest_exclusion(scores, coverage=0.90, *, threshold=None, blocks=None, block_agg="sum",
                      max_nodes=None, min_score_floor=0.0, near_tie_ratio=0.99,
                      max_output_drift=None, min_top1_agreement=None):
    """The targets to leave in float, highest score first: those holding up to `coverage` of the
    score mass, or (threshold) every score above `threshold`, or (a budget: max_output_drift
    and/or min_top1_agreement, score()'s result only) the fewest top targets until the whole
    model's drift is at most the bound and every class-score output's argmax agrees with the
    float model's on at least that fraction of its rows.
    `blocks` {group: [regex, ...]} picks groups whole (block_agg sum, max or mean)."""
    o = _pick_options(coverage, threshold, max_nodes, min_score_floor, near_tie_ratio, block_agg,
                      max_output_drift, min_top1_agreement)
    budget = max_output_drift is not None or min_top1_agreement is not None
    bj = _blocks_json(blocks)
    a = getattr(scores, "analysis", None)
    err = _lib.Error()
    if a is not None and (bj is None or budget):
        if bj is not None:
            raise usage("suggest_exclusion: blocks with an accuracy budget: write the blocks to "
                        "a file and use qplace sensitivity --blocks")
        x = ctypes.c_void_p()
        check(_lib.qp_sensitivity_pick(a.ptr, ctypes.byref(o), ctypes.byref(x),
                                       ctypes.byref(err)), err)
        try:
            ps = _lib.PickSummary()
            _lib.qp_sensitivity_exclusions_get_summary(x, ctypes.byref(ps))
            return [_lib.dec(_lib.qp_sensitivity_excluded(x, i)) for i in range(ps.n_excluded)]
        finally:
            _lib.qp_sensitivity_exclusions_free(x)
    if budget:
        raise usage("suggest_exclusion: an accuracy budget (max_output_drift, "
                    "min_top1_agreement) runs the model: pass score()'s result, not a plain dict "
                    "of scores")
    table = _scores_of(scores)
    names = list(table)
    vals = []
    for n in names:
        v = table[n]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise usage("suggest_exclusion: the score of %r must be a finite number, not %r"
                        % (n, v))
        vals.append(float(v))
    arr = _lib.StrArray(names)
    dv = (ctypes.c_double * max(1, len(vals)))(*vals)
    res = ctypes.POINTER(_lib.ScorePick)()
    check(_lib.qp_sensitivity_pick_scores(arr.ptr, dv, len(vals), ctypes.byref(o), bj,
                                          len(bj) if bj else 0, ctypes.byref(res),
                                          ctypes.byref(err)), err)
    try:
        p = res.contents
        return [names[p.excluded[i]] for i in range(p.n_excluded)]
    finally:
        _lib.qp_sensitivity_score_pick_free(res)


def summarize_exclusion(scores, excluded):
    """ModelOpt's summary of an exclusion list: coverage_pct, num_excluded,
    num_previously_quantized, num_remaining_quantized, excluded_mass, total_mass (unknown
    names count in num_excluded with mass 0)."""
    table = _scores_of(scores)
    excluded = list(excluded)
    total = float(sum(table.values()))
    mass = float(sum(table.get(n, 0.0) for n in excluded))
    return {"coverage_pct": 100.0 * mass / total if total > 0 else 0.0,
            "num_excluded": len(excluded), "num_previously_quantized": len(table),
            "num_remaining_quantized": len(table) - len(excluded),
            "excluded_mass": mass, "total_mass": total}


def exclusion_placement(result, excluded=None, **pick):
    """The analysis' placement minus the excluded targets (`qplace sensitivity
    --placement_out`): picks with **pick (suggest_exclusion's options) on score()'s result."""
    a = getattr(result, "analysis", None)
    if a is None:
        raise usage("exclusion_placement: pass score()'s result")
    if excluded is not None:
        raise usage("exclusion_placement: the exclusions come from the picker options; give "
                    "coverage=, threshold=, max_output_drift= or min_top1_agreement=")
    o = _pick_options(pick.get("coverage", 0.9), pick.get("threshold"), pick.get("max_nodes"),
                      pick.get("min_score_floor", 0.0), pick.get("near_tie_ratio", 0.99),
                      pick.get("block_agg", "sum"), pick.get("max_output_drift"),
                      pick.get("min_top1_agreement"))
    err = _lib.Error()
    x = ctypes.c_void_p()
    check(_lib.qp_sensitivity_pick(a.ptr, ctypes.byref(o), ctypes.byref(x), ctypes.byref(err)),
          err)
    try:
        out = ctypes.c_void_p()
        check(_lib.qp_sensitivity_exclusions_placement(x, ctypes.byref(out), ctypes.byref(err)),
              err)
        from .placement import _Handle
        h = _Handle(out)
        return Placement._from_ptr(h.ptr)
    finally:
        _lib.qp_sensitivity_exclusions_free(x)
