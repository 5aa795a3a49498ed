"""A small, IR-independent data-flow graph for the Collage partitioner.

Nodes are numbered ``0..n-1`` in topological order (the order of the ops in the
block being partitioned).  Graph inputs and constants are *not* nodes; their
types still appear in :attr:`NodeInfo.in_types` so that costs can be estimated.

Conventions
-----------
* ``NodeInfo.in_types`` lists the types of *all* operands of the op, in operand
  order (graph inputs, constants and values produced by other nodes alike).
* ``NodeInfo.inputs`` lists the producer node id of every operand that is
  produced by another node (one entry per such operand, so duplicates are
  allowed, e.g. ``multiply(x, x)``).  It does not need to be aligned with
  ``in_types``; each node has exactly one result, typed ``out_type``.
* Node sets are passed either as iterables of node ids or as bitmasks (Python
  ``int`` with bit ``i`` set for node ``i``).  All reachability queries are
  implemented with such bitmasks.
* Element types are the ``nn`` names (``f16``, ``ui8``, ``f8E4M3FN``); their sizes come
  from the dialect's one dtype table (no op or value of the IR is needed).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from partita.dialects.nn import NUMPY_DTYPES

__all__ = [
    "DataflowGraph",
    "NodeInfo",
    "TensorInfo",
    "bits",
    "to_mask",
]

#: NumPy's names of the nn element types (``float16`` -> ``f16``), for graphs built by hand.
_NUMPY_NAMES = {dtype.name: name for name, dtype in NUMPY_DTYPES.items()}


def normalize_dtype(dtype: str) -> str:
    """Map spellings such as ``float16`` to the short form (``f16``)."""
    return _NUMPY_NAMES.get(dtype, dtype)


@dataclass(frozen=True)
class TensorInfo:
    """Shape and element type of a tensor; dynamic dimensions are ``-1``."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))

    @property
    def is_dynamic(self) -> bool:
        return any(d < 0 for d in self.shape)

    def concrete_shape(self, dynamic_dim_hint: int = 1) -> tuple[int, ...]:
        return tuple(dynamic_dim_hint if d < 0 else d for d in self.shape)

    def numel(self, dynamic_dim_hint: int = 1) -> int:
        n = 1
        for d in self.concrete_shape(dynamic_dim_hint):
            n *= d
        return n

    @property
    def itemsize(self) -> float:
        known = NUMPY_DTYPES.get(self.dtype)  # the project's one dtype table
        return known.itemsize if known is not None else 4

    def nbytes(self, dynamic_dim_hint: int = 1) -> float:
        return self.numel(dynamic_dim_hint) * self.itemsize


