"""``lower-extern-calls``: calls of extern functions become explicit runtime calls.

The TECompiler step of TVM's BYOC flow, in destination-passing style: each ``func.call``
of a ``byoc.extern`` declaration becomes ``byoc.alloc_tensor`` for every result, then
``byoc.call_extern @f(ins) outs(allocs)``.

Dynamic results (``?`` dims) are sized at run time by a shape function
``@<f>_shape_func(index...) -> index...`` (see ``shape_functions``), derived once per
extern function from its ``@<f>_reference`` sibling (left by
``mark-compiler-functions-as-extern``) and inserted after it. At the call site::

    %c0 = arith.constant 0 : index
    %n = tensor.dim %x, %c0 : tensor<?x768xf16>
    %d = func.call @f_shape_func(%n) : (index) -> index
    %out = byoc.alloc_tensor(%d) : tensor<?x2304xf16>
    %r = byoc.call_extern @f(%x, ...) outs(%out) {byoc.shape_func = @f_shape_func} : ...

The declaration may carry only ``byoc.extern``, so the link to the shape function is the
name convention plus ``byoc.shape_func`` on each ``byoc.call_extern`` that used it. An
existing ``@<f>_shape_func`` (e.g. written by hand) is used as is if its type fits.

A result tied to an operand (``byoc.tied_operand`` on the callee's result, set by
``tie-in-place-updates``) gets no allocation: that operand is its ``outs``, so the kernel
writes into the buffer it updates; an operand read anywhere else is a located error.

A shape function runs on the host, between kernel launches: it gets the host of its
first caller's target (the caller's target itself when that is a cpu target; ``llvm``
when the caller has no target), so ``verify-targets`` accepts it and a later
``bind-target`` does not put it on the device. A shape function that already has a
target keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, tensor
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, SymbolRefAttr, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from partita.analysis.shape_functions import derive_shape_function, dynamic_dims
from partita.dialects.byoc import (
    REFERENCE_IMPL,
    SHAPE_FUNC,
    TARGET,
    TIED_OPERAND,
    AllocTensorOp,
    CallExternOp,
    TargetAttr,
    is_extern,
    tied_operand,
)
from partita.ir import op_error, symbol_name
from partita.target import DeviceType, TargetError
from partita.transforms.mark_compiler_functions_as_extern import reference_name

__all__ = ["LowerExternCalls", "SHAPE_FUNC_SUFFIX", "shape_func_name"]

SHAPE_FUNC_SUFFIX = "_shape_func"


def shape_func_name(extern_name: str) -> str:
    return extern_name + SHAPE_FUNC_SUFFIX


def host_of_caller(call: Operation) -> TargetAttr:
    """The host target of the function holding ``call`` (see the module docstring)."""
    caller = call.parent_op()
    while caller is not None and not isinstance(caller, func.FuncOp):
        caller = caller.parent_op()
    attr = caller.attributes.get(TARGET) if caller is not None else None
    if not isinstance(attr, TargetAttr):
        return TargetAttr("llvm")
    if attr.host_target is not None:
        return attr.host_target
    try:
        on_cpu = attr.to_target().device_type is DeviceType.CPU
    except TargetError:
        on_cpu = False
    return attr if on_cpu else TargetAttr("llvm")


@dataclass(frozen=True)
class LowerExternCalls(ModulePass):
    """Lowers ``func.call``s of ``byoc.extern`` functions to ``byoc.alloc_tensor`` +
    ``byoc.call_extern``, with shape functions for dynamic results."""

    name = "lower-extern-calls"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        symbols = {name: sym for sym in op.ops if (name := symbol_name(sym)) is not None}
        calls = [
            c for c in op.walk()
            if isinstance(c, func.CallOp) and is_extern(symbols.get(c.callee.string_value()))
        ]
        for call in calls:
            callee = symbols[call.callee.string_value()]
            assert isinstance(callee, func.FuncOp)
            self._lower(call, callee, symbols)

    def _shape_function(self, call: func.CallOp, callee: func.FuncOp, symbols: dict) -> func.FuncOp:
        name = callee.sym_name.data
        n_in = len(dynamic_dims(callee.function_type.inputs.data))
        n_out = len(dynamic_dims(callee.function_type.outputs.data))
        expected = ((IndexType(),) * n_in, (IndexType(),) * n_out)
        existing = symbols.get(shape_func_name(name))
        if isinstance(existing, func.FuncOp) and TARGET not in existing.attributes:
            existing.attributes[TARGET] = host_of_caller(call)
        if existing is not None:
            if not isinstance(existing, func.FuncOp) or (
                existing.function_type.inputs.data, existing.function_type.outputs.data
            ) != expected:
                raise op_error(
                    existing,
                    f"is not a shape function of @{name}: expected {n_in} index argument(s) "
                    f"and {n_out} index result(s)",
                )
            return existing
        reference = symbols.get(reference_name(name))
        if not isinstance(reference, func.FuncOp) or reference.attributes.get(REFERENCE_IMPL) != SymbolRefAttr(name):
            raise op_error(
                call,
                f"has dynamic result shapes, but @{reference_name(name)}, the body of @{name} needed "
                f"to derive its shape function, is missing (was it dropped by "
                f"mark-compiler-functions-as-extern{{keep-reference=false}}?)",
            )
        shape_func = derive_shape_function(reference, shape_func_name(name))
        shape_func.attributes[TARGET] = host_of_caller(call)
        Rewriter.insert_op(shape_func, InsertPoint.after(reference))
        symbols[shape_func.sym_name.data] = shape_func
        return shape_func

    @staticmethod
    def _tied(call: func.CallOp, operand: int, typ: TensorType) -> SSAValue:
        """The operand a result tied to it is written into: one of the call's own, of the
        result's type, that nothing reads after the call (the callee writes its buffer)."""
        if not 0 <= operand < len(call.arguments) or call.arguments[operand].type != typ:
            raise op_error(call, f"calls @{call.callee.string_value()}, whose result is tied to operand "
                                 f"#{operand}, which is not one of its operands of the result's type {typ}")
        value = call.arguments[operand]
        # A tensor.dim reads the buffer's shape (the shape functions' inputs), which the
        # in-place write keeps: only other reads of its contents forbid writing it.
        if sum(not isinstance(use.operation, tensor.DimOp) for use in value.uses) != 1:
            raise op_error(call, f"passes operand #{operand} to @{call.callee.string_value()}, which writes its "
                                 f"result into it in place ('{TIED_OPERAND}'), but reads it elsewhere too")
        return value

    def _lower(self, call: func.CallOp, callee: func.FuncOp, symbols: dict) -> None:
        new_ops: list[Operation] = []
        result_types = list(call.result_types)
        for typ in result_types:
            if not isinstance(typ, TensorType):
                raise op_error(call, f"returns {typ}: extern calls can only return tensors")
        out_dyn = dynamic_dims(result_types)
        out_dims: list[SSAValue] = []
        shape_func = None
        if out_dyn:
            shape_func = self._shape_function(call, callee, symbols)
            constants: dict[int, SSAValue] = {}
            in_dims: list[SSAValue] = []
            for i, axis in dynamic_dims(call.arguments.types):
                if axis not in constants:
                    c = arith.ConstantOp(IntegerAttr(axis, IndexType()))
                    new_ops.append(c)
                    constants[axis] = c.result
                dim = tensor.DimOp(call.arguments[i], constants[axis])
                new_ops.append(dim)
                in_dims.append(dim.result)
            shape_call = func.CallOp(shape_func.sym_name.data, in_dims, [IndexType()] * len(out_dyn))
            new_ops.append(shape_call)
            out_dims = list(shape_call.results)
        outs: list[SSAValue] = []
        position = 0
        for r, typ in enumerate(result_types):
            assert isinstance(typ, TensorType)
            n = sum(1 for d in typ.get_shape() if d < 0)
            position += n
            if (tied := tied_operand(callee, r)) is not None:  # written in place: no buffer of its own
                outs.append(self._tied(call, tied, typ))
                continue
            alloc = AllocTensorOp(typ, out_dims[position - n:position])
            new_ops.append(alloc)
            outs.append(alloc.result)
        extern_call = CallExternOp(callee.sym_name.data, list(call.arguments), outs)
        if shape_func is not None:
            extern_call.attributes[SHAPE_FUNC] = SymbolRefAttr(shape_func.sym_name.data)
        new_ops.append(extern_call)
        for new in new_ops:
            new.location = call.location
        Rewriter.replace_op(call, new_ops, list(extern_call.res))
