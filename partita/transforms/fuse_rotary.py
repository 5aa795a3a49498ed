"""Rotary embeddings as the exporters write them (Hugging Face's ``rotate_half``), one
``nn.rotary_embedding``; part of ``fuse-attention``:

    y = x * C + concat(-x[..., D/2:], x[..., :D/2]) * S      x: [B, H, S, D]
    C = reshape(c, [Bc, 1, S, D]),  c = f(concat(a, a))       f: element-wise, so both
                                                              halves of c are equal; or
                                                              c = rows of a constant table
                                                              with equal halves (a decode
                                                              step's take at its position)

becomes ``nn.rotary_embedding(x, c[..., :D/2], s[..., :D/2])`` (halves, the whole head
rotated). The halves must be provably equal (the op has one cos / sin per pair); a cache
that is not built as ``concat(a, a)`` leaves the ops as they are.

A head-split transpose feeding the op (``x = transpose(p, [0, 2, 1, 3])``, ``p`` the
``[B, S, H, D]`` projection, read by nothing else) moves after it: the op rotates ``p``
in ``layout = "BSHD"`` and the transpose now feeds the attention, which folds it into
its own indexing (``fuse-attention``'s BSHD form). The head split is then no kernel.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import VerifyException

from partita.dialects import nn
from partita.transforms.chains import tensor_shape
from partita.transforms.dead_ops import erase_dead_chain

__all__ = ["HEAD_SPLIT", "FuseRotaryEmbedding", "SinkHeadSplitPastRotary"]

_END = nn.SLICE_END


def _half(value: SSAValue) -> tuple[SSAValue, int] | None:
    """``(x, k)`` when ``value`` is ``x[..., k * D/2 : (k + 1) * D/2]`` (k = 0, 1), the
    last axis of a rank-4 ``x`` split in halves, the other axes whole."""
    op = value.owner
    if not isinstance(op, nn.StridedSliceOp) or op.refs or len(tensor_shape(op.input)) != 4:
        return None
    d = tensor_shape(op.input)[3]
    if d < 2 or d % 2 or tuple(op.strides) != (1, 1, 1, 1):
        return None
    if tuple(op.begin[:3]) != (0, 0, 0) or any(e < 2**62 for e in op.end[:3]):
        return None
    k = {(0, d // 2): 0, (d // 2, d): 1, (d // 2, _END): 1}.get((op.begin[3], min(op.end[3], _END)))
    if k is None and op.begin[3] == d // 2 and op.end[3] >= d:
        k = 1
    return None if k is None else (op.input, k)


def _rotated_half(value: SSAValue) -> SSAValue | None:
    """``x`` when ``value`` is ``concat(-x[..., D/2:], x[..., :D/2])`` on the last axis."""
    op = value.owner
    if not isinstance(op, nn.ConcatenateOp) or len(op.inputs) != 2 or op.axis % 4 != 3:
        return None
    neg = op.inputs[0].owner
    if not isinstance(neg, nn.NegOp):
        return None
    hi, lo = _half(neg.input), _half(op.inputs[1])
    if hi is None or lo is None or hi[0] is not lo[0] or (hi[1], lo[1]) != (1, 0):
        return None
    return hi[0]


def _equal_halves(value: SSAValue, tables: dict[Operation, bool]) -> bool:
    """Whether both halves of ``value``'s last axis are equal: element-wise functions (a
    scalar factor included) of ``concat(a, a)``, or of a constant table whose halves are
    equal (a precomputed cache), rows of it selected (``take``: a decode step's position)
    or regrouped (a reshape keeping the last axis). ``tables`` remembers each constant's
    answer: every layer's Q and K read the same cos / sin tables."""
    op = value.owner
    if isinstance(op, nn.ConcatenateOp):
        rank = len(tensor_shape(value))
        return len(op.inputs) == 2 and op.inputs[0] is op.inputs[1] and op.axis % rank == rank - 1
    if isinstance(op, nn.ConstantOp):
        if op not in tables:
            table = np.asarray(op.to_numpy())
            half = table.shape[-1] // 2 if table.ndim else 0
            tables[op] = bool(half) and not table.shape[-1] % 2 and \
                bool(np.array_equal(table[..., :half], table[..., half:]))
        return tables[op]
    if isinstance(op, nn.TakeOp):
        rank = len(tensor_shape(op.data))
        return op.axis % rank != rank - 1 and _equal_halves(op.data, tables)
    if isinstance(op, nn.ReshapeOp):
        last = tensor_shape(value)[-1:]
        return last == tensor_shape(op.input)[-1:] and last[0] > 0 and _equal_halves(op.input, tables)
    if isinstance(op, nn.UnaryOp | nn.CastOp):
        return _equal_halves(op.operands[0], tables)
    if isinstance(op, nn.MultiplyOp | nn.DivideOp):
        c = op.rhs.owner
        return isinstance(c, nn.ConstantOp) and np.asarray(c.to_numpy()).size == 1 and _equal_halves(op.lhs, tables)
    return False


def _cache(value: SSAValue, x: SSAValue, tables: dict[Operation, bool]) -> SSAValue | None:
    """``c[Bc, S, D]`` when ``value`` is ``reshape(c, [Bc, 1, S, D])`` broadcasting over
    ``x``'s heads, with equal halves."""
    op = value.owner
    if not isinstance(op, nn.ReshapeOp) or op.operands[1:]:
        return None
    c, shape, xs = op.input, tensor_shape(value), tensor_shape(x)
    cs = tensor_shape(c)
    if len(cs) != 3 or len(shape) != 4 or shape[1] != 1 or shape[3] != xs[3] or cs[2] != xs[3]:
        return None
    if shape[0] != cs[0] or shape[2] != cs[1] or cs[0] not in (1, xs[0]):
        return None
    return c if _equal_halves(c, tables) else None


def _product(op: Operation | None, x_of: bool) -> tuple[SSAValue, SSAValue] | None:
    """``(tensor, cache)`` of ``tensor * cache`` in either order (the cache the reshape)."""
    if not isinstance(op, nn.MultiplyOp):
        return None
    for a, b in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
        if isinstance(b.owner, nn.ReshapeOp) and tensor_shape(a) == tensor_shape(op.result):
            return a, b
    return None


class FuseRotaryEmbedding(RewritePattern):
    """``x * C + rotate_half(x) * S`` -> ``nn.rotary_embedding`` (module docstring)."""

    def __init__(self) -> None:
        self._tables: dict[Operation, bool] = {}  # constant cos / sin tables: equal halves?

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if not isinstance(op, nn.AddOp) or len(tensor_shape(op.result)) != 4:
            return
        for a, b in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            direct, turned = _product(a.owner, True), _product(b.owner, False)
            if direct is None or turned is None:
                continue
            x, cos4 = direct
            if _rotated_half(turned[0]) is not x or tensor_shape(x) != tensor_shape(op.result):
                continue
            cos, sin = _cache(cos4, x, self._tables), _cache(turned[1], x, self._tables)
            if cos is None or sin is None:
                continue
            half = tensor_shape(x)[3] // 2
            bounds = ([0, 0, 0], [_END, _END, half], [1, 1, 1])
            # The caches' first halves, shared by every rotary reading them (Q and K of
            # every layer): one slice each, not one per use.
            found = [_existing_slice(c, *bounds) for c in (cos, sin)]
            slices = [f if f is not None else nn.StridedSliceOp(c, *bounds) for f, c in zip(found, (cos, sin))]
            created = [s for s, f in zip(slices, found) if f is None]
            rotary = nn.RotaryEmbeddingOp(x, slices[0], slices[1], result_type=op.result.type)
            try:
                for s in created:
                    s.verify()
                rotary.verify()
            except VerifyException:
                return
            rotary.location = op.location
            if created:  # right after the caches, so that later rotaries can reuse them
                rewriter.insert(created, _after_defs(cos, sin, op.parent_block()))
            rewriter.replace(op, [rotary])
            for dead in (a.owner, b.owner):
                erase_dead_chain(rewriter, dead)
            return


HEAD_SPLIT = (0, 2, 1, 3)
"""The head split (and merge) transpose: ``[B, S, H, D] <-> [B, H, S, D]``."""


class SinkHeadSplitPastRotary(RewritePattern):
    """``rotary(transpose(p, [0, 2, 1, 3]))`` -> ``transpose(rotary_bshd(p), [0, 2, 1, 3])``
    (module docstring), when the transpose has no other reader."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if not isinstance(op, nn.RotaryEmbeddingOp) or op.layout != "BHSD":
            return
        split = op.input.owner
        if not isinstance(split, nn.TransposeOp) or tuple(split.perm) != HEAD_SPLIT \
                or not op.input.has_one_use():
            return
        rotary = nn.RotaryEmbeddingOp(split.input, op.cos, op.sin, interleaved=op.interleaved,
                                      rotary_dim=op.rotary_dim, layout="BSHD",
                                      result_type=split.input.type)
        rotary.location = op.location
        rewriter.replace(op, [rotary, nn.TransposeOp(rotary, list(HEAD_SPLIT), result_type=op.result.type)])
        rewriter.erase(split)


def _existing_slice(cache: SSAValue, begin, end, strides) -> nn.StridedSliceOp | None:
    for use in cache.uses:
        user = use.operation
        if isinstance(user, nn.StridedSliceOp) and not user.refs and user.input is cache and \
                (tuple(user.begin), tuple(user.end), tuple(user.strides)) == (tuple(begin), tuple(end), tuple(strides)):
            return user
    return None


def _after_defs(a: SSAValue, b: SSAValue, block) -> InsertPoint:
    """Right after the later of the two values' definitions in ``block`` (its start when
    both are arguments)."""
    ops = [v.owner for v in (a, b) if isinstance(v.owner, Operation)]
    if not ops:
        return InsertPoint.at_start(block)
    return InsertPoint.after(max(ops, key=block.get_operation_index))
