"""Import-time constant folding: a node whose inputs are all constants is evaluated with
ONNX's reference evaluator (or, converted first, with the project's NumPy references, in
``Importer.fold_converted``), shape computations over dynamic dims with the symbolic
folders here; the byte budgets keep a fold from building what the import cannot afford."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper
from xdsl.dialects.builtin import TensorType

from partita.dialects import nn
from partita.frontends.onnx.values import SymDim, Value, const_ints, fail, is_symbolic, settle, sym_arith

if TYPE_CHECKING:  # pragma: no cover
    from partita.frontends.onnx.importer import Importer

FOLD_LIMIT_BYTES = 64 << 20
"""The largest value import-time folding builds; a larger result stays an op of the graph."""
FOLD_TOTAL_BYTES = 512 << 20
"""What folding may build over one import, all values together."""


def _static_bytes(typ) -> int | None:
    """Bytes of a static tensor type (None for a dynamic one, 0 for no tensor)."""
    if not isinstance(typ, TensorType):
        return 0
    if nn.DYN in typ.get_shape():
        return None
    return math.prod(typ.get_shape()) * nn.numpy_dtype(typ.element_type).itemsize


# Ops converted even when all their inputs are constant (they produce or pass data, or
# their bodies read values of the enclosing graph).
_NO_FOLD = {"Constant", "Identity", "Dropout", "If", "Loop", "Scan"}


def _fold(cx: Importer, node: onnx.NodeProto, ins: list[Value], attrs: dict) -> list[Value]:
    """Evaluate a node whose inputs are all constants at import time."""
    if any(is_symbolic(v) for v in ins if v is not None):
        folder = _SYMBOLIC_FOLDERS.get(node.op_type)
        if folder is None:
            fail("cannot fold this shape computation over a dynamic dimension")
        out = np.empty((), dtype=object)
        result = folder(cx, ins, attrs)
        if isinstance(result, np.ndarray):
            return [settle(result)]
        out[()] = result
        return [settle(out)]
    from onnx.reference import ReferenceEvaluator

    names = [n if n else "" for n in node.input]
    inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
              for n in names if n]
    outputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
               for n in node.output if n]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", cx.opset)])
    try:
        results = ReferenceEvaluator(model).run(
            None, {n: np.asarray(v) for n, v in zip(names, ins) if n})
    except Exception as err:
        fail(f"constant folding failed: {err}")
    it = iter(results)
    return [np.asarray(next(it)) if n else None for n in node.output]


def _sym_gather(cx, ins, attrs):
    data, idx = ins
    return np.take(data, np.asarray(idx, dtype=np.int64), axis=attrs.get("axis", 0))


def _sym_concat(cx, ins, attrs):
    return np.concatenate([np.asarray(v, dtype=object) for v in ins], axis=attrs["axis"])


def _sym_unsqueeze(cx, ins, attrs):
    axes = attrs["axes"] if cx.opset < 13 else const_ints(ins[1], "axes")
    out = np.asarray(ins[0], dtype=object)
    rank = out.ndim + len(axes)
    for a in sorted(a % rank for a in axes):
        out = np.expand_dims(out, a)
    return out


def _sym_squeeze(cx, ins, attrs):
    axes = attrs.get("axes") if cx.opset < 13 else (
        const_ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else None)
    data = np.asarray(ins[0], dtype=object)
    if axes is None:
        return data.squeeze()
    return data.squeeze(axis=tuple(a % data.ndim for a in axes))


def _sym_slice(cx, ins, attrs):
    if cx.opset < 10:
        starts, ends, axes = attrs["starts"], attrs["ends"], attrs.get("axes")
        steps = None
    else:
        starts, ends = const_ints(ins[1], "starts"), const_ints(ins[2], "ends")
        axes = const_ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
        steps = const_ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else None
    data = np.asarray(ins[0], dtype=object)
    axes = axes or list(range(len(starts)))
    steps = steps or [1] * len(starts)
    index = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a] = slice(s, e, st)
    return data[tuple(index)]


def _sym_binary(kind: str):
    def fold(cx, ins, attrs):
        a, b = np.broadcast_arrays(np.asarray(ins[0], dtype=object),
                                   np.asarray(ins[1], dtype=object))
        out = np.empty(a.shape, dtype=object)
        for i in np.ndindex(a.shape):
            out[i] = sym_arith(kind, a[i], b[i])
        return out

    return fold


def _sym_reshape(cx, ins, attrs):
    data = np.asarray(ins[0], dtype=object)
    shape = const_ints(ins[1], "shape")
    shape = [data.shape[i] if s == 0 and not attrs.get("allowzero", 0) else s
             for i, s in enumerate(shape)]
    return data.reshape(shape)


def _sym_equal(cx, ins, attrs):
    """``Equal`` on shape vectors: a dim is never negative (``Where(Equal(s, -1), ...)``
    in PyTorch's Expand exports), and equals itself; other comparisons are unknown."""
    a, b = np.broadcast_arrays(np.asarray(ins[0], dtype=object), np.asarray(ins[1], dtype=object))
    out = np.empty(a.shape, dtype=np.bool_)
    for i in np.ndindex(a.shape):
        x, y = a[i], b[i]
        if isinstance(x, SymDim) and isinstance(y, SymDim) and x == y:
            out[i] = True
        elif isinstance(x, SymDim) or isinstance(y, SymDim):
            other = y if isinstance(x, SymDim) else x
            if isinstance(other, SymDim) or int(other) >= 0:
                fail("cannot compare a dynamic dimension at import")
            out[i] = False
        else:
            out[i] = int(x) == int(y)
    return out


def _sym_where(cx, ins, attrs):
    cond = np.asarray(ins[0])
    if any(isinstance(c, SymDim) for c in cond.reshape(-1)):
        fail("a Where condition depending on a dynamic dimension")
    return np.where(cond.astype(bool), np.asarray(ins[1], dtype=object),
                    np.asarray(ins[2], dtype=object))


def _sym_shape(cx, ins, attrs):
    dims = np.asarray(ins[0], dtype=object).shape
    return np.asarray(dims[slice(attrs.get("start", 0), attrs.get("end", len(dims)))], dtype=np.int64)


def folds_symbolically(node: onnx.NodeProto, ins: list[Value], attrs: dict) -> bool:
    """Whether ``node`` over a shape computation (an input holding ``SymDim``s) folds at
    import: shape arithmetic on integers has a folder; a float in it (a decode step's
    position cast to float and scaled into rotary angles) is data, computed at run time."""
    if node.op_type not in _SYMBOLIC_FOLDERS:
        return False
    if node.op_type == "Cast":
        to = attrs.get("to")
        return to in (onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL)
    return all(is_symbolic(v) or np.asarray(v).dtype.kind in "iub" for v in ins if v is not None)


_SYMBOLIC_FOLDERS: dict[str, Callable[..., np.ndarray]] = {
    "Shape": _sym_shape,
    "Equal": _sym_equal,
    "Where": _sym_where,
    "Gather": _sym_gather,
    "Concat": _sym_concat,
    "Unsqueeze": _sym_unsqueeze,
    "Squeeze": _sym_squeeze,
    "Slice": _sym_slice,
    "Cast": lambda cx, ins, attrs: ins[0],
    "Identity": lambda cx, ins, attrs: ins[0],
    "Reshape": _sym_reshape,
    "Mul": _sym_binary("mul"),
    "Add": _sym_binary("add"),
    "Sub": _sym_binary("sub"),
    "Div": _sym_binary("div"),
}


