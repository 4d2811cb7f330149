"""qplace.quantize: ModelOpt's modelopt.onnx.quantization.quantize, on qplace's library.

    import qplace                      # was: from modelopt.onnx.quantization import quantize
    summary = qplace.quantize(onnx_path="model.onnx", quantize_mode="int8",
                              calibration_data={"x": batch}, calibration_method="entropy",
                              op_types_to_exclude=["Resize"], nodes_to_exclude=["/head/.*"],
                              output_path="model.quant.onnx")
    summary.outputs[0].cosine          # the drift of each graph output from the float model

The keywords are ModelOpt's, with its defaults (int8, entropy, fp16 high precision, output
<model>.quant.onnx); the model written is the one `qplace quantize` writes with the same flags
and data, byte for byte. ModelOpt keywords qplace has no use for are accepted with a warning
saying what qplace does instead (calibration_eps, simplify, ...); those it cannot honour raise
UsageError saying why (trt_plugins, target_dla, int4). qplace adds: `percentile`, `eval_data`
(held-out samples for the drift), `placement` (a Placement or file applied as it is), `rules`
(a rules file), `ranges` (a Ranges or file instead of calibration), `placement_out`, `threads`.

autotune=True|"quick"|"default"|"extensive" (ModelOpt's integrated autotune) runs the latency
search of `qplace autotune` first (qplace/autotune.h) and quantizes exactly the placement it
chose, as `qplace quantize --autotune` does; the autotune_* keywords are its flags, and the
summary's `autotune` field says what the search did (docs/python.md).
"""

import ctypes
import logging
import os
import warnings
from collections import namedtuple

from . import _lib
from ._core import as_list, choice, float_arg, fspath, int_arg, model_arg
from ._data import open_data, shapes_arg
from .calibrate import METHODS, method_arg
from .errors import check, usage
from .placement import Placement, trt_options
from .ranges import Ranges

Drift = namedtuple("Drift", "name cosine max_abs top1 n_rows")
Drift.__doc__ = ("The drift of one graph output from the float model's: cosine over every "
                 "element, the largest absolute error, and (class-score outputs) the fraction "
                 "of rows whose argmax agrees (top1, None otherwise) over n_rows rows.")

QuantizeSummary = namedtuple(
    "QuantizeSummary",
    "output_path n_edges n_tensors n_weights n_weight_tensors opset_from opset_to "
    "high_precision placement_source calibration_source method n_calib_samples "
    "n_calib_batches n_eval_samples eval_on_calibration drift_before_precision outputs "
    "placement weight_clipping n_weight_channels_clipped n_weight_channels "
    "weight_clip_mean_ratio budget equalization smoothquant_alpha n_cle_pairs n_cle_skipped "
    "n_smoothquant_pairs n_smoothquant_skipped outputs_before bias_correction n_bias_layers "
    "n_biases_added bias_rounds bias_shift_before bias_shift_after bias_seconds "
    "outputs_uncorrected outputs_unclipped auto_methods autotune bias_auto bias_kept "
    "outputs_corrected n_ranges_reused rounding outputs_unrounded")
Rounding = namedtuple(
    "Rounding", "n_layers n_skipped n_timed_out n_weights n_flipped error_before error_after "
    "seconds")
Rounding.__doc__ = ("weight_rounding='adaround': layers whose levels were chosen, left at nearest "
                    "(a shared weight, too few rows) and past the time bound; their weights and "
                    "of them those not at the nearest level; the mean output error relative to "
                    "the output's energy at nearest and after; seconds.")

QuantizeSummary.__doc__ = ("What qplace.quantize wrote, and the drift it measured; budget is a "
                           "Budget with an accuracy budget, else None; autotune an "
                           "AutotuneSummary with autotune=, else None.")

AutotuneSummary = namedtuple(
    "AutotuneSummary",
    "mode n_regions n_patterns n_points n_measured n_replayed n_adopted n_skipped "
    "seed_median_ms best_median_ms reference_median_ms guard_passed seconds placement "
    "output_dir")
AutotuneSummary.__doc__ = ("What quantize(..., autotune=...)'s search did: regions, patterns, "
                           "insertion points, races measured (replayed: from the state file), "
                           "adopted and skipped, the seed's and the best's median latency, the "
                           "model without Q/DQ's, whether the guard kept the Q/DQ placement "
                           "(else the placement is empty), and the placement quantized. "
                           "output_dir: the search's folder, None when it was temporary.")

