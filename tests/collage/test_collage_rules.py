"""Each rule of Collage's partition-rule algebra (partita.collage.rules), on IR-free graphs
and on IR, and the host-copy charge of host placements."""

from __future__ import annotations

import pytest

from partita.collage import (
    DataflowGraph,
    MockEstimator,
    NodeInfo,
    RooflineEstimator,
    TensorInfo,
)
from partita.collage.cost import host_copy_time
from partita.collage.ir_graph import graph_from_block
from partita.collage.rules import (
    HOST_LABEL,
    AllSimple,
    ByKind,
    Combine,
    Composite,
    DFPattern,
    Host,
    OnlyValid,
    OpCallByKind,
    OpKind,
    Primitive,
    RuleContext,
    SubGraphConfig,
    TupleArg,
    TupleProj,
    Union,
    cuda_kind,
    cuda_rule,
    pattern_rule,
    tvm_fusion_rule,
)
from partita.dialects import make_context, nn
from partita.ir import parse_module
from partita.transforms.collage.partitioner import collage_partition, function_candidates

T = TensorInfo((16, 16), "f32")
ROW = TensorInfo((16,), "f32")


def graph(spec: list[tuple[str, tuple[int, ...]]], outputs: list[int], in_types=None) -> DataflowGraph:
    nodes = [NodeInfo(op, ins, (in_types or {}).get(i, tuple(T for _ in range(max(1, len(ins))))), T)
             for i, (op, ins) in enumerate(spec)]
    return DataflowGraph(nodes, outputs)


def sets(cands) -> set[tuple[int, ...]]:
    return {tuple(sorted(c.nodes)) for c in cands}


# ------------------------------------------------------------------- leaves
def test_op_call_by_kind_keeps_ops_up_to_the_kind():
    g = graph([("nn.dense", ()), ("nn.relu", (0,)), ("nn.transpose", (1,)), ("nn.lrn", (2,))], [3])
    ctx = RuleContext(g)
    assert sets(OpCallByKind("cuda", max_kind=OpKind.INJECTIVE).candidates(ctx)) == {(1,), (2,)}
    assert sets(OpCallByKind("cuda").candidates(ctx)) == {(0,), (1,), (2,)}  # lrn is opaque
    assert sets(OpCallByKind("cuda", supports=lambda c, v: v != 1).candidates(ctx)) == {(0,), (2,)}


def test_host_rule_offers_single_ops_on_the_host():
    g = graph([("nn.relu", ()), ("nn.lrn", (0,))], [1])
    cands = Host("llvm", supports=lambda ctx, v: v == 1).candidates(RuleContext(g))
    assert [(sorted(c.nodes), c.target, c.label) for c in cands] == [([1], "llvm", HOST_LABEL)]


# ---------------------------------------------------------------- wrappers
def test_union_primitive_composite():
    g = graph([("nn.relu", ()), ("nn.tanh", (0,))], [1])
    ctx = RuleContext(g)
    a, b = OpCallByKind("x", max_kind=OpKind.ELEMWISE), OpCallByKind("x")
    union = Union(a, b).candidates(ctx)
    assert sets(union) == {(0,), (1,)} and len(union) == 2  # no repeats
    wrapped = Primitive(Composite(a)).candidates(ctx)
    assert all(c.primitive and c.composite == "x" for c in wrapped)
    assert not any(c.primitive or c.composite for c in a.candidates(ctx))
    assert "Primitive\n  Composite\n    OpCallByKind(target=x" in Primitive(Composite(a)).describe()


# ------------------------------------------------------------------ combine
def test_by_kind_chains_injective_ops():
    # Two transposes in a row fuse (injective -> injective); a dense does not join them.
    g = graph([("nn.transpose", ()), ("nn.transpose", (0,)), ("nn.dense", (1,))], [2])
    rule = Combine(OpCallByKind("cuda"), [ByKind(OpKind.INJECTIVE, OpKind.INJECTIVE)], max_depth=3)
    assert sets(rule.candidates(RuleContext(g))) == {(0,), (1,), (2,), (0, 1)}


def test_by_kind_gives_an_anchor_its_epilogue_only():
    # dense -> bias_add (broadcast) -> relu -> transpose: the epilogue stops at the transpose.
    types = {1: (T, ROW)}
    g = graph([("nn.dense", ()), ("nn.bias_add", (0,)), ("nn.relu", (1,)), ("nn.transpose", (2,))], [3], types)
    rule = Combine(OpCallByKind("cuda"), [ByKind(OpKind.OUT_EWISE_FUSABLE, OpKind.BROADCAST)], max_depth=4)
    got = sets(rule.candidates(RuleContext(g)))
    assert {(0, 1), (0, 1, 2), (1, 2)} <= got
    assert not any(3 in s and len(s) > 1 for s in got)


