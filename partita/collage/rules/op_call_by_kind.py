"""``OpCallByKind``: one single-node candidate per op a target runs whose kind is at most
``max_kind`` (TVM's ``OpCallByKindPartitionRule``, the seed of by-kind fusion)."""

from __future__ import annotations

from collections.abc import Callable

from partita.collage.graph import DataflowGraph
from partita.collage.rules.base import PartitionRule, RuleContext
from partita.collage.rules.kind import KindFn, OpKind, default_op_kind
from partita.collage.search import Candidate

__all__ = ["OpCallByKind"]


class OpCallByKind(PartitionRule):
    """``kind_of(graph, v)`` classifies node ``v`` for ``target`` (the default reads op
    names); ``supports(ctx, v)``, when given, further says which nodes the target runs."""

    def __init__(
        self,
        target: str,
        *,
        kind_of: KindFn = default_op_kind,
        max_kind: OpKind = OpKind.OUT_EWISE_FUSABLE,
        supports: Callable[[RuleContext, int], bool] | None = None,
    ) -> None:
        self.target = target
        self.kind_of = kind_of
        self.max_kind = max_kind
        self.supports = supports

    def summary(self) -> str:
        return f"OpCallByKind(target={self.target}, max_kind={self.max_kind.name})"

    def candidates(self, ctx: RuleContext) -> list[Candidate]:
        graph: DataflowGraph = ctx.graph
        return [
            Candidate(frozenset((v,)), self.target, self.target)
            for v in range(len(graph))
            if self.kind_of(graph, v) <= self.max_kind and (self.supports is None or self.supports(ctx, v))
        ]
