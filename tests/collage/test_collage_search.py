"""Tests of the IR-independent Collage core: graph, candidates and search."""

from __future__ import annotations

import time
from importlib import import_module

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partita.collage import (
    Candidate,
    DataflowGraph,
    MockEstimator,
    NodeInfo,
    PartitionError,
    RooflineEstimator,
    TensorInfo,
    brute_force_search,
    combine_candidates,
    enumerate_native_candidates,
    search,
)

T = TensorInfo((16, 16), "f32")
SEARCH = import_module("partita.collage.search")
"""The search module (``partita.collage.search`` is the function of that name)."""


def make_graph(ops: list[str], inputs: list[tuple[int, ...]], outputs=None) -> DataflowGraph:
    nodes = [
        NodeInfo(op, tuple(ins), tuple(T for _ in range(max(1, len(ins)))), T)
        for op, ins in zip(ops, inputs)
    ]
    if outputs is None:
        used = {p for ins in inputs for p in ins}
        outputs = [i for i in range(len(ops)) if i not in used]
    return DataflowGraph(nodes, outputs)


def diamond() -> DataflowGraph:
    # relu0 feeds tanh and add; tanh -> relu1 -> add.
    return make_graph(
        ["nn.relu", "nn.tanh", "nn.relu", "nn.add"],
        [(), (0,), (1,), (0, 2)],
        outputs=[3],
    )


def kernels_plus_traffic(graph: DataflowGraph, cand: Candidate) -> float:
    """One unit per kernel plus 0.1 per result leaving the candidate."""
    return 1.0 + 0.1 * len(graph.output_nodes(cand.mask))


def plan_sets(plan) -> list[tuple[int, ...]]:
    return [tuple(sorted(c.nodes)) for c in plan.candidates]


# ------------------------------------------------------------------ graph
def test_graph_reachability_and_convexity():
    g = diamond()
    assert g.consumers[0] == (1, 3)
    assert g.reaches(0, 3) and g.reaches(1, 3) and not g.reaches(3, 0)
    assert g.is_convex({0, 1, 2, 3})
    assert g.is_convex({1, 2})
    assert g.is_convex({0, 1})
    assert not g.is_convex({0, 3})  # 0 -> tanh -> relu1 -> 3 leaves and re-enters
    assert not g.is_convex({0, 2})
    assert not g.is_convex({1, 3})
    assert g.depth({0, 1, 2, 3}) == 4
    assert g.depth({0, 3}) == 2
    assert g.output_nodes({0, 1}) == [0, 1]
    assert g.external_producers({2, 3}) == [0, 1]
    assert g.is_connected({0, 3}) and not g.is_connected({0, 2})


def test_graph_rejects_non_topological_order():
    with pytest.raises(ValueError, match="topological"):
        make_graph(["nn.relu", "nn.relu"], [(1,), ()])


# ------------------------------------------------------------- candidates
def test_native_candidates_fuse_elementwise_chains():
    g = make_graph(
        ["nn.dense", "nn.bias_add", "nn.gelu", "nn.dense", "nn.softmax"],
        [(), (0,), (1,), (2,), (3,)],
    )
    cands = enumerate_native_candidates(g, ["cuda"], 3)
    sets = {tuple(sorted(c.nodes)) for c in cands}
    assert {(0,), (1,), (2,), (3,), (4,)} <= sets
    assert (0, 1) in sets and (0, 1, 2) in sets and (1, 2) in sets
    assert (0, 1, 2, 3) not in sets  # dense is not element-wise
    assert (2, 3) not in sets and (3, 4) not in sets
    assert all(c.label == ("cuda" if len(c.nodes) == 1 else "cuda.fused") for c in cands)
    # max_depth 1: single nodes only; supports() filters ops per target.
    singles = enumerate_native_candidates(
        g, ["cuda", "llvm"], 1, supports=lambda t, op: not (t == "llvm" and op == "nn.softmax")
    )
    assert len(singles) == 9
    assert not any(c.target == "llvm" and 4 in c.nodes for c in singles)


def test_native_candidates_are_convex():
    # 0 -> 1(relu) -> 2(add 0,1): {0,2} would be non-convex; {0,1,2} is fine.
    g = make_graph(["nn.dense", "nn.relu", "nn.add"], [(), (0,), (0, 1)])
    sets = {tuple(sorted(c.nodes)) for c in enumerate_native_candidates(g, ["cuda"], 3)}
    assert (0, 2) not in sets
    assert (0, 1, 2) in sets


