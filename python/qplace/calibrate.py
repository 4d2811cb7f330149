"""qplace.calibrate: activation ranges of a float model over calibration data (qp_calibrate).

    ranges = qplace.calibrate(onnx_path="model.onnx", calibration_data={"x": batch_array},
                              calibration_method="entropy")
    ranges.save("model.ranges.json")        # the bytes `qplace calibrate` writes for that data

calibration_data takes what qplace.quantize takes (a path, an array, a dict of arrays, an
iterable of dicts). Methods: "max", "entropy" (the default, as ModelOpt's), "percentile", "mse",
"auto" (per tensor, the one of the others with the least error at its consumers' outputs;
`percentile`, default 99.999, for "percentile" and auto's percentile candidate).
"""

import ctypes

from . import _lib
from ._core import choice, float_arg, fspath, int_arg, model_arg
from ._data import open_data
from .errors import check, usage
from .placement import Placement
from .ranges import Ranges

METHODS = {"max": 0, "entropy": 1, "percentile": 2, "mse": 3, "auto": 4}


def method_arg(calibration_method, percentile):
    m = choice(calibration_method or "entropy", METHODS, "calibration_method")
    if percentile is not None:
        if m not in (METHODS["percentile"], METHODS["auto"]):
            raise usage("percentile needs calibration_method='percentile' or 'auto'")
        p = float_arg(percentile, "percentile")
        if not 0 < p <= 100:
            raise usage("percentile %g is not in (0, 100]" % p)
        return m, p
    return m, 0.0


def _progress_fn(progress):
    if progress is None:
        return _lib.ProgressFn()

    def call(done, total, user):
        try:
            progress(done, total)
        except Exception:  # a failing progress callback must not cross into C
            pass
    return _lib.ProgressFn(call)


def calibrate(onnx_path, calibration_data=None, calibration_method="entropy",
              calibration_shapes=None, percentile=None, placement=None, group_concat=True,
              placement_float_only=False, threads=0, output_path=None, trt_cache_path=None,
              progress=None):
    """Calibrates every float activation tensor (or only the activation edges of `placement`,
    a Placement or a placement file) and returns the Ranges. `output_path` / `trt_cache_path`
    also write the ranges file / a TensorRT calibration cache. Raises qplace.Error subclasses."""
    model = model_arg(onnx_path)
    o = _lib.CalibrateOptions()
    _lib.qp_calibrate_options_default(ctypes.byref(o))
    o.method, p = method_arg(calibration_method, percentile)
    if p:
        o.percentile = p
    o.n_threads = int_arg(threads, "threads")
    o.group_concat = 1 if group_concat else 0
    o.placement_float_only = 1 if placement_float_only else 0
    keep = None
    if placement is not None:
        pl = placement if isinstance(placement, Placement) else Placement.load(placement)
        keep = pl._handle()
        o.placement = keep.ptr
    fn = _progress_fn(progress)
    o.progress = fn
    data = open_data(model, calibration_data, calibration_shapes)
    out = ctypes.c_void_p()
    err = _lib.Error()
    try:
        check(_lib.qp_calibrate(model.ptr, data.ptr, ctypes.byref(o), ctypes.byref(out), None,
                                ctypes.byref(err)), err)
    except Exception as ex:
        if data.failure is not None:
            raise ex from data.failure
        raise
    from .ranges import _Handle
    h = _Handle(out)
    ranges = Ranges._from_ptr(h.ptr)
    if model.path is not None:
        ranges.meta["model_path"] = model.path
    if output_path is not None:
        ranges.save(fspath(output_path, "output_path"))
    if trt_cache_path is not None:
        ranges.save_trt_cache(fspath(trt_cache_path, "trt_cache_path"))
    del keep
    return ranges
