"""Running extern functions: compiled kernels on a CUDA device when one is present, else
the partition's reference semantics on the CPU (kept beside the declaration).

``ModuleRunner`` is the reference executor with ``byoc.call_extern`` routed through an
``ExternRuntime``, so the host program runs on NumPy and each extern call goes to the
device (or is emulated), and the runtime counts which path every call took.

Kernel records come in kinds (``kind`` in the record; none means ``cutlass``), each read
into a handle class of ``HANDLE_KINDS`` that knows how to launch its kernel:
``KernelHandle`` (CUTLASS entries) and ``FusedKernelHandle`` (``cuda-codegen``'s fused
injective kernels), with ``RowwiseKernelHandle`` (a block per row: softmax, layer_norm) and
``GemmKernelHandle`` (16x16 tiles on a 2-D grid, batch on z) and ``WindowKernelHandle`` (a
thread per output element looping over its pooling window) for its anchored kernels.
The runtime only loads cubins and dispatches.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, StringAttr
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.lowering.cuda.records import FusedRecord, GemmRecord, RowwiseRecord, WindowRecord
from partita.lowering.cutlass.emitter import EntryInfo
from partita.lowering.cutlass.kernels import KernelSpec
from partita.lowering.cutlass.records import entry_from_record
from partita.lowering.library import LibraryCalls, is_library_handle, static_signatures
from partita.runtime.reference import ReferenceExecutor
from partita.runtime.reference.byoc_impls import ByocFunctions


@dataclass(frozen=True)
class KernelHandle:
    """One extern function's compiled CUTLASS kernel, as recorded in a ``byoc.binary``."""

    function: str
    binary: str
    path: Path
    arch: str
    entry: EntryInfo
    roles: tuple[str, ...]
    smem: int | None
    kind: ClassVar[str] = "cutlass"

    @property
    def kernel_name(self) -> str:
        return self.entry.config.name

    @classmethod
    def from_record(cls, function: str, binary: byoc.BinaryOp, record: DictionaryAttr) -> KernelHandle:
        entry, roles = entry_from_record(record)
        smem = record.data.get("smem")
        return cls(
            function,
            binary.sym_name.data,
            Path(_string(binary, "path")),
            _string(binary, "arch"),
            entry,
            roles,
            smem.value.data if isinstance(smem, IntegerAttr) else None,
        )

    def launch(self, device: Any, module: Any, inputs: Sequence[np.ndarray], out: np.ndarray) -> None:
        """Runs the kernel on ``device`` (``module`` is the loaded cubin) into ``out``."""
        from partita.runtime.cuda import launch_entry

        arrays = {role: np.ascontiguousarray(array) for role, array in zip(self.roles, inputs, strict=True)}
        dims = runtime_dims(self.entry.spec, arrays)
        if prod(self.entry.output_shape(dims)) != out.size:
            raise PartitaError(f"@{self.function}: output of {out.shape} does not fit the kernel's {self.entry.output_shape(dims)}")
        buffers = {role: device.to_device(array) for role, array in arrays.items()}
        buffers["out"] = device.alloc(out.nbytes)
        if (workspace := self.entry.workspace_bytes(dims)) > 0:
            buffers["workspace"] = device.alloc(workspace)
            device.memset0(buffers["workspace"])
        try:
            launch_entry(module, self.entry, {k: int(v) for k, v in buffers.items()}, dims, smem=self.smem)
            _copy_back(device, buffers["out"], out)
        finally:
            for buffer in buffers.values():
                device.free(buffer)


