"""``Combine``: the candidates of a rule plus their unions that the combiners allow (TVM's
``CombinePartitionRule``), and ``combine_candidates``, the same enumeration over a plain
list of candidates with every union allowed (IR-free; for tests, benchmarks and the
brute-force property tests).

Starting from the wrapped rule's candidates, a candidate (or a union built so far) is
merged with a touching candidate of the same target when a combiner fires for the pair;
the union is a new candidate (label ``<target>.<suffix>``, ``data`` = the candidates merged)
when it is convex. Unions deeper than ``max_depth`` (the *depth of the union*: nodes on
the longest path that stays inside it, :meth:`DataflowGraph.depth`) or larger than
``max_nodes`` are not explored; non-convex unions are explored but not kept,
since absorbing the nodes of the path that leaves them can make them convex. Validity
beyond convexity (exits, taps) is ``OnlyValid``'s job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from partita.collage.graph import DataflowGraph, bits
from partita.collage.rules.base import PartitionRule, RuleContext, unique
from partita.collage.rules.combiners import Always, Combiner
from partita.collage.rules.kind import KindFn, OpKind, default_op_kind
from partita.collage.search import Candidate

__all__ = ["Combine", "combine_candidates"]


class Combine(PartitionRule):
    def __init__(
        self,
        sub: PartitionRule,
        combiners: Sequence[Combiner],
        *,
        max_depth: int,
        max_nodes: int | None = None,
        kind_of: KindFn = default_op_kind,
        suffix: str = "combined",
    ) -> None:
        if max_depth < 1:
            raise ValueError(f"Combine: max_depth must be >= 1, got {max_depth}")
        self.sub = sub
        self.combiners = tuple(combiners)
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.kind_of = kind_of
        self.suffix = suffix

    def children(self) -> tuple[PartitionRule, ...]:
        return (self.sub,)

    def summary(self) -> str:
        nodes = "" if self.max_nodes is None else f", max_nodes={self.max_nodes}"
        return f"Combine({', '.join(map(repr, self.combiners))}; max_depth={self.max_depth}{nodes})"

    def candidates(self, ctx: RuleContext) -> list[Candidate]:
        base = self.sub.candidates(ctx)
        out = list(base)
        by_target: dict[str, list[Candidate]] = {}
        for c in base:
            by_target.setdefault(c.target, []).append(c)
        for target, group in by_target.items():
            out.extend(self._unions(ctx, target, group))
        return unique(out)

    def _unions(self, ctx: RuleContext, target: str, group: list[Candidate]) -> list[Candidate]:
        graph = ctx.graph
        kinds: dict[int, OpKind] = {}

        def kind_of(g: DataflowGraph, v: int) -> OpKind:  # asked again and again: once a node
            k = kinds.get(v)
            if k is None:
                k = kinds[v] = self.kind_of(g, v)
            return k

        parts: list[Candidate] = []
        seen: set[int] = set()
        for c in group:
            if c.mask not in seen:
                seen.add(c.mask)
                parts.append(c)
        at_node: dict[int, list[int]] = {}
        for j, c in enumerate(parts):
            for v in c.nodes:
                at_node.setdefault(v, []).append(j)
        made: list[Candidate] = []
        work: list[tuple[int, tuple[int, ...]]] = [(c.mask, (j,)) for j, c in enumerate(parts)]
        while work:
            m, used = work.pop()
            if self.max_nodes is not None and m.bit_count() >= self.max_nodes:
                continue  # full: every union with another part is over max_nodes
            touch = m | graph.neighbours(m)
            tried: set[int] = set()
            for v in bits(touch):
                for j in at_node.get(v, ()):
                    if j in tried:
                        continue
                    tried.add(j)
                    bm = parts[j].mask
                    if bm & ~m == 0:
                        continue
                    u = m | bm
                    if u in seen:
                        continue
                    if self.max_nodes is not None and u.bit_count() > self.max_nodes:
                        continue
                    if u.bit_count() > self.max_depth and graph.depth(u) > self.max_depth:
                        continue
                    if not any(c.fires(graph, m & ~bm, bm, kind_of) for c in self.combiners):
                        continue
                    seen.add(u)
                    p = used + (j,)
                    work.append((u, p))
                    if graph.is_convex(u):
                        made.append(Candidate(frozenset(bits(u)), target, f"{target}.{self.suffix}",
                                              data=tuple(parts[k] for k in p)))
        return made


class _Given(PartitionRule):
    """A leaf whose candidates are fixed up front (``combine_candidates``' input)."""

    def __init__(self, cands: Iterable[Candidate]) -> None:
        self.cands = unique(cands)

    def summary(self) -> str:
        return f"Given({len(self.cands)} candidates)"

    def candidates(self, ctx: RuleContext) -> list[Candidate]:
        return list(self.cands)


def combine_candidates(
    cands: Iterable[Candidate],
    graph: DataflowGraph,
    max_depth: int,
    max_nodes: int | None = None,
) -> list[Candidate]:
    """``cands`` followed by every convex union of adjacent or overlapping candidates of
    one target, within ``max_depth`` and ``max_nodes``: a ``Combine`` whose combiner
    (``Always``) fires for every pair, so unions are label ``<target>.combined`` with
    ``data`` the candidates merged. Repeats in ``cands`` are dropped."""
    rule = Combine(_Given(cands), [Always()], max_depth=max_depth, max_nodes=max_nodes)
    return rule.candidates(RuleContext(graph))