Budget = namedtuple("Budget", "met n_ranked excluded drift_before drift_after top1_before "
                              "top1_after")
Budget.__doc__ = ("The accuracy budget's outcome: met, the quantized nodes ranked, the nodes "
                  "left in float (most sensitive first), and the whole model's drift (kl_div) "
                  "and least top-1 agreement (None without class-score outputs) before and "
                  "after the exclusions.")

_HIGH = {"fp32": 1, "fp16": 10, "bf16": 16}
# weight_clipping (enum qp_weight_clipping); sensitivity.score takes it too
_CLIP = {"absmax": 0, "mse": 1}
_EQUALIZE = {"none": 0, "cle": 1, "smoothquant": 2, "all": 3}

# ModelOpt keywords accepted with no effect, each with what qplace does instead.
_ACCEPTED = {
    "calibration_eps": "qplace calibrates on its own CPU engine, not on ONNX Runtime execution "
                       "providers",
    "simplify": "qplace does not run onnxslim; the model is quantized as given",
    "keep_intermediate_files": "qplace writes no intermediate files",
    "calibrate_per_node": "qplace's calibration is streamed batch by batch already",
    "use_zero_point": "int8/fp8 Q/DQ are symmetric (zero point 0), as ModelOpt's",
    "mha_accumulation_dtype": "qplace writes no Casts around attention's batched MatMuls",
}
# ModelOpt keywords qplace refuses, and why.
_REFUSED = {
    "trt_plugins": "qplace's engine cannot load TensorRT plugins",
    "trt_plugins_precision": "it only serves trt_plugins, which qplace does not take",
    "input_shapes_profile": "qplace calibrates on its own engine; give calibration_shapes",
    "block_size": "int4 is not supported",
    "target_dla": "qplace's trt policy targets TensorRT GPUs, not DLA",
}
_AUTOTUNE_MODES = ("quick", "default", "extensive")
# Keywords that choose or trim the placement: with autotune the search chooses it, and the model
# holds exactly the search's placement.
_AUTOTUNE_CONFLICTS = ("placement", "rules", "op_types_to_quantize", "op_types_to_exclude",
                       "nodes_to_quantize", "nodes_to_exclude", "disable_mha_qdq",
                       "max_output_drift", "min_top1_agreement")


def _accepted_and_refused(given):
    for k, v in given.items():
        if k in _REFUSED and v not in (None, False, [], ()):
            raise usage("quantize: %s is not supported: %s" % (k, _REFUSED[k]))
    for k, v in given.items():
        if k in _ACCEPTED and v not in (None, False, [], ()):
            warnings.warn("qplace.quantize: %s: %s; the value is ignored" % (k, _ACCEPTED[k]),
                          stacklevel=3)


def _default_output(path):
    """<model>.quant.onnx beside the model, as `qplace quantize` names it."""
    return (path[:-5] if path.endswith(".onnx") else path) + ".quant.onnx"


def _drifts(arr, n):
    return [Drift(_lib.dec(d.name), d.cosine, d.max_abs, d.top1 if d.has_top1 else None,
                  d.n_rows) for d in (arr[i] for i in range(n))]


def _summary(s, output_path):
    outs = _drifts(s.outputs, s.n_outputs)
    before = _drifts(s.outputs_before, s.n_outputs) if s.outputs_before else None
    uncorrected = _drifts(s.outputs_uncorrected, s.n_outputs) if s.outputs_uncorrected else None
    return QuantizeSummary(
        output_path, s.n_edges, s.n_tensors, s.n_weights, s.n_weight_tensors, s.opset_from,
        s.opset_to, {v: k for k, v in _HIGH.items()}.get(s.high_precision),
        _lib.dec(s.placement_source), _lib.dec(s.calibration_source), _lib.dec(s.method),
        s.n_calib_samples, s.n_calib_batches, s.n_eval_samples, bool(s.eval_on_calibration),
        bool(s.drift_before_precision), outs, Placement._from_ptr(s.placement),
        {v: k for k, v in _CLIP.items()}.get(s.weight_clipping), s.n_weight_channels_clipped,
        s.n_weight_channels, s.weight_clip_mean_ratio, _budget(s),
        {v: k for k, v in _EQUALIZE.items()}.get(s.equalization), s.smoothquant_alpha,
        s.n_cle_pairs, s.n_cle_skipped, s.n_smoothquant_pairs, s.n_smoothquant_skipped, before,
        bool(s.bias_correction), s.n_bias_layers, s.n_biases_added, s.bias_rounds,
        s.bias_shift_before, s.bias_shift_after, s.bias_seconds, uncorrected,
        _drifts(s.outputs_unclipped, s.n_outputs) if s.outputs_unclipped else None,
        _auto_methods(s), None, bool(s.bias_auto), bool(s.bias_kept),
        _drifts(s.outputs_corrected, s.n_outputs) if s.outputs_corrected else None,
        s.n_ranges_reused, _rounding(s),
        _drifts(s.outputs_unrounded, s.n_outputs) if s.outputs_unrounded else None)


