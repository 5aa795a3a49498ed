"""Shape buckets: one device arena, and one CUDA graph, for every input signature whose
buffers fit it (a KV-cache decode loop, a server's varying batch and sequence lengths).

Without buckets each input-shape signature binds its own arena and captures its own graph
(``partita.runtime.plan``): a decode loop of 1,000 tokens, whose past length grows by one
each step, would allocate and instantiate 1,000 times. With a ``ShapeBuckets`` policy the
launch plan still evaluates every signature's exact shapes, so kernels compute exactly what
the model says (no padding, no masking), but it *reserves* each dynamically sized buffer at
its dims rounded up to the bucket's edge (powers of two by default): every signature whose
rounded sizes agree shares an ``Arena``, placed by the same liveness planner at the
reserved sizes. What changes between those signatures is only dims and grid sizes, so the
arena's one instantiated graph is updated in place, as TensorRT-LLM and vLLM reuse graphs
across shapes: only the kernel nodes whose launch changed are set
(``cuGraphExecKernelNodeSetParams``: a decode step's few kernels that read the grown
cache) when every other step is the same work, else a capture of the new launches is
applied with ``cuGraphExecUpdate``; no instantiation, no allocation either way.

An arena is never both read and written by one run: a device input inside the arena a run
would write (the previous decode step's ``present`` key/values, fed back as ``past``) makes
the pool hand out a twin arena of the same sizes, so the steps alternate between two arenas
and read the cache in place (the buffers a model's outputs are in stay valid until the run
after next). The ``keep`` most recently used arenas stay allocated; the least recently used
is freed beyond that.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

from xdsl.dialects.builtin import DYNAMIC_INDEX

from partita.analysis.liveness import assign_offsets
from partita.ir import PartitaError

__all__ = ["Arena", "ArenaPool", "ShapeBuckets", "lies_in"]


@dataclass(frozen=True)
class ShapeBuckets:
    """How a dynamic dim is rounded up to its bucket's edge: the next power of two, at
    least ``minimum`` (``"pow2"``), or ``edge(d)`` for a policy of one's own (it must return
    an int ``>= d``, the same for every ``d`` of one bucket)."""

    edge: Callable[[int], int]
    name: str = "custom"

    @classmethod
    def powers_of_two(cls, minimum: int = 16) -> ShapeBuckets:
        if minimum < 1:
            raise PartitaError(f"shape buckets need a minimum edge >= 1, got {minimum}")
        return cls(lambda d: max(minimum, 1 << max(int(d) - 1, 0).bit_length()), f"powers of two from {minimum}")

    @classmethod
    def of(cls, policy: str | Callable[[int], int] | ShapeBuckets | None) -> ShapeBuckets | None:
        """``None`` (every signature exact), ``"pow2"``, a policy, or a callable edge."""
        if policy is None or isinstance(policy, ShapeBuckets):
            return policy
        if policy == "pow2":
            return cls.powers_of_two()
        if callable(policy):
            return cls(policy)
        raise PartitaError(f"shape buckets must be None, 'pow2' or a function of a dim, not {policy!r}")

    def reserve(self, declared: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
        """``shape`` with every dim its type leaves dynamic rounded up to its edge."""
        out = []
        for d, n in zip(declared, shape):
            if d != DYNAMIC_INDEX:
                out.append(n)
                continue
            e = int(self.edge(n))
            if e < n:
                raise PartitaError(f"the shape bucket policy ({self.name}) rounds dim {n} down to {e}")
            out.append(e)
        return tuple(out)

    def reserve_bytes(self, nbytes: int) -> int:
        """A workspace's bytes rounded up the same way (its size follows the dims)."""
        return int(self.edge(nbytes)) if nbytes else 0


def lies_in(ptr: int, buffer: Any, nbytes: int) -> bool:
    """Whether device address ``ptr`` lies in the ``nbytes`` of ``buffer`` (``None``: no memory)."""
    return buffer is not None and nbytes > 0 and int(buffer) <= ptr < int(buffer) + nbytes


@dataclass(eq=False)
class Arena:
    """Device memory for one placement: ``pointers`` by buffer root (the roots and reserved
    sizes the key names), and the CUDA graph replaying the launches of the last signature
    that ran in it with ``graph_key`` (the bound plan and the input pointers it read)."""

    key: tuple
    base: Any
    size: int
    pointers: dict[Any, int]
    graph: Any = None
    graph_key: tuple | None = None
    zeroed: bool = False
    """Whether its workspaces were zeroed (once, when the first plan placed in it bound)."""
    users: set = field(default_factory=set)
    """The bound plans whose launches point into this arena (closed with it)."""
    latest: Any = None
    """The plan bound into it last: a new signature's calls whose shapes it leaves as they
    were take that plan's launches (same buffers, same pointers) instead of binding again."""

    def holds(self, ptr: int) -> bool:
        return lies_in(ptr, self.base, self.size)


class ArenaPool:
    """The arenas of a runtime's bucketed signatures, by placement key, least recently
    used first; ``stats`` counts allocations."""

    def __init__(self, device: Any, buckets: ShapeBuckets, keep: int, stats: Any):
        self.device, self.buckets, self.keep, self.stats = device, buckets, max(2, keep), stats
        self._arenas: OrderedDict[tuple, list[Arena]] = OrderedDict()
        self.on_evict: Callable[[Arena], None] | None = None

    def take(self, roots: Sequence[Any], sizes: Sequence[int], ranges: Sequence[tuple[int, int]],
             avoid: Sequence[int], alignment: int) -> Arena:
        """An arena with room for buffers of ``sizes`` (reserved sizes) live over
        ``ranges``, holding none of the ``avoid`` addresses: one already allocated, or a new one."""
        key = (tuple(roots), tuple(sizes))
        twins = self._arenas.get(key)
        if twins is not None:
            self._arenas.move_to_end(key)
            for arena in twins:
                if not any(arena.holds(p) for p in avoid):
                    return arena
        offsets, total = assign_offsets(list(sizes), list(ranges), alignment)
        base = self.device.alloc(total) if total else None
        self.stats["allocations"] += bool(total)
        self.stats["arenas"] += 1
        start = int(base) if base is not None else 0
        arena = Arena(key, base, total, {root: start + offset for root, offset in zip(roots, offsets)})
        self._arenas.setdefault(key, []).append(arena)
        self._arenas.move_to_end(key)
        while sum(len(a) for a in self._arenas.values()) > self.keep:
            _, old = next(iter(self._arenas.items()))
            if old is self._arenas[key]:
                break  # the arenas in use now
            self._arenas.popitem(last=False)
            for victim in old:
                self._release(victim)
        return arena

    def _release(self, arena: Arena) -> None:
        if self.on_evict is not None:
            self.on_evict(arena)
        if arena.graph is not None:
            arena.graph.destroy()
            arena.graph = None
        if arena.base is not None:
            self.device.free(arena.base)
            arena.base = None

    @property
    def arenas(self) -> list[Arena]:
        return [a for twins in self._arenas.values() for a in twins]

    def reserved_bytes(self) -> int:
        return sum(a.size for a in self.arenas)

    def close(self) -> None:
        for arena in self.arenas:
            self._release(arena)
        self._arenas.clear()


def reserved_size(buckets: ShapeBuckets, declared: Sequence[int], shape: Sequence[int], itemsize: int) -> int:
    """Bytes reserved for a buffer of ``shape`` whose type declares ``declared``."""
    return prod(buckets.reserve(declared, shape)) * itemsize
