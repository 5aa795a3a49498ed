"""ONNX converters of data movement and shape ops (Reshape, Transpose, Concat, Pad, Cast,
Constant, Shape, ...)."""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import SSAValue

from partita.dialects import nn
from partita.frontends.onnx.dyn import dyn, run_time, static_length
from partita.frontends.onnx.importer import Importer
from partita.frontends.onnx.indexing import broadcast_to
from partita.frontends.onnx.model import tensor_array
from partita.frontends.onnx.registry import CONVERTERS, converter
from partita.frontends.onnx.values import (
    SymDim,
    const_ints,
    const_scalar,
    fail,
    is_const,
    shape_of,
    sym_arith,
    sym_factors,
)
from partita.ir.parameters import mapped_region


@converter("Identity")
def _identity(cx, ins, attrs):
    return ins[0]


@converter("Dropout")
def _dropout(cx, ins, attrs):
    if len(ins) > 2 and ins[2] is not None:
        if not is_const(ins[2]) or bool(np.asarray(ins[2]).reshape(-1)[0]):
            fail("training_mode must be a constant false")
    if not cx._used_output(1):
        return [ins[0]]
    # Inference: nothing is dropped, the mask is all true.
    x = cx.tensor(ins[0])
    ones = cx.tensor(np.ones([1] * len(shape_of(x)), dtype=np.bool_))
    return [x, broadcast_to(cx, ones, cx.labels(x), "the mask")]


@converter("Constant")
def _constant(cx, ins, attrs):
    if "value" in attrs:
        return tensor_array(attrs["value"], "Constant value", cx.external_dir)
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    fail(f"unsupported Constant attribute(s) {sorted(attrs)}")




@converter("Pad")
def _pad(cx, ins, attrs):
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in nn.PadOp.MODES:
        fail(f"pad mode '{mode}' is not supported ({', '.join(nn.PadOp.MODES)})")
    x = cx.tensor(ins[0])
    rank = len(shape_of(x))
    if cx.opset >= 11 and any(run_time(v) for v in ins[1:]):
        params = dict(zip(("pads", "constant_value", "axes"), ins[1:]))
        return dyn(cx, "pad", [x], params, rank, x.type.element_type, "pads", mode=mode)
    if cx.opset < 11:
        pads, value = list(attrs["pads"]), attrs.get("value", 0.0)
    else:
        pads = const_ints(ins[1], "pads")
        value = const_scalar(ins[2], "constant_value") if len(ins) > 2 and ins[2] is not None \
            and np.asarray(ins[2]).size else 0.0
        if len(ins) > 3 and ins[3] is not None:
            axes = [a % rank for a in const_ints(ins[3], "axes")]
            full = [0] * (2 * rank)
            for j, a in enumerate(axes):
                full[a], full[rank + a] = pads[j], pads[len(axes) + j]
            pads = full
    if len(pads) != 2 * rank:
        fail(f"expected {2 * rank} pads, got {len(pads)}")
    if any(p < 0 for p in pads):
        fail("negative pads are not supported")
    return cx.emit(nn.PadOp(x, pads[:rank], pads[rank:], pad_value=value, mode=mode))



