"""Library calls as launch-plan steps: cuBLASLt, the cuDNN frontend, TensorRT.

A library partition's record (``partita.lowering.library``) is read into a handle, one
class per library (``cublas.CublasLtHandle``, ``cudnn.CudnnGraphHandle``,
``tensorrt.TensorRTHandle``). A handle says what the library needs, in four methods:

* ``load_library() -> lib``: the binding, imported on first use (a missing extra is a
  ``PartitaError`` naming it, see :func:`require`);
* ``make_plan(lib, shapes, dtypes) -> plan``: descriptors, heuristics, engines for one
  shape signature;
* ``workspace_bytes(plan)``: the device scratch a call needs;
* ``launch(lib, plan, stream, inputs, outputs, workspace)``: one call on ``stream`` with
  device pointers only; nothing is allocated or copied;
* ``emulate(inputs)``: its result without a device, or ``None`` for the partition's
  reference body;
* ``release_plan(lib, plan)``: destroys what ``make_plan`` created (handles,
  descriptors, execution contexts), called by the launch plan's ``close()``.

:class:`LibraryHandle` turns that into the launch plan's step protocol
(``partita.runtime.extern``): ``prepare(loader)`` at load makes the plans of static
signatures right away; ``bind`` (once per shape signature) picks the cached plan and
returns one callable that makes the call on the runtime's stream into the plan's memory,
so CUDA graph capture records it like a kernel. On the simulated device the call is a
simulated launch of the handle's emulation at the bound pointers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from partita.ir import PartitaError
from partita.runtime.device import Operand, SimulatedFunction

__all__ = ["LIBRARY_HANDLE_KINDS", "LibraryHandle", "LibraryLaunch", "PreparedLibraryCall", "library_binding", "require"]

#: Record kind -> (module, class) of its handle, imported on first use so that a model
#: without library partitions never imports a library.
LIBRARY_HANDLE_KINDS: dict[str, tuple[str, str]] = {
    "cublaslt": ("partita.runtime.libraries.cublas", "CublasLtHandle"),
    "cudnn": ("partita.runtime.libraries.cudnn", "CudnnGraphHandle"),
    "tensorrt": ("partita.runtime.libraries.tensorrt", "TensorRTHandle"),
}


def handle_class(kind: str) -> Any:
    """The handle class of a library record kind, or None."""
    if kind not in LIBRARY_HANDLE_KINDS:
        return None
    module, name = LIBRARY_HANDLE_KINDS[kind]
    return getattr(importlib.import_module(module), name)


def require(module: str, extra: str, what: str, probe: Callable[[Any], Any] | None = None) -> Any:
    """Imports ``module`` or says which extra installs it. ``probe(module)`` then loads
    the shared library behind the bindings (bindings import without it): a failure
    there is the same missing extra (or no driver), said the same way."""
    try:
        loaded = importlib.import_module(module)
        if probe is not None:
            probe(loaded)
        return loaded
    except Exception as err:  # noqa: BLE001 - ImportError, or the library's own load error
        raise PartitaError(
            f"the '{extra}' target needs {what} (Python module '{module}': {type(err).__name__}: {err}); "
            f"install it with: pip install 'partita[{extra}]' (and a CUDA driver)"
        ) from None


def library_binding(libraries: dict[str, Any], handle: LibraryHandle) -> Any:
    """``handle``'s library from ``libraries`` (bindings or stand-ins by library name),
    loaded into it on first use."""
    lib = libraries.get(handle.library)
    if lib is None:
        lib = libraries[handle.library] = handle.load_library()
    return lib


class LibraryHandle:
    """Base of the library handles: the step protocol over the four methods above.
    Subclasses are dataclasses with ``function`` and ``binary`` and set ``kind`` and
    ``library`` (the target and extra name)."""

    function: str
    binary: str
    kind: ClassVar[str]
    library: ClassVar[str]
    arch: ClassVar[str | None] = None  # no cubin of ours

    @property
    def kernel_name(self) -> str:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def load_library(self) -> Any:
        raise NotImplementedError

    def make_plan(self, lib: Any, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[str]) -> Any:
        raise NotImplementedError

    def workspace_bytes(self, plan: Any) -> int:
        raise NotImplementedError

    def launch(self, lib: Any, plan: Any, stream: int, inputs: Sequence[int], outputs: Sequence[int],
               workspace: int) -> None:
        raise NotImplementedError

    def emulate(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray] | None:
        return None

    def release_plan(self, lib: Any, plan: Any) -> None:
        """Destroys what ``make_plan`` created (nothing, unless the library says)."""

    # -- the launch plan's step protocol ----------------------------------------------
    def prepare(self, loader: Any) -> PreparedLibraryCall:
        """At load: the library (on a device), and the plan of a static signature."""
        shapes = [shape for shape, _ in loader.operands]
        dtypes = tuple(str(dtype) for _, dtype in loader.operands)
        prepared = PreparedLibraryCall(self, loader.device, dtypes, loader.emulation,
                                       operands=len(loader.operands) + loader.results)
        if not getattr(loader.device, "simulated", False):
            prepared.lib = loader.library(self)
            if all(d >= 0 for shape in shapes for d in shape):
                prepared.plan(shapes)
        return prepared


@dataclass
class PreparedLibraryCall:
    """A library call of the launch plan: its plans by shape signature (made once)."""

    handle: LibraryHandle
    device: Any
    dtypes: tuple[str, ...]
    emulation: Callable[[list[np.ndarray], list[np.ndarray]], None] | None
    lib: Any = None
    plans: dict[tuple, Any] = field(default_factory=dict)
    operands: int = 0
    """Inputs and outputs of the call: the pointers a simulated launch of it takes."""

    @property
    def simulated(self) -> bool:
        return bool(getattr(self.device, "simulated", False))

    def plan(self, shapes: Sequence[Sequence[int]]) -> Any:
        key = tuple(tuple(int(d) for d in s) for s in shapes)
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = self.handle.make_plan(self.lib, key, self.dtypes)
        return plan

    def close(self) -> None:
        """Releases every plan's library objects (each once)."""
        plans, self.plans = list(self.plans.values()), {}
        for plan in plans:
            self.handle.release_plan(self.lib, plan)

    def argument_kinds(self) -> list[tuple[Any, tuple[str, ...]]]:
        """On the simulated device, a launch of one pointer per operand (its emulation,
        no cubin's kernel); on a GPU the library call launches nothing of ours."""
        return [(None, ("ptr",) * self.operands)] if self.simulated else []

    def workspace_bytes(self, shapes: Sequence[tuple[int, ...]], outputs: Sequence[tuple[int, ...]] = ()) -> int:
        if self.simulated:
            return 0
        return max(int(self.handle.workspace_bytes(self.plan(shapes))), 0)

    def bind(self, device: Any, inputs: Sequence[Any], outputs: Sequence[Any], workspace: int | None) -> list:
        handle = self.handle
        if any(np.prod(t.shape, dtype=np.int64) == 0 for t in outputs):
            return []
        if self.simulated:
            function = SimulatedFunction(handle.kernel_name, self._emulate)
            tensors = [*inputs, *outputs]
            args = [("ptr", int(t.ptr)) for t in tensors]
            operands = [Operand(i, tuple(t.shape), np.dtype(t.dtype), output=i >= len(inputs))
                        for i, t in enumerate(tensors)]
            return [device.prepare_launch(function, (1, 1, 1), (1, 1, 1), 0, args, operands)]
        plan = self.plan([t.shape for t in inputs])
        return [LibraryLaunch(handle, self.lib, plan, tuple(int(t.ptr) for t in inputs),
                              tuple(int(t.ptr) for t in outputs), int(workspace or 0))]

    def _emulate(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        results = self.handle.emulate(inputs)
        if results is None:
            if self.emulation is None:
                raise PartitaError(f"@{self.handle.function}: nothing emulates this library call")
            self.emulation(inputs, outputs)
            return
        for out, result in zip(outputs, results, strict=True):
            np.copyto(out, np.asarray(result).reshape(out.shape), casting="unsafe")


@dataclass(frozen=True)
class LibraryLaunch:
    """One library call bound to its plan and device pointers: calling it enqueues the
    call on ``stream`` (the hot loop's step)."""

    handle: LibraryHandle
    lib: Any
    plan: Any
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    workspace: int
    warm_up_first: ClassVar[bool] = True
    """A graph records it only after one eager call at its shapes (what TensorRT's first
    enqueue after new shapes and the cuDNN engines' first execute need)."""

    @property
    def label(self) -> str:
        return f"@{self.handle.function} ({self.handle.kernel_name})"

    def __call__(self, stream: Any) -> None:
        self.handle.launch(self.lib, self.plan, int(stream), self.inputs, self.outputs, self.workspace)
