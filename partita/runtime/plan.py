"""The launch plan: a lowered entry function made into data once, run by a tight loop.

IREE's HAL and TVM's VM shape this module: nothing on the hot path interprets IR.

* **Load** (``LaunchPlan``): the entry function (after ``lower-extern-calls`` and
  ``plan-memory``) is read once into steps: each ``byoc.call_extern`` becomes a kernel
  step (its handle's ``prepare``: cubins loaded, kernels looked up; see
  ``partita.runtime.extern`` for step kinds) or, without a compiled kernel, an explicit
  host step; each ``nn`` op left in the function is a host step too, but an
  ``nn.reshape``, a view of its input's buffer (``buffer_of``), is no step; ``nn.constant``
  weights are uploaded to the device once, into one parameter buffer; the static arena
  ``plan-memory`` sized (``byoc.arena_size``) is allocated once.
* **Bind** (``BoundPlan``, once per input-shape signature, cached): index values
  (``tensor.dim``, shape functions, ``arith``) and host-op result shapes are evaluated,
  every dynamically sized tensor (inputs, dynamic ``byoc.alloc_tensor``s, host-op
  results, split-k workspaces) is placed in a per-signature arena by the same
  liveness-based planner as ``plan-memory`` (``assign_offsets``), and every launch is
  packed with its final pointers. Static shapes can then be captured as a CUDA graph.
* **Run**: inputs uploaded once each (a device input only kernels read is passed to
  them in place, its pointer patched into their packed arguments; under a CUDA graph, or
  when the host or the output reads it, it is copied device-to-device once), the
  bound launches enqueued on the runtime's one stream (or one graph launch), outputs
  downloaded once each, one synchronization. A host step is the only exception, and it
  is explicit: its downloads, synchronization and uploads are counted per run and listed
  by ``describe()`` and ``partita-run --report``.

The signature cache is the pool for dynamic sizes: a shape seen before reuses its arena
(no allocation), a new one allocates one arena, and the least recently used signature's
arena is freed beyond ``max_signatures``.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects import arith, func, tensor
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    IntegerAttr,
    ModuleOp,
    SymbolRefAttr,
    TensorType,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from partita.analysis.liveness import (
    ARENA_SIZE,
    OFFSET,
    assign_offsets,
    buffer_of,
    check_memory_plan,
    live_ranges,
)
from partita.analysis.shape_functions import ShapeBuilder, result_dims
from partita.dialects import byoc, nn
from partita.dialects.byoc import REFERENCE_SUFFIX
from partita.ir import PartitaError, op_error
from partita.ir.abi import argument_names
from partita.ir.constants import check_splat_budget, splat_element
from partita.lowering.binaries import BinaryImage, binary_images
from partita.runtime.contracts import Device, LoadedModule
from partita.runtime.interop import DeviceArray, DeviceTensor, as_input
from partita.runtime.libraries import library_binding
from partita.runtime.validate import CheckedDevice, CheckedModule, CubinInterface

__all__ = ["BoundPlan", "HostStep", "LaunchPlan", "Tensor"]

ALIGNMENT = 256
INPUT_ALIGNMENT = 16
"""A user's device pointer is read in place only at this alignment: the widest access any
kernel is compiled for (128-bit ``cp.async`` / vector loads, TMA). A misaligned one would
fault (a sticky ``MISALIGNED_ADDRESS`` that loses the context), so it is copied into its
slot of the arena (256-byte aligned) instead."""
STAGING_CHUNK_BYTES = 16 << 20
"""Each of the two pinned buffers weights go up through on a GPU (at most the largest
weight): large enough for full-bandwidth copies, small beside any model."""
RECORD_ERRORS = (KeyError, ValueError, TypeError, IndexError, ZeroDivisionError, AttributeError, OverflowError)
"""What decoding a kernel record that a file (untrusted) carries can raise: a located
error, never an internal one."""


@dataclass(frozen=True)
class Tensor:
    """An operand at its planned device address."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.dtype.itemsize


def _dtype(typ: TensorType) -> np.dtype:
    return np.dtype(nn.numpy_dtype(typ.element_type))


@dataclass
class HostStep:
    """An op the host runs inside the plan: its tensor operands are downloaded (after a
    synchronization), computed on with NumPy, and the results uploaded. Counted."""

    label: str
    compute: Callable[[list[np.ndarray]], Sequence[np.ndarray]]
    inputs: list[Tensor]
    outputs: list[Tensor]
    stats: Counter[str]
    device: Any = None
    keep: list = field(default_factory=list)

    def __call__(self, stream) -> None:
        device = self.device
        host = []  # downloads follow the kernels before them on the stream
        for t in self.inputs:
            array = np.empty(t.shape, t.dtype)
            if array.nbytes:
                device.download(array, t.ptr, stream)
            host.append(array)
        device.synchronize(stream)
        results = self.compute(host)
        self.keep = []
        for t, value in zip(self.outputs, results, strict=True):
            value = np.ascontiguousarray(value, dtype=t.dtype)
            if value.shape != t.shape:
                raise PartitaError(f"host step {self.label}: result of shape {value.shape}, but {t.shape} was planned")
            if value.nbytes:
                device.upload(t.ptr, value, stream)
            self.keep.append(value)  # alive until the stream has read it
        stats = self.stats
        stats["host_steps"] += 1
        stats["host_downloads"] += len(self.inputs)
        stats["host_download_bytes"] += sum(t.nbytes for t in self.inputs)
        stats["host_uploads"] += len(self.outputs)
        stats["host_upload_bytes"] += sum(t.nbytes for t in self.outputs)


