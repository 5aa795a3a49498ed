"""``Union``: the candidates of every wrapped rule, in order, without repeats (TVM's
``UnionPartitionRule``)."""

from __future__ import annotations

from partita.collage.rules.base import PartitionRule, RuleContext, unique
from partita.collage.search import Candidate

__all__ = ["Union"]


class Union(PartitionRule):
    def __init__(self, *subs: PartitionRule) -> None:
        if not subs:
            raise ValueError("Union needs at least one rule")
        self.subs = tuple(subs)

    def children(self) -> tuple[PartitionRule, ...]:
        return self.subs

    def candidates(self, ctx: RuleContext) -> list[Candidate]:
        return unique(c for sub in self.subs for c in sub.candidates(ctx))
