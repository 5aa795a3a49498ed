"""The pattern kind of a data-flow graph node, from its op's ``OpPattern`` trait.

The kind is declared once, on the ``nn`` op class (:class:`partita.dialects.nn.OpPattern`);
the candidate rules, the native-candidate generator and the cost model all read it here,
so an op defined anywhere with a kind trait is classified without a table edit. A graph
built from IR carries each node's kind (:attr:`NodeInfo.kind`); a graph written by hand
names ``nn`` ops, whose classes the dialect knows.
"""

from __future__ import annotations

from functools import cache

from xdsl.ir import Operation

from partita.collage.graph import DataflowGraph, NodeInfo
from partita.dialects.nn import NN, OpKind, op_kind

__all__ = ["default_op_kind", "is_elementwise", "node_kind", "op_family", "op_named"]


@cache
def _nn_ops() -> dict[str, type[Operation]]:
    return {op.name: op for op in NN.operations}


def op_named(name: str) -> type[Operation] | None:
    """The ``nn`` op class called ``name`` (``None`` for other names)."""
    return _nn_ops().get(name)


def op_family(node: NodeInfo) -> str | None:
    """The ``nn`` family (``linalg``, ``conv``, ``normalization``...) of the node's op: the
    module its class is defined in."""
    cls = op_named(node.op)
    return None if cls is None else cls.__module__.rpartition(".")[2]


def node_kind(node: NodeInfo) -> OpKind:
    """The declared kind of the node's op (``tuple`` and ``get_item`` nodes of hand-built
    graphs are ``TUPLE`` and ``PROJECTION``; an op without a kind is ``OPAQUE``)."""
    if node.kind is not None:
        return OpKind(node.kind)
    if node.op == "tuple":
        return OpKind.TUPLE
    if node.op == "get_item":
        return OpKind.PROJECTION
    cls = op_named(node.op)
    return OpKind.OPAQUE if cls is None else op_kind(cls)


def is_elementwise(node: NodeInfo) -> bool:
    """Element-wise, broadcasting or not (TVM's kinds up to ``kBroadcast``)."""
    return node_kind(node) <= OpKind.BROADCAST


def default_op_kind(graph: DataflowGraph, v: int) -> OpKind:
    """The kind of node ``v`` as TVM's fusion rules see it: an element-wise op is
    ``ELEMWISE`` when every operand has the result's shape, ``BROADCAST`` otherwise."""
    node = graph.nodes[v]
    kind = node_kind(node)
    if kind <= OpKind.BROADCAST:
        same = all(t.shape == node.out_type.shape for t in node.in_types)
        return OpKind.ELEMWISE if same else OpKind.BROADCAST
    return kind
