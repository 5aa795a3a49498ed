"""From IR to the Collage core's data-flow graph.

The search works on ``DataflowGraph`` (plain Python, no xDSL); this module builds one from
a block of ``nn`` ops and maps node ids back to operations. Constants are not nodes: like
graph inputs they are values entering a candidate, so they never decide a placement.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import IntegerAttr, StringAttr, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.traits import IsTerminator

from partita.collage.graph import DataflowGraph, NodeInfo, TensorInfo
from partita.collage.search import Candidate
from partita.dialects.nn import op_kind, type_name

# Ops that carry no computation of their own.
NOT_NODES = frozenset({"nn.constant", "arith.constant"})


def tensor_info(value: SSAValue) -> TensorInfo:
    typ = value.type
    if not isinstance(typ, TensorType):
        return TensorInfo((), "f32")
    return TensorInfo(tuple(typ.get_shape()), type_name(typ.element_type))


def _attr_value(attr: Attribute) -> object:
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, StringAttr):
        return attr.data
    if hasattr(attr, "get_values"):
        return tuple(attr.get_values())  # DenseArrayBase
    return attr


class OpGraph(DataflowGraph):
    """A ``DataflowGraph`` built from IR that remembers the op behind each node, so a
    cost estimator handed only ``(graph, candidate)`` can reach the candidate's ops
    (the measuring estimator compiles them)."""

    def __init__(self, nodes: Sequence[NodeInfo], outputs: Iterable[int], ops: Sequence[Operation]) -> None:
        super().__init__(nodes, outputs)
        self.ops: tuple[Operation, ...] = tuple(ops)


@dataclass(frozen=True)
class BlockGraph:
    """A block's data-flow graph and the op behind each node."""

    graph: DataflowGraph
    ops: tuple[Operation, ...]

    def node_of(self, op: Operation) -> int:
        return self.ops.index(op)


def graph_from_ops(ops: Iterable[Operation], outputs: Iterable[SSAValue] = ()) -> BlockGraph:
    """Nodes for ``ops`` (in order, skipping constants and terminators); an edge where a
    node's result feeds another node; ``outputs`` marks the nodes whose values escape."""
    nodes: list[NodeInfo] = []
    kept: list[Operation] = []
    index: dict[Operation, int] = {}
    for op in ops:
        if op.name in NOT_NODES or op.has_trait(IsTerminator) or not op.results:
            continue
        producers = tuple(
            index[v.owner] for v in op.operands if isinstance(v.owner, Operation) and v.owner in index
        )
        attrs = {name: _attr_value(attr) for name, attr in op.properties.items()}
        nodes.append(NodeInfo(op.name, producers, tuple(map(tensor_info, op.operands)), tensor_info(op.results[0]), attrs,
                              kind=op_kind(op)))
        index[op] = len(kept)
        kept.append(op)
    escaping = set()
    for value in outputs:
        if isinstance(value.owner, Operation) and value.owner in index:
            escaping.add(index[value.owner])
    # A node whose result is used by an op that is not a node (a return, a call...) escapes.
    for op, i in index.items():
        if any(use.operation not in index for result in op.results for use in result.uses):
            escaping.add(i)
    return BlockGraph(OpGraph(nodes, sorted(escaping), kept), tuple(kept))


def graph_from_block(block: Block) -> BlockGraph:
    return graph_from_ops(block.ops)


def function_candidate(function: FuncOp, target: str) -> tuple[DataflowGraph, Candidate]:
    """A whole function body as one candidate on ``target`` (to cost a partition)."""
    built = graph_from_block(function.body.block)
    nodes = frozenset(range(len(built.ops)))
    return built.graph, Candidate(nodes, target, f"{target}.{function.sym_name.data}")
