"""Reference semantics of the ``byoc`` ops, for the NumPy reference executor.

- ``byoc.partition`` runs its region on its operands (the partition is just a function
  the partitioner has not outlined yet);
- ``byoc.alloc_tensor`` is ``np.empty`` of the shape and dtype;
- ``byoc.call_extern`` emulates the external code: it runs the extern function's
  ``@<name>_reference`` sibling (kept by ``mark-compiler-functions-as-extern``), checks
  that the result fits the allocated outputs, copies it in, and returns the outputs.

The reference executor registers them with the ``nn`` ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects.builtin import DYNAMIC_INDEX, SymbolRefAttr, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    ReturnedValues,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.traits import SymbolTable

from partita.dialects import byoc
from partita.dialects.byoc import REFERENCE_SUFFIX
from partita.dialects.nn import numpy_dtype
from partita.ir import op_error


@register_impls
class ByocFunctions(InterpreterFunctions):
    """``byoc.partition``, ``byoc.yield``, ``byoc.alloc_tensor`` and ``byoc.call_extern``."""

    @impl(byoc.PartitionOp)
    def run_partition(self, interpreter: Interpreter, op: byoc.PartitionOp, args: tuple[Any, ...]):
        return interpreter.run_ssacfg_region(op.body, args, "byoc.partition")

    @impl_terminator(byoc.YieldOp)
    def run_yield(self, interpreter: Interpreter, op: byoc.YieldOp, args: tuple[Any, ...]):
        return ReturnedValues(args), ()

    @impl(byoc.AllocTensorOp)
    def run_alloc_tensor(self, interpreter: Interpreter, op: byoc.AllocTensorOp, args: tuple[Any, ...]):
        typ = op.result.type
        assert isinstance(typ, TensorType)
        sizes = iter(args)
        shape = tuple(int(next(sizes)) if d == DYNAMIC_INDEX else d for d in typ.get_shape())
        if any(d < 0 for d in shape):
            raise op_error(op, f"negative dimension in {shape}")
        try:
            dtype = numpy_dtype(typ.element_type)
        except ValueError as err:
            raise op_error(op, str(err)) from None
        return (np.empty(shape, dtype=dtype),)

    @impl(byoc.CallExternOp)
    def run_call_extern(self, interpreter: Interpreter, op: byoc.CallExternOp, args: tuple[Any, ...]):
        n_in = len(op.inputs)
        inputs, outs = args[:n_in], args[n_in:]
        name = op.callee.string_value()
        reference = SymbolTable.lookup_symbol(op, name + REFERENCE_SUFFIX)
        if not isinstance(reference, FuncOp) or reference.attributes.get(byoc.REFERENCE_IMPL) != SymbolRefAttr(name):
            raise op_error(
                op,
                f"cannot emulate @{name} on the CPU: no @{name}{REFERENCE_SUFFIX} reference body "
                "(keep it with mark-compiler-functions-as-extern{keep-reference=true})",
            )
        results = interpreter.call_op(reference, inputs)
        for i, (out, result) in enumerate(zip(outs, results, strict=True)):
            if out.shape != np.shape(result):
                raise op_error(
                    op, f"output #{i} of @{name} has shape {np.shape(result)}, but {out.shape} was allocated"
                )
            np.copyto(out, result)
        return tuple(outs)
