"""What the library codegens (``cublas``, ``cudnn``, ``tensorrt``) share.

A library partition compiles to no kernel of ours: its codegen turns each partition
function into a *record* (the library's descriptors, as plain values), puts the records of
one compiler on one ``byoc.binary`` (``format = "library"``, or ``"onnx"`` for TensorRT's
embedded sub-models), then marks the functions extern. At load, the launch plan reads each
record into a runtime handle (``partita.runtime.libraries``) that makes the library's plan
once per shape signature and calls the library on the plan's stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, SSAValue
from xdsl.passes import ModulePass

from partita.dialects import byoc, nn
from partita.lowering.functions import mark_compiler_functions, outline_compiler_partitions
from partita.target import Target as PartitaTarget

#: Library target -> (module, class) of its codegen pass, ``<target>-codegen``.
LIBRARY_CODEGENS: dict[str, tuple[str, str]] = {
    "cublas": ("partita.lowering.cublas.codegen", "CublasCodegen"),
    "cudnn": ("partita.lowering.cudnn.codegen", "CudnnCodegen"),
    "tensorrt": ("partita.lowering.tensorrt.codegen", "TensorRTCodegen"),
}

def element_type(value: SSAValue) -> str:
    assert isinstance(value.type, TensorType)
    return str(value.type.element_type)


def static_shape(value: SSAValue) -> tuple[int, ...]:
    """The shape, ``-1`` for dynamic dims (xDSL's own marker is a huge negative)."""
    assert isinstance(value.type, TensorType)
    return tuple(d if d >= 0 else -1 for d in value.type.get_shape())


def call_site_constants(module: ModuleOp, function: FuncOp) -> dict[int, np.ndarray]:
    """Arguments of ``function`` that every call passes the same ``nn.constant`` value
    (weights, scales): argument index -> value. A library can fold those at build time
    (TensorRT builds weights into its engine, cuDNN takes the attention scale as an
    attribute). Functions shared by structurally equal partitions usually get different
    weights per call: those arguments stay arguments."""
    from xdsl.dialects.func import CallOp
    from xdsl.ir import OpResult


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
        return {f.sym_name.data: self.record(f) for f in byoc.compiler_functions(module, self.compiler)}

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        outline_compiler_partitions(op, self.compiler)
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
        mark_compiler_functions(op, self.compiler)