class _Loader:
    """What a handle's ``prepare`` gets: the device, cubins loaded once per file and
    checked against the device's arch, library bindings loaded once per library, and of
    the call being prepared its emulation and its operands' ``(shape, dtype)`` (``-1``
    for a dynamic dim)."""

    def __init__(self, device: Device, modules: dict[Path, LoadedModule], images: dict[str, BinaryImage],
                 libraries: dict[str, Any], sealed: bool = False):
        self.device, self.modules, self.images, self.libraries = device, modules, images, libraries
        self.sealed = sealed
        self.kernels: dict[int, Any] = {}  # the checked kernels, for CheckedDevice
        self.emulation: Callable | None = None
        self.operands: list[tuple[tuple[int, ...], np.dtype]] = []

    def library(self, handle: Any) -> Any:
        """The binding of ``handle``'s library (a stand-in when the runtime was given one)."""
        return library_binding(self.libraries, handle)

    def module(self, handle: Any) -> LoadedModule:
        path = Path(handle.path)
        loaded = self.modules.get(path)
        if loaded is None:
            arch = getattr(self.device, "arch", None)
            if arch is not None and not getattr(self.device, "simulated", False):
                from partita.runtime.cuda import arch_runs_on

                if not arch_runs_on(handle.arch, arch):
                    raise PartitaError(
                        f"the cubin of @{handle.binary} is built for {handle.arch} and does not run on "
                        f"{self.device.name} ({arch}); compile for {arch}"
                    )
            # Embedded bytes or the cache file, checked against the binary's sha256 before
            # the driver sees them. Only a binary with bytes of its own (not library or
            # ONNX records) is ever read, and a sealed model (a loaded compiled-model file)
            # reads no host path at all.
            image = self.images.get(handle.binary)
            if image is None:
                raise PartitaError(f"the kernel of @{handle.function} lies in byoc.binary @{handle.binary}, "
                                   "which is not a cubin (its format has no bytes of its own)")
            if image.data is None and self.sealed:
                raise PartitaError(f"byoc.binary @{handle.binary} has no embedded bytes; a compiled model "
                                   "reads no host file")
            if image.data is None:  # the handle's file, checked against the binary's digest
                image = BinaryImage(handle.binary, path, image.digest, nvrtc=image.nvrtc)
            cubin = image.read()
            interface = CubinInterface.read(handle.binary, cubin)
            loaded = self.modules[path] = CheckedModule(self.device.load_module(cubin), interface,
                                                        getattr(self.device, "arch", None) or handle.arch,
                                                        self.kernels)
        return loaded


@dataclass
class _Call:
    op: byoc.CallExternOp
    prepared: Any  # None: an explicit host step running the reference body
    handle: Any


