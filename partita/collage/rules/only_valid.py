"""``OnlyValid``: the wrapped rule's candidates that a backend can compile (TVM's
``OnlyValidPartitionRule`` with its ``SubGraphConfig``).

A candidate is valid when it is convex (contracting it keeps the graph acyclic) and, as
configured: its depth (nodes on the longest path inside it) is at most ``max_depth``; it
has at most ``max_exits`` exits (nodes whose value is used outside it or returned; a kernel
has one output); and, unless ``allow_taps``, no tap (a node whose value is used both inside
and outside: the kernel would have to export an intermediate value).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from partita.collage.graph import DataflowGraph
from partita.collage.rules.base import PartitionRule, RuleContext
from partita.collage.rules.combine import Combine
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


@dataclass(frozen=True)
class Coalescing:
    """When two chosen candidates of a rule may merge after the search (MaxCoalesce):
    the union is valid under ``config`` and, if the rule combines, one of its combiners
    fires for the pair (so a merge is one the rule could have built)."""

    config: SubGraphConfig
    combiners: tuple = ()
    kind_of: object = None

    def why_not(self, graph: DataflowGraph, a: int, b: int) -> str | None:
        why = self.config.why_invalid(graph, a | b)
        if why is not None:
            return why
        if self.combiners and not any(c.fires(graph, a, b, self.kind_of) for c in self.combiners):
            return "no combiner fires"
        return None


class OnlyValid(PartitionRule):
    def __init__(self, sub: PartitionRule, config: SubGraphConfig) -> None:
        self.sub = sub
        self.config = config

    def children(self) -> tuple[PartitionRule, ...]:
        return (self.sub,)

    def coalesce_config(self) -> Coalescing:
        config = replace(self.config, max_depth=None)
        stack = [self.sub]
        while stack:
            rule = stack.pop()
            if isinstance(rule, Combine):
                return Coalescing(config, rule.combiners, rule.kind_of)
            stack.extend(rule.children())
        return Coalescing(config)

    def summary(self) -> str:
        c = self.config
        return f"OnlyValid(max_depth={c.max_depth}, max_exits={c.max_exits}, allow_taps={c.allow_taps})"

    def candidates(self, ctx: RuleContext) -> list[Candidate]:
        return [c for c in self.sub.candidates(ctx) if self.config.why_invalid(ctx.graph, c.mask) is None]
