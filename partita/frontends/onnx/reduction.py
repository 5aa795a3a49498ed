"""ONNX converters of reductions (Reduce*), ArgMax / ArgMin, TopK, CumSum and CumProd."""

from __future__ import annotations

import numpy as np

from partita.dialects import nn
from partita.frontends.onnx.dyn import dyn, run_time
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.values import const_ints, fail, is_const, is_symbolic, shape_of

REDUCTIONS: dict[str, tuple[type[nn.ReduceOp], int]] = {
    "ReduceSum": (nn.ReduceSumOp, 13),
    "ReduceMean": (nn.ReduceMeanOp, 18),
    "ReduceMax": (nn.ReduceMaxOp, 18),
    "ReduceMin": (nn.ReduceMinOp, 18),
    "ReduceProd": (nn.ReduceProdOp, 18),
    "ReduceL1": (nn.ReduceL1Op, 18),
    "ReduceL2": (nn.ReduceL2Op, 18),
    "ReduceSumSquare": (nn.ReduceSumSquareOp, 18),
    "ReduceLogSum": (nn.ReduceLogSumOp, 18),
    "ReduceLogSumExp": (nn.ReduceLogSumExpOp, 18),
}
"""Each reduction's nn op and the opset from which ``axes`` is an input (an attribute
before)."""


def flag(attrs, name: str, default: int) -> bool:
    """A 0/1 attribute: onnxruntime reads anything but 1 as false, NumPy-minded code
    anything but 0 as true; ONNX defines neither, so other values are an error."""
    value = attrs.get(name, default)
    if value not in (0, 1):
        fail(f"attribute '{name}' must be 0 or 1, got {value}")
    return bool(value)


def reduction_axes(cx, ins, attrs, axes_input_opset: int) -> list[int] | None:
    """The reduced axes, or ``None`` for the identity (empty axes with
    ``noop_with_empty_axes``); ONNX's default (no axes) reduces every axis."""
    rank = len(shape_of(ins[0]))
    if cx.opset >= axes_input_opset:
        given = ins[1] if len(ins) > 1 else None
        if given is not None and not is_const(given) and shape_of(given) == (0,):
            given = np.zeros(0, np.int64)  # an empty axes input has no value to wait for
        if given is not None and not is_const(given):
            fail("reduction axes computed at run time are not supported")
        axes = None if given is None else const_ints(given, "axes")
    else:
        axes = attrs.get("axes")
    if not axes:
        if flag(attrs, "noop_with_empty_axes", 0):
            return None
        return list(range(rank))
    return list(nn.normalize_axes(axes, rank))


@converter(*REDUCTIONS)
def _reduce(cx, ins, attrs):
    op_type, axes_input_opset = REDUCTIONS[cx.node.op_type]
    x = cx.tensor(ins[0])
    axes = ins[1] if cx.opset >= axes_input_opset and len(ins) > 1 else None
    if axes is not None and not is_const(axes) and shape_of(axes) != (0,):
        # Axes known only at run time: the result is sized when the plan binds their values
        # (a graph input's are part of the run's signature; a computed one's are read back).
        return cx.emit(nn.DynamicReduceOp(
            x, cx.tensor(axes), op_type.name.removeprefix("nn.reduce_"), keepdims=bool(attrs.get("keepdims", 1)),
            noop_with_empty_axes=bool(attrs.get("noop_with_empty_axes", 0))))
    axes = reduction_axes(cx, [x, *ins[1:]], attrs, axes_input_opset)
    if axes is None:
        return x
    return cx.emit(op_type(x, axes, keepdims=flag(attrs, "keepdims", 1)))


@converter("ArgMax", "ArgMin")
def _arg_reduce(cx, ins, attrs):
    op_type = nn.ArgMaxOp if cx.node.op_type == "ArgMax" else nn.ArgMinOp
    return cx.emit(op_type(cx.tensor(ins[0]), axis=attrs.get("axis", 0),
                           keepdims=flag(attrs, "keepdims", 1),
                           select_last_index=flag(attrs, "select_last_index", 0)))


@converter("TopK")
def _topk(cx, ins, attrs):
    x = cx.tensor(ins[0])
    if cx.opset < 10:
        k = attrs["k"]
    elif run_time(ins[1]):
        rank, options = len(shape_of(x)), {"axis": attrs.get("axis", -1), "largest": bool(attrs.get("largest", 1))}
        return [dyn(cx, "topk_values", [x], {"k": ins[1]}, rank, x.type.element_type, "K", **options),
                dyn(cx, "topk_indices", [x], {"k": ins[1]}, rank, nn.INDEX_TYPE, "K", **options)]
    else:
        (k,) = const_ints(ins[1], "K")
    axis, largest = attrs.get("axis", -1), bool(attrs.get("largest", 1))
    # sorted = 0 leaves the order unspecified: sorted is one valid order.
    return [cx.emit(nn.TopKValuesOp(x, k, axis=axis, largest=largest)),
            cx.emit(nn.TopKIndicesOp(x, k, axis=axis, largest=largest))]


@converter("CumSum", "CumProd")
def _cumulative(cx, ins, attrs):
    kind = cx.node.op_type
    op = nn.CumProdOp if kind == "CumProd" else nn.CumSumOp
    x = cx.tensor(ins[0])
    flags = {"exclusive": bool(attrs.get("exclusive", 0)), "reverse": bool(attrs.get("reverse", 0))}
    if is_const(ins[1]) and not is_symbolic(ins[1]):
        (axis,) = const_ints(ins[1], "axis")
        return cx.emit(op(x, axis, **flags))
    # An axis read at run time (the result's shape does not depend on it): one running
    # sum per axis, the one named selected element-wise, so it stays in kernels.
    rank = len(shape_of(x))
    if rank == 0:
        fail(f"{kind} of a scalar")
    axis = cx.tensor(ins[1])
    if axis.type.get_shape() not in ((), (1,)):
        fail(f"the axis of {kind} must be a scalar")
    axis = cx.emit(nn.CastOp(cx.emit(nn.ReshapeOp(axis, [])), nn.element_type_of(np.dtype(np.int64))))
    out = cx.emit(op(x, rank - 1, **flags))  # an axis out of [-rank, rank) reads as the last
    for k in range(rank - 2, -1, -1):
        named = cx.emit(nn.OrOp(*(cx.emit(nn.EqualOp(axis, cx.tensor(np.asarray(a, np.int64))))
                                  for a in (k, k - rank))))
        out = cx.emit(nn.WhereOp(named, cx.emit(op(x, k, **flags)), out))
    return out
