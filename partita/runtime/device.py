"""The simulated device: the CPU as a device the launch plan runs on unchanged.

A device (this one or ``partita.runtime.cuda.CudaDevice``) offers what a launch plan
needs, and nothing more:

* memory: ``alloc(nbytes) -> buffer`` (``int(buffer)`` is its address), ``free``;
* one stream: ``create_stream``, and on it ``upload(ptr, array, stream)``,
  ``download(array, ptr, stream)``, ``copy(dst, src, nbytes, stream)``,
  ``memset(ptr, nbytes, stream)``, ``fill(ptr, element, count, stream)`` (a splat's
  buffer from its one element) and ``synchronize(stream)``;
* kernels: ``load_module(cubin).kernel(entry, smem, emulation)`` at load, then
  ``prepare_launch(kernel, grid, block, smem, args, operands)`` once per shape signature,
  which packs the C-ABI argument buffer and returns a callable ``launch(stream)``;
* graphs: ``capture(stream, steps) -> graph`` (what the steps, each called with the
  stream, enqueue) with ``graph.launch(stream)``, and ``update_graph(graph, stream,
  steps)`` (the graph replays other steps from now on; it says how: ``"nodes"``,
  ``"graph"`` or ``"instantiated"``, see ``CudaDevice.update_graph``).

Here memory is host byte arenas at made-up device addresses, and a launch decodes the
pointers from the packed argument buffer it was given (the bytes a GPU would receive),
takes views of the arenas at those pointers with the operand shapes, and runs the
kernel's ``emulation`` (its reference semantics) on them. So CI runs exactly the plan a
GPU runs: a memory-plan aliasing mistake or a mis-packed pointer gives wrong results
here too. ``execute=False`` turns every kernel into a no-op (the dispatch benchmark).
"""

from __future__ import annotations

import bisect
import struct
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from partita.ir import PartitaError
from partita.ir.budget import active_budget
from partita.runtime.arguments import ArgumentLayout
from partita.runtime.tma import simulated_tensor_map

__all__ = ["Operand", "SimulatedDevice", "check_operand_dtypes"]

_BASE = 0x7F00_0000_0000
_SPACING = 1 << 36  # room between arenas, so an overrun is caught, not silently aliased


@dataclass(frozen=True)
class Operand:
    """A tensor operand of a launch: its kernel argument index (``None`` when the kernel
    takes no pointer for it), shape and dtype; ``output`` when the kernel writes it."""

    arg: int | None
    shape: tuple[int, ...]
    dtype: np.dtype
    output: bool = False
    ptr: int = 0
    """Where an operand the kernel takes no pointer for lies, when the launch's emulation
    reads it (a Hopper int8 GEMM's zero points: constants the codegen proved zeros, which
    the reference body takes and the kernel's ``Params`` have no room for)."""


def check_operand_dtypes(function: str, roles: Sequence[str], inputs: Sequence[tuple[tuple[int, ...], np.dtype]],
                         out: tuple[tuple[int, ...], np.dtype], want: np.dtype,
                         inputs_want: Mapping[str, np.dtype] | None = None) -> None:
    """A kernel that reads and writes one dtype (``want``; or reads each input role as
    ``inputs_want`` says), called with these (shape, dtype) operands: a located error
    naming @``function`` when they do not fit it."""
    if len(inputs) != len(roles):
        raise PartitaError(f"@{function}: the kernel takes {len(roles)} inputs, got {len(inputs)}")
    for role, (_shape, dtype) in zip(roles, inputs):
        takes = want if inputs_want is None else inputs_want[role]
        if np.dtype(dtype) != takes:
            raise PartitaError(f"@{function}: input '{role}' is {np.dtype(dtype)}, the kernel takes {takes}")
    if np.dtype(out[1]) != want:
        raise PartitaError(f"@{function}: the output is {np.dtype(out[1])}, the kernel writes {want}")


class SimulatedFunction:
    """A kernel of a simulated module: its name and its emulation
    (``emulation(inputs, outputs)`` on NumPy views)."""

    def __init__(self, name: str, emulation: Callable[[list[np.ndarray], list[np.ndarray]], None] | None):
        self.name, self.emulation = name, emulation


class SimulatedModule:
    def __init__(self, device: SimulatedDevice, cubin: bytes):
        self.device, self.cubin = device, cubin

    def kernel(self, name: str, smem: int = 0, emulation=None) -> SimulatedFunction:
        return SimulatedFunction(name, emulation)

    def unload(self) -> None:
        pass


