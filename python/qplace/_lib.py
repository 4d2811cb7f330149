"""The shared library and the C declarations this package calls (include/qplace/*.h).

Everything here mirrors a public header: each ctypes Structure has the fields of its C struct in
the same order (tests/python/abi_dump.c prints the C sizes and offsets; test_abi.py compares),
and each function gets its argument and result types, so a wrong call fails in Python instead of
corrupting memory. The library is looked up, in order, at $QPLACE_LIBRARY, beside this file
(a wheel bundles it there), then ../build of a source checkout, then wherever the dynamic
linker finds libqplace.so.0.
"""

import ctypes
import ctypes.util
import logging
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int,
                    c_int64, c_size_t, c_uint, c_uint64, c_void_p)

MAX_RANK = 8
ERROR_MSG_SIZE = 1024

# enum qp_status
OK, ERR_USAGE, ERR_BAD_INPUT, ERR_UNSUPPORTED, ERR_IO, ERR_NOMEM, ERR_INTERNAL = range(7)


def _load():
    tried = []
    env = os.environ.get("QPLACE_LIBRARY")
    candidates = [env] if env else []
    here = os.path.dirname(os.path.abspath(__file__))
    candidates += [os.path.join(here, "libqplace.so.0"), os.path.join(here, "libqplace.so")]
    # A source checkout (pip install -e, or PYTHONPATH=python): the build tree's library.
    candidates.append(os.path.join(os.path.dirname(os.path.dirname(here)), "build",
                                   "libqplace.so.0"))
    found = ctypes.util.find_library("qplace")
    if found:
        candidates.append(found)
    candidates.append("libqplace.so.0")
    for c in candidates:
        if c in tried:
            continue
        tried.append(c)
        if os.sep in c and not os.path.exists(c):
            continue
        try:
            return ctypes.CDLL(c), c
        except OSError:
            continue
    raise ImportError(
        "qplace: cannot load libqplace (tried %s); build it (cmake -S . -B build && "
        "ninja -C build) and set QPLACE_LIBRARY=/path/to/libqplace.so, or install the wheel "
        "built by `pip install ./python`" % ", ".join(tried))


lib, path = _load()


class Error(Structure):
    _fields_ = [("status", c_int), ("msg", c_char * ERROR_MSG_SIZE)]


class Array(Structure):
    _fields_ = [("dtype", c_int), ("rank", c_int), ("dims", c_int64 * MAX_RANK),
                ("data", c_void_p), ("nbytes", c_size_t), ("owned", c_int)]


StrList = POINTER(c_char_p)


class TrtOptions(Structure):
    _fields_ = [("quantize_mode", c_int), ("disable_mha_qdq", c_int),
                ("n_op_types_to_quantize", c_size_t), ("n_op_types_to_exclude", c_size_t),
                ("op_types_to_quantize", StrList), ("op_types_to_exclude", StrList),
                ("n_nodes_to_quantize", c_size_t), ("n_nodes_to_exclude", c_size_t),
                ("nodes_to_quantize", StrList), ("nodes_to_exclude", StrList),
                ("rules_path", c_char_p)]


class QuantizeConfig(Structure):
    _fields_ = [("trt", TrtOptions), ("placement", c_void_p), ("calibration_method", c_int),
                ("calibration_shapes", c_char_p), ("eval_data", c_void_p), ("dq_only", c_int),
                ("high_precision_dtype", c_int), ("n_threads", c_int), ("percentile", c_double),
                ("ranges", c_void_p), ("opset", c_int64), ("op_types_to_exclude_fp16", StrList),
                ("n_op_types_to_exclude_fp16", c_size_t), ("direct_io_types", c_int),
                ("override_shapes", c_char_p), ("weight_clipping", c_int),
                ("max_output_drift", c_double), ("min_top1_agreement", c_double),
                ("equalization", c_uint), ("smoothquant_alpha", c_double),
                ("bias_correction", c_int), ("weight_rounding", c_int),
                ("weight_rounding_seconds", c_double)]


class QuantizeDrift(Structure):
    _fields_ = [("name", c_char_p), ("cosine", c_double), ("max_abs", c_double),
                ("has_top1", c_int), ("top1", c_double), ("n_rows", c_uint64)]


