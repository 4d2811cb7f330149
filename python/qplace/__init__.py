"""qplace: quantize ONNX models to INT8/FP8 with Q/DQ nodes for TensorRT, from Python.

The package binds libqplace's public C API (include/qplace/) with ctypes: no compiled extension,
numpy arrays passed to the library in memory. The names are ModelOpt's, so switching is an import:

    import qplace
    qplace.quantize(onnx_path="model.onnx", calibration_data=arrays, output_path="q.onnx")
    ranges = qplace.calibrate(onnx_path="model.onnx", calibration_data=arrays)
    result = qplace.sensitivity.score("model.onnx", arrays, granularity="node")
    qplace.sensitivity.suggest_exclusion(result, coverage=0.9)
    outputs = qplace.Session("q.onnx", int8="auto").run({"x": image})

docs/python.md is the reference. Every failure raises a qplace.Error subclass carrying the C
status and message; bad input never crashes the interpreter.
"""

from . import sensitivity
from ._lib import path as library_path
from .calibrate import calibrate
from .errors import (BadInputError, Error, FileError, InternalError, OutOfMemoryError,
                     UnsupportedError, UsageError)
from .placement import Edge, Placement, Weight, trt_placement
from .quantize import AutotuneSummary, Drift, QuantizeSummary, quantize
from .ranges import Range, Ranges
from .session import Session, isa

__version__ = "0.1.0"

__all__ = ["quantize", "calibrate", "sensitivity", "Session", "isa", "Placement", "Edge",
           "Weight", "trt_placement", "Ranges", "Range", "QuantizeSummary", "AutotuneSummary", "Drift", "Error",
           "UsageError", "BadInputError", "UnsupportedError", "FileError", "OutOfMemoryError",
           "InternalError", "library_path", "autotune"]


def autotune(*args, **kwargs):
    """Not bound as a function of its own: the search runs inside quantize() with autotune=True
    or a mode ("quick", "default", "extensive") and the autotune_* keywords, and quantizes the
    placement it chose (docs/python.md); the standalone search is the `qplace autotune`
    command (docs/autotune.md). This raises UnsupportedError saying so instead of silently
    doing something else."""
    raise UnsupportedError("qplace.autotune: no standalone binding; use qplace.quantize("
                           "onnx_path=..., autotune='quick', autotune_output_dir=DIR) for the "
                           "search and the quantization of its placement, or the command "
                           "`qplace autotune --onnx_path MODEL --output_dir DIR`")
