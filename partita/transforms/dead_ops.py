"""Erasing what a fusion pattern leaves unread.

A pattern that folds a chain of ``nn`` ops into one op leaves the chain's producers behind
(scale constants, mask fills, squares); each is erased once nothing reads it, walking up
through ``nn`` ops only (block arguments and other dialects' ops are never touched).
"""

from __future__ import annotations

from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter

from partita.dialects import nn

__all__ = ["erase_dead_chain"]


def erase_dead_chain(rewriter: PatternRewriter, op: Operation | None) -> None:
    """Erase the ``nn`` op ``op`` when nothing reads it, then its producers that became dead."""
    if not isinstance(op, nn.NNOp) or op.parent is None or any(r.uses for r in op.results):
        return
    producers = [v.owner for v in op.operands if isinstance(v.owner, Operation)]
    rewriter.erase(op)
    for producer in producers:
        erase_dead_chain(rewriter, producer)
