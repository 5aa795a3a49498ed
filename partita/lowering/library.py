"""What the library codegens (``cublas``, ``cudnn``, ``tensorrt``) share.

A library partition compiles to no kernel of ours: its codegen turns each partition
function into a *record* (the library's descriptors, as plain values), puts the records of
one compiler on one ``byoc.binary`` (``format = "library"``, or ``"onnx"`` for TensorRT's
embedded sub-models), then marks the functions extern. The runtime reads each record into
a :class:`LibraryHandle`; its interface is small so that it ports to any executor:

* ``prepare(lib, shapes, dtypes) -> plan``: once per shape signature (the runtime caches
  plans by ``(function, shapes, dtypes)``), at load for static shapes
  (:func:`static_signatures`), else at the first call of a new shape: descriptors,
  heuristics, engines.
* ``workspace_bytes(plan)``: device scratch the launch needs (the runtime owns it).
* ``launch(lib, plan, stream, inputs, outputs, workspace)``: device pointers only, on the
  runtime's stream; nothing is allocated or copied here.
* ``emulate(inputs)``: the result without a device, or ``None`` to run the reference body.

``lib`` is the library binding, loaded on first use by :func:`require` (a missing extra
is a :class:`PartitaError` naming it) unless the runtime was handed a stand-in.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, ClassVar, Protocol

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.target import Target

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.target import Target as PartitaTarget

#: Library target -> (module, class) of its codegen pass, ``<target>-codegen``.
LIBRARY_CODEGENS: dict[str, tuple[str, str]] = {
    "cublas": ("partita.lowering.cublas.codegen", "CublasCodegen"),
    "cudnn": ("partita.lowering.cudnn.codegen", "CudnnCodegen"),
    "tensorrt": ("partita.lowering.tensorrt.codegen", "TensorRTCodegen"),
}

#: Element type name -> NumPy dtype name, for the types libraries take.
DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
          "i8": "int8", "i32": "int32", "i64": "int64", "i1": "bool"}


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


def element_type(value: SSAValue) -> str:
    assert isinstance(value.type, TensorType)
    return str(value.type.element_type)


def static_shape(value: SSAValue) -> tuple[int, ...]:
    """The shape, ``-1`` for dynamic dims (xDSL's own marker is a huge negative)."""
    assert isinstance(value.type, TensorType)
    return tuple(d if d >= 0 else -1 for d in value.type.get_shape())


def compiler_functions(module: ModuleOp, compiler: str) -> list[FuncOp]:
    """Functions with a body whose ``byoc.compiler`` is ``compiler``, in module order."""
    return [
        op
        for op in module.ops
        if isinstance(op, FuncOp)
        and op.body.blocks
        and isinstance(attr := op.attributes.get(byoc.COMPILER), StringAttr)
        and attr.data == compiler
    ]


def call_site_constants(module: ModuleOp, function: FuncOp) -> dict[int, np.ndarray]:
    """Arguments of ``function`` that every call passes the same ``nn.constant`` value
    (weights, scales): argument index -> value. A library can fold those at build time
    (TensorRT builds weights into its engine, cuDNN takes the attention scale as an
    attribute). Functions shared by structurally equal partitions usually get different
    weights per call: those arguments stay arguments."""
    from xdsl.dialects.func import CallOp
    from xdsl.ir import OpResult

    from partita.dialects import nn

    name = function.sym_name.data
    calls = [op for op in module.walk() if isinstance(op, CallOp) and op.callee.string_value() == name]
    found: dict[int, np.ndarray] = {}
    if not calls:
        return found
    for index in range(len(function.function_type.inputs)):
        values = []
        for call in calls:
            operand = call.operands[index]
            if not (isinstance(operand, OpResult) and isinstance(operand.op, nn.ConstantOp)):
                break
            values.append(operand.op.to_numpy())
        else:
            if all(v.dtype == values[0].dtype and np.array_equal(v, values[0]) for v in values[1:]):
                found[index] = values[0]
    return found


def fresh_symbol(module: ModuleOp, base: str) -> str:
    taken = {o.sym_name.data for o in module.ops if isinstance(o, FuncOp | byoc.BinaryOp)}
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name


@dataclass(frozen=True)
class LibraryCodegen(ModulePass):
    """Base of the library codegens: outline, one record per function, one
    ``byoc.binary``, mark extern. Subclasses set ``name``, ``compiler``, ``format`` and
    implement :meth:`record`."""

    compiler: ClassVar[str] = ""
    format: ClassVar[str] = "library"

    def record(self, function: FuncOp) -> DictionaryAttr:
        raise NotImplementedError

    def binary_attributes(self, module: ModuleOp) -> dict[str, Attribute]:
        return {}

    def records(self, module: ModuleOp) -> dict[str, DictionaryAttr]:
        return {f.sym_name.data: self.record(f) for f in compiler_functions(module, self.compiler)}

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from partita.transforms.mark_compiler_functions_as_extern import MarkCompilerFunctionsAsExtern
        from partita.transforms.outline_compiler_functions import OutlineCompilerFunctions

        OutlineCompilerFunctions(compiler=self.compiler).apply(ctx, op)
        records = self.records(op)
        if not records:
            return
        attributes: dict[str, Attribute] = {
            "format": StringAttr(self.format),
            "target": byoc.TargetAttr.from_target(PartitaTarget(self.compiler)),
            "kernels": DictionaryAttr(records),
            **self.binary_attributes(op),
        }
        op.body.block.add_op(byoc.BinaryOp(fresh_symbol(op, self.compiler), attributes))
        MarkCompilerFunctionsAsExtern(compiler=self.compiler).apply(ctx, op)


class LibraryHandle(Protocol):
    """A library call the runtime makes for one extern function (see the module doc)."""

    function: str
    kind: ClassVar[str]
    library: ClassVar[str]
    """The target (and extra) name: ``cublas``, ``cudnn``, ``tensorrt``."""

    @property
    def kernel_name(self) -> str: ...

    def load_library(self) -> Any: ...

    def prepare(self, lib: Any, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[np.dtype]) -> Any: ...

    def workspace_bytes(self, plan: Any) -> int: ...

    def launch(self, lib: Any, plan: Any, stream: int, inputs: Sequence[int], outputs: Sequence[int],
               workspace: int) -> None: ...

    def emulate(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray] | None: ...


def static_signatures(module: ModuleOp) -> dict[str, tuple[tuple, tuple]]:
    """``(shapes, dtypes)`` of every extern function whose arguments are all static: what
    a library plan is keyed by, known before the first call."""
    from partita.dialects.byoc import EXTERN

    found = {}
    for op in module.ops:
        if not isinstance(op, FuncOp) or EXTERN not in op.attributes:
            continue
        types = op.function_type.inputs.data
        if all(isinstance(t, TensorType) and all(d >= 0 for d in t.get_shape()) for t in types):
            shapes = tuple(tuple(t.get_shape()) for t in types)  # type: ignore[union-attr]
            dtypes = tuple(DTYPES.get(str(t.element_type), str(t.element_type)) for t in types)  # type: ignore[union-attr]
            found[op.sym_name.data] = (shapes, dtypes)
    return found


def is_library_handle(handle: Any) -> bool:
    return callable(getattr(handle, "prepare", None)) and callable(getattr(handle, "load_library", None))


@dataclass
class LibraryCalls:
    """The extern runtime's side of library handles: the bindings (or stand-ins), the
    plans made per shape signature, and one workspace grown to the largest need."""

    libraries: dict[str, Any]
    plans: dict[tuple, Any]
    workspace: Any = None
    workspace_size: int = 0

    def library(self, handle: Any) -> Any:
        lib = self.libraries.get(handle.library)
        if lib is None:
            lib = self.libraries[handle.library] = handle.load_library()
        return lib

    def preload(self, handles: dict[str, Any], signatures: dict[str, tuple[tuple, tuple]]) -> int:
        """Makes the plans of the library calls whose shapes are static now (at load),
        so that their first call only binds pointers; returns how many were made."""
        made = 0
        for name, handle in handles.items():
            if is_library_handle(handle) and name in signatures:
                self.plan(handle, *signatures[name])
                made += 1
        return made

    def plan(self, handle: Any, shapes: tuple, dtypes: tuple) -> Any:
        key = (handle.function, shapes, dtypes)
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = handle.prepare(self.library(handle), shapes, dtypes)
        return plan

    def bind(self, device: Any, handle: Any, inputs: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> BoundCall:
        """The plan for these inputs' shapes, the inputs on the device, the outputs and
        the workspace allocated: everything ``launch`` needs."""
        arrays = [np.ascontiguousarray(x) for x in inputs]
        shapes = tuple(tuple(a.shape) for a in arrays)
        plan = self.plan(handle, shapes, tuple(str(a.dtype) for a in arrays))
        need = handle.workspace_bytes(plan)
        if need > self.workspace_size:
            if self.workspace is not None:
                device.free(self.workspace)
            self.workspace, self.workspace_size = device.alloc(need), need
        inputs_on_device = [device.to_device(a) for a in arrays]
        outputs_on_device = [device.alloc(max(o.nbytes, 1)) for o in outs]
        workspace = int(self.workspace) if self.workspace is not None else 0
        return BoundCall(self.library(handle), handle, plan, inputs_on_device, outputs_on_device, workspace)

    def call(self, device: Any, handle: Any, inputs: Sequence[np.ndarray], outs: Sequence[np.ndarray],
             copy_back: Callable[[Any, Any, np.ndarray], None]) -> None:
        bound = self.bind(device, handle, inputs, outs)
        try:
            bound.launch()
            for buffer, out in zip(bound.outputs, outs, strict=True):
                copy_back(device, buffer, out)
        finally:
            bound.free(device)


@dataclass
class BoundCall:
    """A library call with its device buffers: ``launch()`` is the hot-loop step."""

    lib: Any
    handle: Any
    plan: Any
    inputs: list
    outputs: list
    workspace: int
    stream: int = 0

    def launch(self) -> None:
        self.handle.launch(self.lib, self.plan, self.stream, [int(b) for b in self.inputs],
                           [int(b) for b in self.outputs], self.workspace)

    def free(self, device: Any) -> None:
        for buffer in (*self.inputs, *self.outputs):
            device.free(buffer)


@dataclass(frozen=True)
class LibraryRecordsTarget(Target):
    """``partita-opt -t library-records``: what each library partition will ask of its
    library, read back from the ``byoc.binary`` records (cuBLASLt descriptors, cuDNN
    graphs, TensorRT ONNX sub-models as text)."""

    name = "library-records"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from partita.runtime.extern import LIBRARY_HANDLE_KINDS, kernel_handles

        handles = [h for h in kernel_handles(module).values() if h.kind in LIBRARY_HANDLE_KINDS]
        if not handles:
            output.write("// no library partitions in this module\n")
        for handle in handles:
            output.write(f"// @{handle.function} (byoc.binary @{handle.binary}, {handle.library})\n")
            output.write(handle.describe() + "\n")