def test_combine_rejects_non_convex_unions():
    g = diamond()
    base = enumerate_native_candidates(g, ["cuda"], 1)
    combined = combine_candidates(base, g, max_depth=2)
    sets = {tuple(sorted(c.nodes)) for c in combined}
    assert (0, 3) not in sets  # adjacent, depth 2, but not convex
    assert {(0, 1), (1, 2), (2, 3)} <= sets
    assert all(g.is_convex(c.mask) for c in combined)
    assert all(g.depth(c.mask) <= 2 for c in combined)
    new = [c for c in combined if c.label == "cuda.combined"]
    assert all(isinstance(c.data, tuple) and len(c.data) >= 2 for c in new)
    # A non-convex intermediate ({0,3}) can still grow into a convex union.
    sets4 = {tuple(sorted(c.nodes)) for c in combine_candidates(base, g, max_depth=4)}
    assert (0, 1, 2, 3) in sets4 and (0, 3) not in sets4


def test_combine_only_merges_same_target():
    g = diamond()
    base = [Candidate({0}, "a", "a"), Candidate({1}, "b", "b"), Candidate({2}, "a", "a")]
    combined = combine_candidates(base, g, max_depth=4)
    assert {tuple(sorted(c.nodes)) for c in combined} == {(0,), (1,), (2,)}


# ----------------------------------------------------------------- search
@pytest.mark.parametrize(
    "max_depth, expected",
    [
        (1, [(0,), (1,), (2,), (3,)]),
        (2, [(0, 1), (2, 3)]),
        (3, [(0,), (1, 2, 3)]),
        (4, [(0, 1, 2, 3)]),
    ],
)
def test_diamond_plans_depend_on_max_depth(max_depth, expected):
    g = diamond()
    cands = combine_candidates(enumerate_native_candidates(g, ["cuda"], 1), g, max_depth)
    est = MockEstimator(kernels_plus_traffic)
    plan = search(g, cands, est)
    assert plan_sets(plan) == expected
    assert plan.total_cost == pytest.approx(sum(plan.costs))
    assert plan.total_cost == pytest.approx(
        brute_force_search(g, cands, kernels_plus_traffic).total_cost
    )


def test_diamond_exact_costs():
    g = diamond()
    base = enumerate_native_candidates(g, ["cuda"], 1)
    p1 = search(g, combine_candidates(base, g, 1), kernels_plus_traffic)
    p3 = search(g, combine_candidates(base, g, 3), kernels_plus_traffic)
    assert p1.total_cost == pytest.approx(4.4)
    assert p3.total_cost == pytest.approx(2.2)
    assert [c.label for c in p3.candidates] == ["cuda", "cuda.combined"]


def test_search_ignores_non_convex_candidates():
    g = diamond()
    cands = enumerate_native_candidates(g, ["cuda"], 1) + [
        Candidate({0, 3}, "cuda", "bad"),
    ]
    est = MockEstimator({"bad": 0.0, "cuda": 1.0})
    plan = search(g, cands, est)
    assert all(c.label != "bad" for c in plan.candidates)
    assert plan.total_cost == 4.0


def test_missing_candidate_names_node():
    g = diamond()
    cands = enumerate_native_candidates(g, ["llvm"], 3, supports=lambda t, op: op != "nn.tanh")
    with pytest.raises(PartitionError, match=r"node 1 \(nn\.tanh\)"):
        search(g, cands, MockEstimator({"llvm": 1.0}, default=1.0))


def test_no_disjoint_cover_names_node():
    g = make_graph(["nn.relu", "nn.relu", "nn.relu"], [(), (0,), (1,)])
    cands = [Candidate({0, 1}, "x", "x"), Candidate({1, 2}, "x", "x")]
    with pytest.raises(PartitionError, match=r"node 2 \(nn\.relu\)"):
        search(g, cands, lambda g, c: 1.0)


def test_cyclic_cover_is_detected():
    # a1(0), b2(1) sources; b1(2) uses a1, a2(3) uses b2.  A={0,3} and B={1,2}
    # are each convex but depend on each other.
    g = make_graph(["nn.relu", "nn.relu", "nn.relu", "nn.relu"], [(), (), (0,), (1,)])
    A, B = Candidate({0, 3}, "x", "A"), Candidate({1, 2}, "x", "B")
    assert g.is_convex(A.mask) and g.is_convex(B.mask)
    assert not g.partition_is_acyclic([A.mask, B.mask])
    with pytest.raises(PartitionError, match="cyclic"):
        search(g, [A, B], lambda g, c: 1.0)
    assert plan_sets(search(g, [A, B], lambda g, c: 1.0, check_acyclic=False)) == [(0, 3), (1, 2)]