@dataclass(frozen=True)
class FusedKernelHandle:
    """One extern function's fused injective kernel (``cuda-codegen``): one thread per
    output element, grid-stride; arguments are the input pointers, the output pointer
    and the run-time dims as ``int``."""

    function: str
    binary: str
    path: Path
    arch: str
    record: FusedRecord
    kind: ClassVar[str] = "fused"
    record_type: ClassVar[type[FusedRecord]] = FusedRecord

    @property
    def kernel_name(self) -> str:
        return f"{self.record.entry} ({self.kind}, {self.record.block} threads/block)"

    @classmethod
    def from_record(cls, function: str, binary: byoc.BinaryOp, record: DictionaryAttr) -> FusedKernelHandle:
        return cls(function, binary.sym_name.data, Path(_string(binary, "path")), _string(binary, "arch"),
                   cls.record_type.from_attr(record))

    def launch(self, device: Any, module: Any, inputs: Sequence[np.ndarray], out: np.ndarray) -> None:
        rec = self.record
        shapes = [np.shape(x) for x in inputs]
        why = rec.check_inputs(shapes, [np.asarray(x).dtype for x in inputs]) or rec.check_output(out.shape, out.dtype)
        if why is not None:
            raise PartitaError(f"@{self.function}: {why}")
        if out.size == 0:
            return
        buffers = [device.to_device(np.ascontiguousarray(x)) for x in inputs]
        buffers.append(device.alloc(out.nbytes))
        try:
            args = rec.args([int(b) for b in buffers[:-1]], int(buffers[-1]), rec.runtime_dims(shapes))
            grid, block = rec.geometry(out.shape)
            module.launch(rec.entry, grid, block, args, 0)
            _copy_back(device, buffers[-1], out)
        finally:
            for buffer in buffers:
                device.free(buffer)


@dataclass(frozen=True)
class RowwiseKernelHandle(FusedKernelHandle):
    """A ``rowwise`` kernel (softmax / layer_norm with its epilogue): one block of
    ``block`` threads per row, static shared memory only."""

    kind: ClassVar[str] = "rowwise"
    record_type: ClassVar[type[FusedRecord]] = RowwiseRecord


@dataclass(frozen=True)
class GemmKernelHandle(FusedKernelHandle):
    """A ``gemm`` kernel (dense / matmul / batch_matmul with its epilogue): ``tile x
    tile`` threads per output tile, grid ``(N tiles, M tiles, batch)``."""

    kind: ClassVar[str] = "gemm"
    record_type: ClassVar[type[FusedRecord]] = GemmRecord


@dataclass(frozen=True)
class WindowKernelHandle(FusedKernelHandle):
    """A ``window`` kernel (max / avg / global-avg pool with its epilogue): one thread per
    output element, grid-stride, like a fused injective kernel."""

    kind: ClassVar[str] = "window"
    record_type: ClassVar[type[FusedRecord]] = WindowRecord


Handle = KernelHandle | FusedKernelHandle
"""A compiled kernel: ``function``, ``binary``, ``path``, ``arch``, ``kind`` and
``launch(device, module, inputs, out)``."""

#: Record kind -> handle class; a record without ``kind`` is a CUTLASS one.
HANDLE_KINDS: dict[str, Any] = {
    h.kind: h for h in (KernelHandle, FusedKernelHandle, RowwiseKernelHandle, GemmKernelHandle, WindowKernelHandle)
}

#: Library record kinds -> (module, class) of their handle, imported on first use so a
#: model without library partitions never imports a library's codegen.
LIBRARY_HANDLE_KINDS: dict[str, tuple[str, str]] = {
    "cublaslt": ("partita.lowering.cublas.handle", "CublasLtHandle"),
    "cudnn": ("partita.lowering.cudnn.handle", "CudnnGraphHandle"),
    "tensorrt": ("partita.lowering.tensorrt.handle", "TensorRTHandle"),
}


def _handle_class(kind: str) -> Any:
    if kind in HANDLE_KINDS:
        return HANDLE_KINDS[kind]
    if kind in LIBRARY_HANDLE_KINDS:
        import importlib

        module, cls = LIBRARY_HANDLE_KINDS[kind]
        return getattr(importlib.import_module(module), cls)
    return None


