"""ONNX converters of the losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss,
decomposed into nn ops as the operators' own ONNX function bodies define them (a gather of
each target's log-probability, a class weight, the ``ignore_index`` mask, a reduction)."""

from __future__ import annotations

import numpy as np

from partita.dialects import nn
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.values import fail, shape_of

_REDUCTIONS = ("none", "sum", "mean")


def _reduction(attrs) -> str:
    r = attrs.get("reduction", b"mean")
    r = r.decode() if isinstance(r, bytes) else r
    if r not in _REDUCTIONS:
        fail(f"reduction '{r}' is not one of {', '.join(_REDUCTIONS)}")
    return r


def nll_loss(cx, log_prob, target, weight, attrs):
    """``-log_prob[n, target[n, d...], d...] * weight[target]``, zero where the target is
    ``ignore_index``, then reduced: ``mean`` divides by the sum of the weights used."""
    shape = shape_of(log_prob)
    if len(shape) < 2:
        fail(f"the input must be [N, C, d1..dk], got rank {len(shape)}")
    target = cx.tensor(target)
    if shape_of(target) != (shape[0], *shape[2:]):
        fail(f"target of shape {list(shape_of(target))} does not fit input {list(shape)}")
    if nn.numpy_dtype(target.type.element_type).kind not in "iu":
        fail("target must be of an integer type")
    target = cx.emit(nn.CastOp(target, nn.element_type_of(np.int64)))
    ignore = attrs.get("ignore_index")
    keep = None  # where the target counts (ignore_index masked out)
    if ignore is not None:
        ignored = cx.emit(nn.EqualOp(target, cx.tensor(np.asarray(ignore, np.int64))))
        keep = cx.emit(nn.NotOp(ignored))
        # An ignored target may lie outside [0, C): gather class 0 there, masked below.
        target = cx.emit(nn.WhereOp(ignored, cx.tensor(np.asarray(0, np.int64)), target))
    index = cx.emit(nn.ReshapeOp(target, [shape[0], 1, *shape[2:]]))
    picked = cx.emit(nn.ReshapeOp(cx.emit(nn.GatherElementsOp(log_prob, index, 1)), list(shape_of(target))))
    zero = cx.tensor(np.asarray(0), like=log_prob)
    if weight is not None:
        w = cx.tensor(weight, like=log_prob)
        if shape_of(w) != (shape[1],):
            fail(f"weight must be [C] = [{shape[1]}], got {list(shape_of(w))}")
        w = cx.emit(nn.TakeOp(w, target, 0))
        if keep is not None:
            w = cx.emit(nn.WhereOp(keep, w, zero))
    elif keep is not None:
        w = cx.emit(nn.WhereOp(keep, cx.tensor(np.asarray(1), like=log_prob), zero))
    else:
        w = None
    loss = cx.emit(nn.NegOp(picked if w is None else cx.emit(nn.MultiplyOp(picked, w))))
    reduction = _reduction(attrs)
    if reduction == "none":
        return loss
    axes = list(range(len(shape_of(loss))))
    if reduction == "sum" or (reduction == "mean" and w is None):
        op = nn.ReduceSumOp if reduction == "sum" else nn.ReduceMeanOp
        return cx.emit(op(loss, axes, keepdims=False))
    total = cx.emit(nn.ReduceSumOp(loss, axes, keepdims=False))
    return cx.emit(nn.DivideOp(total, cx.emit(nn.ReduceSumOp(w, axes, keepdims=False))))


@converter("NegativeLogLikelihoodLoss")
def _nll_loss(cx, ins, attrs):
    weight = ins[2] if len(ins) > 2 else None
    return nll_loss(cx, cx.tensor(ins[0]), ins[1], weight, attrs)


@converter("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(cx, ins, attrs):
    scores = cx.tensor(ins[0])
    log_prob = cx.emit(nn.LogSoftmaxOp(scores, axis=1))
    weight = ins[2] if len(ins) > 2 else None
    return [nll_loss(cx, log_prob, ins[1], weight, attrs), log_prob]
