"""``OnlyValid``: the wrapped rule's candidates that a backend can compile (TVM's
``OnlyValidPartitionRule`` with its ``SubGraphConfig``).

A candidate is valid when it is convex (contracting it keeps the graph acyclic) and, as
configured: its depth (nodes on the longest path inside it) is at most ``max_depth``; it
has at most ``max_exits`` exits (nodes whose value is used outside it or returned; a kernel
has one output); and, unless ``allow_taps``, no tap (a node whose value is used both inside
and outside: the kernel would have to export an intermediate value).
"""

from __future__ import annotations

from dataclasses import dataclass

from partita.collage.graph import DataflowGraph
from partita.collage.rules.base import PartitionRule, RuleContext
from partita.collage.search import Candidate

__all__ = ["OnlyValid", "SubGraphConfig"]


@dataclass(frozen=True)
class SubGraphConfig:
    max_depth: int | None = None
    max_exits: int | None = None
    allow_taps: bool = True

    def why_invalid(self, graph: DataflowGraph, mask: int) -> str | None:
        """Why the node set ``mask`` is not valid under this config (``None`` if it is)."""
        if not graph.is_convex(mask):
            return "not convex"
        if self.max_depth is not None and graph.depth(mask) > self.max_depth:
            return f"depth {graph.depth(mask)} > {self.max_depth}"
        if self.max_exits is not None:
            exits = graph.output_nodes(mask)
            if len(exits) > self.max_exits:
                return f"{len(exits)} exits > {self.max_exits}"
        if not self.allow_taps and graph.taps(mask):
            return f"taps at nodes {graph.taps(mask)}"
        return None


class OnlyValid(PartitionRule):
    def __init__(self, sub: PartitionRule, config: SubGraphConfig) -> None:
        self.sub = sub
        self.config = config

    def children(self) -> tuple[PartitionRule, ...]:
        return (self.sub,)

    def summary(self) -> str:
        c = self.config
        return f"OnlyValid(max_depth={c.max_depth}, max_exits={c.max_exits}, allow_taps={c.allow_taps})"

    def candidates(self, ctx: RuleContext) -> list[Candidate]:
        return [c for c in self.sub.candidates(ctx) if self.config.why_invalid(ctx.graph, c.mask) is None]