class LaunchPlan:
    """The entry function of a lowered module as steps, prepared on ``device``."""

    def __init__(self, module: ModuleOp, device: Device, *, entry: str = "main", handles: dict | None = None,
                 embedded: Mapping[str, bytes] | None = None, libraries: Mapping[str, Any] | None = None):
        from partita.runtime.extern import kernel_handles
        from partita.runtime.reference import ReferenceExecutor

        self.module, self.device, self.entry = module, device, entry
        self.function = self._entry(module, entry)
        self.block = self.function.body.block
        self.executor = ReferenceExecutor(module)
        self.interpreter = self.executor.interpreter
        try:
            self.handles = kernel_handles(module) if handles is None else handles
        except RECORD_ERRORS as err:
            raise PartitaError(f"a kernel record of the module cannot be used ({type(err).__name__}: {err})") from None
        self.symbols = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
        self.alias = buffer_of(self.block)
        self.ranges = live_ranges(self.block)
        self.modules: dict[Path, LoadedModule] = {}
        self.calls: dict[Operation, _Call] = {}
        self.constants: dict[SSAValue, np.ndarray] = {}
        self.params = None
        self.mapped: list[int] = []  # weights the device reads in place (map_host)
        self.arena = None
        self.param_ptr: dict[SSAValue, int] = {}
        self.static_ptr: dict[SSAValue, int] = {}
        self.outputs = list(self.block.last_op.operands) if isinstance(self.block.last_op, func.ReturnOp) else []
        self.sizing_args = sizing_arguments(self.block)
        """Indices of the arguments whose values size a result (``SIZED_BY`` operands): they
        are part of a run's shape signature, like TensorRT's shape tensors."""
        # Library bindings by library name (``cublas``...): loaded on first use; tests pass
        # recording stand-ins.
        self.libraries: dict[str, Any] = dict(libraries or {})
        check_memory_plan(self.function)  # before anything is allocated
        loader = _Loader(device, self.modules, binary_images(module, embedded), self.libraries,
                         sealed=embedded is not None and bool(embedded))
        # Launches are packed through it: geometry and argument layout checked against
        # each kernel's cubin before a device sees them.
        self.checked_device = CheckedDevice(device, loader.kernels)
        try:
            # Constants nothing reads are never built. Splats are device fills: on a GPU
            # only device memory limits them; the simulated device's memory is the host's,
            # so there they stay within one total budget.
            if device.simulated:
                check_splat_budget([op for op in self.block.ops if isinstance(op, nn.ConstantOp) and op.result.uses])
            for op in self.block.ops:
                self._load_op(op, loader)
            self._place_constants()
            self._place_static()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _entry(module: ModuleOp, entry: str) -> func.FuncOp:
        for op in module.ops:
            if isinstance(op, func.FuncOp) and op.sym_name.data == entry and op.body.blocks:
                if len(op.body.blocks) != 1:
                    raise op_error(op, "the launch plan needs a function of a single block")
                return op
        raise PartitaError(f"no func.func @{entry} with a body in the module")

    def _load_op(self, op: Operation, loader: _Loader) -> None:
        if isinstance(op, byoc.CallExternOp):
            name = op.callee.string_value()
            handle = self.handles.get(name)
            prepared = None
            if handle is not None:
                loader.emulation = self.emulation(op)
                loader.operands = [(tuple(d if d >= 0 else -1 for d in v.type.get_shape()), _dtype(v.type))
                                   for v in op.inputs]
                try:
                    prepared = handle.prepare(loader)
                except RECORD_ERRORS as err:
                    raise op_error(op, f"the kernel record of @{name} cannot be used ({type(err).__name__}: {err})") from None
            self.calls[op] = _Call(op, prepared, handle)
        elif isinstance(op, nn.ConstantOp):
            # A splat stays a zero-stride view: the device fills its buffer (no host copy).
            # Constants nothing reads are not placed at all.
            if op.result.uses:
                values = op.to_numpy()
                self.constants[op.result] = values if splat_element(values) is not None else np.ascontiguousarray(values)
        elif not isinstance(
            op, arith.ConstantOp | tensor.DimOp | func.CallOp | func.ReturnOp | byoc.AllocTensorOp | nn.NNOp
        ) and not op.name.startswith("arith."):
            raise op_error(op, "cannot be part of a launch plan (expected byoc, nn, arith, tensor.dim or shape-function calls)")

    def emulation(self, op: byoc.CallExternOp) -> Callable[[list[np.ndarray], list[np.ndarray]], None]:
        """The reference semantics of the extern function ``op`` calls, in
        destination-passing style."""
        name = op.callee.string_value()
        reference = self.symbols.get(name + REFERENCE_SUFFIX)
        if reference is None or reference.attributes.get(byoc.REFERENCE_IMPL) != SymbolRefAttr(name):
            def missing(inputs, outputs):
                raise op_error(op, f"cannot emulate @{name}: no @{name}{REFERENCE_SUFFIX} reference body "
                               "(keep it with mark-compiler-functions-as-extern{keep-reference=true})")
            return missing
        interpreter = self.interpreter

        def emulate(inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
            results = interpreter.call_op(reference, tuple(inputs))
            for out, result in zip(outputs, results, strict=True):
                if out.shape != np.shape(result):
                    raise op_error(op, f"@{name} computed a result of shape {np.shape(result)}, {out.shape} was allocated")
                np.copyto(out, result)

        return emulate

    def _place_constants(self) -> None:
        """Weights to the device once: one buffer, one upload (or, for a splat, one device
        fill of its element) each, one sync."""
        if not self.constants:
            return
        map_host = getattr(self.device, "map_host", None)
        values = []
        for value, array in self.constants.items():
            if map_host is not None and splat_element(array) is None:
                # The simulated device reads a weight where it lies (a view of the mapped
                # model file, or of the IR's bytes): no copy.
                self.param_ptr[value] = map_host(array)
                self.mapped.append(self.param_ptr[value])
            else:
                values.append(value)
        if not values:
            return
        sizes = [self.constants[v].nbytes for v in values]
        offsets, total = assign_offsets(sizes, [(0, 0)] * len(values), ALIGNMENT)
        self.params = self.device.alloc(total)
        stream = self.device.create_stream()
        staging = None
        try:
            make_staging = getattr(self.device, "pinned_staging", None)
            largest = max((self.constants[v].nbytes for v in values if splat_element(self.constants[v]) is None),
                          default=0)
            if make_staging is not None and largest:  # a GPU: host memory stays two chunks (issue 25)
                staging = make_staging(min(STAGING_CHUNK_BYTES, largest))
            for value, offset in zip(values, offsets):
                array = self.constants[value]
                self.param_ptr[value] = int(self.params) + offset
                element = splat_element(array)
                if element is not None:
                    self.device.fill(int(self.params) + offset, element, array.size, stream)
                elif array.nbytes:
                    (staging or self.device).upload(int(self.params) + offset, array, stream)
            self.device.synchronize(stream)
        finally:
            if staging is not None:
                staging.close()
            self.device.destroy_stream(stream)

    def _place_static(self) -> None:
        size = self.function.attributes.get(ARENA_SIZE)
        planned = [op for op in self.block.ops if isinstance(op, byoc.AllocTensorOp) and OFFSET in op.attributes]
        if not planned:
            return
        if not isinstance(size, IntegerAttr):
            raise op_error(self.function, f"has planned allocations but no '{ARENA_SIZE}'")
        self.arena = self.device.alloc(size.value.data)
        for op in planned:
            offset = op.attributes[OFFSET]
            assert isinstance(offset, IntegerAttr)
            self.static_ptr[op.result] = int(self.arena) + offset.value.data

    @property
    def host_ops(self) -> list[str]:
        """Every step the host runs, named by its op and location."""
        out = []
        for op in self.block.ops:
            if isinstance(op, nn.NNOp) and not isinstance(op, nn.ConstantOp | nn.ReshapeOp):
                out.append(f"{op.name}{_where(op)}")
            elif isinstance(op, byoc.CallExternOp) and self.calls[op].prepared is None:
                out.append(f"@{op.callee.string_value()}{_where(op)} (no compiled kernel: its reference body)")
        return out

    def bind(self, inputs: Sequence[tuple[tuple[int, ...], np.dtype]], stats: Counter[str],
             sizing: Mapping[int, np.ndarray] | None = None) -> BoundPlan:
        return BoundPlan(self, inputs, stats, sizing)

    def close(self) -> None:
        for buffer in (self.params, self.arena, *self.mapped):
            if buffer is not None:
                self.device.free(buffer)
        self.params = self.arena = None
        self.mapped = []
        for call in self.calls.values():  # library handles, descriptors, engines
            close = getattr(call.prepared, "close", None)
            if close is not None:
                close()
        for module in self.modules.values():
            unload = getattr(module, "unload", None)
            if unload is not None:
                unload()
        self.modules.clear()


class BoundPlan:
    """A ``LaunchPlan`` for one input-shape signature: memory placed, launches packed."""

    def __init__(self, plan: LaunchPlan, inputs: Sequence[tuple[tuple[int, ...], np.dtype]], stats: Counter[str],
                 sizing: Mapping[int, np.ndarray] | None = None):
        self.plan, self.device, self.stats = plan, plan.device, stats
        self.sizing = dict(sizing or {})  # argument index -> its values, where they size a result
        self.arena = None
        self.graph = None
        self.eager_reason: str | None = None
        """Why this signature runs eagerly although graphs are on (its capture failed)."""
        self.steps: list[Callable[[Any], None]] = []
        self.host_steps: list[HostStep] = []
        try:
            self._bind(inputs)
        except BaseException:
            self.close()
            raise

    def _bind(self, inputs: Sequence[tuple[tuple[int, ...], np.dtype]]) -> None:
        plan = self.plan
        values: dict[SSAValue, Any] = {}  # index values -> int, tensors -> shape
        for arg, (shape, _) in zip(plan.block.args, inputs):
            values[arg] = tuple(shape)
        contents = {plan.block.args[i]: array for i, array in self.sizing.items()}
        workspaces: dict[Operation, int] = {}
        for op in plan.block.ops:
            if isinstance(op, func.ReturnOp):
                break
            args = [values.get(v) for v in op.operands]
            if isinstance(op, byoc.AllocTensorOp):
                sizes = iter(args)
                values[op.result] = tuple(int(next(sizes)) if d == DYNAMIC_INDEX else d for d in op.result.type.get_shape())
                if any(d < 0 for d in values[op.result]):
                    raise op_error(op, f"negative dimension in {values[op.result]}")
            elif isinstance(op, byoc.CallExternOp):
                for out, res in zip(op.outs, op.res):
                    values[res] = values[out]
                call = plan.calls[op]
                if call.prepared is not None and op.outs:
                    size = call.prepared.workspace_bytes([values[v] for v in op.inputs])
                    if size:
                        workspaces[op] = size
            elif isinstance(op, nn.ConstantOp):
                values[op.result] = tuple(op.result.type.get_shape())
            elif isinstance(op, nn.NNOp) and getattr(op, "SIZED_BY", ()):
                values[op.result] = _sized_result_shape(op, values, contents)
            elif isinstance(op, nn.NNOp):
                values[op.result] = _host_result_shape(op, values)
                if isinstance(op, nn.ReshapeOp) and prod(values[op.input]) != prod(values[op.result]):
                    raise op_error(op, f"cannot view {prod(values[op.input])} elements of shape "
                                       f"{values[op.input]} as {values[op.result]}")
            elif isinstance(op, tensor.DimOp):
                values[op.result] = int(args[0][args[1]])
            elif isinstance(op, func.CallOp):
                results = plan.interpreter.call_op(plan.symbols[op.callee.string_value()], tuple(args))
                for res, value in zip(op.results, results):
                    values[res] = int(value)
            else:  # arith on index values
                for res, value in zip(op.results, plan.interpreter.run_op(op, tuple(args))):
                    values[res] = value
        self.shapes = values
        self._place(workspaces)
        self._build(workspaces)

    def _place(self, workspaces: dict[Operation, int]) -> None:
        """Dynamic buffers of this signature into one arena, by liveness."""
        plan = self.plan
        ops = list(plan.block.ops)
        index = {op: i for i, op in enumerate(ops)}
        roots: list[Any] = []
        sizes: list[int] = []
        ranges: list[tuple[int, int]] = []
        for value, span in plan.ranges.items():
            if value in plan.static_ptr or value in plan.param_ptr or not isinstance(value.type, TensorType):
                continue
            roots.append(value)
            sizes.append(prod(self.shapes[value]) * _dtype(value.type).itemsize)
            ranges.append(span)
        for op, size in workspaces.items():
            roots.append(op)
            sizes.append(size)
            ranges.append((index[op], index[op]))
        offsets, total = assign_offsets(sizes, ranges, ALIGNMENT)
        self.arena_bytes = total
        self.pointers: dict[Any, int] = {}
        if total:
            self.arena = self.device.alloc(total)
            self.stats["allocations"] += 1
            base = int(self.arena)
            self.pointers = {root: base + offset for root, offset in zip(roots, offsets)}
        else:
            self.pointers = dict.fromkeys(roots, 0)
        if workspaces:  # zeroed once; the kernels leave their workspace zeroed again
            stream = self.device.create_stream()
            try:
                for op, size in workspaces.items():
                    self.device.memset(self.pointers[op], size, stream)
                self.device.synchronize(stream)
            finally:
                self.device.destroy_stream(stream)

    def tensor(self, value: SSAValue) -> Tensor:
        plan = self.plan
        root = plan.alias.get(value, value)
        if root in plan.param_ptr:
            ptr = plan.param_ptr[root]
        elif root in plan.static_ptr:
            ptr = plan.static_ptr[root]
        else:
            ptr = self.pointers[root]
        assert isinstance(value.type, TensorType)
        return Tensor(ptr, tuple(self.shapes[value]), _dtype(value.type))

    def _build(self, workspaces: dict[Operation, int]) -> None:
        plan = self.plan
        arguments = {arg: i for i, arg in enumerate(plan.block.args)}
        patches: list[list[tuple[Any, int]]] = [[] for _ in plan.block.args]
        readers: set[int] = set()  # arguments something other than a kernel argument reads
        for op in plan.block.ops:
            if isinstance(op, byoc.CallExternOp):
                call = plan.calls[op]
                if not op.outs:
                    continue  # extern functions are pure: a call with no result does nothing
                ins = [self.tensor(v) for v in op.inputs]
                outs = [self.tensor(v) for v in op.outs]
                if call.prepared is not None:
                    try:
                        launches = call.prepared.bind(plan.checked_device, ins, outs, self.pointers.get(op))
                    except RECORD_ERRORS as err:
                        raise op_error(op, f"the kernel record of @{op.callee.string_value()} does not fit this call "
                                           f"({type(err).__name__}: {err})") from None
                    self.steps.extend(launches)
                    for j, value in enumerate(op.inputs):
                        if value in arguments:
                            uses = patches[arguments[value]]
                            for launch in launches:
                                operands = getattr(launch, "operands", ())
                                if j < len(operands) and operands[j].arg is not None and hasattr(launch, "set_pointer"):
                                    uses.append((launch, operands[j].arg))
                                else:
                                    readers.add(arguments[value])
                else:
                    emulate = plan.emulation(op)

                    def compute(arrays, emulate=emulate, outs=outs):
                        results = [np.empty(t.shape, t.dtype) for t in outs]
                        emulate(arrays, results)
                        return results

                    self._host(f"@{op.callee.string_value()}", compute, ins, outs)
            elif isinstance(op, nn.ReshapeOp):
                # A view (``buffer_of``): no step; an input it views must be in its slot.
                root = plan.alias.get(op.input, op.input)
                if root in arguments:
                    readers.add(arguments[root])
            elif isinstance(op, nn.NNOp) and not isinstance(op, nn.ConstantOp):
                tensors = [v for v in op.operands if isinstance(v.type, TensorType)]
                readers.update(arguments[v] for v in tensors if v in arguments)
                self._host(op.name, lambda arrays, op=op: plan.interpreter.run_op(op, tuple(arrays)),
                           [self.tensor(v) for v in tensors], [self.tensor(r) for r in op.results])
        self.inputs = [self.tensor(arg) for arg in plan.block.args]
        self.outputs = [self.tensor(v) for v in plan.outputs]
        readers.update(arguments[v] for v in plan.outputs if v in arguments)
        readers.update(i for op, call in plan.calls.items() if call.prepared is None
                       for i in (arguments[v] for v in op.inputs if v in arguments))
        # A device input only kernels read is passed to them in place (its pointer patched
        # into their packed arguments); any other is copied device-to-device into its slot.
        self.patches = [uses if i not in readers else None for i, uses in enumerate(patches)]
        self.bound_inputs = [t.ptr for t in self.inputs]

    def _host(self, label: str, compute, ins: list[Tensor], outs: list[Tensor]) -> None:
        step = HostStep(label, compute, ins, outs, self.stats)
        step.device = self.device
        self.steps.append(step)
        self.host_steps.append(step)

    @property
    def capturable(self) -> bool:
        """A graph can replay this signature: no step needs the host in between."""
        return not self.host_steps

    def point_input(self, index: int, ptr: int) -> bool:
        """Makes the kernels read input ``index`` at ``ptr``; False when they cannot
        (a captured graph, or a reader other than kernel arguments)."""
        uses = self.patches[index]
        if uses is None or self.graph is not None:
            return False
        if self.bound_inputs[index] != ptr:
            for launch, arg in uses:
                launch.set_pointer(arg, ptr)
            self.bound_inputs[index] = ptr
        return True

    def read_inputs_from_slots(self) -> None:
        """Points every kernel back at the inputs' arena slots (before a capture: a graph
        keeps the pointers it was captured with)."""
        for index, slot in enumerate(self.inputs):
            if self.patches[index] is not None and self.bound_inputs[index] != slot.ptr:
                self.point_input(index, slot.ptr)

    def capture(self, stream) -> None:
        steps = self.steps

        def record(s) -> None:
            for step in steps:
                step(s)

        self.graph = self.device.capture(stream, record)

    def close(self) -> None:
        if self.graph is not None:
            self.graph.destroy()
            self.graph = None
        if self.arena is not None:
            self.device.free(self.arena)
            self.arena = None


def _where(op: Operation) -> str:
    loc = getattr(op, "location", None)
    if loc is not None and hasattr(loc, "filename"):
        return f" at {loc.filename.data}:{loc.line.data}:{loc.column.data}"
    return ""


def sizing_arguments(block: Block) -> list[int]:
    """The arguments of ``block`` that an op reads as a ``SIZED_BY`` operand."""
    args = {arg: i for i, arg in enumerate(block.args)}
    return sorted({args[v] for op in block.ops for v in sizing_operands(op) if v in args})


def sizing_operands(op: Operation) -> list[SSAValue]:
    """The operands whose values size ``op``'s result (its ``SIZED_BY`` operands)."""
    out: list[SSAValue] = []
    for name in getattr(op, "SIZED_BY", ()):
        v = getattr(op, name)
        out += [v] if isinstance(v, SSAValue) else list(v)
    return out


def _sized_result_shape(op: nn.NNOp, shapes: dict[SSAValue, Any], contents: dict[SSAValue, np.ndarray]) -> tuple[int, ...]:
    """The result shape of an op sized by the values of some operands: graph inputs (the
    run's signature holds them) or constants."""

    def value(v: SSAValue) -> np.ndarray:
        if v in contents:
            return contents[v]
        if isinstance(v.owner, nn.ConstantOp):
            return v.owner.to_numpy()
        raise op_error(op, "its result shape depends on the values of an operand computed at run time "
                           "(only graph inputs and constants may size a result)")

    try:
        return tuple(int(d) for d in op.result_shape_from_values(lambda v: tuple(shapes[v]), value))
    except VerifyException as err:
        raise op_error(op, str(err)) from None


def _host_result_shape(op: nn.NNOp, values: dict[SSAValue, Any]) -> tuple[int, ...]:
    """Concrete result shape of a host op, by the shape rules shape functions use (every
    input dim known, so they fold to integers)."""
    typ = op.result.type
    assert isinstance(typ, TensorType)
    static = typ.get_shape()
    if DYNAMIC_INDEX not in static:
        return tuple(static)
    dims = result_dims(op, lambda v: list(values[v]), ShapeBuilder(Block()))
    if not all(isinstance(d, int) for d in dims):
        raise op_error(op, "its result shape could not be computed from its input shapes")
    return tuple(int(d) for d in dims)


class Runtime:
    """Runs a lowered module's entry function through its launch plan on ``device``.

    ``device``: ``"auto"`` (a CUDA device when one is usable and every cubin runs on it,
    else the simulated device, with the reason in ``describe()``), ``"cuda"``,
    ``"simulated"``, or a device object. ``graphs``: capture static launch sequences as
    CUDA graphs, one per shape signature: the first run of a signature is eager (the
    warm-up libraries need: TensorRT's first enqueue after its shapes, the cuDNN engines'
    first execute), the graph is captured after it; a signature whose capture fails keeps
    running eagerly, the reason in ``describe()``. ``debug``: run eagerly and synchronize
    after every step so a fault names its step (also ``PARTITA_CUDA_DEBUG=1``).

    The CUDA context is made current in whatever thread loads, runs, reads a device output
    or closes (it is per thread in the driver). ``close()`` releases everything the plan
    made, and the device's primary context when the runtime chose the device itself.
    """

    def __init__(
        self,
        module: ModuleOp,
        device: Any = "auto",
        *,
        entry: str = "main",
        graphs: bool = True,
        debug: bool | None = None,
        max_signatures: int = 8,
        embedded: Mapping[str, bytes] | None = None,
        libraries: Mapping[str, Any] | None = None,
    ):
        self.device, self.device_note = _choose_device(module, device)
        self._owns_device = device in ("auto", "cuda")
        self.device.make_current()
        self.graphs = graphs
        self.debug = bool(int(os.environ.get("PARTITA_CUDA_DEBUG", "0") or 0)) if debug is None else debug
        self.max_signatures = max_signatures
        self.stats: Counter[str] = Counter()
        try:
            self.plan = LaunchPlan(module, self.device, entry=entry, embedded=embedded, libraries=libraries)
        except BaseException:
            if self._owns_device and hasattr(self.device, "close"):
                self.device.close()
            raise
        self.stream = self.device.create_stream()
        self._bound: OrderedDict[tuple, BoundPlan] = OrderedDict()
        # One stream, one arena per signature, packed launches patched per run and an
        # interpreter with one environment: a run owns them all until its synchronization,
        # so concurrent callers (a server's thread pool) take turns.
        self._lock = threading.Lock()

    # -- the hot path ------------------------------------------------------------------
    def run(self, *args: Any, outputs: str = "host", **named: Any) -> tuple:
        """Runs the entry function. Arguments are NumPy arrays, CUDA arrays
        (``__cuda_array_interface__``) or DLPack tensors, positional or by name.
        ``outputs="device"`` returns ``DeviceArray``s (valid until the next run)."""
        if outputs not in ("host", "device"):
            raise PartitaError(f"outputs must be 'host' or 'device', not {outputs!r}")
        self.device.make_current()  # before binding: allocation and library plans need it too
        values = self._arguments(args, named)
        with self._lock:
            return self._run(values, outputs)

    __call__ = run

    def _run(self, values: list[Any], outputs: str) -> tuple:
        device, stream = self.device, self.stream
        sizing = {i: self._host_values(values[i]) for i in self.plan.sizing_args}
        signature = tuple(v.shape for v in values) + tuple((i, a.tobytes()) for i, a in sizing.items())
        bound = self._bound.get(signature)
        if bound is None:
            bound = self._bind(signature, values, sizing)
        else:
            self._bound.move_to_end(signature)
        staged = []  # host arrays the stream reads from, alive until the synchronization
        for index, (value, slot) in enumerate(zip(values, bound.inputs)):
            if slot.nbytes == 0:
                continue
            if isinstance(value, DeviceTensor):
                if value.stream is not None and hasattr(device, "wait_for"):
                    device.wait_for(value.stream, stream)  # written on the producer's stream
                if value.ptr % INPUT_ALIGNMENT == 0 and bound.point_input(index, value.ptr):
                    continue
                if bound.bound_inputs[index] != slot.ptr:
                    bound.point_input(index, slot.ptr)
                device.copy(slot.ptr, value.ptr, slot.nbytes, stream)
            else:
                if bound.bound_inputs[index] != slot.ptr:
                    bound.point_input(index, slot.ptr)
                array = np.ascontiguousarray(value)
                staged.append(array)
                device.upload(slot.ptr, array, stream)
        if self.debug:
            self._run_debug(bound)
        elif bound.graph is not None:
            bound.graph.launch(stream)
        else:
            for step in bound.steps:
                step(stream)
        if outputs == "device":
            results: tuple = tuple(DeviceArray(device, t.ptr, t.shape, t.dtype) for t in bound.outputs)
        else:
            results = tuple(np.empty(t.shape, t.dtype) for t in bound.outputs)
            for array, t in zip(results, bound.outputs):
                if array.nbytes:
                    device.download(array, t.ptr, stream)
        try:
            device.synchronize(stream)
        except Exception as err:
            raise PartitaError(f"{err}: a kernel of this run failed; run with debug=True (or "
                               "PARTITA_CUDA_DEBUG=1) to name it") from None
        del staged
        self.stats["runs"] += 1
        if self.graphs and not self.debug and bound.graph is None and bound.capturable and bound.eager_reason is None:
            self._capture(bound)  # after the first (warm-up) run of the signature
        return results

    def _run_debug(self, bound: BoundPlan) -> None:
        for step in bound.steps:
            try:
                step(self.stream)
                self.device.synchronize(self.stream)
            except Exception as err:
                name = getattr(getattr(step, "function", None), "name", None) or getattr(step, "label", "a step")
                raise PartitaError(f"kernel {name} failed: {err}") from None

    def _capture(self, bound: BoundPlan) -> None:
        """Captures ``bound``'s steps as a graph, or leaves it eager with the reason (a
        library that cannot be captured, a driver that refuses)."""
        bound.read_inputs_from_slots()
        try:
            bound.capture(self.stream)
        except Exception as err:  # noqa: BLE001 - any refusal: the eager steps still run
            bound.graph = None
            bound.eager_reason = str(err) or type(err).__name__
            self.stats["capture_fallbacks"] += 1
        else:
            self.stats["captures"] += 1

    # -- binding -----------------------------------------------------------------------
    def _arguments(self, args: Sequence[Any], named: dict[str, Any]) -> list[Any]:
        try:
            return _bind(self.plan.function, list(args), dict(named), _handle(self.stream))
        except ValueError as err:
            raise PartitaError(str(err)) from None

    def _host_values(self, value: Any) -> np.ndarray:
        """An input's values on the host (a device input is read back: a shape input is small)."""
        if not isinstance(value, DeviceTensor):
            return np.array(value)
        array = np.empty(value.shape, value.dtype)
        if array.nbytes:
            self.device.download(array, value.ptr, self.stream)
            self.device.synchronize(self.stream)
        self.stats["sizing_reads"] += 1
        return array

    def _bind(self, signature: tuple, values: list[Any], sizing: Mapping[int, np.ndarray] | None = None) -> BoundPlan:
        bound = self.plan.bind([(v.shape, v.dtype) for v in values], self.stats, sizing)
        self.stats["binds"] += 1
        self._bound[signature] = bound
        while len(self._bound) > self.max_signatures:
            _, old = self._bound.popitem(last=False)
            old.close()
        return bound

    # -- what a user sees ------------------------------------------------------------
    @property
    def handles(self) -> dict:
        return self.plan.handles

    def describe(self) -> str:
        """Where the plan runs, and every host step with its per-run copies."""
        handles = self.plan.handles
        archs = sorted({h.arch for h in handles.values() if h.arch is not None})
        libraries = sorted({h.library for h in handles.values() if h.arch is None})
        kernels = len(handles) - sum(h.arch is None for h in handles.values())
        parts = [f"{kernels} kernel(s) compiled for {', '.join(archs)}"] if kernels else []
        if libraries:
            parts.append(f"{len(handles) - kernels} library call(s) ({', '.join(libraries)})")
        kernels = " and ".join(parts) if parts else "no compiled kernels"
        where = f"running on {self.device.name}"
        host = self.plan.host_ops
        if not self.graphs:
            mode = "eager launches"
        elif host:
            mode = "eager launches: host steps keep CUDA graphs off"
        else:
            mode = "a CUDA graph per shape signature"
        lines = [f"{kernels}, {where} ({mode}, one stream)"]
        if self.device_note:
            lines.append(self.device_note)
        for signature, bound in self._bound.items():
            if bound.eager_reason is not None:
                shapes = ", ".join("x".join(map(str, s)) or "scalar" for s in signature)
                lines.append(f"inputs ({shapes}) run eagerly: their capture failed: {bound.eager_reason}")
        if host:
            lines.append(f"{len(host)} host step(s), each: synchronize, download its inputs, run on NumPy, upload its results:")
            lines.extend(f"  {label}" for label in host)
        if self.stats["host_steps"]:
            s = self.stats
            lines.append(
                f"host copies so far: {s['host_downloads']} downloads ({s['host_download_bytes']} B), "
                f"{s['host_uploads']} uploads ({s['host_upload_bytes']} B) over {s['runs']} run(s)"
            )
        return "\n".join(lines)

    def close(self) -> None:
        with self._lock:  # never under a run in flight
            if self.stream is None:
                return
            self.device.make_current()  # the closing thread may not be the one that ran
            for bound in self._bound.values():
                bound.close()
            self._bound.clear()
            self.plan.close()
            self.device.destroy_stream(self.stream)
            self.stream = None
            if self._owns_device and hasattr(self.device, "close"):
                self.device.close()  # the primary context the runtime retained


def _handle(stream: Any) -> int | None:
    """A stream's handle as an integer (what DLPack producers take), None when it has none."""
    try:
        return int(stream)
    except (TypeError, ValueError):
        return None


def _bind(function: func.FuncOp, args: list[Any], named: dict[str, Any], stream: int | None = None) -> list[Any]:
    """Arguments in order, each a host array or a device tensor of the declared shape
    and dtype (a DLPack producer ordered before ``stream``)."""
    inputs = function.function_type.inputs.data
    names = argument_names(function)  # the model's own names (onnx.name), else SSA hints
    hints = [a.name_hint for a in function.body.block.args]
    if len(args) == 1 and isinstance(args[0], dict):
        named, args = {**args[0], **named}, []
    for i in range(len(args), len(inputs)):
        key = names[i] if names[i] in named else hints[i]
        if key not in named:
            raise ValueError(f"@{function.sym_name.data}: missing argument #{i}" + (f" ({names[i]})" if names[i] else ""))
        args.append(named.pop(key))
    if named:
        raise ValueError(f"@{function.sym_name.data}: unknown arguments {sorted(named)}")
    if len(args) != len(inputs):
        raise ValueError(f"@{function.sym_name.data} takes {len(inputs)} arguments, got {len(args)}")
    out = []
    for i, (value, typ) in enumerate(zip(args, inputs)):
        label = f"#{i} (%{hints[i]})" if hints[i] else (f"#{i} ({names[i]})" if names[i] else f"#{i}")
        try:
            value = as_input(value, stream)
        except TypeError as err:
            raise ValueError(f"@{function.sym_name.data} argument {label}: {err}") from None
        assert isinstance(typ, TensorType)
        shape = typ.get_shape()
        if len(value.shape) != len(shape) or any(d != DYNAMIC_INDEX and d != s for d, s in zip(shape, value.shape)):
            raise ValueError(f"@{function.sym_name.data} argument {label}: shape {tuple(value.shape)} does not match {typ}")
        if np.dtype(value.dtype) != _dtype(typ):
            raise ValueError(f"@{function.sym_name.data} argument {label}: dtype {value.dtype} does not match {typ} "
                             f"(expected {_dtype(typ)})")
        out.append(value)
    return out


def _choose_device(module: ModuleOp, device: Any) -> tuple[Any, str | None]:
    from partita.runtime.cuda import CudaDevice, CudaError, arch_runs_on, cuda_status
    from partita.runtime.device import SimulatedDevice

    if device == "simulated":
        return SimulatedDevice(), None
    if device not in ("auto", "cuda"):
        return device, None
    why = cuda_status()
    if why is None:
        try:
            cuda = CudaDevice()
        except CudaError as err:
            why = str(err)
        else:
            archs = sorted({op.attributes["arch"].data for op in module.ops
                            if isinstance(op, byoc.BinaryOp) and "arch" in op.attributes})
            wrong = [a for a in archs if not arch_runs_on(a, cuda.arch)]
            if not wrong:
                return cuda, None
            why = f"kernels compiled for {', '.join(wrong)} do not run on {cuda.name} ({cuda.arch}); compile for {cuda.arch}"
            cuda.close()
    if device == "cuda":
        raise PartitaError(f"no CUDA device to run on: {why}")
    return SimulatedDevice(), f"the plan runs on the simulated device: {why}"
