"""``Composite``: each candidate of the wrapped rule becomes a composite function named
by its label (TVM's ``CompositePartitionRule``): the partition carries
``byoc.composite = <backend>.<pattern>``, which the backend's codegen dispatches on."""

from __future__ import annotations

from dataclasses import replace

from partita.collage.rules.base import PartitionRule, RuleContext
from partita.collage.search import Candidate

__all__ = ["Composite"]


class Composite(PartitionRule):
    def __init__(self, sub: PartitionRule) -> None:
        self.sub = sub

    def children(self) -> tuple[PartitionRule, ...]:
        return (self.sub,)

    def candidates(self, ctx: RuleContext) -> list[Candidate]:
        return [replace(c, composite=c.label) for c in self.sub.candidates(ctx)]
