"""``simplify-inference``: remove inference-mode ``nn.batch_norm`` (TVM's SimplifyInference
and FoldScaleAxis, simplified).

An inference batch norm is a per-channel affine map ``x * scale + shift`` with
``scale = gamma / sqrt(variance + epsilon)`` and ``shift = beta - mean * scale``:

* when its four parameters are ``nn.constant``s and ``x`` is the only use of an
  ``nn.conv2d`` (either layout) with a constant weight and output channels on the batch
  norm's axis, the scale is folded into the weight (along ``O`` of ``OIHW``/``OHWI``) and
  the shift becomes an ``nn.bias_add`` after the convolution, so the batch norm vanishes
  into work a convolution backend fuses (``conv2d_bias_relu``);
* otherwise, when the variance is constant, it becomes ``nn.multiply`` / ``nn.add`` with
  the scale and shift reshaped to broadcast along the channel axis (``[C, 1, 1]`` for axis
  1 of a rank-4 value, ``[C]`` for the last axis): injective work a native kernel fuses.
  Constant parts are folded to constants, other parts are computed with ``nn`` arithmetic
  on the rank-1 vectors and ``nn.reshape``;
* a non-constant variance needs a square root, which ``nn`` has no op for: that batch
  norm is left as it is (it runs where the partitioner puts it).

Folded constants are computed in float64 and rounded once to the value's dtype;
constants left dead by a rewrite are erased.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from partita.dialects import nn

__all__ = ["DecomposeBatchNorm", "FoldBatchNormIntoConv", "SimplifyInference"]

_CHANNEL_AXIS = {"NCHW": 1, "NHWC": 3}


def _constant(value: SSAValue) -> np.ndarray | None:
    """The values of a ``nn.constant`` value in float64, else ``None`` (folding makes
    new arrays of the constant's size: a splat over the materialization limit stops it)."""
    owner = value.owner
    return owner.to_numpy(buffer=True).astype(np.float64) if isinstance(owner, nn.ConstantOp) else None


def _dtype(value: SSAValue) -> np.dtype:
    assert isinstance(value.type, TensorType)
    return nn.numpy_dtype(value.type.element_type)


def _rank(value: SSAValue) -> int:
    assert isinstance(value.type, TensorType)
    return len(value.type.get_shape())


def _erase_dead_constants(rewriter: PatternRewriter, values: list[SSAValue]) -> None:
    for value in values:
        owner = value.owner
        if isinstance(owner, nn.ConstantOp) and owner.parent is not None and not owner.result.uses:
            rewriter.erase(owner)


class FoldBatchNormIntoConv(RewritePattern):
    """``batch_norm(conv2d(x, W))`` with constants -> ``bias_add(conv2d(x, W * scale), shift)``."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if not isinstance(op, nn.BatchNormOp):
            return
        conv = op.input.owner
        if not isinstance(conv, nn.Conv2DOp) or not conv.result.has_one_use():
            return
        axis = _CHANNEL_AXIS[conv.data_layout]
        if op.axis % 4 != axis:
            return
        params = [_constant(v) for v in (op.gamma, op.beta, op.mean, op.variance, conv.weight)]
        if any(p is None for p in params):
            return
        gamma, beta, mean, var, weight = params
        scale = gamma / np.sqrt(var + op.epsilon)
        # O is the leading axis of both OIHW and OHWI.
        new_weight = nn.ConstantOp((weight * scale.reshape(-1, 1, 1, 1)).astype(_dtype(conv.weight)))
        shift = nn.ConstantOp((beta - mean * scale).astype(_dtype(op.result)))
        new_conv = nn.Conv2DOp(conv.input, new_weight, strides=conv.strides, padding=conv.padding,
                               dilation=conv.dilation, groups=conv.groups, data_layout=conv.data_layout,
                               kernel_layout=conv.kernel_layout, result_type=conv.result.type)
        bias = nn.BiasAddOp(new_conv, shift, axis=axis, result_type=op.result.type)
        new_conv.location, bias.location = conv.location, op.location
        dead = [op.gamma, op.beta, op.mean, op.variance, conv.weight]
        rewriter.replace(op, [new_weight, new_conv, shift, bias])
        rewriter.erase(conv)
        _erase_dead_constants(rewriter, dead)


class DecomposeBatchNorm(RewritePattern):
    """``batch_norm(x)`` with a constant variance -> ``x * scale + shift`` (broadcast)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if not isinstance(op, nn.BatchNormOp):
            return
        var = _constant(op.variance)
        if var is None:
            return
        rank = _rank(op.input)
        axis = op.axis % rank
        dtype = _dtype(op.result)
        new_ops: list[Operation] = []

        def const(array: np.ndarray) -> SSAValue:
            new_ops.append(c := nn.ConstantOp(np.asarray(array).astype(dtype)))
            return c.result

        def emit(o: Operation) -> SSAValue:
            new_ops.append(o)
            return o.results[0]

        inv_std = 1.0 / np.sqrt(var + op.epsilon)
        gamma, beta, mean = (_constant(v) for v in (op.gamma, op.beta, op.mean))
        # Rank-1 vectors: NumPy arrays while constant, else values computed with nn ops.
        scale = gamma * inv_std if gamma is not None else emit(nn.MultiplyOp(op.gamma, const(inv_std)))
        if isinstance(scale, np.ndarray) and mean is not None and beta is not None:
            shift: np.ndarray | SSAValue = beta - mean * scale
        else:
            mean_v = op.mean if mean is None else const(mean)
            scale_v = const(scale) if isinstance(scale, np.ndarray) else scale
            product = emit(nn.MultiplyOp(mean_v, scale_v))
            shift = emit(nn.SubtractOp(op.beta if beta is None else const(beta), product))
        # Broadcast along ``axis``: [C] followed by ones for the axes after it.
        trailing = (1,) * (rank - 1 - axis)

        def along_axis(vector: np.ndarray | SSAValue) -> SSAValue:
            if isinstance(vector, np.ndarray):
                return const(vector.reshape(-1, *trailing))
            if not trailing:
                return vector
            assert isinstance(vector.type, TensorType)
            (c,) = vector.type.get_shape()
            return emit(nn.ReshapeOp(vector, (DYNAMIC_INDEX if c == DYNAMIC_INDEX else c, *trailing)))

        scaled = emit(nn.MultiplyOp(op.input, along_axis(scale), result_type=op.result.type))
        emit(nn.AddOp(scaled, along_axis(shift), result_type=op.result.type))
        for o in new_ops:
            o.location = op.location
        dead = [op.gamma, op.beta, op.mean, op.variance]
        rewriter.replace(op, new_ops)
        _erase_dead_constants(rewriter, dead)


@dataclass(frozen=True)
class SimplifyInference(ModulePass):
    """Fold inference batch norms into the preceding convolution's weights and a bias,
    else decompose them into a broadcast multiply and add."""

    name = "simplify-inference"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FoldBatchNormIntoConv(), DecomposeBatchNorm()], dce_enabled=False)
        ).rewrite_module(op)