def test_cost_fn_memoized_and_plan_ordered():
    g = make_graph(["nn.dense", "nn.relu", "nn.dense", "nn.relu"], [(), (0,), (1,), (2,)])
    cands = enumerate_native_candidates(g, ["cuda", "llvm"], 2)
    calls: dict[Candidate, int] = {}

    def cost(graph, c):
        calls[c] = calls.get(c, 0) + 1
        return len(c.nodes) ** 0.5 * (2.0 if c.target == "llvm" else 1.0)

    plan = search(g, cands, cost)
    assert max(calls.values()) == 1
    mins = [c.min_node for c in plan.candidates]
    assert mins == sorted(mins)
    assert plan_sets(plan) == [(0, 1), (2, 3)]


def test_negative_cost_rejected():
    g = diamond()
    with pytest.raises(ValueError, match=">= 0"):
        search(g, enumerate_native_candidates(g, ["x"], 1), lambda g, c: -1.0)


def test_empty_graph():
    g = DataflowGraph([], [])
    assert search(g, [], lambda g, c: 1.0).candidates == ()


# ------------------------------------------------- property: search == brute
@st.composite
def graphs_and_candidates(draw):
    n = draw(st.integers(1, 8))
    inputs = []
    for i in range(n):
        k = draw(st.integers(0, min(2, i)))
        inputs.append(tuple(sorted(draw(st.sets(st.integers(0, i - 1), min_size=k, max_size=k))) if i else ()))
    g = make_graph(["nn.relu"] * n, inputs)
    targets = ["a", "b"]
    cands = []
    costs = {}
    for v in range(n):  # every node has at least one single-node candidate
        for t in draw(st.sets(st.sampled_from(targets), min_size=1)):
            lab = f"c{len(cands)}"
            cands.append(Candidate({v}, t, lab))
            costs[lab] = draw(st.floats(0.0, 10.0, allow_nan=False))
    extra = draw(
        st.lists(st.sets(st.integers(0, n - 1), min_size=min(2, n), max_size=4), max_size=12)
    )
    for s in extra:
        lab = f"c{len(cands)}"
        cands.append(Candidate(s, draw(st.sampled_from(targets)), lab))
        costs[lab] = draw(st.floats(0.0, 10.0, allow_nan=False))
    return g, cands, costs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs_and_candidates())
def test_search_matches_brute_force(data):
    g, cands, costs = data
    est = MockEstimator(costs)
    plan = search(g, cands, est, check_acyclic=False)
    ref = brute_force_search(g, cands, est)
    assert plan.total_cost == pytest.approx(ref.total_cost, abs=1e-9)
    assert plan.total_cost == pytest.approx(sum(costs[c.label] for c in plan.candidates))
    seen: set[int] = set()
    for c in plan.candidates:
        assert not (c.nodes & seen), "candidates overlap"
        seen |= c.nodes
        assert g.is_convex(c.mask)
    assert seen == set(range(len(g)))


@settings(max_examples=150, deadline=None)
@given(graphs_and_candidates(), st.integers(1, 4))
def test_generated_candidates_are_valid(data, max_depth):
    g, _, _ = data
    native = enumerate_native_candidates(g, ["a", "b"], max_depth)
    assert all(len(c.nodes) <= max_depth and g.is_convex(c.mask) for c in native)
    combined = combine_candidates(native, g, max_depth)
    assert all(g.is_convex(c.mask) for c in combined)
    assert all(g.depth(c.mask) <= max_depth for c in combined[len(native):])
    assert len({(c.mask, c.target) for c in combined[len(native):]}) == len(combined) - len(native)
    plan = search(g, combined, lambda g, c: 1.0 + 0.01 * len(c.nodes), check_acyclic=False)
    assert sum(len(c.nodes) for c in plan.candidates) == len(g)


