"""Loading a launch plan (``LaunchPlan``): the entry function read once into steps, each
``byoc.call_extern`` prepared by its kernel handle (cubins loaded and checked against
their sha256 and the device's arch, library bindings opened), weights uploaded once into
one parameter buffer, the static arena ``plan-memory`` sized allocated once."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue

from partita.analysis.bound_shapes import FunctionShapes
from partita.analysis.liveness import (
    ARENA_SIZE,
    OFFSET,
    assign_offsets,
    buffer_of,
    check_memory_plan,
    live_ranges,
)
from partita.dialects import byoc, nn
from partita.dialects.byoc import REFERENCE_SUFFIX
from partita.ir import PartitaError, op_error
from partita.ir.constants import check_splat_budget, splat_element
from partita.ir.parameters import ParameterAttr, storage_dtype, stored_values
from partita.lowering.binaries import BinaryImage, binary_images
from partita.runtime.arenas import lies_in
from partita.runtime.arguments import ArgumentLayouts
from partita.runtime.contracts import Device, LoadedModule
from partita.runtime.libraries import library_binding
from partita.runtime.plan_bind import (
    ALIGNMENT,
    EMULATED,
    HOST,
    LAUNCH,
    RECORD_ERRORS,
    SELECTED,
    BoundPlan,
    StageSchedule,
    _dtype,
    is_data_dependent,
    plan_stages,
    sizing_arguments,
)
from partita.runtime.validate import CheckedDevice, CheckedModule, CubinInterface

__all__ = ["LaunchPlan"]

STAGING_CHUNK_BYTES = 16 << 20
"""Each of the two pinned buffers weights go up through on a GPU (at most the largest
weight): large enough for full-bandwidth copies, small beside any model."""


class _Loader:
    """What a handle's ``prepare`` gets: the device, cubins loaded once per file and
    checked against the device's arch, library bindings loaded once per library, and of
    the call being prepared its emulation, its operands' ``(shape, dtype)`` (``-1``
    for a dynamic dim) and its number of results."""

    def __init__(self, device: Device, modules: dict[Path, LoadedModule], images: dict[str, BinaryImage],
                 libraries: dict[str, Any], sealed: bool = False):
        self.device, self.modules, self.images, self.libraries = device, modules, images, libraries
        self.sealed = sealed
        self.kernels: dict[int, Any] = {}  # the checked kernels, for CheckedDevice
        self.emulation: Callable | None = None
        self.operands: list[tuple[tuple[int, ...], np.dtype]] = []
        self.results = 0  # the call's outputs

    @functools.cached_property
    def multiprocessor_count(self) -> int:
        """SMs of the device (0 where it has none to say: the simulated device), asked once."""
        return int(getattr(self.device, "multiprocessor_count", 0) or 0)

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
        # Imported here although no cycle needs it: imported with this module, they shift
        # the heap so that partita-run keeps one more weight-sized block resident (seen by
        # tests/runtime/test_weights.py::test_compile_and_run_grow_by_about_the_weights).
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
        self.converted: dict[SSAValue, np.dtype] = {}  # constants uploaded at another dtype
        self.params = None
        self.mapped: list[int] = []  # weights the device reads in place (map_host)
        self.arena = None
        self.arena_bytes = 0
        self.param_ptr: dict[SSAValue, int] = {}
        self.static_ptr: dict[SSAValue, int] = {}
        self.outputs = list(self.block.last_op.operands) if isinstance(self.block.last_op, func.ReturnOp) else []
        self.stages = plan_stages(self.block)
        """The entry block's ops, cut where the sizes of the rest depend on values the plan
        computes (see ``plan_bind``); one stage for most models."""
        self.op_index = {op: i for i, op in enumerate(self.block.ops)}
        self._stage_of_op = {op: k for k, ops in enumerate(self.stages) for op in ops}
        arguments = {arg: i for i, arg in enumerate(self.block.args)}
        self.read_by_later_stages = {arguments[root] for ops in self.stages[1:] for op in ops for v in op.operands
                                     if (root := self.alias.get(v, v)) in arguments}
        """Arguments an op of a later stage reads: always copied into their arena slots."""
        self.facts = BindFacts(self.block, self.interpreter, self.symbols)
        """What binding a signature reads of the IR, read once here (shapes, element types,
        call operands, index constants): a bind works on plain data."""
        self.arguments = arguments
        """Each entry-block argument's index."""
        self.sizing_args = sizing_arguments(self.block)
        """Indices of the arguments whose values size a result (``SIZED_BY`` operands): they
        are part of a run's shape signature, like TensorRT's shape tensors."""
        # Library bindings by library name (``cublas``...): loaded on first use; tests pass
        # recording stand-ins.
        self.libraries: dict[str, Any] = dict(libraries or {})
        check_memory_plan(self.function)  # before anything is allocated
        loader = _Loader(device, self.modules, binary_images(module, embedded), self.libraries,
                         sealed=embedded is not None and bool(embedded))
        # Launches are packed through it: every argument layout is built and checked
        # against its kernel's cubin as the calls are prepared (below), a launch's
        # geometry when a shape signature is bound, before a device sees either.
        self.checked_device = CheckedDevice(device, loader.kernels, ArgumentLayouts())
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
        dtypes = self.facts.dtypes
        self.dynamic_buffers: list[list[tuple[SSAValue, tuple[int, int], int]]] = [[] for _ in self.stages]
        """Per stage, the buffers a bind places (those neither a weight nor in the static
        arena): ``(root, live range, itemsize)``, listed once here so that a bind only
        sizes them."""
        for value, span in self.ranges.items():
            if value not in self.static_ptr and value not in self.param_ptr and value in dtypes:
                self.dynamic_buffers[self.stage_of(value)].append((value, span, dtypes[value].itemsize))
        self.schedules = [self._schedule(k) for k in range(len(self.stages))]
        """Per stage, what a bind builds of each op (``StageSchedule``), read once here."""

    def _schedule(self, stage: int) -> StageSchedule:
        """Stage ``stage``'s steps as a bind builds them, and the arguments something other
        than a kernel argument reads there (they run from their arena slots): neither
        depends on the shapes a signature binds."""
        arguments = self.arguments
        steps: list[tuple[Operation, str]] = []
        readers = set(self.read_by_later_stages)
        for k, op in enumerate(self.stages[stage]):
            if stage > 0 and k == 0 and is_data_dependent(op):
                steps.append((op, SELECTED))
            elif (call := self.facts.calls.get(op)) is not None:
                if not call.outs:
                    continue  # extern functions are pure: a call with no result does nothing
                # An argument written in place (a tied result's outs) is the run's own copy,
                # in its slot: a user's buffer is never written.
                readers.update(arguments[root] for v in call.outs if (root := self.alias.get(v, v)) in arguments)
                steps.append((op, LAUNCH if self.calls[op].prepared is not None else EMULATED))
            elif isinstance(op, nn.ReshapeOp):  # a view (``buffer_of``): no step
                if (root := self.alias.get(op.input, op.input)) in arguments:
                    readers.add(arguments[root])
            elif isinstance(op, nn.NNOp) and not isinstance(op, nn.ConstantOp):
                readers.update(arguments[v] for v in op.operands if v in arguments)
                steps.append((op, HOST))
        # An argument the plan returns is returned from its slot, and an extern call the host
        # runs reads its inputs there, whichever stage either is in.
        readers.update(arguments[v] for v in self.outputs if v in arguments)
        readers.update(arguments[v] for op, call in self.calls.items() if call.prepared is None
                       for v in self.facts.calls[op].inputs if v in arguments)
        consumers: dict[SSAValue, list[int]] = {}
        for k, op in enumerate(self.stages[stage]):
            for v in dict.fromkeys(self.facts.reads[op]):
                consumers.setdefault(v, []).append(k)
        return StageSchedule(tuple(steps), frozenset(readers), {v: tuple(ks) for v, ks in consumers.items()})

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
                loader.results = len(op.outs)
                try:
                    prepared = handle.prepare(loader)
                    kernels = prepared.argument_kinds()
                except RECORD_ERRORS as err:
                    raise op_error(op, f"the kernel record of @{name} cannot be used ({type(err).__name__}: {err})") from None
                for kernel, kinds in kernels:  # a file whose record the cubin contradicts: refused now
                    try:
                        self.checked_device.admit(kernel, kinds)
                    except PartitaError as err:
                        raise op_error(op, err.message) from None
            self.calls[op] = _Call(op, prepared, handle)
        elif isinstance(op, nn.ConstantOp):
            # A splat stays a zero-stride view: the device fills its buffer (no host copy).
            # Constants nothing reads are not placed at all.
            if op.result.uses:
                value = op.value
                if (isinstance(value, ParameterAttr) and value.stored_element != value.get_element_type()
                        and getattr(self.device, "pinned_staging", None) is not None):
                    # Stored at another type (to-mixed-precision): a GPU gets it converted
                    # a staging chunk at a time, never a whole converted copy on the host.
                    try:
                        self.constants[op.result] = stored_values(value)
                    except PartitaError as err:
                        raise op_error(op, err.message) from None
                    self.converted[op.result] = storage_dtype(value.get_element_type())
                else:
                    # Kept as read (a permuted parameter is a strided view of its file): the
                    # device lays each one out as it takes it, a weight or a chunk at a time.
                    self.constants[op.result] = op.to_numpy()
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

    def check_call_shapes(self, op: byoc.CallExternOp, values: dict[SSAValue, Any]) -> None:
        """A located error when the bound shapes of a call with dynamic dims do not fit the
        partition it calls (checked on its reference body, when kept), before a kernel
        or the emulation sees them. A reference's result shapes are kept per input shapes
        (the layers of a model call one partition function alike)."""
        call = self.facts.calls[op]
        if call.reference is None:
            return
        inputs = tuple(tuple(values[v]) for v in call.inputs)
        key = (call.reference, inputs)
        shapes = self.facts.reference_shapes.get(key)
        if shapes is None:
            shapes = call.reference.bind(inputs)
            self.facts.remember(self.facts.reference_shapes, key, shapes)
        for out, shape in zip(call.outs, shapes):
            if tuple(values[out]) != shape:
                raise op_error(op, f"@{call.name} computes a result of shape {shape} from these inputs, but its "
                                   f"shape function allocated {values[out]}")

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
        def nbytes(v: SSAValue) -> int:  # on the device
            array = self.constants[v]
            return array.size * self.converted[v].itemsize if v in self.converted else array.nbytes

        sizes = [nbytes(v) for v in values]
        offsets, total = assign_offsets(sizes, [(0, 0)] * len(values), ALIGNMENT)
        try:
            self.params = self.device.alloc(total)
        except PartitaError as err:  # over the memory budget: name the largest constant
            largest = max(values, key=lambda v: self.constants[v].nbytes)
            raise op_error(largest.owner, f"{err.message}, for the constants (the largest is this one)") from None
        stream = self.device.create_stream()
        staging = None
        try:
            make_staging = getattr(self.device, "pinned_staging", None)
            largest = max((nbytes(v) for v in values if splat_element(self.constants[v]) is None), default=0)
            if make_staging is not None and largest:  # a GPU: host memory stays two chunks (issue 25)
                staging = make_staging(min(STAGING_CHUNK_BYTES, largest))
            for value, offset in zip(values, offsets):
                array = self.constants[value]
                self.param_ptr[value] = int(self.params) + offset
                element = splat_element(array)
                if element is not None:
                    self.device.fill(int(self.params) + offset, element, array.size, stream)
                elif value in self.converted and array.size:
                    assert staging is not None  # converted only where staging exists
                    staging.upload(int(self.params) + offset, array, stream, self.converted[value])
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
        try:
            self.arena = self.device.alloc(size.value.data)
            self.arena_bytes = size.value.data
        except PartitaError as err:  # over the memory budget: name the largest planned buffer
            largest = max(planned, key=lambda op: _static_bytes(op.result.type))
            raise op_error(largest, f"{err.message}, for the static arena (the largest buffer is this op's)") from None
        for op in planned:
            offset = op.attributes[OFFSET]
            assert isinstance(offset, IntegerAttr)
            self.static_ptr[op.result] = int(self.arena) + offset.value.data

    def holds(self, ptr: int) -> bool:
        """Whether ``ptr`` is in the static arena, which every run writes (the buffers
        ``plan-memory`` placed: outputs of static shape among them)."""
        return lies_in(ptr, self.arena, self.arena_bytes)

    def stage_of(self, value: SSAValue) -> int:
        """The stage that defines ``value`` (arguments: the first)."""
        owner = value.owner
        return self._stage_of_op.get(owner, 0) if isinstance(owner, Operation) else 0

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
             sizing: Mapping[int, np.ndarray] | None = None, *, pool: Any = None,
             avoid: Sequence[int] = (), basis: BoundPlan | None = None) -> BoundPlan:
        """This plan for one input signature; with ``pool`` (shape buckets), its buffers in
        a shared arena holding none of the ``avoid`` addresses. From ``basis`` (the plan
        bound to another signature), only what the changed arguments reach is bound again."""
        return BoundPlan(self, inputs, stats, sizing, pool=pool, avoid=avoid, basis=basis)

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


