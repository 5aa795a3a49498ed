"""``merge-rotary-embeddings``: Q's and K's rotary embeddings as one op (vLLM's fused
``rotary_embedding(positions, query, key)``).

After ``combine-parallel-dense`` Q and K are adjacent head splits of one projection ``y``
(``[B, S, W]``), each rotated by its own ``nn.rotary_embedding`` with the same cos / sin
tables::

    q = rotary(reshape(y[..., a : a + Hq * D]  -> [B, S, Hq, D]), cos, sin)
    k = rotary(reshape(y[..., a + Hq * D : a + (Hq + Hk) * D] -> [B, S, Hk, D]), cos, sin)

A rotation acts on each head alone, so both are one rotation of ``Hq + Hk`` heads::

    r = rotary(reshape(y[..., a : a + (Hq + Hk) * D] -> [B, S, Hq + Hk, D]), cos, sin)
    q = r[:, :, :Hq],  k = r[:, :, Hq:]

one kernel instead of two; the attention reads ``q`` and ``k`` as views of ``r`` (heads
``Hq + Hk`` apart). Only ``[B, S, H, D]`` rotations whose slices and reshapes have no
other reader merge, with equal attributes, element types and shape references.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
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
from partita.transforms.chains import tensor_shape

__all__ = ["MergeAdjacentRotaries", "MergeRotaryEmbeddings"]


def _head_split(rotary: nn.RotaryEmbeddingOp) -> tuple[nn.ReshapeOp, nn.StridedSliceOp, int, int] | None:
    """``(reshape, slice, start, end)`` when the rotary rotates, in BSHD, the head split
    of columns ``[start, end)`` of a ``[B, S, W]`` value (axes 0 and 1 whole), each op read
    by the next alone."""
    if rotary.layout != "BSHD" or len(list(rotary.input.uses)) != 1:
        return None
    reshape = rotary.input.owner
    if not isinstance(reshape, nn.ReshapeOp) or len(list(reshape.input.uses)) != 1:
        return None
    sliced = reshape.input.owner
    if not isinstance(sliced, nn.StridedSliceOp) or sliced.refs or len(tensor_shape(sliced.input)) != 3:
        return None
    cols = sliced.static_range(2)
    if not (sliced.keeps_whole(0) and sliced.keeps_whole(1)) or cols is None or cols.step != 1 or not len(cols):
        return None
    return reshape, sliced, cols.start, cols.stop


class MergeAdjacentRotaries(RewritePattern):
    """Matched from Q's rotary: K's is the one after it on the same tables and input."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, first: nn.RotaryEmbeddingOp, rewriter: PatternRewriter) -> None:
        split = _head_split(first)
        if split is None:
            return
        reshape, sliced, start, end = split
        for use in sliced.input.uses:
            other = use.operation
            if not isinstance(other, nn.StridedSliceOp) or other is sliced:
                continue
            users = [u.operation for u in other.result.uses]
            reshape2 = users[0] if len(users) == 1 else None
            rotaries = [u.operation for u in reshape2.result.uses] if isinstance(reshape2, nn.ReshapeOp) else []
            second = rotaries[0] if len(rotaries) == 1 else None
            if not isinstance(second, nn.RotaryEmbeddingOp) or second is first:
                continue
            split2 = _head_split(second)
            if split2 is None or split2[2] != end or not self._compatible(first, second, reshape, split2[0]):
                continue
            self._merge(first, second, reshape, sliced, start, split2[3], rewriter)
            return

    @staticmethod
    def _compatible(a: nn.RotaryEmbeddingOp, b: nn.RotaryEmbeddingOp, ra: nn.ReshapeOp, rb: nn.ReshapeOp) -> bool:
        (_, _, _, d), (_, _, _, d2) = tensor_shape(a.result), tensor_shape(b.result)
        return (a.cos is b.cos and a.sin is b.sin and a.interleaved == b.interleaved and a.rotary_dim == b.rotary_dim
                and d == d2 and d > 0 and a.result.type.element_type == b.result.type.element_type
                and list(ra.refs) == list(rb.refs) and ra.ref_axes == rb.ref_axes and ra.targets == rb.targets
                and tensor_shape(a.result)[:2] == tensor_shape(b.result)[:2])

    @staticmethod
    def _merge(first: nn.RotaryEmbeddingOp, second: nn.RotaryEmbeddingOp, reshape: nn.ReshapeOp,
               sliced: nn.StridedSliceOp, start: int, stop: int, rewriter: PatternRewriter) -> None:
        b, s, hq, d = tensor_shape(first.result)
        hk = tensor_shape(second.result)[2]
        element = first.result.type.element_type
        both = nn.StridedSliceOp(sliced.input, [0, 0, start], [nn.SLICE_END, nn.SLICE_END, stop], [1, 1, 1],
                                 result_type=TensorType(element, [b, s, stop - start]))
        heads = type(reshape).create(operands=[both.result, *reshape.refs],
                                     result_types=[TensorType(element, [b, s, hq + hk, d])],
                                     properties=dict(reshape.properties), attributes=dict(reshape.attributes))
        rotated = type(first).create(operands=[heads.result, first.cos, first.sin],
                                     result_types=[heads.result.type], properties=dict(first.properties),
                                     attributes=dict(first.attributes))
        rotated.location = first.location
        q = nn.StridedSliceOp(rotated.result, [0, 0, 0, 0], [nn.SLICE_END, nn.SLICE_END, hq, nn.SLICE_END], [1, 1, 1, 1],
                              result_type=first.result.type)
        k = nn.StridedSliceOp(rotated.result, [0, 0, hq, 0], [nn.SLICE_END, nn.SLICE_END, hq + hk, nn.SLICE_END], [1, 1, 1, 1],
                              result_type=second.result.type)
        earlier = first if first.is_before_in_block(second) else second
        rewriter.insert([both, heads, rotated, q, k], InsertPoint.before(earlier))
        for old, new in ((first, q), (second, k)):
            chain = [old, old.input.owner, old.input.owner.input.owner]
            old.result.replace_all_uses_with(new.result)
            for op in chain:
                rewriter.erase(op)


@dataclass(frozen=True)
class MergeRotaryEmbeddings(ModulePass):
    """Q's and K's rotary embeddings of one projection -> one (see the module docstring)."""

    name = "merge-rotary-embeddings"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([MergeAdjacentRotaries()], dce_enabled=False),
                             apply_recursively=False).rewrite_module(op)
