"""Step kinds of a launch plan: how one compiled extern function runs on a device.

Every ``byoc.call_extern`` of the entry function becomes one step of the launch plan
(``partita.runtime.plan``). What the step does is up to its *handle*, read from the
extern function's record in a ``byoc.binary`` (``kind`` in the record; none means
``cutlass``; ``HANDLE_KINDS`` maps kinds to handle classes). A handle is any object with

* ``function``, ``binary``, ``path``, ``arch``, ``kind`` and ``kernel_name`` (for reports);
* ``prepare(loader) -> prepared``, called once when the executable is loaded: load the
  cubin (``loader.module(handle)``, cached per file and checked against the device's
  arch), look up kernels, opt in to shared memory, create library handles or plans.
  ``loader.emulation`` is the function's reference semantics
  (``emulation(inputs, outputs)`` on NumPy arrays), for simulated devices;
* ``prepared.argument_kinds() -> [(kernel, kinds), ...]``: each kernel its binds launch
  through ``device.prepare_launch`` and that launch's parameter kinds, known from the
  record alone: the launch plan builds every argument layout at load from them and
  checks it against the kernel's cubin, so a bind only looks layouts up;
* ``prepared.workspace_bytes(input_shapes, output_shapes) -> int``: memory per call, live
  at the call: scratch (the native split-K GEMM's partial tiles, written by one pass and
  read by the next; a library's), or, where ``prepared.zeroes_workspace``, memory the
  kernel finds zeroed and leaves so (serial split-K semaphores): zeroed once when the
  signature is first bound, and given to no other buffer;
* ``prepared.bind(device, inputs, outputs, workspace) -> [launch, ...]``, called once per
  input-shape signature with ``Tensor(ptr, shape, dtype)`` operands at their planned
  addresses: check the operands, pack the arguments, and return callables
  ``launch(stream)`` that only enqueue work (none for an empty output). The run loop
  calls them, and CUDA graph capture records them.

Kernel handles (``KernelHandle`` for CUTLASS entries; ``FusedKernelHandle`` and its
``rowwise`` / ``gemm`` / ``window`` kinds for ``cuda-codegen``'s kernels) return
``device.prepare_launch(...)`` launches. A library call (cuBLAS, cuDNN, TensorRT) is a
handle kind of its own (``partita.runtime.libraries``, imported when a record names it)
whose ``bind`` returns a callable making the library call on the stream; on the simulated
device, a simulated launch of its emulation.

Collage's measurement runs a candidate through a launch plan too
(``partita.transforms.collage.measure``): there is no other way to run a kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, StringAttr

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.lowering.binaries import cubin_file
from partita.lowering.cuda.contracts import contract_digest, contract_symbol
from partita.lowering.cuda.records import (
    FusedRecord,
    GemmRecord,
    RowwiseRecord,
    ScatterRecord,
    WindowRecord,
)
from partita.lowering.cuda.schedules import SPLIT_K_SLOTS, split_k_slots
from partita.lowering.cutlass.emitter import EntryInfo
from partita.lowering.cutlass.kernels import NUMPY_DTYPES, KernelSpec, UnsupportedKernel, problem_dims
from partita.lowering.cutlass.records import entry_from_record
from partita.runtime.device import Operand, check_operand_dtypes
from partita.runtime.hopper import Sm90KernelHandle
from partita.runtime.libraries import handle_class as library_handle_class
from partita.runtime.validate import CheckedModule, as_checked, check_cutlass_contract


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
            cubin_file(binary),
            _string(binary, "arch"),
            entry,
            roles,
            smem.value.data if isinstance(smem, IntegerAttr) else None,
        )

    def prepare(self, loader: Any) -> PreparedCutlass:
        module = loader.module(self)
        smem = self.smem
        if smem is None:
            smem = module.global_int(self.entry.smem_symbol) if hasattr(module, "global_int") else 0
        kernel = module.kernel(self.entry.name, smem, loader.emulation)
        return PreparedCutlass(self, kernel, smem, as_checked(module))

    def check(self, inputs: Sequence[tuple[tuple[int, ...], np.dtype]], out: tuple[tuple[int, ...], np.dtype]) -> dict[str, int]:
        """The run-time dims of a call on operands of these (shape, dtype); a located error
        when they do not fit the kernel."""
        spec = self.entry.spec
        if spec.is_int8 or spec.is_fp8:  # 8-bit operands, an i32 or f32 (bias and) output
            check_operand_dtypes(self.function, self.roles, inputs, out, NUMPY_DTYPES[spec.out_dtype],
                                 {role: NUMPY_DTYPES[spec.role_dtype(role)] for role in self.roles})
        else:
            check_operand_dtypes(self.function, self.roles, inputs, out, np.dtype(spec.dtype))
        try:
            dims = runtime_dims(self.entry.spec, {role: _Shaped(shape) for role, (shape, _) in zip(self.roles, inputs)})
        except PartitaError as err:
            raise PartitaError(f"@{self.function}: {err}") from None
        expected = self.entry.output_shape(dims)
        if prod(expected) != prod(out[0]):
            raise PartitaError(f"@{self.function}: output of {tuple(out[0])} does not fit the kernel's {expected}")
        return dims

class _Shaped:
    """A stand-in array carrying only a shape (``runtime_dims`` reads shapes)."""

    def __init__(self, shape):
        self.shape = tuple(shape)


@dataclass(frozen=True)
class PreparedCutlass:
    handle: KernelHandle
    kernel: Any
    smem: int
    checked: CheckedModule | None = None
    """The cubin's checked module, whose launch contract the record must match."""

    zeroes_workspace: ClassVar[bool] = True
    """Its workspace is serial split-K semaphores, which the kernel finds zeroed and leaves
    so: the plan zeroes it once and places nothing else in it."""

    def argument_kinds(self) -> list[tuple[Any, tuple[str, ...]]]:
        """The kernel this call launches and its parameter kinds, from the record alone."""
        return [(self.kernel, self.handle.entry.arg_kinds)]

    def workspace_bytes(self, shapes: Sequence[tuple[int, ...]], outputs: Sequence[tuple[int, ...]] = ()) -> int:
        dims = runtime_dims(self.handle.entry.spec, {r: _Shaped(s) for r, s in zip(self.handle.roles, shapes)})
        return self.handle.entry.workspace_bytes(dims)

    def bind(self, device: Any, inputs: Sequence[Any], outputs: Sequence[Any], workspace: int | None) -> list:
        handle, entry = self.handle, self.handle.entry
        (out,) = outputs
        dims = handle.check([(t.shape, t.dtype) for t in inputs], (out.shape, out.dtype))
        if prod(out.shape) == 0:
            return []  # M = 0: a zero grid is an invalid launch, and there is nothing to do
        pointers = {role: t.ptr for role, t in zip(handle.roles, inputs)}
        pointers["out"] = out.ptr
        if workspace is not None:
            pointers["workspace"] = workspace
        names = [p.name for p in entry.params]
        operands = [Operand(names.index(role), tuple(t.shape), np.dtype(t.dtype)) for role, t in zip(handle.roles, inputs)]
        operands.append(Operand(names.index("out"), tuple(out.shape), np.dtype(out.dtype), output=True))
        args = entry.args(pointers, dims)
        launch = device.prepare_launch(self.kernel, entry.grid(dims), entry.block, self.smem, args, operands)
        check_cutlass_contract(self.checked, entry, handle.function)  # after the geometry and layout checks
        return [launch]


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
        return cls(function, binary.sym_name.data, cubin_file(binary), _string(binary, "arch"),
                   cls.record_type.from_attr(record))

    def prepare(self, loader: Any) -> PreparedFused:
        module = loader.module(self)
        kernel = module.kernel(self.record.entry, self.record.dynamic_smem, loader.emulation)
        sms = loader.multiprocessor_count
        return PreparedFused(self, kernel, as_checked(module), split_k_slots(sms) if sms else SPLIT_K_SLOTS)