def test_combine_respects_max_depth_and_target():
    g = graph([("nn.relu", ()), ("nn.tanh", (0,)), ("nn.sigmoid", (1,))], [2])
    seeds = Union(OpCallByKind("a"), OpCallByKind("b", supports=lambda c, v: v == 1))
    rule = Combine(seeds, [AllSimple(ByKind(OpKind.OPAQUE, OpKind.OPAQUE))], max_depth=2)
    got = {(tuple(sorted(c.nodes)), c.target) for c in rule.candidates(RuleContext(g))}
    assert ((0, 1), "a") in got and ((1, 2), "a") in got
    assert ((0, 1, 2), "a") not in got  # depth 3
    assert not any(t == "b" and len(s) > 1 for s, t in got)  # never across targets


def test_tuple_combiners():
    g = graph([("nn.relu", ()), ("nn.transpose", ()), ("tuple", (0, 1)), ("get_item", (2,)), ("nn.dense", ())],
              [3, 4])
    ctx = RuleContext(g)
    args = Combine(OpCallByKind("t", max_kind=OpKind.OPAQUE), [TupleArg()], max_depth=3).candidates(ctx)
    assert {(0, 2), (1, 2), (0, 1, 2)} <= sets(args)
    assert (2, 3) not in sets(args)
    proj = Combine(OpCallByKind("t", max_kind=OpKind.OPAQUE), [TupleProj()], max_depth=3).candidates(ctx)
    assert (2, 3) in sets(proj) and (0, 2) not in sets(proj)


# --------------------------------------------------------------- validity
def test_only_valid_rejects_two_exits_and_taps():
    # relu feeds tanh and sigmoid and is also used outside: {relu, tanh, sigmoid} has a tap
    # (relu) and three exits.
    g = graph([("nn.relu", ()), ("nn.tanh", (0,)), ("nn.sigmoid", (0,)), ("nn.add", (0, 1))], [2, 3])
    everything = ByKind(OpKind.OPAQUE, OpKind.OPAQUE)
    combined = Combine(OpCallByKind("x", max_kind=OpKind.OPAQUE), [everything], max_depth=4)
    ctx = RuleContext(g)
    assert (0, 1, 2) in sets(combined.candidates(ctx))
    strict = SubGraphConfig(max_exits=1, allow_taps=False)
    assert strict.why_invalid(g, 0b0111) == "3 exits > 1"
    assert SubGraphConfig(allow_taps=False).why_invalid(g, 0b0111) == "taps at nodes [0]"
    assert SubGraphConfig(max_depth=1).why_invalid(g, 0b0011) == "depth 2 > 1"
    assert SubGraphConfig().why_invalid(g, 0b1001) == "not convex"
    valid = sets(OnlyValid(combined, strict).candidates(ctx))
    assert (0, 1, 2) not in valid and (0, 1) not in valid  # relu would be tapped
    assert (0, 1, 3) not in valid  # sigmoid, outside, reads relu: a tap again
    assert (0, 1, 2, 3) not in valid  # two exits (sigmoid, add)
    assert (1, 3) in valid
    assert (0, 1, 2) in sets(OnlyValid(combined, SubGraphConfig(max_exits=3)).candidates(ctx))


# ---------------------------------------------------------------- on IR
DENSE_CHAIN = """
func.func @main(%x: tensor<16x32xf32>, %w: tensor<64x32xf32>, %b: tensor<64xf32>) -> (tensor<16x64xf32>, tensor<16x64xf32>) {
  %0 = nn.dense %x, %w : (tensor<16x32xf32>, tensor<64x32xf32>) -> tensor<16x64xf32>
  %1 = nn.bias_add %0, %b {axis = 1 : i64} : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %2 = nn.relu %1 : (tensor<16x64xf32>) -> tensor<16x64xf32>
  %3 = nn.tanh %2 : (tensor<16x64xf32>) -> tensor<16x64xf32>
  func.return %2, %3 : tensor<16x64xf32>, tensor<16x64xf32>
}
"""


def ir_context(text: str) -> RuleContext:
    module = parse_module(text, make_context(), "test")
    block = next(iter(module.ops)).body.block
    built = graph_from_block(block)
    return RuleContext(built.graph, built.ops, block)


def test_df_pattern_and_pattern_style_on_ir():
    ctx = ir_context(DENSE_CHAIN)
    matches = DFPattern("cutlass").candidates(ctx)
    assert {c.label: sorted(c.nodes) for c in matches} == {
        "cutlass.dense_bias_relu": [0, 1, 2], "cutlass.dense_bias": [0, 1], "cutlass.dense": [0]}
    assert all(c.primitive and c.composite == c.label for c in pattern_rule("cutlass").candidates(ctx))