class QuantizeSummary(Structure):
    _fields_ = [("n_edges", c_size_t), ("n_tensors", c_size_t), ("n_weights", c_size_t),
                ("n_weight_tensors", c_size_t), ("opset_from", c_int64), ("opset_to", c_int64),
                ("high_precision", c_int), ("placement_source", c_char_p),
                ("calibration_source", c_char_p), ("method", c_char_p),
                ("n_calib_samples", c_uint64), ("n_calib_batches", c_uint64),
                ("n_eval_samples", c_uint64), ("eval_on_calibration", c_int),
                ("n_outputs", c_size_t), ("outputs", POINTER(QuantizeDrift)),
                ("placement", c_void_p), ("drift_before_precision", c_int),
                ("n_overridden", c_size_t), ("weight_clipping", c_int),
                ("n_weight_channels", c_size_t), ("n_weight_channels_clipped", c_size_t),
                ("weight_clip_mean_ratio", c_double), ("budget", c_int),
                ("budget_met", c_int), ("n_budget_ranked", c_size_t),
                ("n_budget_excluded", c_size_t), ("budget_excluded", POINTER(c_char_p)),
                ("budget_drift_before", c_double), ("budget_drift_after", c_double),
                ("budget_top1_before", c_double), ("budget_top1_after", c_double),
                ("equalization", c_uint),
                ("smoothquant_alpha", c_double), ("n_cle_pairs", c_size_t),
                ("n_cle_skipped", c_size_t), ("n_smoothquant_pairs", c_size_t),
                ("n_smoothquant_skipped", c_size_t),
                ("outputs_before", POINTER(QuantizeDrift)),
                ("bias_correction", c_int),
                ("n_bias_layers", c_size_t), ("n_biases_added", c_size_t),
                ("bias_rounds", c_int), ("bias_shift_before", c_double),
                ("bias_shift_after", c_double), ("bias_seconds", c_double),
                ("outputs_uncorrected", POINTER(QuantizeDrift)),
                ("outputs_unclipped", POINTER(QuantizeDrift)),
                ("auto_methods", c_size_t * 4), ("n_auto_fallback", c_size_t),
                ("bias_auto", c_int), ("bias_kept", c_int),
                ("outputs_corrected", POINTER(QuantizeDrift)),
                ("n_ranges_reused", c_size_t), ("weight_rounding", c_int),
                ("n_rounded_layers", c_size_t), ("n_rounding_skipped", c_size_t),
                ("n_rounding_timed_out", c_size_t), ("n_rounded_weights", c_uint64),
                ("n_rounded_flipped", c_uint64), ("rounding_error_before", c_double),
                ("rounding_error_after", c_double), ("rounding_seconds", c_double),
                ("outputs_unrounded", POINTER(QuantizeDrift))]


class DataOptions(Structure):
    _fields_ = [("max_bytes", c_uint64), ("image_mean", c_float * 3), ("image_std", c_float * 3),
                ("image_bgr", c_int), ("seed", c_uint64), ("synthetic_batches", c_uint64)]


class Range(Structure):
    _fields_ = [("tensor", c_char_p), ("lo", c_float), ("hi", c_float), ("amax", c_float),
                ("n_nan", c_uint64), ("n_inf", c_uint64), ("n_values", c_uint64)]


class RangesMeta(Structure):
    _fields_ = [("model_path", c_char_p), ("method", c_char_p), ("percentile", c_double),
                ("calibration_source", c_char_p), ("num_samples", c_uint64)]


ProgressFn = CFUNCTYPE(None, c_uint64, c_uint64, c_void_p)


class CalibrateOptions(Structure):
    _fields_ = [("method", c_int), ("percentile", c_double), ("n_threads", c_int),
                ("placement", c_void_p), ("placement_float_only", c_int),
                ("group_concat", c_int), ("progress", ProgressFn), ("progress_user", c_void_p)]


class CalibrateReport(Structure):
    _fields_ = [("n_batches", c_uint64), ("n_samples", c_uint64), ("n_tensors", c_size_t),
                ("n_nonfinite_tensors", c_size_t), ("n_nan", c_uint64), ("n_inf", c_uint64),
                ("peak_stats_bytes", c_size_t)]


class PlacementEntry(Structure):
    _fields_ = [("tensor", c_char_p), ("node", c_char_p), ("input", c_int), ("axis", c_int),
                ("reason", c_char_p)]


class SaveOptions(Structure):
    _fields_ = [("external", c_int), ("external_location", c_char_p),
                ("external_min_bytes", c_size_t)]


class ValueInfo(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("rank", c_int),
                ("dims", c_int64 * MAX_RANK), ("dim_params", c_char_p * MAX_RANK),
                ("is_tensor", c_int), ("is_input", c_int), ("is_output", c_int),
                ("is_initializer", c_int), ("producer", c_char_p), ("n_consumers", c_size_t)]


class SessionOptions(Structure):
    _fields_ = [("n_threads", c_int), ("no_fusion", c_int), ("lazy_plan", c_int),
                ("lane", c_int), ("int8", c_int)]


