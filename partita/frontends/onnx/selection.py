"""ONNX converters of the ops whose result sizes depend on values: NonZero, Compress,
Unique, NonMaxSuppression (``nn`` selection ops; see ``partita.dialects.nn.selection``).
Nodes of constants fold like any other (their ops evaluated by the references); run-time
operands give a ``?`` dim the launch plan sizes once the op has run."""

from __future__ import annotations

import numpy as np

from partita.dialects import nn
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.transform import reshape_to
from partita.frontends.onnx.values import fail, is_const, is_symbolic, shape_of


@converter("NonZero")
def _non_zero(cx, ins, attrs):
    x = cx.tensor(ins[0])
    if not shape_of(x):
        fail("NonZero of a scalar")
    return cx.emit(nn.NonZeroOp(x))


@converter("Compress")
def _compress(cx, ins, attrs):
    x, condition = ins[0], ins[1]
    axis = attrs.get("axis")
    if is_const(condition) and not is_symbolic(condition):  # a fixed selection: a gather
        indices = np.nonzero(np.asarray(condition).reshape(-1))[0].astype(np.int64)
        index = cx.tensor(indices)
    else:
        condition = cx.tensor(condition)
        if len(shape_of(condition)) != 1:
            fail("condition must be 1-D")
        index = reshape_to(cx, cx.emit(nn.NonZeroOp(condition)), [-1])
    x = cx.tensor(x)
    if axis is None:
        x, axis = reshape_to(cx, x, [-1]), 0
    if not -len(shape_of(x)) <= axis < len(shape_of(x)):
        fail(f"axis {axis} is out of range for rank {len(shape_of(x))}")
    return cx.emit(nn.TakeOp(x, index, axis))


@converter("Unique")
def _unique(cx, ins, attrs):
    axis, sorted_ = attrs.get("axis"), bool(attrs.get("sorted", 1))
    x = cx.tensor(ins[0])
    if axis is None:
        x, axis = reshape_to(cx, x, [-1]), 0
    rank = len(shape_of(x))
    if not -rank <= axis < rank:
        fail(f"axis {axis} is out of range for rank {rank}")
    # One op per result ONNX asks for (each re-selects on the host; unused ones are not built).
    return [cx.emit(nn.UniqueOp(x, axis, sorted_, output)) if k == 0 or cx._used_output(k) else None
            for k, output in enumerate(nn.UNIQUE_RESULTS)]


@converter("NonMaxSuppression")
def _non_max_suppression(cx, ins, attrs):
    ins = list(ins) + [None] * (5 - len(ins))
    boxes, scores = cx.tensor(ins[0]), cx.tensor(ins[1])
    defaults = (np.array([0], np.int64), np.array([0], np.float32), np.array([-np.inf], np.float32))
    limits = []
    for v, default in zip(ins[2:], defaults):
        if v is None:
            v = default
        elif is_const(v):
            v = np.asarray(v).astype(default.dtype if default.dtype == np.int64 else np.asarray(v).dtype)
        limits.append(cx.tensor(v))
    return cx.emit(nn.NonMaxSuppressionOp(boxes, scores, *limits, center_point_box=attrs.get("center_point_box", 0)))
