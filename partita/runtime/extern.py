"""Running extern functions: compiled kernels on a CUDA device when one is present, else
the partition's reference semantics on the CPU (kept beside the declaration).

``ModuleRunner`` is the reference executor with ``byoc.call_extern`` routed through an
``ExternRuntime``, so the host program runs on NumPy and each extern call goes to the
device (or is emulated), and the runtime counts which path every call took.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, StringAttr
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.lowering.cutlass.emitter import EntryInfo
from partita.lowering.cutlass.kernels import KernelSpec
from partita.lowering.cutlass.records import entry_from_record
from partita.runtime.reference import ReferenceExecutor
from partita.runtime.reference.byoc_impls import ByocFunctions


@dataclass(frozen=True)
class KernelHandle:
    """One extern function's compiled kernel, as recorded in a ``byoc.binary``."""

    function: str
    binary: str
    path: Path
    arch: str
    entry: EntryInfo
    roles: tuple[str, ...]
    smem: int | None


def kernel_handles(module: ModuleOp) -> dict[str, KernelHandle]:
    """Every extern function that has a compiled kernel, keyed by function name."""
    handles = {}
    for op in module.ops:
        if not isinstance(op, byoc.BinaryOp):
            continue
        kernels = op.attributes["kernels"]
        assert isinstance(kernels, DictionaryAttr)
        for function, record in kernels.data.items():
            assert isinstance(record, DictionaryAttr)
            entry, roles = entry_from_record(record)
            smem = record.data.get("smem")
            handles[function] = KernelHandle(
                function,
                op.sym_name.data,
                Path(_string(op, "path")),
                _string(op, "arch"),
                entry,
                roles,
                smem.value.data if isinstance(smem, IntegerAttr) else None,
            )
    return handles


def _string(op: byoc.BinaryOp, name: str) -> str:
    attr = op.attributes.get(name)
    if not isinstance(attr, StringAttr):
        raise PartitaError(f"byoc.binary @{op.sym_name.data} has no '{name}'")
    return attr.data


def runtime_dims(spec: KernelSpec, arrays: dict[str, np.ndarray]) -> dict[str, int]:
    """Values of the kernel's run-time dimensions, read off its inputs."""
    dims: dict[str, int] = {}
    if spec.op == "dense":
        dims["M"] = prod(arrays["x"].shape[:-1])
    elif spec.op == "batch_matmul":
        dims["batch"], dims["M"] = arrays["a"].shape[0], arrays["a"].shape[1]
    else:
        dims["N"] = arrays["x"].shape[0]
    return {name: dims[name] for name in spec.dynamic_dims}


@dataclass
class ExternRuntime:
    """Dispatches extern calls; ``device`` is a ``partita.runtime.cuda.CudaDevice`` (or
    anything with its interface) or ``None`` for CPU emulation."""

    handles: dict[str, KernelHandle]
    device: Any = None
    launches: Counter[str] = field(default_factory=Counter)
    emulated: Counter[str] = field(default_factory=Counter)
    _modules: dict[Path, Any] = field(default_factory=dict)

    @classmethod
    def for_module(cls, module: ModuleOp, device: Any = "auto") -> ExternRuntime:
        if device == "auto":
            from partita.runtime.cuda import CudaDevice, cuda_available

            device = CudaDevice() if cuda_available() else None
        return cls(kernel_handles(module), device)

    def call(
        self, name: str, inputs: Sequence[np.ndarray], outs: Sequence[np.ndarray], emulate: Callable[[], tuple]
    ) -> tuple:
        handle = self.handles.get(name)
        if handle is None or self.device is None:
            self.emulated[name] += 1
            return emulate()
        self.launches[name] += 1
        return self._launch(handle, inputs, outs)

    def _module(self, handle: KernelHandle) -> Any:
        module = self._modules.get(handle.path)
        if module is None:
            try:
                cubin = handle.path.read_bytes()
            except OSError as err:
                raise PartitaError(
                    f"the cubin of @{handle.binary} is gone ({err.strerror}: {handle.path}); compile the model again"
                ) from None
            module = self._modules[handle.path] = self.device.load_module(cubin)
        return module

    def _launch(self, handle: KernelHandle, inputs: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> tuple:
        from partita.runtime.cuda import launch_entry

        (out,) = outs
        arrays = {role: np.ascontiguousarray(array) for role, array in zip(handle.roles, inputs, strict=True)}
        dims = runtime_dims(handle.entry.spec, arrays)
        if prod(handle.entry.output_shape(dims)) != out.size:
            raise PartitaError(f"@{handle.function}: output of {out.shape} does not fit the kernel's {handle.entry.output_shape(dims)}")
        buffers = {role: self.device.to_device(array) for role, array in arrays.items()}
        buffers["out"] = self.device.alloc(out.nbytes)
        if (workspace := handle.entry.workspace_bytes(dims)) > 0:
            buffers["workspace"] = self.device.alloc(workspace)
            self.device.memset0(buffers["workspace"])
        try:
            launch_entry(
                self._module(handle), handle.entry, {k: int(v) for k, v in buffers.items()}, dims, smem=handle.smem
            )
            self.device.synchronize()
            result = np.empty(out.shape, out.dtype)
            self.device.copy_dtoh(result, buffers["out"])
        finally:
            for buffer in buffers.values():
                self.device.free(buffer)
        np.copyto(out, result)
        return (out,)

    def describe(self) -> str:
        """Where the kernels ran, said plainly."""
        if not self.handles:
            return "no compiled kernels"
        archs = sorted({h.arch for h in self.handles.values()})
        if self.device is None:
            return f"kernels compiled for {', '.join(archs)} but emulated on the CPU (no CUDA device)"
        return f"kernels compiled for {', '.join(archs)}, running on {self.device.name}"


@register_impls
class ExternFunctions(InterpreterFunctions):
    """``byoc.call_extern`` through an ``ExternRuntime`` (emulation as the fallback)."""

    def __init__(self, runtime: ExternRuntime):
        self.runtime = runtime
        self.emulation = ByocFunctions()

    @impl(byoc.CallExternOp)
    def run_call_extern(self, interpreter: Interpreter, op: byoc.CallExternOp, args: tuple[Any, ...]):
        n_in = len(op.inputs)
        return self.runtime.call(
            op.callee.string_value(),
            args[:n_in],
            args[n_in:],
            lambda: self.emulation.run_call_extern(interpreter, op, args).values,
        )


class ModuleRunner(ReferenceExecutor):
    """Runs a lowered module: NumPy on the host, extern calls through ``runtime``."""

    def __init__(self, module: ModuleOp, runtime: ExternRuntime | None = None):
        super().__init__(module)
        self.runtime = runtime if runtime is not None else ExternRuntime.for_module(module)
        self.interpreter.register_implementations(ExternFunctions(self.runtime), override=True)
