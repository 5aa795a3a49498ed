"""Operator pattern kinds (TVM's ``OpPatternKind``, declared by each op's ``OpPattern``
trait) and the kind of a sub-graph.

The kinds are ordered: a sub-graph's kind is the largest kind of its nodes
(:func:`partita.collage.rules.combiners.set_kind`), and the ``ByKind`` combiner compares
kinds with ``<=``, as TVM's fusion rules do.
"""

from __future__ import annotations

from collections.abc import Callable

from partita.collage.graph import DataflowGraph
from partita.collage.kinds import default_op_kind
from partita.dialects.nn import OpKind

__all__ = ["KindFn", "OpKind", "default_op_kind"]

KindFn = Callable[[DataflowGraph, int], OpKind]
"""The kind of node ``v`` of a graph, as some target sees it."""