@dataclass(frozen=True)
class NodeInfo:
    """One op of the graph (see the module docstring for the conventions)."""

    op: str
    inputs: tuple[int, ...]
    in_types: tuple[TensorInfo, ...]
    out_type: TensorInfo
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    kind: int | None = field(default=None, compare=False, hash=False)
    """The op's pattern kind (``partita.dialects.nn.OpKind``) where the graph was built
    from IR; ``None``: looked up from ``op`` (:func:`partita.collage.kinds.node_kind`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(int(i) for i in self.inputs))
        object.__setattr__(self, "in_types", tuple(self.in_types))


def to_mask(nodes: Iterable[int] | int) -> int:
    """Bitmask of a node set (an ``int`` is returned unchanged)."""
    if isinstance(nodes, int):
        return nodes
    m = 0
    for v in nodes:
        m |= 1 << v
    return m


def bits(mask: int) -> Iterator[int]:
    """The node ids of a bitmask, in increasing order."""
    if not mask:
        return
    # Shift the set down to its lowest node so that the loop works on a small
    # int even when the graph (and so the mask) is large.
    base = (mask & -mask).bit_length() - 1
    mask >>= base
    while mask:
        low = mask & -mask
        yield base + low.bit_length() - 1
        mask ^= low


class DataflowGraph:
    """Nodes in topological order, their producer edges and the graph outputs.

    ``outputs`` names the nodes whose results leave the graph (are returned).
    """

    def __init__(self, nodes: Sequence[NodeInfo], outputs: Iterable[int] = ()) -> None:
        self.nodes: tuple[NodeInfo, ...] = tuple(nodes)
        n = len(self.nodes)
        self.outputs: frozenset[int] = frozenset(int(o) for o in outputs)
        for o in self.outputs:
            if not 0 <= o < n:
                raise ValueError(f"graph output {o} is not a node (graph has {n} nodes)")
        consumers: list[list[int]] = [[] for _ in range(n)]
        for i, node in enumerate(self.nodes):
            for p in node.inputs:
                if not 0 <= p < i:
                    raise ValueError(
                        f"node {i} ({node.op}) has input {p}: nodes must be in topological order"
                    )
                if i not in consumers[p]:
                    consumers[p].append(i)
        self.consumers: tuple[tuple[int, ...], ...] = tuple(tuple(c) for c in consumers)
        self.producers: tuple[tuple[int, ...], ...] = tuple(
            tuple(dict.fromkeys(node.inputs)) for node in self.nodes
        )
        # Strict descendants / ancestors of every node as bitmasks.
        desc = [0] * n
        for v in range(n - 1, -1, -1):
            m = 0
            for c in self.consumers[v]:
                m |= desc[c] | (1 << c)
            desc[v] = m
        anc = [0] * n
        for v in range(n):
            m = 0
            for p in self.producers[v]:
                m |= anc[p] | (1 << p)
            anc[v] = m
        self._desc = desc
        self._anc = anc
        # Neighbours (producers and consumers) as bitmasks, for adjacency tests.
        self._nbr = [
            to_mask(self.producers[v]) | to_mask(self.consumers[v]) for v in range(n)
        ]
        self._cons = [to_mask(self.consumers[v]) for v in range(n)]
        self.full_mask: int = (1 << n) - 1

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, i: int) -> NodeInfo:
        return self.nodes[i]

    def __repr__(self) -> str:
        return f"DataflowGraph({len(self.nodes)} nodes, outputs={sorted(self.outputs)})"

    # ------------------------------------------------------------ reachability
    def descendants(self, v: int) -> int:
        """Bitmask of the nodes reachable from ``v`` (excluding ``v``)."""
        return self._desc[v]

    def ancestors(self, v: int) -> int:
        """Bitmask of the nodes that reach ``v`` (excluding ``v``)."""
        return self._anc[v]

    def reaches(self, a: int, b: int) -> bool:
        return bool(self._desc[a] >> b & 1)

    def neighbours(self, nodes: Iterable[int] | int) -> int:
        """Bitmask of the producers and consumers of ``nodes`` outside ``nodes``."""
        m = to_mask(nodes)
        r = 0
        for v in bits(m):
            r |= self._nbr[v]
        return r & ~m

    def successors(self, nodes: Iterable[int] | int) -> int:
        """Bitmask of the consumers of ``nodes`` outside ``nodes``."""
        m = to_mask(nodes)
        r = 0
        for v in bits(m):
            r |= self._cons[v]
        return r & ~m

    def taps(self, nodes: Iterable[int] | int) -> list[int]:
        """Nodes of the set whose result is used both inside the set and outside it (or
        returned): an intermediate value the sub-graph would also have to export."""
        s = to_mask(nodes)
        out = []
        for v in bits(s):
            inside = self._cons[v] & s
            if inside and (v in self.outputs or self._cons[v] & ~s):
                out.append(v)
        return out

    def is_convex(self, nodes: Iterable[int] | int) -> bool:
        """True iff no path leaves the set and re-enters it.

        A set ``S`` is convex iff no node outside ``S`` is both a descendant of
        some node of ``S`` and an ancestor of some node of ``S``; merging a
        non-convex set into one op would create a cycle.
        """
        s = to_mask(nodes)
        d = a = 0
        for v in bits(s):
            d |= self._desc[v]
            a |= self._anc[v]
        return (d & a & ~s) == 0

    def is_connected(self, nodes: Iterable[int] | int) -> bool:
        """True iff the set is weakly connected through its internal edges."""
        s = to_mask(nodes)
        if s == 0:
            return False
        low = s & -s
        seen = frontier = low
        while frontier:
            nxt = 0
            for v in bits(frontier):
                nxt |= self._nbr[v]
            nxt &= s & ~seen
            seen |= nxt
            frontier = nxt
        return seen == s

    def depth(self, nodes: Iterable[int] | int) -> int:
        """Number of nodes on the longest path that stays inside the set."""
        s = to_mask(nodes)
        longest: dict[int, int] = {}
        best = 0
        for v in bits(s):
            d = 1
            for p in self.producers[v]:
                if s >> p & 1:
                    d = max(d, longest[p] + 1)
            longest[v] = d
            best = max(best, d)
        return best

    def output_nodes(self, nodes: Iterable[int] | int) -> list[int]:
        """Nodes of the set whose result is used outside it (or is a graph output)."""
        s = to_mask(nodes)
        out = []
        for v in bits(s):
            if v in self.outputs or any(not (s >> c & 1) for c in self.consumers[v]):
                out.append(v)
        return out

    def external_producers(self, nodes: Iterable[int] | int) -> list[int]:
        """Distinct nodes outside the set that feed a node of the set, in order."""
        s = to_mask(nodes)
        ext = 0
        for v in bits(s):
            for p in self.producers[v]:
                if not (s >> p & 1):
                    ext |= 1 << p
        return list(bits(ext))

    def partition_is_acyclic(self, parts: Sequence[Iterable[int] | int]) -> bool:
        """True iff contracting each (disjoint) part into one node keeps a DAG."""
        masks = [to_mask(p) for p in parts]
        owner: dict[int, int] = {}
        for k, m in enumerate(masks):
            for v in bits(m):
                owner[v] = k
        succ: list[set[int]] = [set() for _ in masks]
        indeg = [0] * len(masks)
        for k, m in enumerate(masks):
            for v in bits(m):
                for c in self.consumers[v]:
                    j = owner.get(c)
                    if j is not None and j != k and j not in succ[k]:
                        succ[k].add(j)
                        indeg[j] += 1
        ready = [k for k in range(len(masks)) if indeg[k] == 0]
        done = 0
        while ready:
            k = ready.pop()
            done += 1
            for j in succ[k]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        return done == len(masks)