def test_native_cuda_rule_rejects_a_tapped_group():
    # relu is returned and feeds tanh: {dense, bias_add, relu, tanh} would export relu too.
    ctx = ir_context(DENSE_CHAIN)
    got = sets(cuda_rule(max_depth=4).candidates(ctx))
    assert (0, 1, 2) in got and (0, 1, 2, 3) not in got and (2, 3) not in got
    assert (3,) in got


def test_cuda_kind_follows_the_fusers_predicates(monkeypatch):
    from partita.lowering.cuda import fusion

    # a transposed convolution of run-time height and width: no native kernel takes it
    text = """
func.func @main(%x: tensor<1x4x?x?xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x3x?x?xf32> {
  %0 = nn.conv2d_transpose %x, %w : (tensor<1x4x?x?xf32>, tensor<4x3x3x3xf32>) -> tensor<1x3x?x?xf32>
  %1 = nn.relu %0 : (tensor<1x3x?x?xf32>) -> tensor<1x3x?x?xf32>
  func.return %1 : tensor<1x3x?x?xf32>
}
"""
    ctx = ir_context(text)
    assert [cuda_kind(ctx.graph, v) for v in range(2)] == [OpKind.OPAQUE, OpKind.ELEMWISE]
    cands = cuda_rule(3).candidates(ctx)
    assert {(tuple(sorted(c.nodes)), c.target) for c in cands} == {((0,), "llvm"), ((1,), "cuda")}
    # An op the fuser learns to anchor becomes a native candidate with its epilogue.
    anchors = fusion.is_anchor
    monkeypatch.setattr(fusion, "is_anchor", lambda op: isinstance(op, nn.Conv2DTransposeOp) or anchors(op))
    assert cuda_kind(ctx.graph, 0) == OpKind.OUT_EWISE_FUSABLE
    assert {(0,), (1,), (0, 1)} == sets(c for c in cuda_rule(3).candidates(ctx) if c.target == "cuda")


def test_tvm_style_backend_fuses_its_matches():
    from partita.backends import register_backend, unregister_backend
    from partita.backends.pattern import is_op, wildcard

    register_backend("ruletvm", patterns=[("dense", is_op("nn.dense")(wildcard(), wildcard())),
                                          ("bias_add", is_op("nn.bias_add")(wildcard(), wildcard())),
                                          ("relu", is_op("nn.relu")(wildcard())),
                                          ("tanh", is_op("nn.tanh")(wildcard()))],
                     partition_rule="tvm")
    try:
        ctx = ir_context(DENSE_CHAIN)
        got = tvm_fusion_rule("ruletvm", 3).candidates(ctx)
        assert {(0, 1, 2), (0, 1), (1, 2), (0,), (3,)} <= sets(got)
        assert (2, 3) not in sets(got)  # relu is tapped
        combined = [c for c in got if len(c.nodes) > 1]
        assert all(c.composite is None and c.primitive for c in combined)
    finally:
        unregister_backend("ruletvm")


# ------------------------------------------------------------ host copies
CONV_1X1 = """
func.func @main(%x: tensor<1x8x8x16xf32>, %w: tensor<16x1x1x16xf32>) -> tensor<1x8x8x16xf32> {
  %0 = nn.conv2d %x, %w {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x8x8x16xf32>, tensor<16x1x1x16xf32>) -> tensor<1x8x8x16xf32>
  func.return %0 : tensor<1x8x8x16xf32>
}
"""


def test_host_placement_pays_its_copies_on_a_device(monkeypatch):
    # A conv the native codegen cannot compile (its kernel rule removed): its native
    # placement is the host.
    import partita.lowering.cuda.ops  # noqa: F401 - registers the rules
    from partita.lowering.cuda.rules import WINDOW

    monkeypatch.delitem(WINDOW, nn.Conv2DOp)
    estimator = RooflineEstimator("h100")
    module = parse_module(CONV_1X1, make_context(), "conv")
    fn = next(iter(module.ops))
    graph, _, cands = function_candidates(fn, "cuda,cutlass,llvm", estimator)
    host = next(c for c in cands if c.label == HOST_LABEL)
    cutlass = next(c for c in cands if c.target == "cutlass")
    copies = host_copy_time(graph, host, estimator.dev)
    # Alone, the host looks cheaper than a kernel launch; with its copies it is not.
    assert estimator.estimate(graph, host) < estimator.estimate(graph, cutlass)
    assert estimator.estimate(graph, host) + copies > estimator.estimate(graph, cutlass)
    assert copies == pytest.approx((2 * 8 * 8 * 16 * 4 + 16 * 16 * 4) / 50e9 + 3 * 10e-6)
    report = collage_partition(module, "cuda,cutlass,llvm", estimator, baseline=False)
    assert [g.target for g in report.functions[0].groups] == ["cutlass"]