class Shape(Structure):
    _fields_ = [("name", c_char_p), ("rank", c_int), ("dims", c_int64 * MAX_RANK)]


class Int8Decision(Structure):
    _fields_ = [("node", c_char_p), ("op_type", c_char_p), ("fused", c_int), ("into", c_char_p),
                ("reason", c_char_p)]


class SensitivityOptions(Structure):
    _fields_ = [("granularity", c_int), ("metric", c_int), ("probe", c_int),
                ("quantize_mode", c_int), ("op_types_scope", StrList),
                ("n_op_types_scope", c_size_t), ("no_incremental", c_int),
                ("cache_bytes", c_size_t), ("n_threads", c_int), ("probe_workers", c_int),
                ("progress", ProgressFn), ("progress_user", c_void_p), ("absmax_weights", c_int)]


class SensitivityTarget(Structure):
    _fields_ = [("name", c_char_p), ("op_type", c_char_p), ("state", c_int), ("score", c_double),
                ("rank", c_size_t), ("n_edges", c_size_t), ("n_weights", c_size_t),
                ("n_nodes", c_size_t), ("error", c_char_p)]


class SensitivitySummary(Structure):
    _fields_ = [("n_targets", c_size_t), ("n_scored", c_size_t), ("n_unprobed", c_size_t),
                ("n_failed", c_size_t), ("n_samples", c_uint64),
                ("n_calibration_samples", c_uint64), ("total_score", c_double),
                ("reference_seconds", c_double), ("probe_seconds", c_double)]


class PickOptions(Structure):
    _fields_ = [("mode", c_int), ("coverage", c_double), ("threshold", c_double),
                ("max_output_drift", c_double), ("max_targets", c_size_t),
                ("min_score_floor", c_double), ("near_tie_ratio", c_double),
                ("blocks_path", c_char_p), ("block_agg", c_int),
                ("min_top1_agreement", c_double)]


class PickSummary(Structure):
    _fields_ = [("n_excluded", c_size_t), ("excluded_score", c_double),
                ("coverage_pct", c_double), ("near_tie", c_int), ("warning", c_char_p),
                ("n_budget_groups", c_size_t), ("budget_met", c_int),
                ("drift_quantized", c_double), ("drift_after", c_double),
                ("top1_quantized", c_double), ("top1_after", c_double)]


class ScorePick(Structure):
    _fields_ = [("n_excluded", c_size_t), ("excluded", POINTER(c_size_t)),
                ("excluded_score", c_double), ("total_score", c_double),
                ("coverage_pct", c_double), ("near_tie", c_int), ("warning", c_char * 256)]


class AutotuneConfig(Structure):
    _fields_ = [("mode", c_char_p), ("schemes_per_region", c_size_t), ("output_dir", c_char_p),
                ("pattern_cache", c_char_p), ("qdq_baseline", c_char_p),
                ("state_file", c_char_p), ("backend", c_char_p), ("timing_cache", c_char_p),
                ("trtexec_args", c_char_p), ("warmup_runs", c_int), ("timing_runs", c_int),
                ("quantize_mode", c_int), ("high_precision_dtype", c_int),
                ("calibration_shapes", c_char_p), ("n_threads", c_int)]


class AutotuneSummary(Structure):
    _fields_ = [("n_regions", c_size_t), ("n_patterns", c_size_t), ("n_points", c_size_t),
                ("n_measured", c_size_t), ("n_replayed", c_size_t), ("n_adopted", c_size_t),
                ("n_skipped", c_size_t), ("seed_median_ms", c_double),
                ("best_median_ms", c_double), ("reference_median_ms", c_double),
                ("guard_passed", c_int), ("seconds", c_double), ("placement", c_void_p)]


# The structs test_abi.py checks against the C compiler's layout (name in C -> class).
STRUCTS = {
    "qp_error": Error, "qp_array": Array, "qp_trt_options": TrtOptions,
    "qp_quantize_config": QuantizeConfig, "qp_quantize_drift": QuantizeDrift,
    "qp_quantize_summary": QuantizeSummary, "qp_data_options": DataOptions, "qp_range": Range,
    "qp_ranges_meta": RangesMeta, "qp_calibrate_options": CalibrateOptions,
    "qp_calibrate_report": CalibrateReport, "qp_placement_entry": PlacementEntry,
    "qp_value_info": ValueInfo, "qp_session_options": SessionOptions, "qp_shape": Shape,
    "qp_int8_decision": Int8Decision, "qp_sensitivity_options": SensitivityOptions,
    "qp_sensitivity_target": SensitivityTarget, "qp_sensitivity_summary": SensitivitySummary,
    "qp_sensitivity_pick_options": PickOptions, "qp_sensitivity_pick_summary": PickSummary,
    "qp_sensitivity_score_pick": ScorePick, "qp_save_options": SaveOptions,
    "qp_autotune_config": AutotuneConfig, "qp_autotune_summary": AutotuneSummary,
}

