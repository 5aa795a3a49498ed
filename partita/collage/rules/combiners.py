"""Combiners: when ``Combine`` may merge two adjacent candidates of one target (TVM's
``CombinerRule`` family).

A combiner answers ``fires(graph, a, b, kind_of)`` for two node sets (bitmasks) that touch.
The kind of a set is the largest kind of its nodes, tuples and projections aside (they only
move values, so they do not make a set less fusable):

* ``ByKind(upstream, downstream)``: a set of kind at most ``upstream`` feeds a set of kind
  at most ``downstream`` (``ByKind(OUT_EWISE_FUSABLE, BROADCAST)`` is a GEMM's epilogue,
  ``ByKind(INJECTIVE, INJECTIVE)`` chains transposes and reshapes);
* ``AllSimple(*combiners)``: fires when any of its combiners does (TVM's grouping of simple
  rules under one name);
* ``TupleArg()``: a set that only feeds ``TUPLE`` nodes of the other set joins it when it
  is at most injective (the tuple's fields are computed where the tuple is);
* ``TupleProj()``: a ``PROJECTION`` node joins the set producing the value it projects;
* ``Always()``: fires for every pair (``Combine`` only offers touching ones), for the
  unrestricted unions of ``combine_candidates``.

TVM also has a constant combiner; in Partita constants are not graph nodes but values
entering a candidate (:mod:`partita.collage.ir_graph`), so every candidate already holds
the constants it reads and there is nothing left to combine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from partita.collage.graph import DataflowGraph, bits
from partita.collage.rules.kind import KindFn, OpKind

__all__ = ["AllSimple", "Always", "ByKind", "Combiner", "TupleArg", "TupleProj", "set_kind"]

_MOVERS = (OpKind.TUPLE, OpKind.PROJECTION)


def set_kind(graph: DataflowGraph, mask: int, kind_of: KindFn) -> OpKind:
    """The kind of a node set: its largest node kind, tuples and projections aside."""
    kinds = [kind_of(graph, v) for v in bits(mask)]
    rest = [k for k in kinds if k not in _MOVERS]
    return max(rest) if rest else max(kinds, default=OpKind.ELEMWISE)


def _feeds(graph: DataflowGraph, a: int, b: int) -> bool:
    return bool(graph.successors(a) & b)


class Combiner(ABC):
    @abstractmethod
    def fires(self, graph: DataflowGraph, a: int, b: int, kind_of: KindFn) -> bool: ...

    def __repr__(self) -> str:
        return type(self).__name__ + "()"


class ByKind(Combiner):
    def __init__(self, upstream: OpKind, downstream: OpKind) -> None:
        self.upstream = upstream
        self.downstream = downstream

    def __repr__(self) -> str:
        return f"ByKind({self.upstream.name}, {self.downstream.name})"

    def fires(self, graph: DataflowGraph, a: int, b: int, kind_of: KindFn) -> bool:
        for up, down in ((a, b), (b, a)):
            if (_feeds(graph, up, down)
                    and set_kind(graph, up, kind_of) <= self.upstream
                    and set_kind(graph, down, kind_of) <= self.downstream):
                return True
        return False


class AllSimple(Combiner):
    def __init__(self, *combiners: Combiner) -> None:
        self.combiners = combiners

    def __repr__(self) -> str:
        return f"AllSimple({', '.join(map(repr, self.combiners))})"

    def fires(self, graph: DataflowGraph, a: int, b: int, kind_of: KindFn) -> bool:
        return any(c.fires(graph, a, b, kind_of) for c in self.combiners)


def _single(mask: int) -> int | None:
    return mask.bit_length() - 1 if mask and mask & (mask - 1) == 0 else None


class TupleArg(Combiner):
    def fires(self, graph: DataflowGraph, a: int, b: int, kind_of: KindFn) -> bool:
        for arg, tup in ((a, b), (b, a)):
            fed = graph.successors(arg) & tup
            if (fed and all(kind_of(graph, v) == OpKind.TUPLE for v in bits(fed))
                    and set_kind(graph, arg, kind_of) <= OpKind.INJECTIVE):
                return True
        return False


class TupleProj(Combiner):
    def fires(self, graph: DataflowGraph, a: int, b: int, kind_of: KindFn) -> bool:
        for src, proj in ((a, b), (b, a)):
            v = _single(proj)
            if v is not None and kind_of(graph, v) == OpKind.PROJECTION and _feeds(graph, src, proj):
                return True
        return False


class Always(Combiner):
    def fires(self, graph: DataflowGraph, a: int, b: int, kind_of: KindFn) -> bool:
        return True