def test_host_caller_pays_no_copies():
    # The same conv on a host caller: a host placement copies nothing.
    module = parse_module(CONV_1X1, make_context(), "conv")
    estimator = MockEstimator({"llvm": 1.0, "llvm.fused": 1.0, "cutlass": 1.5})
    report = collage_partition(module, "llvm,cutlass", estimator, baseline=False)
    assert [g.target for g in report.functions[0].groups] == ["llvm"]
    assert report.total == 1.0


# ------------------------------------------------------------- MaxCoalesce
CHAIN = """
func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %0 = nn.relu %x : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %1 = nn.tanh %0 : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %2 = nn.sigmoid %1 : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %3 = nn.relu %2 : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %4 = nn.tanh %3 : (tensor<64x64xf32>) -> tensor<64x64xf32>
  func.return %4 : tensor<64x64xf32>
}
"""


def test_max_coalesce_merges_adjacent_groups_beyond_max_depth():
    # max-depth=2 caps the native groups at two ops; one kernel is cheaper (one launch, no
    # round trip through memory), so the chosen groups are merged into one.
    module = parse_module(CHAIN, make_context(), "chain")
    report = collage_partition(module, "cuda,llvm", RooflineEstimator("h100"), 2, baseline=True)
    (fn,) = report.functions
    assert [(g.target, g.nodes) for g in fn.groups] == [("cuda", (0, 1, 2, 3, 4))]
    assert fn.groups[0].label == "cuda.fused"
    assert fn.total < fn.eager_total  # the search alone needs three launches


def test_max_coalesce_keeps_what_the_rule_cannot_build():
    from partita.collage.coalesce import max_coalesce
    from partita.collage.search import Plan

    ctx = ir_context(DENSE_CHAIN)  # dense, bias_add, relu (returned), tanh
    g = ctx.graph
    cost = MockEstimator(lambda graph, cand: 1.0)  # any kernel costs 1: merging always pays
    seeds = [c for c in cuda_rule(1).candidates(ctx) if c.target == "cuda"]
    plan = Plan(tuple(seeds), 4.0, (1.0,) * 4)
    merged = max_coalesce(g, plan, {"cuda": cuda_rule(1).coalesce_config()}, cost.estimate)
    # The epilogue joins the dense; tanh cannot (relu would be tapped).
    assert [tuple(sorted(c.nodes)) for c in merged.candidates] == [(0, 1, 2), (3,)]
    assert merged.total_cost == 2.0
    # A pattern-only rule never merges.
    assert pattern_rule("cutlass").coalesce_config() is None
    assert max_coalesce(g, plan, {}, cost.estimate) == plan


def test_max_coalesce_never_merges_around_another_target():
    """Two cuda groups joined by an edge and by a path through a host group: one kernel of
    both would need the host's result before it starts and feed it after (a cycle), so
    they stay apart; without the host in between they merge."""
    from partita.collage.coalesce import max_coalesce
    from partita.collage.search import Candidate, Plan

    t = TensorInfo((4, 4), "f32")

    class Always:
        def why_not(self, graph, a, b):
            return None

    def plan_of(host_reads_only_exp: bool) -> tuple[DataflowGraph, Plan]:
        add_inputs = (0, 0) if host_reads_only_exp else (0, 1)
        g = DataflowGraph([NodeInfo("nn.exp", (), (), t), NodeInfo("nn.det", (0,), (t,), t),
                           NodeInfo("nn.add", add_inputs, (t, t), t)], outputs=[1, 2])
        cands = (Candidate({0}, "cuda", "cuda.exp"), Candidate({1}, "llvm", "llvm"), Candidate({2}, "cuda", "cuda.add"))
        return g, Plan(cands, 3.0, (1.0, 1.0, 1.0))

    cost = MockEstimator(lambda graph, cand: 1.0)
    g, plan = plan_of(host_reads_only_exp=False)
    assert max_coalesce(g, plan, {"cuda": Always()}, cost.estimate).candidates == plan.candidates
    g, plan = plan_of(host_reads_only_exp=True)
    merged = max_coalesce(g, plan, {"cuda": Always()}, cost.estimate)
    assert sorted(tuple(sorted(c.nodes)) for c in merged.candidates) == [(0, 2), (1,)]