BatchFn = CFUNCTYPE(c_int, c_void_p, c_uint64, POINTER(Array), POINTER(Error))
LogFn = CFUNCTYPE(None, c_int, c_char_p, c_void_p)

E = POINTER(Error)
P = c_void_p
PP = POINTER(c_void_p)
S = c_int  # enum qp_status


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    globals()[name] = f


_DECLS = [
    # status.h
    ("qp_status_name", c_char_p, c_int),
    ("qp_log_set_hook", None, LogFn, c_void_p),
    # dtype.h / array.h
    ("qp_dtype_name", c_char_p, c_int),
    ("qp_array_view", S, POINTER(Array), c_int, c_int, POINTER(c_int64), c_void_p, c_size_t, E),
    ("qp_array_release", None, POINTER(Array)),
    # model.h
    ("qp_model_load_file", S, c_char_p, c_void_p, PP, E),
    ("qp_model_load_buffer", S, c_void_p, c_size_t, c_char_p, c_void_p, PP, E),
    ("qp_model_save_file", S, P, c_char_p, c_void_p, E),
    ("qp_model_save_buffer", S, P, PP, POINTER(c_size_t), E),
    ("qp_model_free", None, P),
    # graph.h
    ("qp_model_value", S, P, c_char_p, POINTER(ValueInfo), E),
    ("qp_model_n_inputs", c_size_t, P),
    ("qp_model_input_name", c_char_p, P, c_size_t),
    ("qp_model_n_nodes", c_size_t, P),
    # placement.h
    ("qp_placement_create", P),
    ("qp_placement_free", None, P),
    ("qp_placement_add_edge", S, P, c_char_p, c_char_p, c_int, c_char_p, E),
    ("qp_placement_add_weight", S, P, c_char_p, c_char_p, c_int, c_int, c_char_p, E),
    ("qp_placement_n_edges", c_size_t, P),
    ("qp_placement_n_weights", c_size_t, P),
    ("qp_placement_edge", c_int, P, c_size_t, POINTER(PlacementEntry)),
    ("qp_placement_weight", c_int, P, c_size_t, POINTER(PlacementEntry)),
    ("qp_placement_check", S, P, P, E),
    ("qp_placement_read_json", S, c_char_p, c_size_t, c_char_p, PP, E),
    ("qp_placement_write_json", S, P, PP, E),
    ("qp_placement_save_file", S, P, c_char_p, E),
    ("qp_placement_trt", S, P, POINTER(TrtOptions), PP, E),
    # calib.h
    ("qp_calib_method_parse", S, c_char_p, POINTER(c_int), E),
    ("qp_data_options_default", None, POINTER(DataOptions)),
    ("qp_provider_open_model", S, P, c_char_p, c_char_p, POINTER(DataOptions), PP, E),
    ("qp_provider_callback_create", S, StrList, c_size_t, c_uint64, BatchFn, c_void_p, PP, E),
    ("qp_provider_n_samples", c_uint64, P),
    ("qp_provider_source", c_char_p, P),
    ("qp_provider_free", None, P),
    ("qp_ranges_create", P),
    ("qp_ranges_free", None, P),
    ("qp_ranges_count", c_size_t, P),
    ("qp_ranges_at", POINTER(Range), P, c_size_t),
    ("qp_ranges_set", S, P, POINTER(Range), E),
    ("qp_ranges_get_meta", POINTER(RangesMeta), P),
    ("qp_ranges_set_meta", S, P, POINTER(RangesMeta), E),
    ("qp_ranges_write_json", S, P, POINTER(RangesMeta), PP, E),
    ("qp_ranges_save_json", S, P, POINTER(RangesMeta), c_char_p, E),
    ("qp_ranges_read_json", S, c_char_p, c_size_t, c_char_p, PP, E),
    ("qp_ranges_write_trt_cache", S, P, c_char_p, c_int, PP, E),
    ("qp_ranges_save_trt_cache", S, P, c_char_p, c_int, c_char_p, E),
    ("qp_ranges_read_trt_cache", S, c_char_p, c_size_t, c_char_p, PP, E),
    ("qp_calibrate_options_default", None, POINTER(CalibrateOptions)),
    ("qp_calibrate", S, P, P, POINTER(CalibrateOptions), PP, POINTER(CalibrateReport), E),
    # quantize.h
    ("qp_quantize_config_default", None, POINTER(QuantizeConfig)),
    ("qp_quantize_model", S, P, P, POINTER(QuantizeConfig), PP, POINTER(POINTER(QuantizeSummary)),
     E),
    ("qp_quantize_summary_free", None, POINTER(QuantizeSummary)),
    # autotune.h
    ("qp_autotune_config_default", None, POINTER(AutotuneConfig)),
    ("qp_autotune_file", S, c_char_p, P, POINTER(AutotuneConfig),
     POINTER(POINTER(AutotuneSummary)), E),
    ("qp_autotune_summary_free", None, POINTER(AutotuneSummary)),
    # session.h
    ("qp_session_create", S, P, POINTER(SessionOptions), c_size_t, POINTER(Shape), PP, E),
    ("qp_session_free", None, P),
    ("qp_session_n_inputs", c_size_t, P),
    ("qp_session_input_name", c_char_p, P, c_size_t),
    ("qp_session_input_dtype", c_int, P, c_size_t),
    ("qp_session_n_outputs", c_size_t, P),
    ("qp_session_output_name", c_char_p, P, c_size_t),
    ("qp_session_set_threads", None, P, c_int),
    ("qp_session_run", S, P, c_size_t, POINTER(Array), E),
    ("qp_session_output", S, P, c_size_t, POINTER(Array), E),
    ("qp_session_int8_decisions", c_size_t, P, POINTER(POINTER(Int8Decision)),
     POINTER(c_char_p)),
    ("qp_session_isa", c_char_p),
    # sensitivity.h
    ("qp_sensitivity_score", S, P, P, P, P, POINTER(SensitivityOptions), PP, E),
    ("qp_sensitivity_free", None, P),
    ("qp_sensitivity_get_summary", None, P, POINTER(SensitivitySummary)),
    ("qp_sensitivity_n_targets", c_size_t, P),
    ("qp_sensitivity_target", c_int, P, c_size_t, POINTER(SensitivityTarget)),
    ("qp_sensitivity_target_node", c_char_p, P, c_size_t, c_size_t),
    ("qp_sensitivity_pick_options_default", None, POINTER(PickOptions)),
    ("qp_sensitivity_pick", S, P, POINTER(PickOptions), PP, E),
    ("qp_sensitivity_exclusions_free", None, P),
    ("qp_sensitivity_exclusions_get_summary", None, P, POINTER(PickSummary)),
    ("qp_sensitivity_excluded", c_char_p, P, c_size_t),
    ("qp_sensitivity_exclusions_placement", S, P, PP, E),
    ("qp_sensitivity_pick_scores", S, StrList, POINTER(c_double), c_size_t, POINTER(PickOptions),
     c_char_p, c_size_t, POINTER(POINTER(ScorePick)), E),
    ("qp_sensitivity_score_pick_free", None, POINTER(ScorePick)),
]

