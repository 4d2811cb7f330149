"""calibration_data -> a C provider (include/qplace/calib.h).

What ModelOpt's calibration_data takes, and more:
  - None: seeded synthetic data (the summary and the ranges say "synthetic");
  - a path: a .npz/.npy file, a folder of shards or an image folder, opened by the library
    exactly as `qplace quantize --calibration_data_path` opens it;
  - a numpy array (a model with one input), or a dict {input name: array}: every array cut
    along axis 0 into N // batch steps as np.array_split (ModelOpt's CalibrationDataProvider;
    the batch is calibration_shapes' first dim of the first input, else its static dim, else 1);
  - an iterable of dicts, one batch each, or an ONNX Runtime CalibrationDataReader (get_next()).
In-memory data go to the library through its callback provider, batch by batch, as views of
the arrays: nothing is copied unless an array is not C-contiguous, nothing is written to disk.
"""

import ctypes
import os

import numpy as np

from . import _lib
from ._core import fspath, numpy_dtype, onnx_dtype
from .errors import check, usage


def _parse_shapes(s):
    out = {}
    for part in (s or "").split(","):
        if ":" in part:
            name, dims = part.rsplit(":", 1)
            try:
                out[name.strip()] = [int(d) for d in dims.lower().split("x")]
            except ValueError:
                pass  # the library reports a bad shapes string
    return out


def shapes_arg(calibration_shapes, what="calibration_shapes"):
    """A "name:1x3x224x224,..." string or a dict {name: (1, 3, 224, 224)} -> the string."""
    if calibration_shapes is None or isinstance(calibration_shapes, str):
        return calibration_shapes
    if isinstance(calibration_shapes, dict):
        parts = []
        for k, v in calibration_shapes.items():
            try:
                dims = "x".join(str(int(d)) for d in v)
            except (TypeError, ValueError):
                raise usage("%s: the shape of '%s' must be a sequence of integers, not %r"
                            % (what, k, v)) from None
            parts.append("%s:%s" % (k, dims))
        return ",".join(parts)
    raise usage("%s: expected 'name:1x3x224x224,...' or a dict of shapes, not %s"
                % (what, type(calibration_shapes).__name__))


def data_options(seed=None):
    o = _lib.DataOptions()
    _lib.qp_data_options_default(ctypes.byref(o))
    if seed is not None:
        o.seed = seed
    return o


class Provider:
    """A struct qp_provider and whatever it reads from (arrays, the callback), freed together."""

    def __init__(self):
        self.ptr = ctypes.c_void_p()
        self.batches = None
        self.names = None
        self.failure = None
        self._fn = None
        self._names = None

    def close(self):
        if self.ptr:
            _lib.qp_provider_free(self.ptr)
            self.ptr = ctypes.c_void_p()

    def __del__(self):
        self.close()

    # ---- in-memory batches through qp_provider_callback_create ----

    def _give(self, user, index, inputs, err):
        try:
            batch = self.batches[index]
            base = ctypes.addressof(inputs.contents)
            for i, a in enumerate(batch):
                slot = _lib.Array.from_address(base + i * ctypes.sizeof(_lib.Array))
                e = _lib.Error()
                st = _lib.qp_array_view(ctypes.byref(slot), onnx_dtype(a.dtype, self.names[i]),
                                        a.ndim, (ctypes.c_int64 * max(1, a.ndim))(*a.shape),
                                        a.ctypes.data if a.size else None, a.nbytes,
                                        ctypes.byref(e))
                if st != _lib.OK:
                    err.contents.status = st
                    err.contents.msg = e.msg
                    return st
            return _lib.OK
        except BaseException as ex:  # never let an exception cross into C
            self.failure = ex
            msg = ("calibration_data: %s: %s" % (type(ex).__name__, ex)).encode()
            err.contents.status = _lib.ERR_BAD_INPUT
            err.contents.msg = msg[:_lib.ERROR_MSG_SIZE - 1]
            return _lib.ERR_BAD_INPUT

    def _callback(self, names, batches):
        self.names = names
        self.batches = batches
        self._names = _lib.StrArray(names)
        self._fn = _lib.BatchFn(self._give)
        err = _lib.Error()
        check(_lib.qp_provider_callback_create(self._names.ptr, len(names), len(batches),
                                               self._fn, None, ctypes.byref(self.ptr),
                                               ctypes.byref(err)), err)


def _input_specs(model):
    specs = []
    for name in model.input_names():
        v = model.value(name)
        dims = [v.dims[k] for k in range(max(0, min(v.rank, _lib.MAX_RANK)))]
        specs.append((name, v.dtype, v.rank, dims))
    return specs


