"""Candidate generation and the optimal-cover search of the Collage partitioner.

A :class:`Candidate` is a (sub-graph, target) pair.  The search picks disjoint
candidates covering every node of a :class:`~partita.collage.graph.DataflowGraph`
with the least total cost, as a shortest path over "covered node sets":

* a state is the set of covered nodes (a bitmask);
* from a state, the *first uncovered node* ``f`` (in topological order) must be
  covered next, by a candidate containing ``f`` and disjoint from the state.
  All nodes before ``f`` are covered, so such a candidate has ``f`` as its
  minimum node: candidates are indexed by their minimum node;
* Dijkstra (costs are non-negative) from the empty set to the full set.

The states can grow combinatorially where many independent chains run side by side and
candidates reach past the first uncovered node (a detector's per-class post-processing:
SSDlite's 2,000 nodes reach millions of states). Past ``MAX_EXACT_STATES`` expanded states
the search starts again as an A* beam search: states in the order of their cost plus a
lower bound of what covering the rest costs (each uncovered node at the least cost per node
of a candidate holding it), at most ``BEAM`` of them expanded per first uncovered node, so
the cover stays valid and near the optimum; ``Plan.exact`` says which search found it.

``enumerate_native_candidates`` is a simple IR-free generator (for tests, benchmarks and
the brute-force property tests), as is ``combine_candidates`` of
:mod:`partita.collage.rules.combine`, the unions of its candidates; the IR partitioner
builds its candidates with the rule algebra of :mod:`partita.collage.rules`.

Depth
-----
Two notions are used, both documented on the functions:

* :func:`enumerate_native_candidates`: ``max_depth`` bounds the *number of
  nodes* of a fused group (a producer plus up to ``max_depth - 1`` element-wise
  consumers), like TVM's FuseOps depth.
* ``Combine`` and ``combine_candidates``: ``max_depth`` bounds the *depth of the
  union*, the number of nodes on the longest path that stays inside the union.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from partita.collage.graph import DataflowGraph, NodeInfo, bits, to_mask
from partita.collage.kinds import is_elementwise

__all__ = [
    "Candidate",
    "PartitionError",
    "Plan",
    "brute_force_search",
    "enumerate_native_candidates",
    "search",
]

class PartitionError(Exception):
    """No cover of the graph by the given candidates exists."""


@dataclass(frozen=True)
class Candidate:
    """A sub-graph (set of node ids) placed on one target.

    ``label`` names the kernel/group (e.g. ``"cutlass.dense_bias_gelu"``,
    ``"cuda.fused"``, ``"llvm"``); ``data`` is opaque to the partitioner (the IR
    layer stores its pattern match there) and takes no part in equality.
    ``composite`` is the pattern name a ``Composite`` rule gave the candidate and
    ``primitive`` whether a ``Primitive`` rule made it a unit of compilation (see
    :mod:`partita.collage.rules`); neither takes part in equality.
    """

    nodes: frozenset[int]
    target: str
    label: str
    data: Any = field(default=None, compare=False, hash=False)
    composite: str | None = field(default=None, compare=False, hash=False)
    primitive: bool = field(default=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, frozenset):
            object.__setattr__(self, "nodes", frozenset(self.nodes))
        if not self.nodes:
            raise ValueError("a candidate needs at least one node")

    @cached_property
    def mask(self) -> int:
        return to_mask(self.nodes)

    @cached_property
    def min_node(self) -> int:
        return min(self.nodes)

    def __repr__(self) -> str:
        return f"Candidate({sorted(self.nodes)}, {self.target!r}, {self.label!r})"


class _Estimator(Protocol):
    def estimate(self, graph: DataflowGraph, candidate: Candidate) -> float: ...


CostFn = Callable[[DataflowGraph, Candidate], float] | _Estimator


@dataclass(frozen=True)
class Plan:
    """The chosen candidates, ordered by their first (minimum) node.

    The order is by minimum node id, which is not necessarily an execution
    order of the partitions; use a topological sort of the contracted graph to
    schedule them.
    """

    candidates: tuple[Candidate, ...]
    total_cost: float
    costs: tuple[float, ...]
    exact: bool = True
    """Whether the cover is the least-cost one (else the beam search's, see the module)."""

    def assignment(self) -> dict[int, Candidate]:
        """Node id -> the candidate covering it."""
        return {v: c for c in self.candidates for v in c.nodes}

    def summary(self) -> list[tuple[tuple[int, ...], str, str, float]]:
        """(sorted nodes, target, label, cost) per chosen candidate."""
        return [
            (tuple(sorted(c.nodes)), c.target, c.label, k)
            for c, k in zip(self.candidates, self.costs)
        ]


# --------------------------------------------------------------- candidates
def enumerate_native_candidates(
    graph: DataflowGraph,
    targets: Iterable[str],
    max_depth: int,
    supports: Callable[[str, str], bool] | None = None,
    fusable: Callable[[NodeInfo], bool] = is_elementwise,
) -> list[Candidate]:
    """Native-target fused groups, TVM FuseOps style.

    For every target and every node it supports: the single node (label
    ``target``), plus every convex group made of that node (the producer) and
    up to ``max_depth - 1`` element-wise nodes that consume, transitively, from
    it (label ``f"{target}.fused"``).  Here *depth is the number of nodes* of
    the group.  ``supports(target, op_name)`` says which target runs which op
    (default: everything); ``fusable(node)`` which nodes may join a producer (default:
    the element-wise kinds of the ops' ``OpPattern`` trait).
    """
    targets = list(dict.fromkeys(targets))
    out: list[Candidate] = []
    for target in targets:
        ok = [supports is None or supports(target, n.op) for n in graph.nodes]
        fusable_node = [ok[v] and fusable(graph.nodes[v]) for v in range(len(graph))]
        for root in range(len(graph)):
            if not ok[root]:
                continue
            out.append(Candidate(frozenset((root,)), target, target))
            if max_depth < 2:
                continue
            # Grow by element-wise consumers; every convex group is reachable
            # through convex intermediates (its prefixes in id order).
            seen = {1 << root}
            frontier = [1 << root]
            for _size in range(2, max_depth + 1):
                nxt = []
                for m in frontier:
                    for v in bits(m):
                        for c in graph.consumers[v]:
                            if not fusable_node[c] or m >> c & 1:
                                continue
                            u = m | (1 << c)
                            if u in seen:
                                continue
                            seen.add(u)
                            if graph.is_convex(u):
                                nxt.append(u)
                                out.append(Candidate(frozenset(bits(u)), target, f"{target}.fused"))
                frontier = nxt
                if not frontier:
                    break
    return out


# ------------------------------------------------------------------- search
def _cost_callable(cost_fn: CostFn) -> Callable[[DataflowGraph, Candidate], float]:
    est = getattr(cost_fn, "estimate", None)
    return est if callable(est) else cost_fn  # type: ignore[return-value]


def _usable(graph: DataflowGraph, candidates: Sequence[Candidate], check_convex: bool) -> list[int]:
    n = len(graph)
    keep = []
    for k, c in enumerate(candidates):
        if c.min_node < 0 or max(c.nodes) >= n:
            raise ValueError(f"{c!r} names a node outside the graph (0..{n - 1})")
        if check_convex and not graph.is_convex(c.mask):
            continue
        keep.append(k)
    covered = 0
    for k in keep:
        covered |= candidates[k].mask
    missing = graph.full_mask & ~covered
    if missing:
        v = (missing & -missing).bit_length() - 1
        raise PartitionError(
            f"no candidate covers node {v} ({graph.nodes[v].op}); "
            f"no target supports it or every candidate containing it is invalid"
        )
    return keep


def _make_plan(
    candidates: Sequence[Candidate], chosen: Sequence[int], costs: Sequence[float], exact: bool = True
) -> Plan:
    order = sorted(range(len(chosen)), key=lambda i: candidates[chosen[i]].min_node)
    cs = tuple(candidates[chosen[i]] for i in order)
    ks = tuple(float(costs[i]) for i in order)
    return Plan(cs, float(sum(ks)), ks, exact)


def _check_acyclic(graph: DataflowGraph, plan: Plan) -> None:
    if not graph.partition_is_acyclic([c.mask for c in plan.candidates]):
        raise PartitionError(
            "the cheapest cover contracts to a cyclic graph (each candidate is "
            f"convex but they depend on each other): {plan.summary()}"
        )


MAX_EXACT_STATES = 200_000
"""The states the exact search expands before it starts again as a beam search."""
BEAM = 32
"""The beam search's states expanded per first uncovered node."""


class _OverBudget(Exception):
    """The exact search passed ``MAX_EXACT_STATES``."""


def _lower_bounds(graph: DataflowGraph, by_min: list[list[tuple[int, int]]],
                  cost: Callable[[int], float]) -> tuple[dict[int, float], float]:
    """Each node's share, the least cost per node of a candidate holding it (0 for a node
    none holds: the search reports it): per candidate the shares of its nodes, and the
    shares of all nodes."""
    share = [math.inf] * len(graph)
    for cands in by_min:
        for m, k in cands:
            per = cost(k) / m.bit_count()
            for v in bits(m):
                share[v] = min(share[v], per)
    share = [0.0 if x == math.inf else x for x in share]
    return {k: sum(share[v] for v in bits(m)) for cands in by_min for m, k in cands}, sum(share)


def _shortest_cover(graph: DataflowGraph, by_min: list[list[tuple[int, int]]], cost: Callable[[int], float], *,
                    beam: int | None) -> dict[int, tuple[int, int]]:
    """Dijkstra from the empty cover to the full one: each reached state's predecessor
    and candidate. Exact (``beam`` None: raises ``_OverBudget`` past ``MAX_EXACT_STATES``),
    or an A* beam search expanding at most ``beam`` states per first uncovered node, in the
    order of their cost plus a lower bound of the rest (each uncovered node at the least
    cost per node of a candidate holding it: every candidate's cost counted up front)."""
    full = graph.full_mask
    # A*'s lower bound of what covering the rest costs (the beam search only): the sum of
    # its nodes' shares, less each chosen candidate's nodes' (``bound``).
    bound, everything = _lower_bounds(graph, by_min, cost) if beam is not None else ({}, 0.0)
    rest: dict[int, float] = {0: everything}
    dist: dict[int, float] = {0: 0.0}
    parent: dict[int, tuple[int, int]] = {}
    expanded = [0] * len(graph)
    tie = itertools.count()
    heap: list[tuple[float, int, int]] = [(rest[0], 0, 0)]
    furthest = 0
    states = 0
    while heap:
        priority, _, s = heapq.heappop(heap)
        if s == full:
            break
        d = dist[s]
        if priority > d + rest.get(s, 0.0) + 1e-12 * max(1.0, priority):
            continue  # reached again more cheaply since it was pushed
        f = (~s & (s + 1)).bit_length() - 1
        if f > furthest:
            furthest = f
        if beam is not None:
            expanded[f] += 1
            if expanded[f] > beam:
                continue
        else:
            states += 1
            if states > MAX_EXACT_STATES:
                raise _OverBudget
        for m, k in by_min[f]:
            if m & s:
                continue
            ns = s | m
            nd = d + cost(k)
            old = dist.get(ns)
            if old is None or nd < old:
                dist[ns] = nd
                parent[ns] = (s, k)
                if beam is not None:
                    rest[ns] = max(rest[s] - bound[k], 0.0)
                heapq.heappush(heap, (nd + rest.get(ns, 0.0), next(tie), ns))
    if full not in dist:
        raise PartitionError(
            f"no cover by disjoint candidates: cannot cover node {furthest} "
            f"({graph.nodes[furthest].op}) without overlapping earlier choices"
        )
    return parent


def search(
    graph: DataflowGraph,
    candidates: Sequence[Candidate],
    cost_fn: CostFn,
    *,
    check_convex: bool = True,
    check_acyclic: bool = True,
) -> Plan:
    """Least-cost cover of all nodes by disjoint candidates (Collage search).

    ``cost_fn`` is a callable ``(graph, candidate) -> seconds`` or an object
    with such an ``estimate`` method; it is called at most once per candidate,
    and only for candidates the search reaches.  Non-convex candidates are
    ignored when ``check_convex``.  Raises :class:`PartitionError` naming the
    node when some node cannot be covered, and (when ``check_acyclic``) when the
    optimal cover contracts to a cyclic graph.
    """
    fn = _cost_callable(cost_fn)
    n = len(graph)
    if n == 0:
        return Plan((), 0.0, ())
    keep = _usable(graph, candidates, check_convex)
    by_min: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for k in keep:
        c = candidates[k]
        by_min[c.min_node].append((c.mask, k))
    memo: dict[int, float] = {}

    def cost(k: int) -> float:
        x = memo.get(k)
        if x is None:
            x = float(fn(graph, candidates[k]))
            if not x >= 0.0:  # also rejects NaN
                raise ValueError(f"cost of {candidates[k]!r} is {x}; costs must be >= 0")
            memo[k] = x
        return x

    try:
        parent, exact = _shortest_cover(graph, by_min, cost, beam=None), True
    except _OverBudget:
        parent, exact = _shortest_cover(graph, by_min, cost, beam=BEAM), False
    chosen: list[int] = []
    s = graph.full_mask
    while s:
        s, k = parent[s]
        chosen.append(k)
    chosen.reverse()
    plan = _make_plan(candidates, chosen, [memo[k] for k in chosen], exact)
    if check_acyclic:
        _check_acyclic(graph, plan)
    return plan


def brute_force_search(
    graph: DataflowGraph,
    candidates: Sequence[Candidate],
    cost_fn: CostFn,
    *,
    check_convex: bool = True,
) -> Plan:
    """Exhaustive reference for :func:`search` (exponential; small graphs only).

    Enumerates every cover of the nodes by pairwise-disjoint candidates (each
    exactly once, using plain ``set`` operations) and returns a cheapest one.
    """
    fn = _cost_callable(cost_fn)
    n = len(graph)
    if n == 0:
        return Plan((), 0.0, ())
    keep = _usable(graph, candidates, check_convex)
    costs = {k: float(fn(graph, candidates[k])) for k in keep}
    best: list[Any] = [None, None]  # cost, chosen

    def rec(covered: set[int], chosen: list[int], total: float) -> None:
        first = next((v for v in range(n) if v not in covered), None)
        if first is None:
            if best[0] is None or total < best[0]:
                best[0], best[1] = total, list(chosen)
            return
        for k in keep:
            nodes = candidates[k].nodes
            if first in nodes and not (nodes & covered):
                chosen.append(k)
                rec(covered | nodes, chosen, total + costs[k])
                chosen.pop()

    rec(set(), [], 0.0)
    if best[1] is None:
        raise PartitionError("no cover by disjoint candidates exists")
    return _make_plan(candidates, best[1], [costs[k] for k in best[1]])