class SimulatedLaunch:
    """A launch packed once; calling it runs the emulation at the packed pointers."""

    __slots__ = ("args", "block", "cluster", "device", "function", "grid", "offsets", "operands", "params", "smem")

    def __init__(self, device, function, grid, block, smem, params, offsets, operands):
        self.device, self.function, self.grid, self.block, self.smem = device, function, grid, block, smem
        self.params, self.offsets, self.operands = params, offsets, operands

    def clone(self) -> SimulatedLaunch:
        """The same launch with its own copy of the packed arguments."""
        copy = SimulatedLaunch(self.device, self.function, self.grid, self.block, self.smem, bytearray(self.params),
                               self.offsets, self.operands)
        copy.args, copy.cluster = self.args, self.cluster
        return copy

    def pointer(self, arg: int) -> int:
        return struct.unpack_from("<Q", self.params, self.offsets[arg])[0]

    def set_pointer(self, arg: int, ptr: int) -> None:
        struct.pack_into("<Q", self.params, self.offsets[arg], ptr)

    def __call__(self, stream) -> None:
        if type(stream) is _Recorder:  # being captured into a graph
            # as the driver copies a kernel node's arguments: a later patch of this launch
            # reaches the graph only through an update
            stream.launches.append(self.clone())
            return
        device = self.device
        device.counts["launch"] += 1
        if not device.execute:
            return
        if self.function.emulation is None:
            raise RuntimeError(f"simulated kernel {self.function.name} has no emulation")
        read = [o for o in self.operands if o.arg is not None or o.ptr]
        views = [device.view(o.ptr if o.arg is None else self.pointer(o.arg), o.shape, o.dtype) for o in read]
        flags = [o.output for o in read]
        self.function.emulation(
            [v for v, out in zip(views, flags) if not out], [v for v, out in zip(views, flags) if out]
        )


class SimulatedGraph:
    """A captured launch sequence, replayed in order."""

    def __init__(self, device: SimulatedDevice, launches: list):
        self.device, self.launches = device, launches

    def launch(self, stream) -> None:
        self.device.counts["graph_launch"] += 1
        for launch in self.launches:
            launch(stream)

    def destroy(self) -> None:
        self.launches = []


class _Stream:
    """The simulated device's stream: work runs when it is enqueued."""