def reshape_to(cx: Importer, x: SSAValue, target: list[object]) -> SSAValue:
    """``nn.reshape`` to entries that are ints (``0`` copy, ``-1`` infer) or ``SymDim``s.

    A ``-1`` is inferred symbolically where it can be: the input's dim factors that the
    target does not cancel (``[batch, seq]`` to ``[-1, seq]`` gives ``batch``), so later
    shapes read from the result still match the input's. The dims are recorded on the
    result (``Importer.sym_labels``)."""
    in_labels = cx.labels(x)
    out: list[object] = []
    for i, t in enumerate(target):
        if isinstance(t, SymDim):
            out.append(t)
        elif int(t) == 0:
            if i >= len(in_labels):
                fail(f"shape entry {i} is 0 but the input has rank {len(in_labels)}")
            out.append(in_labels[i])
        else:
            out.append(int(t))
    if out.count(-1) > 1:
        fail("more than one -1 in the target shape")
    if -1 in out:
        out[out.index(-1)] = _inferred_dim(x, in_labels, [d for d in out if not _is_minus_one(d)], target)
    shape = [nn.DYN if isinstance(d, SymDim) else d for d in out]
    refs = []
    if shape.count(nn.DYN) > 1:
        # Several run-time dims: each one read from a tensor is a shape reference.
        refs = [(*cx.sym_sources[d], k) for k, d in enumerate(out)
                if isinstance(d, SymDim) and d in cx.sym_sources]
        if shape.count(nn.DYN) - len(refs) > 1:
            fail(f"the target shape has {shape.count(nn.DYN) - len(refs)} dynamic dimensions "
                 "that are not dimensions of a tensor; nn.reshape infers one")
    if shape == list(shape_of(x)) and out == in_labels:
        return x
    result = cx.emit(nn.ReshapeOp(x, shape, refs))
    cx.sym_labels[result] = out
    return result


def slice_axis(cx: Importer, x: SSAValue, axis: int, start: int, stop: int) -> SSAValue:
    """``x[..., start:stop, ...]`` along ``axis``: a view that consumers read in place."""
    rank = len(shape_of(x))
    begin, end = [0] * rank, [nn.SLICE_END] * rank
    begin[axis], end[axis] = start, stop
    return cx.emit(nn.StridedSliceOp(x, begin, end, [1] * rank))


def drop_axis(cx: Importer, x: SSAValue, axis: int) -> SSAValue:
    """``x`` without its ``axis``, which has size 1: a reshape."""
    labels = cx.labels(x)
    return reshape_to(cx, x, labels[:axis] + labels[axis + 1:])


def _is_minus_one(d: object) -> bool:
    return not isinstance(d, SymDim) and d == -1


def _inferred_dim(x: SSAValue, in_labels: list[object], rest: list[object], target: list[object]) -> object:
    """The ``-1`` of a reshape of ``in_labels`` whose other entries are ``rest``."""
    remaining = sym_factors(in_labels)
    unmatched = []
    for d in sym_factors(rest):
        if isinstance(d, SymDim) and d in remaining:
            remaining.remove(d)
        elif isinstance(d, SymDim):
            unmatched.append(d)
    if unmatched:  # known only at run time (nn.reshape infers it from the element count)
        return SymDim(("inferred", id(x), tuple(map(str, target))))
    static_out = math.prod(d for d in sym_factors(rest) if not isinstance(d, SymDim))
    static_in = math.prod(d for d in remaining if not isinstance(d, SymDim))
    if static_out == 0 or static_in % static_out:
        if not any(isinstance(d, SymDim) for d in remaining):
            fail(f"cannot reshape {math.prod(remaining)} elements into {target}")
        return SymDim(("inferred", id(x), tuple(map(str, target))))
    dim: object = static_in // static_out
    for d in remaining:
        if isinstance(d, SymDim):
            dim = sym_arith("mul", dim, d)
    return dim


@converter("Reshape")
def _reshape(cx, ins, attrs):
    if run_time(ins[1]):
        x = cx.tensor(ins[0])
        return dyn(cx, "reshape", [x], {"shape": ins[1]}, static_length(ins[1], "the shape"),
                   x.type.element_type, "the shape", allowzero=bool(attrs.get("allowzero", 0)))
    if not is_const(ins[1]):
        fail("the shape input must be a constant (or a foldable shape computation)")
    target = list(np.asarray(ins[1]).reshape(-1))
    x = cx.tensor(ins[0])
    if attrs.get("allowzero", 0) and any(not isinstance(t, SymDim) and t == 0 for t in target):
        # A 0 is a literal empty dimension, not "copy the input's".
        if any(isinstance(t, SymDim) or t == -1 for t in target) or nn.DYN in shape_of(x):
            fail("allowzero with a 0 and a dynamic or inferred dimension is not supported")
        if math.prod(shape_of(x)) != 0:
            fail(f"cannot reshape {math.prod(shape_of(x))} elements into {target}")
        return cx.emit(nn.ReshapeOp(x, [int(t) for t in target]))
    return reshape_to(cx, x, target)


