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
    maps a target to its ``Coalescing``; ``label(target)`` names a merged candidate."""
    cands = list(plan.candidates)
    costs = list(plan.costs)
    merged = True
    while merged:
        merged = False
        for i in range(len(cands)):
            a = cands[i]
            config = configs.get(a.target)
            if config is None:
                continue
            touch = a.mask | graph.neighbours(a.mask)
            for j in range(len(cands)):
                b = cands[j]
                if j == i or b.target != a.target or not (b.mask & touch):
                    continue
                union = a.mask | b.mask
                if config.why_not(graph, a.mask, b.mask) is not None:  # type: ignore[attr-defined]
                    continue
                rest = [c.mask for k, c in enumerate(cands) if k not in (i, j)]
                if not graph.partition_is_acyclic([*rest, union]):
                    continue
                new = Candidate(frozenset(bits(union)), a.target, label(a.target), data=(a, b),
                                primitive=a.primitive or b.primitive)
                new_cost = float(cost(graph, new))
                if new_cost <= costs[i] + costs[j]:
                    keep = [k for k in range(len(cands)) if k not in (i, j)]
                    cands = [cands[k] for k in keep] + [new]
                    costs = [costs[k] for k in keep] + [new_cost]
                    merged = True
                    break
            if merged:
                break
    order = sorted(range(len(cands)), key=lambda k: cands[k].min_node)
    ordered = tuple(float(costs[k]) for k in order)
    return Plan(tuple(cands[k] for k in order), float(sum(ordered)), ordered)