def _rounding(s):
    """weight_rounding="adaround": a Rounding; None with nearest levels."""
    if s.weight_rounding != 1:
        return None
    return Rounding(s.n_rounded_layers, s.n_rounding_skipped, s.n_rounding_timed_out,
                    s.n_rounded_weights, s.n_rounded_flipped, s.rounding_error_before,
                    s.rounding_error_after, s.rounding_seconds)


def _auto_methods(s):
    """calibration_method "auto": {method: tensors that took it, "fallback": of the entropy ones,
    those without an evaluable consumer}; None for other methods."""
    if _lib.dec(s.method) != "auto":
        return None
    d = {m: s.auto_methods[i] for m, i in METHODS.items() if m != "auto"}
    d["fallback"] = s.n_auto_fallback
    return d


def _budget(s):
    if not s.budget:
        return None
    def top1(v):
        return None if v < 0 else v
    return Budget(bool(s.budget_met), s.n_budget_ranked,
                  [_lib.dec(s.budget_excluded[i]) for i in range(s.n_budget_excluded)],
                  s.budget_drift_before, s.budget_drift_after, top1(s.budget_top1_before),
                  top1(s.budget_top1_after))


def quantize(onnx_path, quantize_mode="int8", calibration_data=None, calibration_method=None,
             calibration_cache_path=None, calibration_shapes=None, calibration_eps=None,
             override_shapes=None, op_types_to_quantize=None, op_types_to_exclude=None,
             op_types_to_exclude_fp16=None, nodes_to_quantize=None, nodes_to_exclude=None,
             use_external_data_format=False, keep_intermediate_files=False, output_path=None,
             log_level=None, log_file=None, trt_plugins=None, trt_plugins_precision=None,
             high_precision_dtype="fp16", mha_accumulation_dtype=None, disable_mha_qdq=False,
             dq_only=False, block_size=None, use_zero_point=False, passes=None, simplify=False,
             calibrate_per_node=False, input_shapes_profile=None, direct_io_types=False,
             opset=None, calibration_data_reader=None, target_dla=False, autotune=None,
             *, percentile=None, eval_data=None, placement=None, rules=None, ranges=None,
             placement_out=None, threads=0, weight_clipping="mse", max_output_drift=None,
             min_top1_agreement=None, equalization="none", smoothquant_alpha=0.5,
             bias_correction="auto", weight_rounding="nearest", weight_rounding_seconds=None,
             autotune_output_dir=None, autotune_schemes_per_region=None,
             autotune_pattern_cache=None, autotune_qdq_baseline=None, autotune_state_file=None,
             autotune_backend=None, autotune_use_trtexec=False, autotune_timing_cache=None,
             autotune_trtexec_args=None, autotune_warmup_runs=None, autotune_timing_runs=None):
    """Quantizes onnx_path (a path, the model's bytes) and writes output_path; returns a
    QuantizeSummary. Raises qplace.Error subclasses (UsageError for a bad argument,
    BadInputError for a bad model or data, ...); on failure nothing is written."""
    args = dict(locals())
    _accepted_and_refused(dict(
        calibration_eps=calibration_eps, simplify=simplify, use_zero_point=use_zero_point,
        keep_intermediate_files=keep_intermediate_files, calibrate_per_node=calibrate_per_node,
        mha_accumulation_dtype=mha_accumulation_dtype, trt_plugins=trt_plugins,
        trt_plugins_precision=trt_plugins_precision, input_shapes_profile=input_shapes_profile, block_size=block_size,
        target_dla=target_dla))
    args["autotune"] = _autotune_mode(args)
    for p in as_list(passes, "passes"):
        if p != "concat_elimination":
            raise usage("quantize: passes: the only pass is concat_elimination, not %r" % p)
    if quantize_mode == "int4":
        raise usage("quantize: quantize_mode 'int4' is not supported (int8 or fp8)")
    if calibration_data is not None and calibration_data_reader is not None:
        raise usage("quantize: give calibration_data or calibration_data_reader, not both")
    if calibration_data_reader is not None:
        args["calibration_data"] = calibration_data_reader
    handler = _logging(log_level, log_file)
    try:
        return _quantize(**args)
    finally:
        if handler is not None:
            _lib.logger.removeHandler(handler)
            handler.close()


