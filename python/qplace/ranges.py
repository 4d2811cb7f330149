"""Calibrated ranges as Python objects (docs/calibration.md, "Ranges file").

    r = qplace.calibrate(onnx_path="model.onnx", calibration_data=arrays)
    r["conv1_out"].amax                     # a Range: lo, hi, amax, n_nan, n_inf, n_values
    r.meta["method"], r.meta["calibration_source"]
    r.save("ranges.json")                   # the library's writer: the file format byte for byte
    r.save_trt_cache("cal.cache")           # TensorRT's implicit-INT8 calibration cache
    same = qplace.Ranges.load("ranges.json")

A Ranges is an ordered mapping tensor -> Range (insertion order, as the file lists them).
"""

import ctypes
from collections import OrderedDict, namedtuple

from . import _lib
from ._core import fspath, parse, read_file, write
from .errors import check

Range = namedtuple("Range", "lo hi amax n_nan n_inf n_values")
Range.__doc__ = ("One activation tensor: the observed finite range [lo, hi], the calibrated "
                 "threshold amax (INT8 scale = amax / 127), non-finite and finite value counts.")
Range.__new__.__defaults__ = (0, 0, 0)

TRT_CACHE_DEFAULT_VERSION = 8601

_META_KEYS = ("model_path", "method", "percentile", "calibration_source", "num_samples")


class _Handle:
    def __init__(self, ptr=None):
        self.ptr = ptr if ptr is not None else ctypes.c_void_p(_lib.qp_ranges_create())
        if not self.ptr:
            raise MemoryError("qplace: out of memory")

    def __del__(self):
        if getattr(self, "ptr", None):
            _lib.qp_ranges_free(self.ptr)
            self.ptr = None


class Ranges(OrderedDict):
    """tensor name -> Range, plus `meta` (how the ranges were made)."""

    def __init__(self, items=(), meta=None):
        super().__init__()
        for k, v in (items.items() if hasattr(items, "items") else items):
            self[k] = Range(*v)
        self.meta = dict.fromkeys(_META_KEYS)
        self.meta.update(meta or {})

    def __repr__(self):
        return "Ranges(%d tensors, method=%r, source=%r)" % (
            len(self), self.meta.get("method"), self.meta.get("calibration_source"))

    @classmethod
    def _from_ptr(cls, ptr):
        r = cls()
        for i in range(_lib.qp_ranges_count(ptr)):
            e = _lib.qp_ranges_at(ptr, i).contents
            r[_lib.dec(e.tensor)] = Range(e.lo, e.hi, e.amax, e.n_nan, e.n_inf, e.n_values)
        m = _lib.qp_ranges_get_meta(ptr).contents
        r.meta = {"model_path": _lib.dec(m.model_path), "method": _lib.dec(m.method),
                  "percentile": m.percentile,
                  "calibration_source": _lib.dec(m.calibration_source),
                  "num_samples": m.num_samples}
        return r

    def _meta_struct(self):
        m = self.meta
        s = _lib.RangesMeta(_lib.enc(m.get("model_path")), _lib.enc(m.get("method")),
                            float(m.get("percentile") or 0),
                            _lib.enc(m.get("calibration_source")), int(m.get("num_samples") or 0))
        return s

    def _handle(self):
        h = _Handle()
        err = _lib.Error()
        for name, v in self.items():
            v = Range(*v)
            e = _lib.Range(_lib.enc(name), v.lo, v.hi, v.amax, v.n_nan, v.n_inf, v.n_values)
            check(_lib.qp_ranges_set(h.ptr, ctypes.byref(e), ctypes.byref(err)), err)
        meta = self._meta_struct()
        check(_lib.qp_ranges_set_meta(h.ptr, ctypes.byref(meta), ctypes.byref(err)), err)
        return h

    # ---- JSON and TensorRT caches ----

    @classmethod
    def from_json(cls, text, source=None):
        h = _Handle(parse(_lib.qp_ranges_read_json, text, source or "ranges"))
        return cls._from_ptr(h.ptr)

    @classmethod
    def load(cls, path):
        path, data = read_file(path, "ranges")
        return cls.from_json(data, path)

    @classmethod
    def from_trt_cache(cls, text, source=None):
        h = _Handle(parse(_lib.qp_ranges_read_trt_cache, text, source or "cache"))
        return cls._from_ptr(h.ptr)

    @classmethod
    def load_trt_cache(cls, path):
        path, data = read_file(path, "calibration cache")
        return cls.from_trt_cache(data, path)

    def to_json(self):
        h = self._handle()
        return write(_lib.qp_ranges_write_json, h.ptr, None)

    def save(self, path):
        """Writes the ranges file atomically."""
        h = self._handle()
        err = _lib.Error()
        check(_lib.qp_ranges_save_json(h.ptr, None, _lib.enc(fspath(path, "path")),
                                       ctypes.byref(err)), err)

    def to_trt_cache(self, trt_version=TRT_CACHE_DEFAULT_VERSION):
        h = self._handle()
        return write(_lib.qp_ranges_write_trt_cache, h.ptr, None, int(trt_version))

    def save_trt_cache(self, path, trt_version=TRT_CACHE_DEFAULT_VERSION):
        h = self._handle()
        err = _lib.Error()
        check(_lib.qp_ranges_save_trt_cache(h.ptr, None, int(trt_version),
                                            _lib.enc(fspath(path, "path")), ctypes.byref(err)),
              err)
