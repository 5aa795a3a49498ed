"""``Primitive``: each candidate of the wrapped rule becomes a unit of compilation (TVM's
``PrimitivePartitionRule``): its partition carries ``byoc.primitive``, so nothing later
fuses it with its neighbours or splits it."""

from __future__ import annotations

from dataclasses import replace

from partita.collage.rules.base import PartitionRule, RuleContext
from partita.collage.search import Candidate

__all__ = ["Primitive"]


class Primitive(PartitionRule):
    def __init__(self, sub: PartitionRule) -> None:
        self.sub = sub

    def children(self) -> tuple[PartitionRule, ...]:
        return (self.sub,)

    def candidates(self, ctx: RuleContext) -> list[Candidate]:
        return [replace(c, primitive=True) for c in self.sub.candidates(ctx)]