def _logging(log_level, log_file):
    """log_level sets the "qplace" logger's level; log_file adds a handler for the call."""
    if log_level is not None:
        lv = choice(str(log_level).upper(), {"DEBUG": 10, "INFO": 20, "WARNING": 30,
                                             "ERROR": 40}, "log_level")
        _lib.logger.setLevel(lv)
    if log_file is None:
        return None
    try:
        h = logging.FileHandler(fspath(log_file, "log_file"), mode="a")
    except OSError as ex:
        from .errors import FileError
        raise FileError("log_file '%s': cannot open for appending: %s"
                        % (log_file, ex.strerror)) from None
    h.setFormatter(logging.Formatter("qplace: %(levelname)s: %(message)s"))
    _lib.logger.addHandler(h)
    return h


def _quantize(onnx_path, quantize_mode, calibration_data, calibration_method,
              calibration_cache_path, calibration_shapes, override_shapes, op_types_to_quantize,
              op_types_to_exclude, op_types_to_exclude_fp16, nodes_to_quantize, nodes_to_exclude,
              use_external_data_format, output_path, high_precision_dtype, disable_mha_qdq,
              dq_only, direct_io_types, opset, percentile, eval_data, placement, rules, ranges,
              placement_out, threads, weight_clipping, max_output_drift, min_top1_agreement,
              equalization, smoothquant_alpha, bias_correction, weight_rounding,
              weight_rounding_seconds, autotune, **kw):
    """quantize() once its ModelOpt-only keywords are checked (kw: those, unused, and the
    autotune_* keywords)."""
    model = model_arg(onnx_path)
    if output_path is None:
        if model.path is None:
            raise usage("quantize: output_path is required when the model is given as bytes")
        output_path = _default_output(model.path)
    output_path = fspath(output_path, "output_path")
    if model.path is not None and os.path.exists(output_path) and os.path.samefile(
            output_path, model.path):
        raise usage("quantize: output path '%s' is the input model; choose another "
                    "output_path" % output_path)

    c = _lib.QuantizeConfig()
    _lib.qp_quantize_config_default(ctypes.byref(c))
    c.trt, keep = trt_options(quantize_mode, op_types_to_quantize, op_types_to_exclude,
                              nodes_to_quantize, nodes_to_exclude, disable_mha_qdq, rules)
    c.calibration_method, c.percentile = method_arg(calibration_method, percentile)
    shapes = shapes_arg(calibration_shapes)
    c.calibration_shapes = _lib.enc(shapes)
    over = shapes_arg(override_shapes, "override_shapes")
    c.override_shapes = _lib.enc(over)
    c.dq_only = 1 if dq_only else 0
    c.high_precision_dtype = choice(high_precision_dtype, _HIGH, "high_precision_dtype")
    c.n_threads = int_arg(threads, "threads")
    c.direct_io_types = 1 if direct_io_types else 0
    c.weight_clipping = choice(weight_clipping or "mse", _CLIP, "weight_clipping")
    if max_output_drift is not None:
        c.max_output_drift = float_arg(max_output_drift, "max_output_drift")
        if not c.max_output_drift >= 0:
            raise usage("quantize: max_output_drift must be >= 0, not %r" % max_output_drift)
    if min_top1_agreement is not None:
        c.min_top1_agreement = float_arg(min_top1_agreement, "min_top1_agreement")
        if not 0 < c.min_top1_agreement <= 1:
            raise usage("quantize: min_top1_agreement must be in (0, 1], not %r"
                        % min_top1_agreement)
    c.equalization = choice(equalization or "none", _EQUALIZE, "equalization")
    try:
        c.smoothquant_alpha = float(smoothquant_alpha)
    except (TypeError, ValueError):
        raise usage("quantize: smoothquant_alpha must be a number in [0, 1], not %r"
                    % (smoothquant_alpha,)) from None
    if not 0.0 <= c.smoothquant_alpha <= 1.0:
        raise usage("quantize: smoothquant_alpha %g is not in [0, 1]" % c.smoothquant_alpha)
    bc = {True: 1, False: 0, "on": 1, "off": 0, "auto": 2}
    if not isinstance(bias_correction, (bool, str)) or bias_correction not in bc:
        raise usage("quantize: bias_correction must be True, False, 'on', 'off' or 'auto', "
                    "not %r" % (bias_correction,))
    c.bias_correction = bc[bias_correction]
    c.weight_rounding = choice(weight_rounding or "nearest", {"nearest": 0, "adaround": 1},
                               "weight_rounding")
    if weight_rounding_seconds is not None:
        c.weight_rounding_seconds = float_arg(weight_rounding_seconds, "weight_rounding_seconds")
        if not c.weight_rounding_seconds > 0:
            raise usage("quantize: weight_rounding_seconds must be > 0, not %r"
                        % (weight_rounding_seconds,))
    c.opset = 0 if opset is None else int_arg(opset, "opset", 1, 1000)
    fp16_ops = _lib.StrArray(
        [t for v in as_list(op_types_to_exclude_fp16, "op_types_to_exclude_fp16")
         for t in v.split(",") if t])
    c.op_types_to_exclude_fp16 = fp16_ops.ptr
    c.n_op_types_to_exclude_fp16 = len(fp16_ops)
    pl = None
    if placement is not None:
        pl = (placement if isinstance(placement, Placement) else Placement.load(placement))
        pl = pl._handle()
        c.placement = pl.ptr
    rg = None
    if ranges is not None or calibration_cache_path is not None:
        r = Ranges()
        if ranges is not None:
            r = ranges if isinstance(ranges, Ranges) else Ranges.load(ranges)
        if calibration_cache_path is not None:  # its scales over the ranges, as the CLI
            cache = Ranges.load_trt_cache(calibration_cache_path)
            r = Ranges(list(r.items()) + list(cache.items()), r.meta)
        rg = r._handle()
        c.ranges = rg.ptr
    data = None  # None: the library makes seeded synthetic data, as `qplace quantize` does
    if calibration_data is not None:
        data = open_data(model, calibration_data, shapes)
    ev = None
    if eval_data is not None:
        ev = open_data(model, eval_data, shapes, what="eval_data")
        c.eval_data = ev.ptr
    out = ctypes.c_void_p()
    summ = ctypes.POINTER(_lib.QuantizeSummary)()
    asum = ctypes.POINTER(_lib.AutotuneSummary)()
    err = _lib.Error()
    try:
        try:
            if autotune is not None:
                c.placement = _search(model, data, c, autotune, kw, asum)
            check(_lib.qp_quantize_model(model.ptr, data.ptr if data else None,
                                         ctypes.byref(c), ctypes.byref(out), ctypes.byref(summ),
                                         ctypes.byref(err)), err)
        except Exception as ex:
            cause = next((d.failure for d in (data, ev) if d is not None and d.failure), None)
            if cause is not None:
                raise ex from cause
            raise
        from ._core import Model
        q = Model(out)
        try:
            s = _summary(summ.contents, output_path)
        finally:
            _lib.qp_quantize_summary_free(summ)
        if asum:
            s = s._replace(placement_source="autotune" if asum.contents.guard_passed else
                           "autotune (guard failed: the empty placement)",
                           autotune=_autotune_summary(asum.contents, autotune, kw))
    finally:
        if asum:
            _lib.qp_autotune_summary_free(asum)
    ext = os.path.basename(output_path) + "_data" if use_external_data_format else None
    q.save(output_path, external_location=ext)
    if placement_out is not None:
        s.placement.save(placement_out)
    del keep, fp16_ops, pl, rg
    return s


