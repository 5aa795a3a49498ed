"""The runtime's contracts as ``typing.Protocol``s: what a launch plan asks of a device, of
a loaded cubin, of a prepared launch and of a library handle.

Both devices (``partita.runtime.cuda.CudaDevice`` and the simulated
``partita.runtime.device.SimulatedDevice``) and the test stand-ins satisfy them
structurally; nothing has to inherit from them. Each is ``runtime_checkable``, so a
test can say ``isinstance(device, Device)`` (which checks that the members exist, not
their signatures).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from partita.runtime.arguments import ArgumentLayout

__all__ = [
    "CapturedGraph", "Device", "LibraryHandle", "LoadedModule", "PreparedLaunch", "TimingDevice",
]


@runtime_checkable
class PreparedLaunch(Protocol):
    """A kernel launch with its argument buffer packed once per shape signature; the plan
    repoints input pointers and calls it on the stream."""

    def set_pointer(self, arg: int, ptr: int) -> None: ...

    def __call__(self, stream: Any) -> None: ...


@runtime_checkable
class CapturedGraph(Protocol):
    """A stream's work recorded once (a CUDA graph), replayed per run."""

    def launch(self, stream: Any) -> None: ...

    def destroy(self) -> None: ...


@runtime_checkable
class LoadedModule(Protocol):
    """A cubin loaded on a device: its kernels by entry name."""

    def kernel(self, name: str, smem: int = 0, emulation: Callable | None = None) -> Any: ...

    def unload(self) -> None: ...


@runtime_checkable
class Device(Protocol):
    """What a launch plan needs of a device, and nothing more (see
    ``partita.runtime.device`` for the semantics of each call). The runtime also uses
    ``wait_for(producer_stream, stream)`` and ``close()`` where a device has them."""

    name: str
    simulated: bool

    def alloc(self, nbytes: int) -> Any: ...

    def free(self, buf: Any) -> None: ...

    def create_stream(self) -> Any: ...

    def destroy_stream(self, stream: Any) -> None: ...

    def make_current(self) -> None: ...

    def upload(self, ptr: int, array: np.ndarray, stream: Any) -> None: ...

    def download(self, array: np.ndarray, ptr: int, stream: Any) -> None: ...

    def host_view(self, ptr: int, shape: Sequence[int], dtype: Any) -> np.ndarray | None:
        """A read-only view of device memory where it is host memory (the simulated
        device: a host step reads its operands in place), else None (download them)."""
        ...

    def copy(self, dst: int, src: int, nbytes: int, stream: Any) -> None: ...

    def memset(self, ptr: int, nbytes: int, stream: Any) -> None: ...

    def synchronize(self, stream: Any = None) -> None: ...

    def load_module(self, cubin: bytes) -> LoadedModule: ...

    def prepare_launch(self, function: Any, grid: Sequence[int], block: Sequence[int], smem: int,
                       args: Sequence[tuple[str, object]], operands: Sequence[Any] = (),
                       layout: ArgumentLayout | None = None, cluster: Sequence[int] | None = None) -> PreparedLaunch:
        """A launch packed once; ``layout`` is the plan's layout of these argument kinds
        (built when absent), so the device only fills in values; ``cluster``: CTAs per
        thread-block cluster (a Hopper kernel's cluster launch)."""
        ...

    def encode_tensor_map(self, request: Any) -> Any:
        """A TMA descriptor (``partita.runtime.tma.TensorMap``) for a Hopper kernel's operand."""
        ...

    def capture(self, stream: Any, steps: Sequence[Callable[[Any], None]]) -> CapturedGraph:
        """What ``steps`` (each called with the stream) enqueue, recorded as a graph."""
        ...


@runtime_checkable
class TimingDevice(Device, Protocol):
    """A device whose stream can be timed: events recorded on the stream between steps
    and read after a synchronization (``partita.runtime.profile``; Collage's
    ``cost=measure`` times its candidates' plans with it). The simulated device has no
    clock and is no ``TimingDevice``: its profiles say "n/a"."""

    def create_event(self) -> Any: ...

    def record_event(self, event: Any, stream: Any) -> None: ...

    def elapsed_ms(self, start: Any, stop: Any) -> float: ...

    def destroy_event(self, event: Any) -> None: ...


@runtime_checkable
class LibraryHandle(Protocol):
    """A library call as a launch-plan step (``partita.runtime.libraries``): the binding,
    a plan per shape signature, its scratch, the call on a stream, its emulation."""

    function: str
    binary: str

    def load_library(self) -> Any: ...

    def make_plan(self, lib: Any, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[np.dtype]) -> Any: ...

    def workspace_bytes(self, plan: Any) -> int: ...

    def launch(self, lib: Any, plan: Any, stream: Any, inputs: Sequence[int], outputs: Sequence[int],
               workspace: int) -> None: ...

    def emulate(self, inputs: Sequence[np.ndarray]) -> Any: ...
