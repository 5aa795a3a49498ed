"""``fuse-rms-norm``: RMSNorm as the exporters write it becomes one ``nn.rms_norm``.

PyTorch's exporters (Hugging Face's ``LlamaRMSNorm``, T5's layer norm) leave, over the
last axis of ``x``:

    m = reduce_mean(pow(x, 2) | x * x, axes = [-1], keepdims)
    s = sqrt(m + eps)                                eps: a one-element constant
    n = x * (1 / s) | x * reciprocal(s) | x / s
    y = n * w | w * n                                optional: w over the last axis

which is ``nn.rms_norm(x, w, axis = -1, epsilon = eps)`` (a scale of ones when there is
no ``w``, or when a cast stands between ``n`` and ``w``: the cast and the multiply then
stay, as the kernel's epilogue). As one op it is one ``rowwise`` kernel reading the row
once for its mean square and once for the output, where the chain took three kernels (the
square, the mean, the scaling). Only the chain's own intermediates are replaced, and only
when each is used once, so a partial match leaves the ops as they were.
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

__all__ = ["FuseRMSNorm", "FuseRMSNormChain"]


class FuseRMSNormChain(RewritePattern):
    """Matched from its ``reduce_mean`` (see the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, mean: nn.ReduceMeanOp, rewriter: PatternRewriter) -> None:
        if not over_last_axis(mean):
            return
        rank = len(tensor_shape(mean.input))
        x = squared(mean.input)
        if x is None or len(list(mean.input.uses)) != 1:
            return
        shifted = plus_epsilon(mean.result)
        if shifted is None:
            return
        add, eps = shifted
        sqrt = sole_user(add.results[0])
        if not isinstance(sqrt, nn.SqrtOp):
            return
        n = normalized_by(sqrt.result, x)
        if n is None or n.results[0].type != x.type:
            return
        weighted = scaled_over_last_axis(n, nn.MultiplyOp)
        if weighted is not None:
            last, scale = weighted
        else:
            ones = nn.ConstantOp(np.ones(1, dtype=nn.NUMPY_DTYPES[str(x.type.element_type)]))  # type: ignore[attr-defined]
            rewriter.insert(ones, InsertPoint.before(n))
            last, scale = n, ones.result
        norm = nn.RMSNormOp(x, scale, axis=rank - 1, epsilon=eps, result_type=last.results[0].type)
        rewriter.insert(norm, InsertPoint.before(last))
        rewriter.replace_all_uses_with(last.results[0], norm.result)
        erase_dead_chain(rewriter, last)


@dataclass(frozen=True)
class FuseRMSNorm(ModulePass):
    """Decomposed RMSNorm chains -> ``nn.rms_norm`` (see the module docstring)."""

    name = "fuse-rms-norm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FuseRMSNormChain()], dce_enabled=False),
            apply_recursively=False,
        ).rewrite_module(op)
