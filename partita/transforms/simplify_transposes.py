"""``simplify-transposes``: transposes that move no data become reshapes, and a transpose
of a transpose becomes one (TVM's ``SimplifyTranspose``).

A transpose whose non-unit dims keep their order moves only dims of size 1, so every
element keeps its row-major offset: it is a reshape, which the memory plan makes a view
of its input and a fused kernel reads in place. A decode step writes such transposes
around its attention: the head split ``[B, 1, H, D] -> [B, H, 1, D]`` of the one new
token's Q, K and V, and the head merge back, a kernel each until now. A ``?`` dim is
not known to be 1, so it counts as moving data; one is inferred from the element count,
several are sized by shape references to the transpose's input. A transpose that changes
nothing (the result type is the input's) is its input.

``transpose(transpose(x, p), q)`` is ``transpose(x, [p[i] for i in q])``: one kernel
instead of two, or none when the composition moves only unit dims. The inner transpose
stays while anything else reads it.

Run after ``fuse-attention`` and ``merge-rotary-embeddings``, which read head-split
transposes, and before partitioning, so Collage prices the views as free.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from partita.dialects import nn

__all__ = ["ComposeTransposes", "SimplifyTransposes", "TransposeOfUnitDimsToReshape", "simplifies_a_transpose"]


def moves_only_unit_dims(op: nn.TransposeOp) -> bool:
    """Whether ``op`` keeps the order of its input's dims that are not a static 1."""
    shape = op.input.type.get_shape()
    moved = [p for p in op.perm if shape[p] != 1]
    return moved == sorted(moved)


def simplifies_a_transpose(op: Operation) -> bool:
    """Whether a pattern of this pass rewrites ``op``."""
    if not isinstance(op, nn.TransposeOp) or not isinstance(op.input.type, TensorType):
        return False
    return moves_only_unit_dims(op) or isinstance(op.input.owner, nn.TransposeOp)


class TransposeOfUnitDimsToReshape(RewritePattern):
    """A transpose moving only unit dims -> a reshape (or its input, if the type is kept)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.TransposeOp, rewriter: PatternRewriter) -> None:
        if not moves_only_unit_dims(op):
            return
        if op.result.type == op.input.type:
            rewriter.replace(op, [], [op.input])
            return
        shape = op.result.type.get_shape()
        refs = [(op.input, op.perm[t], t) for t, d in enumerate(shape) if d == nn.DYN]
        if len(refs) == 1:
            refs = []  # one ? is inferred from the element count
        reshape = nn.ReshapeOp(op.input, shape, refs)
        reshape.location = op.location
        rewriter.replace(op, reshape)


class ComposeTransposes(RewritePattern):
    """``transpose(transpose(x, p), q)`` -> ``transpose(x, p o q)``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.TransposeOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if not isinstance(inner, nn.TransposeOp):
            return
        composed = nn.TransposeOp(inner.input, [inner.perm[i] for i in op.perm], op.result.type)
        composed.location = op.location
        rewriter.replace(op, composed)
        if not inner.result.uses:
            rewriter.erase_op(inner)


@dataclass(frozen=True)
class SimplifyTransposes(ModulePass):
    """Transposes of unit dims become reshapes, transposes of transposes compose (see the
    module docstring)."""

    name = "simplify-transposes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        patterns = [ComposeTransposes(), TransposeOfUnitDimsToReshape()]
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns, dce_enabled=False)).rewrite_module(op)