# ------------------------------------------------------------------- scale
def mlp_chain(blocks: int, d: int = 768, seq: int = 128, dt: str = "f16") -> DataflowGraph:
    """``blocks`` encoder MLP blocks: dense, bias_add, gelu, dense, add (residual), layer_norm."""
    x, h = TensorInfo((seq, d), dt), TensorInfo((seq, 4 * d), dt)
    nodes: list[NodeInfo] = []

    def add(op, ins, in_types, out):
        nodes.append(NodeInfo(op, tuple(ins), tuple(in_types), out))
        return len(nodes) - 1

    prev = None
    for _ in range(blocks):
        src = [] if prev is None else [prev]
        n0 = add("nn.dense", src, (x, TensorInfo((4 * d, d), dt)), h)
        n1 = add("nn.bias_add", [n0], (h, TensorInfo((4 * d,), dt)), h)
        n2 = add("nn.gelu", [n1], (h,), h)
        n3 = add("nn.dense", [n2], (h, TensorInfo((d, 4 * d), dt)), x)
        n4 = add("nn.add", [n3, *src], (x, x), x)
        prev = add("nn.layer_norm", [n4], (x, TensorInfo((d,), dt), TensorInfo((d,), dt)), x)
    return DataflowGraph(nodes, [prev])


def test_scale_1000_block_chain():
    g = mlp_chain(1000)
    t0 = time.perf_counter()
    native = enumerate_native_candidates(g, ["cuda", "llvm"], 3)
    cands = combine_candidates([c for c in native if c.target == "cuda"], g, 3)
    cands += [c for c in native if c.target == "llvm"]
    plan = search(g, cands, RooflineEstimator("h100"))
    elapsed = time.perf_counter() - t0
    print(f"1000-block chain ({len(g)} nodes, {len(cands)} candidates): {elapsed:.2f}s")
    assert sum(len(c.nodes) for c in plan.candidates) == len(g)
    assert all(c.target == "cuda" for c in plan.candidates)


# ------------------------------------------------- the beam past MAX_EXACT_STATES
def interleaved_chains(chains: int, length: int) -> tuple[DataflowGraph, list[Candidate], dict[str, float]]:
    """``chains`` independent chains of ``length`` relus, their nodes interleaved in the
    topological order (a detector's per-class post-processing), each node alone (cost 1)
    or with its successor (cost 1.5): every pair reaches ``chains`` nodes past the first
    uncovered one, so the covered sets multiply."""
    def node(c: int, i: int) -> int:
        return i * chains + c

    inputs = [() if i == 0 else (node(c, i - 1),) for i in range(length) for c in range(chains)]
    graph = make_graph(["nn.relu"] * len(inputs), inputs)
    cands, costs = [], {}
    for c in range(chains):
        for i in range(length):
            for nodes, cost in [({node(c, i)}, 1.0)] + ([({node(c, i), node(c, i + 1)}, 1.5)] if i + 1 < length else []):
                label = f"c{len(cands)}"
                cands.append(Candidate(nodes, "cuda", label))
                costs[label] = cost
    return graph, cands, costs


def test_a_search_past_its_state_budget_finishes_as_a_beam_search(monkeypatch) -> None:
    """The exact search over 10 interleaved chains expands thousands of states; with the
    budget below that, the search starts again as a beam search: a valid cover (disjoint,
    every node, convex) marked not exact, here as cheap as the optimum (pairs along each
    chain: 3 a chain)."""
    graph, cands, costs = interleaved_chains(10, 4)
    exact = search(graph, cands, MockEstimator(costs))
    assert exact.exact and exact.total_cost == pytest.approx(30.0)
    monkeypatch.setattr(SEARCH, "MAX_EXACT_STATES", 100)
    beam = search(graph, cands, MockEstimator(costs))
    assert not beam.exact
    seen: set[int] = set()
    for c in beam.candidates:
        assert not (c.nodes & seen) and graph.is_convex(c.mask)
        seen |= c.nodes
    assert seen == set(range(len(graph)))
    assert beam.total_cost == pytest.approx(exact.total_cost)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs_and_candidates())
def test_the_beam_search_gives_a_valid_cover_no_cheaper_than_the_optimum(data) -> None:
    g, cands, costs = data
    est = MockEstimator(costs)
    best = brute_force_search(g, cands, est)
    budget, SEARCH.MAX_EXACT_STATES = SEARCH.MAX_EXACT_STATES, 0
    try:
        plan = search(g, cands, est, check_acyclic=False)
    finally:
        SEARCH.MAX_EXACT_STATES = budget
    assert not plan.exact
    assert plan.total_cost >= best.total_cost - 1e-9
    seen: set[int] = set()
    for c in plan.candidates:
        assert not (c.nodes & seen)
        seen |= c.nodes
    assert seen == set(range(len(g)))