def _copy_back(device: Any, buffer: Any, out: np.ndarray) -> None:
    device.synchronize()
    result = np.empty(out.shape, out.dtype)
    device.copy_dtoh(result, buffer)
    np.copyto(out, result)


def kernel_handles(module: ModuleOp) -> dict[str, Handle]:
    """Every extern function that has a compiled kernel, keyed by function name."""
    handles = {}
    for op in module.ops:
        if not isinstance(op, byoc.BinaryOp):
            continue
        kernels = op.attributes["kernels"]
        assert isinstance(kernels, DictionaryAttr)
        for function, record in kernels.data.items():
            assert isinstance(record, DictionaryAttr)
            kind = record.data.get("kind")
            kind_name = kind.data if isinstance(kind, StringAttr) else KernelHandle.kind
            handle_class = _handle_class(kind_name)
            if handle_class is None:
                raise PartitaError(f"byoc.binary @{op.sym_name.data}: @{function} has a kernel of unknown kind '{kind_name}'")
            handles[function] = handle_class.from_record(function, op, record)
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

    handles: dict[str, Handle]
    device: Any = None
    launches: Counter[str] = field(default_factory=Counter)
    emulated: Counter[str] = field(default_factory=Counter)
    libraries: dict[str, Any] = field(default_factory=dict)
    """Library bindings by target name (``cublas``...); stand-ins go here in tests."""
    _modules: dict[Path, Any] = field(default_factory=dict)
    _library_calls: LibraryCalls | None = None

    @classmethod
    def for_module(cls, module: ModuleOp, device: Any = "auto", libraries: dict[str, Any] | None = None) -> ExternRuntime:
        """The runtime of ``module`` on ``device``; with a device, the plans of library
        calls with static shapes are made here, at load."""
        if device == "auto":
            from partita.runtime.cuda import CudaDevice, cuda_available

            device = CudaDevice() if cuda_available() else None
        runtime = cls(kernel_handles(module), device, libraries=dict(libraries or {}))
        if device is not None:
            runtime.library_calls.preload(runtime.handles, static_signatures(module))
        return runtime

    @property
    def library_calls(self) -> LibraryCalls:
        if self._library_calls is None:
            self._library_calls = LibraryCalls(self.libraries, {})
        return self._library_calls

    def call(
        self, name: str, inputs: Sequence[np.ndarray], outs: Sequence[np.ndarray], emulate: Callable[[], tuple]
    ) -> tuple:
        handle = self.handles.get(name)
        if handle is None or self.device is None:
            self.emulated[name] += 1
            if handle is not None and is_library_handle(handle):
                # A library handle may emulate its own artifact (TensorRT's ONNX sub-model).
                results = handle.emulate(inputs)
                if results is not None:
                    for out, result in zip(outs, results, strict=True):
                        np.copyto(out, np.asarray(result).reshape(out.shape), casting="unsafe")
                    return tuple(outs)
            return emulate()
        self.launches[name] += 1
        if is_library_handle(handle):
            self.library_calls.call(self.device, handle, inputs, outs, _copy_back)
            return tuple(outs)
        return self._launch(handle, inputs, outs)

    def _module(self, handle: Handle) -> Any:
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

    def _launch(self, handle: Handle, inputs: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> tuple:
        (out,) = outs
        handle.launch(self.device, self._module(handle), inputs, out)
        return (out,)

    def describe(self) -> str:
        """Where the kernels ran, said plainly."""
        if not self.handles:
            return "no compiled kernels"
        archs = sorted({h.arch for h in self.handles.values() if not is_library_handle(h)})
        libraries = sorted({h.library for h in self.handles.values() if is_library_handle(h)})
        what = " and ".join(
            part for part in (f"kernels compiled for {', '.join(archs)}" if archs else "",
                              f"library calls ({', '.join(libraries)})" if libraries else "") if part
        )
        if self.device is None:
            return f"{what} but emulated on the CPU (no CUDA device)"
        return f"{what}, running on {self.device.name}"


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