@dataclass(frozen=True)
class CallFacts:
    """A ``byoc.call_extern`` as binding reads it."""

    name: str
    inputs: tuple[SSAValue, ...]
    outs: tuple[SSAValue, ...]
    res: tuple[SSAValue, ...]
    reference: FunctionShapes | None
    """The shape rules of the reference body its bound shapes are checked on: only for a
    call with a dynamic input dim whose body was kept."""
    reads_arguments: bool
    """Whether an input is an entry-block argument: its launches may be patched to read a
    device input in place, so each bound plan gets copies of them; the others' launches
    are never written after their bind and are shared between bound plans."""


class BindFacts:
    """The IR facts of an entry block that binding a signature reads, gathered once at load
    (IREE's and TVM's VM's plans are data): each tensor's declared shape (``-1`` for ``?``)
    and element type, each call's operands and the reference it is checked on, each
    ``arith.constant``'s value; and the memos of shape-function and reference results per
    argument values, and of each call's launches per bound tensors, bounded, which the
    layers of a model and the signatures of a decode loop share."""

    MEMO = 4096
    """Entries each memo keeps (a decode loop brings new sizes each step)."""

    def __init__(self, block: Block, interpreter: Any, symbols: Mapping[str, func.FuncOp]):
        self.shapes: dict[SSAValue, tuple[int, ...]] = {}
        self.dtypes: dict[SSAValue, np.dtype] = {}
        self.calls: dict[Operation, CallFacts] = {}
        self.constants: dict[SSAValue, Any] = {}
        self.shape_calls: dict[tuple, tuple] = {}
        self.reference_shapes: dict[tuple, list[tuple[int, ...]]] = {}
        self.launches: dict[tuple, list] = {}
        """``(call, input tensors, output tensors, workspace)`` -> launches bound for them,
        copied for each bound plan (``BoundPlan._launches``)."""
        self.templates: dict[tuple, tuple[list, list[list[tuple[int, int]]]]] = {}
        """``(callee, input shapes and dtypes, output shapes and dtypes)`` -> launches bound
        for one call of the function and where each pointer argument's tensor is: another
        call at the same shapes (the next layer's) copies them and patches its pointers."""
        self.reads: dict[Operation, tuple[SSAValue, ...]] = {
            op: tuple(v for inner in op.walk() for v in inner.operands) for op in block.ops}
        """Each op's operands, its regions' included: what binding it reads (``BoundPlan``
        binds an op again only where one of them changed since its basis)."""
        for value in (*block.args, *(r for op in block.ops for r in op.results)):
            if isinstance(value.type, TensorType):
                self.shapes[value] = tuple(value.type.get_shape())
                self.dtypes[value] = _dtype(value.type)
        rules: dict[func.FuncOp, FunctionShapes] = {}
        for op in block.ops:
            if isinstance(op, byoc.CallExternOp):
                name = op.callee.string_value()
                inputs = tuple(op.inputs)
                reference = symbols.get(name + REFERENCE_SUFFIX)
                dynamic = any(DYNAMIC_INDEX in self.shapes.get(v, ()) for v in inputs)
                checked = None
                if dynamic and reference is not None and reference.body.blocks:
                    if reference not in rules:  # one per function, whichever calls share it
                        rules[reference] = FunctionShapes(reference)
                    checked = rules[reference]
                self.calls[op] = CallFacts(name, inputs, tuple(op.outs), tuple(op.res), checked,
                                           any(isinstance(v, BlockArgument) and v.owner is block for v in inputs))
            elif isinstance(op, arith.ConstantOp):
                (self.constants[op.result],) = interpreter.run_op(op, ())

    def remember(self, memo: dict, key: tuple, value: Any) -> None:
        if len(memo) >= self.MEMO:
            memo.pop(next(iter(memo)))  # the oldest
        memo[key] = value


def _where(op: Operation) -> str:
    loc = getattr(op, "location", None)
    if loc is not None and hasattr(loc, "filename"):
        return f" at {loc.filename.data}:{loc.line.data}:{loc.column.data}"
    return ""


def _static_bytes(t: Attribute) -> int:
    """Bytes of a planned buffer of type ``t`` (0 for anything but a static tensor)."""
    if not isinstance(t, TensorType) or any(d < 0 for d in t.get_shape()):
        return 0
    return prod(t.get_shape()) * _dtype(t).itemsize