def _autotune_mode(args):
    """The search's mode from quantize()'s autotune keyword (None: no search), after checking the
    keywords that go with it."""
    v = args["autotune"]
    given = [k for k in args if k.startswith("autotune_") and args[k] not in (None, False)]
    if v is None or v is False:
        if given:
            raise usage("quantize: %s needs autotune=True or a mode (quick, default, "
                        "extensive)" % given[0])
        return None
    mode = "default" if v is True else v
    if mode not in _AUTOTUNE_MODES:
        raise usage("quantize: autotune must be True or one of quick, default, extensive, not "
                    "%r" % (v,))
    for k in _AUTOTUNE_CONFLICTS:
        if args[k] not in (None, False, [], ()):
            raise usage("quantize: %s cannot be combined with autotune: the search chooses the "
                        "placement and the model is written with exactly it (seed the search "
                        "with a Q/DQ model through autotune_qdq_baseline)" % k)
    return mode


def _opt_path(v, what):
    return None if v is None else _lib.enc(fspath(v, what))


def _search(model, data, c, mode, kw, asum):
    """Runs qp_autotune_file on the model's file with the quantize configuration's data, shapes,
    type, precision and threads; asum receives the summary (the caller frees it). Returns the
    placement pointer to quantize (owned by asum)."""
    if model.path is None:
        raise usage("quantize: autotune needs onnx_path as a file path: the search times model "
                    "files")
    if c.high_precision_dtype not in (_HIGH["fp32"], _HIGH["fp16"]):
        raise usage("quantize: high_precision_dtype bf16 with autotune: the search times fp32 "
                    "or fp16 models")
    a = _lib.AutotuneConfig()
    _lib.qp_autotune_config_default(ctypes.byref(a))
    a.mode = _lib.enc(mode)
    if kw["autotune_schemes_per_region"] is not None:
        a.schemes_per_region = int_arg(kw["autotune_schemes_per_region"],
                                       "autotune_schemes_per_region", 1)
    a.output_dir = _opt_path(kw["autotune_output_dir"], "autotune_output_dir")
    a.pattern_cache = _opt_path(kw["autotune_pattern_cache"], "autotune_pattern_cache")
    a.qdq_baseline = _opt_path(kw["autotune_qdq_baseline"], "autotune_qdq_baseline")
    a.state_file = _opt_path(kw["autotune_state_file"], "autotune_state_file")
    backend = kw["autotune_backend"]
    if kw["autotune_use_trtexec"]:
        if backend not in (None, "trtexec"):
            raise usage("quantize: autotune_use_trtexec and autotune_backend=%r disagree"
                        % backend)
        backend = "trtexec"
    if backend is not None:
        a.backend = _lib.enc(choice(backend, ("builtin", "trtexec", "ort"), "autotune_backend"))
    a.timing_cache = _opt_path(kw["autotune_timing_cache"], "autotune_timing_cache")
    if kw["autotune_trtexec_args"] is not None:
        a.trtexec_args = _lib.enc(str(kw["autotune_trtexec_args"]))
    if kw["autotune_warmup_runs"] is not None:
        a.warmup_runs = int_arg(kw["autotune_warmup_runs"], "autotune_warmup_runs")
    if kw["autotune_timing_runs"] is not None:
        a.timing_runs = int_arg(kw["autotune_timing_runs"], "autotune_timing_runs", 4)
    a.quantize_mode = c.trt.quantize_mode
    a.high_precision_dtype = c.high_precision_dtype
    a.calibration_shapes = c.calibration_shapes
    a.n_threads = c.n_threads
    err = _lib.Error()
    check(_lib.qp_autotune_file(_lib.enc(model.path), data.ptr if data else None,
                                ctypes.byref(a), ctypes.byref(asum), ctypes.byref(err)), err)
    return asum.contents.placement


def _autotune_summary(s, mode, kw):
    out = kw["autotune_output_dir"]
    return AutotuneSummary(mode, s.n_regions, s.n_patterns, s.n_points, s.n_measured,
                           s.n_replayed, s.n_adopted, s.n_skipped, s.seed_median_ms,
                           s.best_median_ms, s.reference_median_ms, bool(s.guard_passed),
                           s.seconds, Placement._from_ptr(s.placement),
                           None if out is None else fspath(out, "autotune_output_dir"))
