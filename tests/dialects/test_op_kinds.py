"""Op kinds have one source of truth: the ``OpPattern`` trait on the ``nn`` op classes.

Collage's rules, its native-candidate generator, its cost model and the native CUDA fuser
all read the trait; an op defined here, outside the dialect, with a kind trait is picked up
by them without any table edit.
"""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import TensorType, f32
from xdsl.dialects.func import ReturnOp
from xdsl.ir import Block
from xdsl.irdl import irdl_op_definition
from xdsl.traits import Pure

import partita.lowering.cuda.ops  # noqa: F401  (registers the kernel rules)
from partita.collage import (
    DataflowGraph,
    NodeInfo,
    TensorInfo,
    enumerate_native_candidates,
)
from partita.collage.cost import RooflineEstimator, node_flops, op_class
from partita.collage.ir_graph import graph_from_ops
from partita.collage.kinds import default_op_kind, node_kind
from partita.collage.rules import RuleContext, host_rule
from partita.collage.search import Candidate
from partita.dialects import nn
from partita.dialects.nn import NN, OpKind, OpPattern, UnaryOp, kind_trait, op_kind
from partita.lowering.cuda import fusion
from partita.lowering.cuda.rules import INJECTIVE

NN_OPS = sorted(NN.operations, key=lambda op: op.name)


@pytest.mark.parametrize("op", NN_OPS, ids=lambda op: op.name)
def test_every_nn_op_is_pure_and_has_exactly_one_kind(op):
    assert op.has_trait(Pure)
    assert len(op.get_traits_of_type(OpPattern)) == 1


def test_kinds_follow_the_families():
    assert op_kind(nn.ReluOp) == op_kind(nn.ExpOp) == OpKind.ELEMWISE
    assert op_kind(nn.AddOp) == op_kind(nn.BiasAddOp) == OpKind.BROADCAST
    assert op_kind(nn.TransposeOp) == op_kind(nn.TakeOp) == OpKind.INJECTIVE
    assert op_kind(nn.ReduceSumOp) == op_kind(nn.SoftmaxOp) == OpKind.COMM_REDUCE
    assert op_kind(nn.DenseOp) == op_kind(nn.Conv2DOp) == OpKind.OUT_EWISE_FUSABLE
    assert op_kind(nn.ScatterNDOp) == op_kind(nn.TopKValuesOp) == OpKind.OPAQUE


def _node(op: type, n_in: int = 1) -> NodeInfo:
    t = TensorInfo((4, 8), "f32")
    return NodeInfo(op.name, (), tuple(t for _ in range(n_in)), t)


@pytest.mark.parametrize("op", NN_OPS, ids=lambda op: op.name)
def test_collage_and_cost_read_the_trait(op):
    node = _node(op)
    kind = op_kind(op)
    assert node_kind(node) == kind
    graph = DataflowGraph([node], [0])
    expected = OpKind.ELEMWISE if kind <= OpKind.BROADCAST else kind
    assert default_op_kind(graph, 0) == expected
    cls = op_class(node)
    if kind <= OpKind.BROADCAST:
        assert cls == "elementwise"
    elif kind == OpKind.INJECTIVE:
        assert cls == "data"
    elif kind == OpKind.COMM_REDUCE:
        assert cls == "reduction"
    elif kind == OpKind.OUT_EWISE_FUSABLE:
        assert cls in ("gemm", "conv")
    else:
        assert cls == "other"


def test_reductions_are_costed_as_reductions():
    x = TensorInfo((64, 1024), "f32")
    node = NodeInfo("nn.reduce_sum", (), (x,), TensorInfo((64,), "f32"), {"axes": (1,)})
    assert op_class(node) == "reduction"
    assert node_flops(node) == 64 * 1024  # every input element, not one per output element
    relu = NodeInfo("nn.relu", (), (x,), x)
    assert node_flops(relu) == 64 * 1024


@pytest.mark.parametrize("op", sorted(INJECTIVE, key=lambda op: op.name), ids=lambda op: op.name)
def test_the_fusers_rules_agree_with_the_trait(op):
    """An op a kernel computes at an output index is at most injective; one read at the
    (broadcast) output index, as an epilogue reads it, is element-wise."""
    rule = INJECTIVE[op]
    assert op_kind(op) <= OpKind.INJECTIVE
    if rule.elementwise:
        assert op_kind(op) <= OpKind.BROADCAST


def _block_with(op_type: type) -> tuple[Block, list]:
    block = Block(arg_types=[TensorType(f32, [4, 8]), TensorType(f32, [16, 8])])
    dense = nn.DenseOp(block.args[0], block.args[1])
    scale = op_type(dense.result)
    block.add_ops([dense, scale, ReturnOp(scale.results[0])])
    return block, [dense, scale]


@irdl_op_definition
class ScaleOp(UnaryOp):
    """A test op outside the ``nn`` dialect, declared element-wise."""

    name = "test.scale"
    traits = kind_trait(OpKind.ELEMWISE)


@irdl_op_definition
class BlackBoxOp(UnaryOp):
    """A test op declared opaque."""

    name = "test.black_box"
    traits = kind_trait(OpKind.OPAQUE)


def test_a_new_op_with_a_kind_trait_is_fused_and_costed_without_a_table():
    block, ops = _block_with(ScaleOp)
    built = graph_from_ops(block.ops)
    graph = built.graph
    assert built.ops == tuple(ops)  # the dense, then the test op
    assert [node_kind(n) for n in graph.nodes] == [OpKind.OUT_EWISE_FUSABLE, OpKind.ELEMWISE]
    assert op_class(graph.nodes[1]) == "elementwise"
    assert node_flops(graph.nodes[1]) == 4 * 16

    fused = {tuple(sorted(c.nodes)) for c in enumerate_native_candidates(graph, ["cuda"], 2)}
    assert (0, 1) in fused
    host = {tuple(sorted(c.nodes)) for c in host_rule(2).candidates(RuleContext(graph))}
    assert (0, 1) in host

    cost = RooflineEstimator()
    assert cost.breakdown(graph, Candidate(frozenset({1}), "cuda", "cuda"))["flops"] == 4 * 16


def test_an_opaque_op_is_not_fused():
    block, _ = _block_with(BlackBoxOp)
    graph = graph_from_ops(block.ops).graph
    assert node_kind(graph.nodes[1]) == OpKind.OPAQUE
    fused = {tuple(sorted(c.nodes)) for c in enumerate_native_candidates(graph, ["cuda"], 2)}
    assert (0, 1) not in fused
    host = {tuple(sorted(c.nodes)) for c in host_rule(2).candidates(RuleContext(graph))}
    assert (0, 1) not in host
    assert not fusion.is_fusable(graph.ops[1])  # type: ignore[attr-defined]