@dataclass(frozen=True)
class PreparedFused:
    handle: FusedKernelHandle
    kernel: Any
    checked: CheckedModule | None = None
    """The cubin's checked module, whose launch contract the record must match."""
    slots: int = SPLIT_K_SLOTS
    """Tensor-core tiles the device runs at once: how far a split-K GEMM splits."""

    def argument_kinds(self) -> list[tuple[Any, tuple[str, ...]]]:
        """The kernel this call launches and its parameter kinds, from the record alone."""
        return [(self.kernel, self.handle.record.arg_kinds)]

    def workspace_bytes(self, shapes: Sequence[tuple[int, ...]], outputs: Sequence[tuple[int, ...]] = ()) -> int:
        # a split-K GEMM's partial tiles (scratch: each pass writes what the next reads)
        return self.handle.record.workspace_bytes(shapes, outputs[0], self.slots) if outputs else 0

    def bind(self, device: Any, inputs: Sequence[Any], outputs: Sequence[Any], workspace: int | None) -> list:
        rec = self.handle.record
        (out,) = outputs
        shapes = [tuple(t.shape) for t in inputs]
        why = rec.check_inputs(shapes, [np.dtype(t.dtype) for t in inputs]) or rec.check_output(out.shape, np.dtype(out.dtype))
        if why is not None:
            raise PartitaError(f"@{self.handle.function}: {why}")
        if prod(out.shape) == 0:
            return []
        dims = rec.runtime_dims(shapes)
        operands = [Operand(i, tuple(t.shape), np.dtype(t.dtype)) for i, t in enumerate(inputs)]
        operands.append(Operand(len(inputs), tuple(out.shape), np.dtype(out.dtype), output=True))
        passes = rec.launches(shapes, tuple(out.shape), self.slots)  # two for a split-K GEMM: its slices, then their sum
        if len(passes) > 1 and not workspace:
            raise PartitaError(f"@{self.handle.function}: its K slices need a workspace, and the call has none")
        launches = [device.prepare_launch(self.kernel, grid, block, rec.dynamic_smem,
                                          rec.args([t.ptr for t in inputs], out.ptr, dims, workspace or 0, k_slices),
                                          operands)
                    for grid, block, k_slices in passes]
        if self.checked is not None:  # after the geometry and layout checks, before any run
            handle = self.handle
            self.checked.check_contract(rec.entry, contract_symbol(rec.entry),
                                        lambda: contract_digest(handle.function, handle.kind, rec), handle.function)
        return launches


