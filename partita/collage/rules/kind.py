"""Operator pattern kinds (TVM's ``OpPatternKind``) and the kind of a sub-graph.

The kinds are ordered: a sub-graph's kind is the largest kind of its nodes
(:func:`partita.collage.rules.combiners.set_kind`), and the ``ByKind`` combiner compares
kinds with ``<=``, as TVM's fusion rules do.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum

from partita.collage.graph import DataflowGraph, NodeInfo

__all__ = ["KindFn", "OpKind", "default_op_kind"]


class OpKind(IntEnum):
    ELEMWISE = 0
    """Every output element from the same-index input elements (relu, add of equal shapes)."""
    BROADCAST = 1
    """Element-wise with broadcasting operands (bias add)."""
    INJECTIVE = 2
    """An index remapping (transpose, reshape, pad, concatenate)."""
    COMM_REDUCE = 3
    """A commutative reduction (sum, softmax's row reduction)."""
    OUT_EWISE_FUSABLE = 4
    """A complex op whose output takes an element-wise epilogue (dense, conv2d)."""
    TUPLE = 7
    """Gathers values into one (TVM's tuple); never an index computation."""
    PROJECTION = 8
    """Takes one field of a multi-result value (TVM's ``TupleGetItem``)."""
    OPAQUE = 9
    """Anything no rule may fuse."""


KindFn = Callable[[DataflowGraph, int], OpKind]
"""The kind of node ``v`` of a graph, as some target sees it."""

_INJECTIVE = frozenset(
    {"nn.transpose", "nn.reshape", "nn.pad", "nn.concatenate", "nn.squeeze", "nn.expand_dims",
     "nn.flatten", "nn.batch_flatten", "nn.strided_slice", "nn.slice", "nn.broadcast_to", "nn.take"}
)
_REDUCE = frozenset({"nn.softmax", "nn.layer_norm", "nn.sum", "nn.mean", "nn.max", "nn.min",
                     "nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d"})
_COMPLEX = frozenset({"nn.dense", "nn.matmul", "nn.batch_matmul", "nn.conv2d"})
_ELEMWISE = frozenset({"nn.add", "nn.subtract", "nn.multiply", "nn.divide", "nn.relu", "nn.gelu",
                       "nn.sigmoid", "nn.tanh", "nn.clip", "nn.bias_add"})


def default_op_kind(graph: DataflowGraph, v: int) -> OpKind:
    """The kind of an ``nn`` op from its name (for IR-free graphs and targets that do not
    say): element-wise ops are ``BROADCAST`` when an operand's shape differs from the
    result's, ``tuple``/``get_item`` nodes are ``TUPLE``/``PROJECTION``."""
    node: NodeInfo = graph.nodes[v]
    op = node.op
    if op in _ELEMWISE:
        same = all(t.shape == node.out_type.shape for t in node.in_types)
        return OpKind.ELEMWISE if same else OpKind.BROADCAST
    if op in _INJECTIVE:
        return OpKind.INJECTIVE
    if op in _REDUCE:
        return OpKind.COMM_REDUCE
    if op in _COMPLEX:
        return OpKind.OUT_EWISE_FUSABLE
    if op == "tuple":
        return OpKind.TUPLE
    if op == "get_item":
        return OpKind.PROJECTION
    return OpKind.OPAQUE