@dataclass
class SimulatedDevice:
    """The CPU as a device: host byte arenas at device addresses, kernels emulated."""

    execute: bool = True
    name: str = "simulated device (CPU)"
    arch: str | None = None
    simulated: bool = True
    counts: Counter[str] = field(default_factory=Counter)
    _bases: list[int] = field(default_factory=list)
    _arenas: dict[int, np.ndarray] = field(default_factory=dict)
    _charged: dict[int, tuple[Any, int]] = field(default_factory=dict)
    """Allocations charged to a memory budget, released by ``free``."""
    _next: int = _BASE

    # -- memory ----------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        self.counts["alloc"] += 1
        base = self._next
        # Its memory is the host's: charged to the active budget (NumPy's zeroed pages are
        # only reserved, so a too-large arena would otherwise fail later, when touched).
        budget = active_budget()
        if budget is not None:
            budget.charge(int(nbytes), f"allocating {int(nbytes)} bytes on the {self.name}")
        try:
            arena = np.zeros(max(1, int(nbytes)), np.uint8)
        except (MemoryError, ValueError):  # NumPy says ValueError past its largest array
            if budget is not None:
                budget.release(int(nbytes))
            raise MemoryError(f"out of device memory: cannot allocate {int(nbytes)} bytes "
                              f"on the {self.name}") from None
        if budget is not None:
            self._charged[base] = (budget, int(nbytes))
        self._next += max(_SPACING, -(-int(nbytes) // _SPACING) * _SPACING)
        self._arenas[base] = arena
        bisect.insort(self._bases, base)
        return base

    def map_host(self, array: np.ndarray) -> int:
        """A device address for the host array ``array``, read in place (no copy): the
        simulated device's weights are views of the mapped model file. Read-only arrays
        stay read-only (a kernel writing a weight fails); ``free`` unmaps."""
        self.counts["map_host"] += 1
        base = self._next
        self._next += max(_SPACING, -(-int(array.nbytes) // _SPACING) * _SPACING)
        flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        self._arenas[base] = flat if flat.size else np.zeros(1, np.uint8)
        bisect.insort(self._bases, base)
        return base

    def free(self, ptr: int) -> None:
        self.counts["free"] += 1
        ptr = int(ptr)
        if ptr not in self._arenas:
            raise RuntimeError(f"free of {ptr:#x}, which is not an allocation")
        del self._arenas[ptr]
        self._bases.remove(ptr)
        charged = self._charged.pop(ptr, None)
        if charged is not None:
            charged[0].release(charged[1])

    @property
    def allocated_bytes(self) -> int:
        return sum(a.nbytes for a in self._arenas.values())

    def view(self, ptr: int, shape: Sequence[int], dtype) -> np.ndarray:
        """The tensor of ``shape`` and ``dtype`` at device address ``ptr``."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes == 0:  # an empty tensor has no bytes to find (the planner gives it none)
            return np.empty(tuple(shape), dtype)
        k = bisect.bisect_right(self._bases, ptr) - 1
        base = self._bases[k] if k >= 0 else None
        arena = self._arenas.get(base) if base is not None else None
        if arena is None or ptr - base + nbytes > arena.nbytes:
            raise RuntimeError(f"simulated device: {nbytes} bytes at {ptr:#x} are outside every allocation")
        return np.ndarray(tuple(shape), dtype, buffer=arena, offset=ptr - base)

    def host_view(self, ptr: int, shape: Sequence[int], dtype) -> np.ndarray:
        """``view``, read-only: what a host step reads its operands through (this
        device's memory is the host's, so a download would only copy it)."""
        array = self.view(ptr, shape, dtype)
        array.flags.writeable = False
        return array

    # -- the stream ----------------------------------------------------------------
    def create_stream(self):
        return _Stream()

    def destroy_stream(self, stream) -> None:
        pass

    def make_current(self) -> None:
        pass

    def upload(self, ptr: int, array: np.ndarray, stream) -> None:
        self.counts["upload"] += 1
        self.counts["upload_bytes"] += array.nbytes
        self.view(ptr, array.shape, array.dtype)[...] = array

    def download(self, array: np.ndarray, ptr: int, stream) -> None:
        self.counts["download"] += 1
        self.counts["download_bytes"] += array.nbytes
        array[...] = self.view(ptr, array.shape, array.dtype)

    def copy(self, dst: int, src: int, nbytes: int, stream) -> None:
        self.counts["copy"] += 1
        self.view(dst, (nbytes,), np.uint8)[...] = self.view(src, (nbytes,), np.uint8)

    def memset(self, ptr: int, nbytes: int, stream) -> None:
        if type(stream) is _Recorder:  # captured: a memset node, run when the graph is
            stream.launches.append(lambda replay: self.memset(ptr, nbytes, replay))
            return
        self.counts["memset"] += 1
        self.view(ptr, (nbytes,), np.uint8)[...] = 0

    def fill(self, ptr: int, element: np.ndarray, count: int, stream) -> None:
        """``count`` copies of the 0-d ``element`` at ``ptr`` (a splat constant's buffer)."""
        self.counts["fill"] += 1
        self.counts["fill_bytes"] += count * element.dtype.itemsize
        self.view(ptr, (count,), element.dtype)[...] = element

    def synchronize(self, stream=None) -> None:
        self.counts["synchronize"] += 1

    # -- kernels ---------------------------------------------------------------------
    def load_module(self, cubin: bytes) -> SimulatedModule:
        self.counts["load_module"] += 1
        return SimulatedModule(self, cubin)

    def prepare_launch(self, function: SimulatedFunction, grid, block, smem: int, args, operands: Sequence[Operand] = (),
                       layout: ArgumentLayout | None = None, cluster=None):
        if layout is None:  # a launch outside a plan
            layout = ArgumentLayout.of(kind for kind, _ in args)
        params = layout.pack([value for _, value in args])
        launch = SimulatedLaunch(self, function, tuple(grid), tuple(block), int(smem), params, layout.offsets,
                                 tuple(operands))
        launch.args = tuple(args)  # what was packed, for reports and tests
        launch.cluster = None if cluster is None else tuple(cluster)
        return launch

    def encode_tensor_map(self, request):
        """A TMA descriptor in the simulated format (its address first, where a launch
        reads the operand's pointer), refused where ``cuTensorMapEncodeTiled`` would be."""
        self.counts["encode_tensor_map"] += 1
        return simulated_tensor_map(request)

    def capture(self, stream, steps: Sequence[Callable[[Any], None]]) -> SimulatedGraph:
        return SimulatedGraph(self, _recorded(steps))

    def update_graph(self, graph: SimulatedGraph, stream, steps: Sequence[Callable[[Any], None]]) -> str:
        """``graph`` replays what ``steps`` enqueue now (a whole update, always in place here)."""
        self.counts["graph_update"] += 1
        graph.launches = _recorded(steps)
        return "graph"


def _recorded(steps: Sequence[Callable[[Any], None]]) -> list:
    """The launches ``steps`` enqueue, collected instead of run (a capture)."""
    launches: list = []
    recorder = _Recorder(launches)
    for step in steps:
        step(recorder)
    return launches


class _Recorder:
    """The stream handed to ``record`` during a simulated capture: launches called with
    it are collected instead of run (what stream capture does on a GPU)."""

    def __init__(self, launches: list):
        self.launches = launches