def _check_array(a, name, dtype, rank, dims, what):
    if not isinstance(a, np.ndarray):
        try:
            a = np.asarray(a)
        except Exception:
            raise usage("%s: input '%s' is %s, not an array" % (what, name, type(a).__name__))
    if a.dtype == object:
        raise usage("%s: input '%s' is an object array (pickled data is never read); give a "
                    "numeric array" % (what, name))
    if dtype and a.dtype != numpy_dtype(dtype):
        raise usage("%s: input '%s' is %s but the model takes %s; convert it with "
                    ".astype(np.%s)" % (what, name, a.dtype, numpy_dtype(dtype),
                                         numpy_dtype(dtype)))
    if rank >= 0 and a.ndim != rank:
        raise usage("%s: input '%s' has shape %s, rank %d, but the model's rank is %d"
                    % (what, name, tuple(a.shape), a.ndim, rank))
    for k in range(1, min(a.ndim, len(dims))):  # axis 0 is the batch
        if dims[k] > 0 and a.shape[k] != dims[k]:
            raise usage("%s: input '%s' has shape %s but the model's dim %d is %d"
                        % (what, name, tuple(a.shape), k, dims[k]))
    return np.ascontiguousarray(a)


def _keys(d, specs, what):
    names = [s[0] for s in specs]
    extra = [k for k in d if k not in names]
    missing = [n for n in names if n not in d]
    if extra or missing:
        raise usage("%s: the keys must be the model's inputs (%s)%s%s" % (
            what, ", ".join(names),
            "; not inputs: %s" % ", ".join(map(str, extra)) if extra else "",
            "; missing: %s" % ", ".join(missing) if missing else ""))


def _split(d, specs, shapes, what):
    """A dict of whole arrays -> batches, as ModelOpt's CalibrationDataProvider cuts them."""
    _keys(d, specs, what)
    arrays = [_check_array(d[n], n, dt, r, dims, what) for n, dt, r, dims in specs]
    for (n, _, _, _), a in zip(specs, arrays):
        if a.ndim == 0:
            raise usage("%s: input '%s' is a scalar; calibration batches are cut along axis 0"
                        % (what, n))
    rows = [a.shape[0] for a in arrays]
    if len(set(rows)) > 1:
        raise usage("%s: inputs have different row counts: %s" % (
            what, ", ".join("%s %d" % (s[0], r) for s, r in zip(specs, rows))))
    first, dims0 = specs[0][0], specs[0][3]
    batch = shapes.get(first, [0])[0] if first in shapes else (dims0[0] if dims0 else 0)
    batch = batch if batch and batch > 0 else 1
    steps = rows[0] // batch
    if steps == 0:
        raise usage("%s: input '%s' has %d rows, fewer than one batch of %d"
                    % (what, first, rows[0], batch))
    cut = [np.array_split(a, steps, axis=0) for a in arrays]
    return [[np.ascontiguousarray(c[k]) for c in cut] for k in range(steps)]


def _reader_batches(reader):
    out = []
    while True:
        b = reader.get_next()
        if b is None:
            return out
        out.append(b)


def open_data(model, data, calibration_shapes=None, what="calibration_data", seed=None):
    """A Provider for `data` (see the module's docstring) on the inputs of `model`."""
    p = Provider()
    err = _lib.Error()
    shapes = shapes_arg(calibration_shapes)
    if data is None or isinstance(data, (str, bytes, os.PathLike)):
        path = None if data is None else fspath(data, what)
        o = data_options(seed)
        check(_lib.qp_provider_open_model(model.ptr, _lib.enc(path), _lib.enc(shapes),
                                          ctypes.byref(o), ctypes.byref(p.ptr),
                                          ctypes.byref(err)), err)
        return p
    specs = _input_specs(model)
    if isinstance(data, np.ndarray):
        if len(specs) != 1:
            raise usage("%s: an array feeds a model with one input; this one has %d (%s): give "
                        "a dict {name: array}" % (what, len(specs),
                                                 ", ".join(s[0] for s in specs)))
        data = {specs[0][0]: data}
    if isinstance(data, dict):
        batches = _split(data, specs, _parse_shapes(shapes), what)
    else:
        if hasattr(data, "get_next"):
            items = _reader_batches(data)
        else:
            try:
                items = list(data)
            except TypeError:
                raise usage("%s: expected a path, an array, a dict of arrays or an iterable of "
                            "dicts, not %s" % (what, type(data).__name__)) from None
        if not items:
            raise usage("%s: the iterable gave no batches" % what)
        batches = []
        for k, b in enumerate(items):
            if not isinstance(b, dict):
                raise usage("%s: batch %d is %s, not a dict {input name: array}"
                            % (what, k, type(b).__name__))
            _keys(b, specs, "%s batch %d" % (what, k))
            batches.append([_check_array(b[n], n, dt, r, dims, "%s batch %d" % (what, k))
                            for n, dt, r, dims in specs])
    p._callback([s[0] for s in specs], batches)
    return p
