"""MaxCoalesce: merge adjacent chosen candidates of one target when that is cheaper.

The search only picks among the candidates the rules made, and rules bound their size
(``max_depth``), so two adjacent groups of one target can stay apart although one kernel
would cost less (one launch, no round trip of the value between them through memory).
After the search, two chosen candidates of the same target that touch are merged when the
target's rule allows it (its ``coalesce_config``: the union is valid under the rule's
``SubGraphConfig`` without the depth bound and one of its combiners fires for the pair;
pattern-only backends allow nothing, since a union of their patterns is nothing their
codegen compiles), contracting the union keeps the plan acyclic, and the union's
estimated cost is at most the sum of the two. Repeated until
nothing merges.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from partita.collage.graph import DataflowGraph, bits
from partita.collage.search import Candidate, Plan

__all__ = ["max_coalesce"]


def max_coalesce(
    graph: DataflowGraph,
    plan: Plan,
    configs: Mapping[str, object],
    cost: Callable[[DataflowGraph, Candidate], float],
    label: Callable[[str], str] = lambda target: f"{target}.combined",
) -> Plan:
    """``plan`` with mergeable neighbours merged (see the module docstring). ``configs``
    maps a target to its ``Coalescing``; ``label(target)`` names a merged candidate.

    Greedy in a fixed order: the first candidate (in plan order, merged ones last) with a
    mergeable neighbour merges with its first such neighbour, and the scan starts again.
    Each scan reaches a candidate's neighbours through the node -> candidate map, a pair
    that failed once is not tried again (the rule's verdict and the costs depend on the two
    node sets only, and a cycle through other candidates stays when they merge), and a
    candidate that had no partner is skipped until a merge next to it gives it a new one."""
    cands: list[Candidate | None] = list(plan.candidates)
    costs = list(plan.costs)
    groups = _GroupGraph(graph, [c.mask for c in plan.candidates])
    refused: set[tuple[int, int]] = set()  # (mask, mask) pairs that do not merge
    settled: set[int] = set()  # candidates with no partner since their neighbours last changed
    merged = True
    while merged:
        merged = False
        for i, a in enumerate(cands):
            if a is None or i in settled or (config := configs.get(a.target)) is None:
                continue
            touch = a.mask | graph.neighbours(a.mask)
            for j in sorted({groups.owner.get(v, i) for v in bits(touch)} - {i}):  # uncovered nodes: none
                b = cands[j]
                assert b is not None
                if b.target != a.target or (a.mask, b.mask) in refused:
                    continue
                if config.why_not(graph, a.mask, b.mask) is not None:  # type: ignore[attr-defined]
                    refused.add((a.mask, b.mask))
                    continue
                if groups.path_between(i, j):  # contracting the two would close a cycle
                    refused.add((a.mask, b.mask))
                    continue
                union = a.mask | b.mask
                new = Candidate(frozenset(bits(union)), a.target, label(a.target), data=(a, b),
                                primitive=a.primitive or b.primitive)
                new_cost = float(cost(graph, new))
                if new_cost > costs[i] + costs[j]:
                    refused.add((a.mask, b.mask))
                    continue
                cands[i] = cands[j] = None
                cands.append(new)
                costs.append(new_cost)
                groups.merge(i, j, union)
                # Only the new group's neighbours have a new pair (with it) to try.
                settled -= {groups.owner.get(v) for v in bits(graph.neighbours(union))}
                merged = True
                break
            if merged:
                break
            settled.add(i)
    live = [k for k, c in enumerate(cands) if c is not None]
    order = sorted(live, key=lambda k: cands[k].min_node)  # type: ignore[union-attr]
    ordered = tuple(float(costs[k]) for k in order)
    return Plan(tuple(cands[k] for k in order), float(sum(ordered)), ordered)  # type: ignore[misc]


class _GroupGraph:
    """The plan's candidates contracted to one node each: successor and predecessor sets
    kept up to date as candidates merge, so that whether a merge keeps the plan acyclic is
    a search from the two candidates only (``DataflowGraph.partition_is_acyclic`` walks
    every node of the graph)."""

    def __init__(self, graph: DataflowGraph, masks: list[int]) -> None:
        self.owner: dict[int, int] = {v: k for k, m in enumerate(masks) for v in bits(m)}
        self.succ: list[set[int]] = [set() for _ in masks]
        self.pred: list[set[int]] = [set() for _ in masks]
        for v, k in self.owner.items():
            for c in graph.consumers[v]:
                j = self.owner.get(c)  # a node no candidate covers joins no path (as there)
                if j is not None and j != k:
                    self.succ[k].add(j)
                    self.pred[j].add(k)

    def path_between(self, i: int, j: int) -> bool:
        """Whether a path leads from one of groups ``i``, ``j`` to the other through a third
        group (in an acyclic plan, exactly when contracting the two makes a cycle)."""
        start = (self.succ[i] | self.succ[j]) - {i, j}
        seen, stack = set(start), list(start)
        while stack:
            for n in self.succ[stack.pop()]:
                if n in (i, j):
                    return True
                if n not in seen:
                    seen.add(n)
                    stack.append(n)
        return False

    def merge(self, i: int, j: int, union: int) -> None:
        """Groups ``i`` and ``j`` become one new group (the next index)."""
        k = len(self.succ)
        succ = (self.succ[i] | self.succ[j]) - {i, j}
        pred = (self.pred[i] | self.pred[j]) - {i, j}
        self.succ.append(succ)
        self.pred.append(pred)
        for n in succ:
            self.pred[n] -= {i, j}
            self.pred[n].add(k)
        for n in pred:
            self.succ[n] -= {i, j}
            self.succ[n].add(k)
        self.succ[i] = self.succ[j] = self.pred[i] = self.pred[j] = set()
        for v in bits(union):
            self.owner[v] = k