@converter("Flatten")
def _flatten(cx, ins, attrs):
    x = cx.tensor(ins[0])
    labels = cx.labels(x)
    axis = attrs.get("axis", 1)
    if not -len(labels) <= axis <= len(labels):
        fail(f"axis {axis} out of range for rank {len(labels)}")
    axis = axis + len(labels) if axis < 0 else axis

    def prod(dims):
        total: object = 1
        for d in dims:
            total = sym_arith("mul", total, d)
        return total

    return reshape_to(cx, x, [prod(labels[:axis]), prod(labels[axis:])])


@converter("Transpose")
def _transpose(cx, ins, attrs):
    if is_const(ins[0]) and mapped_region(ins[0]) is not None:
        # A transposed weight (an exported MatMul(x, Transpose(W)): tied embeddings, an
        # lm_head) is a permuted view of its mapping, a parameter with a perm: no bytes,
        # whatever its size (the fold budget is for values that folding builds).
        return ins[0].transpose(attrs.get("perm", list(range(ins[0].ndim))[::-1]))
    x = cx.tensor(ins[0])
    perm = attrs.get("perm", list(range(len(shape_of(x))))[::-1])
    return cx.emit(nn.TransposeOp(x, perm))


@converter("Concat")
def _concat(cx, ins, attrs):
    vals = cx.operands(*ins)
    return cx.emit(nn.ConcatenateOp(vals, axis=attrs["axis"]))


@converter("Unsqueeze")
def _unsqueeze(cx, ins, attrs):
    x = cx.tensor(ins[0])
    if cx.opset >= 13 and run_time(ins[1]):
        rank = len(shape_of(x)) + static_length(ins[1], "axes")
        return dyn(cx, "unsqueeze", [x], {"axes": ins[1]}, rank, x.type.element_type, "axes")
    axes = attrs.get("axes") if cx.opset < 13 else const_ints(ins[1], "axes")
    labels: list[object] = cx.labels(x)
    rank = len(labels) + len(axes)
    for a in sorted(a % rank for a in axes):
        labels.insert(a, 1)
    return reshape_to(cx, x, labels)


@converter("Squeeze")
def _squeeze(cx, ins, attrs):
    x = cx.tensor(ins[0])
    if cx.opset >= 13 and len(ins) > 1 and run_time(ins[1]):
        rank = len(shape_of(x)) - static_length(ins[1], "axes")
        return dyn(cx, "squeeze", [x], {"axes": ins[1]}, rank, x.type.element_type, "axes")
    if cx.opset < 13:
        axes = attrs.get("axes")
    else:
        axes = const_ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else None
    labels = cx.labels(x)
    if axes is None:
        if any(isinstance(d, SymDim) for d in labels):
            # Which dims are 1 is known only at run time: the result keeps the dynamic
            # ones (a run where one is 1 gives another rank: an error when the plan binds).
            known = [nn.DYN if isinstance(d, SymDim) else d for d in labels if d != 1]
            return dyn(cx, "squeeze", [x], {}, len(known), x.type.element_type, "the squeezed axes", known=known)
        axes = [i for i, d in enumerate(labels) if d == 1]
    axes = {a % len(labels) for a in axes}
    for a in axes:
        if labels[a] != 1 and not isinstance(labels[a], SymDim):
            fail(f"cannot squeeze axis {a} of size {labels[a]}")
    return reshape_to(cx, x, [d for i, d in enumerate(labels) if i not in axes])


@converter("Shape")
def _shape_op(cx, ins, attrs):
    x = cx.tensor(ins[0])
    labels = cx.labels(x)
    # Negative bounds count from the end; out-of-range bounds clamp (opset 15).
    start, end = attrs.get("start", 0), attrs.get("end", len(labels))
    dims = labels[slice(start, end)]
    if any(isinstance(d, SymDim) for d in dims):
        return np.asarray(dims, dtype=object)
    return np.asarray(dims, dtype=np.int64)


SUPPORTED_OPS = tuple(sorted(CONVERTERS))


