"""Placements as Python objects: where Q/DQ pairs go (docs/placement.md).

    p = qplace.Placement.load("placement.json")
    for e in p.edges:   print(e.tensor, "->", e.node, e.input, e.reason)
    for w in p.weights: print(w.tensor, "->", w.node, w.input, "axis", w.axis)
    p.edges = [e for e in p.edges if not e.node.startswith("head")]
    p.save("edited.json")            # the library's writer: the file format byte for byte
    q = qplace.trt_placement("model.onnx", op_types_to_exclude=["Resize"])

Reading a file and saving it again gives the same bytes; entries keep their order.
"""

import ctypes
from collections import namedtuple

from . import _lib
from ._core import as_list, fspath, model_arg, parse, read_file, write
from .errors import check, usage

Edge = namedtuple("Edge", "tensor node input reason")
Edge.__doc__ = "An activation edge: one Q/DQ pair on `tensor` read by input `input` of `node`."
Weight = namedtuple("Weight", "tensor node input axis reason")
Weight.__doc__ = "A weight quantizer: constant `tensor` per channel along `axis` (-1: per tensor)."


class _Handle:
    """A struct qp_placement, freed with the object."""

    def __init__(self, ptr=None):
        self.ptr = ptr if ptr is not None else ctypes.c_void_p(_lib.qp_placement_create())
        if not self.ptr:
            raise MemoryError("qplace: out of memory")

    def __del__(self):
        if getattr(self, "ptr", None):
            _lib.qp_placement_free(self.ptr)
            self.ptr = None


class Placement:
    """Activation edges and weight quantizers, each with the reason that placed it."""

    def __init__(self, edges=(), weights=()):
        self.edges = [Edge(*e) for e in edges]
        self.weights = [Weight(*w) for w in weights]

    def __repr__(self):
        return "Placement(%d edges, %d weights)" % (len(self.edges), len(self.weights))

    def __eq__(self, other):
        return (isinstance(other, Placement) and self.edges == other.edges
                and self.weights == other.weights)

    # ---- to and from the library ----

    @classmethod
    def _from_ptr(cls, ptr):
        p = cls()
        e = _lib.PlacementEntry()
        for i in range(_lib.qp_placement_n_edges(ptr)):
            _lib.qp_placement_edge(ptr, i, ctypes.byref(e))
            p.edges.append(Edge(_lib.dec(e.tensor), _lib.dec(e.node), e.input, _lib.dec(e.reason)))
        for i in range(_lib.qp_placement_n_weights(ptr)):
            _lib.qp_placement_weight(ptr, i, ctypes.byref(e))
            p.weights.append(Weight(_lib.dec(e.tensor), _lib.dec(e.node), e.input, e.axis,
                                    _lib.dec(e.reason)))
        return p

    def _handle(self):
        h = _Handle()
        err = _lib.Error()
        for k, e in enumerate(self.edges):
            if not isinstance(e.input, int) or isinstance(e.input, bool):
                raise usage("placement edge %d: input must be an integer, not %r" % (k, e.input))
            check(_lib.qp_placement_add_edge(h.ptr, _lib.enc(e.tensor), _lib.enc(e.node), e.input,
                                             _lib.enc(e.reason or "user"), ctypes.byref(err)),
                  err)
        for k, w in enumerate(self.weights):
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (w.input, w.axis)):
                raise usage("placement weight %d: input and axis must be integers" % k)
            check(_lib.qp_placement_add_weight(h.ptr, _lib.enc(w.tensor), _lib.enc(w.node),
                                               w.input, w.axis, _lib.enc(w.reason or "user"),
                                               ctypes.byref(err)), err)
        return h

    # ---- JSON ----

    @classmethod
    def from_json(cls, text, source=None):
        """Parses the placement file format (strict: unknown keys, repeated slots refused)."""
        h = _Handle(parse(_lib.qp_placement_read_json, text, source or "placement"))
        return cls._from_ptr(h.ptr)

    @classmethod
    def load(cls, path):
        path, data = read_file(path, "placement")
        return cls.from_json(data, path)

    def to_json(self):
        h = self._handle()
        return write(_lib.qp_placement_write_json, h.ptr)

    def save(self, path):
        """Writes the file atomically (nothing is left behind on failure)."""
        h = self._handle()
        err = _lib.Error()
        check(_lib.qp_placement_save_file(h.ptr, _lib.enc(fspath(path, "path")),
                                          ctypes.byref(err)), err)

    def check(self, onnx_path):
        """Checks every entry against the model and returns the placement sorted in graph
        order (qp_placement_check); raises BadInputError naming the first bad entry."""
        model = model_arg(onnx_path)
        h = self._handle()
        err = _lib.Error()
        check(_lib.qp_placement_check(h.ptr, model.ptr, ctypes.byref(err)), err)
        return Placement._from_ptr(h.ptr)


def trt_options(quantize_mode="int8", op_types_to_quantize=None, op_types_to_exclude=None,
                nodes_to_quantize=None, nodes_to_exclude=None, disable_mha_qdq=False,
                rules=None):
    """A struct qp_trt_options and the string arrays it points at (keep both alive)."""
    from ._core import choice
    o = _lib.TrtOptions()
    o.quantize_mode = choice(quantize_mode, {"int8": 0, "fp8": 1}, "quantize_mode")
    o.disable_mha_qdq = 1 if disable_mha_qdq else 0
    keep = []
    for field, v in (("op_types_to_quantize", op_types_to_quantize),
                     ("op_types_to_exclude", op_types_to_exclude),
                     ("nodes_to_quantize", nodes_to_quantize),
                     ("nodes_to_exclude", nodes_to_exclude)):
        arr = _lib.StrArray(as_list(v, field))
        keep.append(arr)
        setattr(o, field, arr.ptr)
        setattr(o, "n_" + field, len(arr))
    if rules is not None:
        o.rules_path = _lib.enc(fspath(rules, "rules"))
    return o, keep


def trt_placement(onnx_path, quantize_mode="int8", op_types_to_quantize=None,
                  op_types_to_exclude=None, nodes_to_quantize=None, nodes_to_exclude=None,
                  disable_mha_qdq=False, rules=None):
    """The placement `qplace quantize` computes (the trt policy, the lists, the rules file), on
    the model converted to opset 19 when it is older (the names are that model's)."""
    model = model_arg(onnx_path)
    o, keep = trt_options(quantize_mode, op_types_to_quantize, op_types_to_exclude,
                          nodes_to_quantize, nodes_to_exclude, disable_mha_qdq, rules)
    out = ctypes.c_void_p()
    err = _lib.Error()
    check(_lib.qp_placement_trt(model.ptr, ctypes.byref(o), ctypes.byref(out), ctypes.byref(err)),
          err)
    del keep
    h = _Handle(out)
    return Placement._from_ptr(h.ptr)