@dataclass(frozen=True)
class RowwiseKernelHandle(FusedKernelHandle):
    """A ``rowwise`` kernel (softmax / layer_norm, or a reduction over the last axes,
    with its epilogue): one block of ``block`` threads per row, static shared memory only."""

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


@dataclass(frozen=True)
class ScatterKernelHandle(FusedKernelHandle):
    """A ``scatter`` kernel (an update written in place into the argument its result is
    tied to): one thread per element it stores, grid-stride; the call's ``outs`` is that
    argument's buffer (``lower-extern-calls``)."""

    kind: ClassVar[str] = "scatter"
    record_type: ClassVar[type[FusedRecord]] = ScatterRecord


Handle = KernelHandle | FusedKernelHandle
"""A compiled kernel: ``function``, ``binary``, ``path``, ``arch``, ``kind`` and
``prepare(loader)``."""

#: Record kind -> handle class; a record without ``kind`` is a CUTLASS one.
HANDLE_KINDS: dict[str, Any] = {
    h.kind: h for h in (KernelHandle, FusedKernelHandle, RowwiseKernelHandle, GemmKernelHandle, WindowKernelHandle,
                        ScatterKernelHandle, Sm90KernelHandle)
}


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
            handle_class = HANDLE_KINDS.get(kind_name) or library_handle_class(kind_name)
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
    if spec.op in ("dense", "batch_matmul"):
        try:
            dims = problem_dims(spec, {role: tuple(a.shape) for role, a in arrays.items()})
        except UnsupportedKernel as err:
            raise PartitaError(f"{spec.op} kernel: {err}") from None
    else:
        dims["N"], dims["H"], dims["W"] = arrays["x"].shape[:3]
        dims["P"], dims["Q"] = spec.conv_output(dims)
        residual = arrays.get("residual")  # read as C in the output's NHWC layout: its very shape
        output = (dims["N"], dims["P"], dims["Q"], spec.filter_shape[0])  # type: ignore[index]
        if residual is not None and tuple(residual.shape) != output:
            raise PartitaError(f"conv2d kernel: the residual {list(residual.shape)} is not the output's {list(output)}")
    return {name: dims[name] for name in spec.dynamic_dims}


