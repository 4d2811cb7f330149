"""Handles and conversions the public modules share: models, arrays, strings, option values."""

import ctypes
import os

import numpy as np

from . import _lib
from .errors import check, usage

# ONNX element type numbers (enum qp_dtype) <-> numpy dtypes.
_NP_OF = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
          7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
          13: np.uint64}
_DT_OF = {np.dtype(v): k for k, v in _NP_OF.items()}


def numpy_dtype(dt):
    if dt not in _NP_OF:
        raise usage("qplace: element type %s has no numpy equivalent"
                    % _lib.dec(_lib.qp_dtype_name(dt)))
    return np.dtype(_NP_OF[dt])


def onnx_dtype(npdt, what):
    d = np.dtype(npdt)
    if d not in _DT_OF:
        raise usage("%s: numpy dtype %s has no ONNX element type qplace reads" % (what, d))
    return _DT_OF[d]


def array_view(a, what):
    """A qp_array viewing the C-contiguous numpy array `a` (the caller keeps `a` alive)."""
    if a.ndim > _lib.MAX_RANK:
        raise usage("%s: rank %d is above %d" % (what, a.ndim, _lib.MAX_RANK))
    out = _lib.Array()
    dims = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
    err = _lib.Error()
    check(_lib.qp_array_view(ctypes.byref(out), onnx_dtype(a.dtype, what), a.ndim, dims,
                             a.ctypes.data if a.size else None, a.nbytes, ctypes.byref(err)), err)
    return out


def array_copy(v):
    """A numpy copy of the qp_array `v` (a view into the library)."""
    shape = tuple(v.dims[k] for k in range(v.rank))
    dt = numpy_dtype(v.dtype)
    if not v.nbytes:
        return np.zeros(shape, dt)
    buf = ctypes.string_at(v.data, v.nbytes)
    return np.frombuffer(buf, dtype=dt).reshape(shape).copy()


def as_list(v, what):
    """None, a string or an iterable of strings -> a list of str (ModelOpt's list arguments)."""
    if v is None:
        return []
    if isinstance(v, (str, bytes, os.PathLike)):
        return [_lib.dec(_lib.enc(v))]
    try:
        items = list(v)
    except TypeError:
        raise usage("%s: expected a string or a list of strings, not %s"
                    % (what, type(v).__name__)) from None
    for x in items:
        if not isinstance(x, str):
            raise usage("%s: expected strings, got %r" % (what, x))
    return items


def choice(value, allowed, what):
    if value not in allowed:
        raise usage("%s: %r is not one of %s" % (what, value, ", ".join(map(str, allowed))))
    return allowed[value] if isinstance(allowed, dict) else value


def int_arg(v, what, lo=0, hi=None):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo or (
            hi is not None and v > hi):
        raise usage("%s: expected an integer %s, not %r"
                    % (what, ">= %d" % lo if hi is None else "in %d..%d" % (lo, hi), v))
    return int(v)


def float_arg(v, what):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise usage("%s: expected a number, not %r" % (what, v))
    return float(v)


def fspath(p, what):
    if not isinstance(p, (str, bytes, os.PathLike)):
        raise usage("%s: expected a path, not %s" % (what, type(p).__name__))
    return os.fsdecode(p)


def read_file(path, what):
    """(path as str, its bytes); FileError naming `what` and the path when it cannot be read."""
    path = fspath(path, what)
    try:
        with open(path, "rb") as f:
            return path, f.read()
    except OSError as ex:
        from .errors import FileError
        raise FileError("%s '%s': cannot read: %s" % (what, path, ex.strerror)) from None


def parse(reader, text, source):
    """A new handle from one of the library's strict readers (text, len, source, out, err)."""
    data = text.encode() if isinstance(text, str) else bytes(text)
    out = ctypes.c_void_p()
    err = _lib.Error()
    check(reader(data, len(data), _lib.enc(source), ctypes.byref(out), ctypes.byref(err)), err)
    return out


def write(writer, *args):
    """The text one of the library's writers (..., char **text_out, err) mallocs, as str."""
    text = ctypes.c_void_p()
    err = _lib.Error()
    check(writer(*args, ctypes.byref(text), ctypes.byref(err)), err)
    return _lib.take_string(text).decode()


class Model:
    """A loaded ONNX model (struct qp_model), freed with the object."""

    def __init__(self, ptr, path=None):
        self.ptr = ptr
        self.path = path

    @classmethod
    def load(cls, source, what="onnx_path"):
        err = _lib.Error()
        out = ctypes.c_void_p()
        if isinstance(source, (bytes, bytearray, memoryview)):
            buf = bytes(source)
            check(_lib.qp_model_load_buffer(buf, len(buf), None, None, ctypes.byref(out),
                                            ctypes.byref(err)), err)
            return cls(out, None)
        path = fspath(source, what)
        check(_lib.qp_model_load_file(_lib.enc(path), None, ctypes.byref(out),
                                      ctypes.byref(err)), err)
        return cls(out, path)

    def input_names(self):
        return [_lib.dec(_lib.qp_model_input_name(self.ptr, i))
                for i in range(_lib.qp_model_n_inputs(self.ptr))]

    def value(self, name):
        info = _lib.ValueInfo()
        err = _lib.Error()
        check(_lib.qp_model_value(self.ptr, _lib.enc(name), ctypes.byref(info),
                                  ctypes.byref(err)), err)
        return info

    def save(self, path, external_location=None):
        err = _lib.Error()
        opts = None
        if external_location is not None:
            opts = ctypes.byref(_lib.SaveOptions(1, _lib.enc(external_location), 0))
        check(_lib.qp_model_save_file(self.ptr, _lib.enc(path), opts, ctypes.byref(err)), err)

    def to_bytes(self):
        err = _lib.Error()
        data = ctypes.c_void_p()
        size = ctypes.c_size_t()
        check(_lib.qp_model_save_buffer(self.ptr, ctypes.byref(data), ctypes.byref(size),
                                        ctypes.byref(err)), err)
        try:
            return ctypes.string_at(data.value, size.value)
        finally:
            _lib.libc.free(data)

    def __del__(self):
        if getattr(self, "ptr", None):
            _lib.qp_model_free(self.ptr)
            self.ptr = None


def model_arg(onnx_path, what="onnx_path"):
    """onnx_path may be a path, the model's bytes, or an already loaded Model."""
    if isinstance(onnx_path, Model):
        return onnx_path
    return Model.load(onnx_path, what)