for _d in _DECLS:
    _fn(*_d)

# The library never prints: its log lines go to the "qplace" logger (warnings reach stderr through
# logging's last-resort handler, as the CLI prints them). The hook may be called from the
# library's threads; ctypes takes the GIL for it.
_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)
logger = logging.getLogger("qplace")


def _log(level, msg, user):
    try:
        lv = _LEVELS[level] if 0 <= level < len(_LEVELS) else logging.ERROR
        if logger.isEnabledFor(lv):
            logger.log(lv, "%s", msg.decode("utf-8", "replace"))
    except Exception:  # never raise into C
        pass


_log_hook = LogFn(_log)
lib.qp_log_set_hook(_log_hook, None)

libc = ctypes.CDLL(None)
libc.free.argtypes = [c_void_p]
libc.free.restype = None


def take_string(ptr):
    """A malloc'd char* from the library as bytes, freed."""
    try:
        return ctypes.string_at(ptr.value) if ptr.value else b""
    finally:
        libc.free(ptr)


def enc(s):
    """str / os.PathLike -> bytes for a const char * (None stays None)."""
    if s is None:
        return None
    if isinstance(s, bytes):
        return s
    return os.fsencode(s) if isinstance(s, os.PathLike) else str(s).encode()


def dec(b):
    return None if b is None else b.decode("utf-8", "replace")


class StrArray:
    """A const char *const * with its bytes kept alive (len(), .ptr)."""

    def __init__(self, items):
        self.items = [enc(x) for x in items or []]
        self.arr = (c_char_p * max(1, len(self.items)))(*self.items)

    def __len__(self):
        return len(self.items)

    @property
    def ptr(self):
        return ctypes.cast(self.arr, StrList) if self.items else None


__all__ = ["lib", "path"]
