"""``fuse-layer-norm``: LayerNorm as exporters write it out becomes one ``nn.layer_norm``.

Before opset 17 ONNX had no LayerNormalization, and PyTorch's TorchScript exporter (like
hand-written norms in many models) leaves, over the last axis of ``x``:

    m = reduce_mean(x, axes = [-1], keepdims)
    d = x - m
    v = reduce_mean(pow(d, 2) | d * d, axes = [-1], keepdims)
    s = sqrt(v + eps)                                eps: a one-element constant
    n = d / s | d * (1 / s) | d * reciprocal(s)
    y = n * w | w * n                                optional: w over the last axis
    y = y + b | b + y                                optional: b over the last axis

which is ``nn.layer_norm(x, w, b, axis = -1, epsilon = eps)`` (ones and zeros for a missing
``w`` or ``b``). As one op it is one ``rowwise`` kernel (Welford's mean and M2 in one
pass over the row, then the output), where the chain took four (BERT exported at opset
14: the mean, the difference, the variance, the scaling). The chain's intermediates must
be its own (``d`` read by the square and the division alone, the others used once), so a
partial match leaves the ops as they were.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from partita.dialects import nn
from partita.transforms.chains import (
    normalized_by,
    over_last_axis,
    plus_epsilon,
    scaled_over_last_axis,
    sole_user,
    squared,
    tensor_shape,
)
from partita.transforms.dead_ops import erase_dead_chain

__all__ = ["FuseLayerNorm", "FuseLayerNormChain"]


class FuseLayerNormChain(RewritePattern):
    """Matched from the ``reduce_mean`` of ``x`` (see the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, mean: nn.ReduceMeanOp, rewriter: PatternRewriter) -> None:
        if not over_last_axis(mean):
            return
        x = mean.input
        sub = sole_user(mean.result)
        if not isinstance(sub, nn.SubtractOp) or sub.lhs is not x or sub.rhs is not mean.result or sub.result.type != x.type:
            return
        d = sub.result
        squares = {use.operation for use in d.uses if use.operation.results and squared(use.operation.results[0]) is d}
        if len(squares) != 1:
            return
        (square,) = squares
        var = sole_user(square.results[0])
        if not isinstance(var, nn.ReduceMeanOp) or not over_last_axis(var):
            return
        shifted = plus_epsilon(var.result)
        sqrt = sole_user(shifted[0].results[0]) if shifted is not None else None
        if not isinstance(sqrt, nn.SqrtOp):
            return
        n = normalized_by(sqrt.result, d)
        # d feeds the square (twice when it is d * d) and the division, nothing else
        if n is None or n.results[0].type != x.type or {use.operation for use in d.uses} != {square, n}:
            return
        channels = tensor_shape(x)[-1]
        if channels < 0:
            return  # no static size for the default scale and shift
        last, scale, shift = n, None, None
        scaled = scaled_over_last_axis(last, nn.MultiplyOp)
        if scaled is not None:
            last, scale = scaled
        offset = scaled_over_last_axis(last, nn.AddOp)
        if offset is not None:
            last, shift = offset
        dtype = nn.NUMPY_DTYPES[str(x.type.element_type)]  # type: ignore[attr-defined]
        defaults = []
        if scale is None:
            defaults.append(nn.ConstantOp(np.ones(channels, dtype=dtype)))
            scale = defaults[-1].result
        if shift is None:
            defaults.append(nn.ConstantOp(np.zeros(channels, dtype=dtype)))
            shift = defaults[-1].result
        norm = nn.LayerNormOp(x, scale, shift, axis=len(tensor_shape(x)) - 1, epsilon=shifted[1],  # type: ignore[index]
                              result_type=last.results[0].type)
        rewriter.insert([*defaults, norm], InsertPoint.before(last))
        rewriter.replace_all_uses_with(last.results[0], norm.result)
        erase_dead_chain(rewriter, last)


@dataclass(frozen=True)
class FuseLayerNorm(ModulePass):
    """Decomposed LayerNorm chains -> ``nn.layer_norm`` (see the module docstring)."""

    name = "fuse-layer-norm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FuseLayerNormChain()], dce_enabled=False),
            apply_recursively=False,
        ).rewrite_module(op)
