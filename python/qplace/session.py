"""qplace.Session: run a model on numpy arrays in qplace's CPU engine (include/qplace/session.h).

    s = qplace.Session("model.onnx", shapes={"x": (1, 3, 48, 192)}, int8="auto")
    outputs = s.run({"x": image})           # {output name: numpy array}, copies
    s.isa, s.int8_decisions()               # the ISA the kernels use; what the integer path fused

int8="off" (the default, as the library's) runs a Q/DQ model as written (the fake-quantization
oracle); "auto" fuses DequantizeLinear -> op -> QuantizeLinear into integer kernels, as
`qplace run` does by default; "exact" gives "off"'s outputs bit for bit in fewer passes
(docs/engine.md "Exact path"). A session is used from one thread at a time.
"""

import ctypes

import numpy as np

from . import _lib
from ._core import array_copy, array_view, choice, int_arg, model_arg, numpy_dtype
from .errors import check, usage


def isa():
    """The instruction set the engine's kernels run with ("AVX-512 VNNI BF16 AMX", "AVX2", ...)."""
    return _lib.dec(_lib.qp_session_isa())


class Session:
    def __init__(self, onnx_path, shapes=None, threads=0, int8="off", fusion=True):
        self._model = model_arg(onnx_path)
        o = _lib.SessionOptions()
        o.n_threads = int_arg(threads, "threads")
        o.no_fusion = 0 if fusion else 1
        o.int8 = choice(int8, {"off": 0, "auto": 1, "exact": 2}, "int8")
        shapes = shapes or {}
        if not isinstance(shapes, dict):
            raise usage("shapes: expected a dict {input name: shape}")
        arr = (_lib.Shape * max(1, len(shapes)))()
        self._shape_names = []
        for k, (name, dims) in enumerate(shapes.items()):
            try:
                dims = tuple(int(d) for d in dims)
            except (TypeError, ValueError):
                raise usage("shapes: the shape of '%s' must be a sequence of integers, not %r"
                            % (name, dims)) from None
            if len(dims) > _lib.MAX_RANK:
                raise usage("shapes: '%s' has rank %d, above %d" % (name, len(dims),
                                                                   _lib.MAX_RANK))
            b = _lib.enc(name)
            self._shape_names.append(b)
            arr[k].name = b
            arr[k].rank = len(dims)
            for i, d in enumerate(dims):
                arr[k].dims[i] = d
        self.ptr = ctypes.c_void_p()
        err = _lib.Error()
        check(_lib.qp_session_create(self._model.ptr, ctypes.byref(o), len(shapes), arr,
                                     ctypes.byref(self.ptr), ctypes.byref(err)), err)
        n = _lib.qp_session_n_inputs(self.ptr)
        self.input_names = [_lib.dec(_lib.qp_session_input_name(self.ptr, i)) for i in range(n)]
        self._input_dtypes = [_lib.qp_session_input_dtype(self.ptr, i) for i in range(n)]
        self.output_names = [_lib.dec(_lib.qp_session_output_name(self.ptr, i))
                             for i in range(_lib.qp_session_n_outputs(self.ptr))]

    @property
    def isa(self):
        return isa()

    def set_threads(self, threads):
        _lib.qp_session_set_threads(self.ptr, int_arg(threads, "threads"))

    def run(self, inputs):
        """inputs: a dict {input name: array}, a list in input order, or one array for a model
        with one input. Returns {output name: array} (copies owned by Python)."""
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if isinstance(inputs, dict):
            extra = [k for k in inputs if k not in self.input_names]
            missing = [n for n in self.input_names if n not in inputs]
            if extra or missing:
                raise usage("run: the inputs are %s%s%s" % (
                    ", ".join(self.input_names),
                    "; not inputs: %s" % ", ".join(map(str, extra)) if extra else "",
                    "; missing: %s" % ", ".join(missing) if missing else ""))
            inputs = [inputs[n] for n in self.input_names]
        inputs = list(inputs)
        if len(inputs) != len(self.input_names):
            raise usage("run: %d inputs given, the model takes %d (%s)"
                        % (len(inputs), len(self.input_names), ", ".join(self.input_names)))
        arrays = []
        for name, dt, a in zip(self.input_names, self._input_dtypes, inputs):
            a = np.asarray(a)
            want = numpy_dtype(dt)
            if a.dtype != want:
                raise usage("run: input '%s' is %s but the model takes %s; convert it with "
                            ".astype(np.%s)" % (name, a.dtype, want, want))
            arrays.append(np.ascontiguousarray(a))
        views = (_lib.Array * max(1, len(arrays)))()
        for k, (name, a) in enumerate(zip(self.input_names, arrays)):
            views[k] = array_view(a, "run: input '%s'" % name)
        err = _lib.Error()
        check(_lib.qp_session_run(self.ptr, len(arrays), views, ctypes.byref(err)), err)
        out = {}
        for i, name in enumerate(self.output_names):
            v = _lib.Array()
            check(_lib.qp_session_output(self.ptr, i, ctypes.byref(v), ctypes.byref(err)), err)
            out[name] = array_copy(v)
        return out

    def int8_decisions(self):
        """What the integer path did with each Q/DQ node: a list of dicts (node, op_type,
        fused, into, reason), and the fallback reason ("" when it planned)."""
        d = ctypes.POINTER(_lib.Int8Decision)()
        fb = ctypes.c_char_p()
        n = _lib.qp_session_int8_decisions(self.ptr, ctypes.byref(d), ctypes.byref(fb))
        rows = [{"node": _lib.dec(d[i].node), "op_type": _lib.dec(d[i].op_type),
                 "fused": bool(d[i].fused), "into": _lib.dec(d[i].into),
                 "reason": _lib.dec(d[i].reason)} for i in range(n)]
        return rows, _lib.dec(fb.value) or ""

    def __del__(self):
        if getattr(self, "ptr", None):
            _lib.qp_session_free(self.ptr)
            self.ptr = None
