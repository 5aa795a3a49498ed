"""Reference executor: interprets a module on NumPy arrays (the ground truth for tests).

``run(module, *args)`` evaluates the entry ``func.func``. Implementations come from the
xDSL interpreter framework: ``func`` and ``arith`` from xDSL, ``nn`` and ``tensor.dim`` from
``partita.runtime.reference.nn``, the ``byoc`` ops from ``byoc_impls``, plus any classes the
caller passes (``ReferenceExecutor(module, impls=...)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType
from xdsl.interpreter import Interpreter, InterpreterFunctions
from xdsl.interpreters.arith import ArithFunctions
from xdsl.interpreters.func import FuncFunctions

from partita.dialects.nn import numpy_dtype
from partita.ir.abi import argument_names
from partita.runtime.reference.byoc_impls import ByocFunctions
from partita.runtime.reference.nn import NN_FUNCTIONS


class ReferenceExecutor:
    """Interprets functions of ``module`` with NumPy-backed op implementations; ``impls``
    adds implementations of other ops."""

    def __init__(self, module: ModuleOp, impls: Sequence[type[InterpreterFunctions]] = ()):
        self.module = module
        self.interpreter = Interpreter(module)
        for cls in (FuncFunctions, ArithFunctions, *NN_FUNCTIONS, ByocFunctions, *impls):
            self.interpreter.register_implementations(cls())

    def entry_function(self, entry: str) -> func.FuncOp:
        for op in self.module.ops:
            if isinstance(op, func.FuncOp) and op.sym_name.data == entry:
                return op
        raise ValueError(f"no func.func @{entry} in the module")

    def run(self, *args: Any, entry: str = "main", **named: Any) -> tuple[np.ndarray, ...]:
        """Call ``@entry``. Arguments are positional, or by block-argument name (keywords,
        or a single mapping passed positionally)."""
        fn = self.entry_function(entry)
        if len(args) == 1 and isinstance(args[0], Mapping):
            named = {**args[0], **named}
            args = ()
        values = self._bind(fn, list(args), named)
        return tuple(self.interpreter.call_op(fn, tuple(values)))

    @staticmethod
    def _bind(fn: func.FuncOp, args: list[Any], named: dict[str, Any]) -> list[Any]:
        inputs = fn.function_type.inputs.data
        names = argument_names(fn) if fn.body.blocks else []
        hints = [a.name_hint for a in fn.body.block.args] if fn.body.blocks else []
        if named:
            for i in range(len(args), len(inputs)):
                # The model's own name (``onnx.name``), or the SSA name hint.
                label = next((n for n in (names[i] if i < len(names) else None,
                                          hints[i] if i < len(hints) else None)
                              if n is not None and n in named),
                             names[i] if i < len(names) else None)
                if label not in named:
                    raise ValueError(f"@{fn.sym_name.data}: missing argument "
                                     f"{_label(i, label)}")
                args.append(named.pop(label))
            if named:
                raise ValueError(f"@{fn.sym_name.data}: unknown arguments {sorted(named)}")
        if len(args) != len(inputs):
            raise ValueError(f"@{fn.sym_name.data} takes {len(inputs)} arguments, "
                             f"got {len(args)}")
        return [
            _check_arg(fn.sym_name.data, _label(i, names[i] if i < len(names) else None),
                       value, typ)
            for i, (value, typ) in enumerate(zip(args, inputs))
        ]

    def __call__(self, *args: Any, entry: str = "main", **named: Any) -> tuple[np.ndarray, ...]:
        return self.run(*args, entry=entry, **named)


def _label(index: int, name: str | None) -> str:
    return f"#{index} (%{name})" if name else f"#{index}"


def _check_arg(fn_name: str, label: str, value: Any, typ: Any) -> Any:
    """Check an array against a tensor type: rank, static dims and exact dtype."""
    if not isinstance(typ, TensorType):
        return value
    if not isinstance(value, np.ndarray):
        raise ValueError(f"@{fn_name} argument {label}: expected a numpy array for {typ}, "
                         f"got {type(value).__name__}")
    shape = typ.get_shape()
    if value.ndim != len(shape) or any(
        d != DYNAMIC_INDEX and d != s for d, s in zip(shape, value.shape)
    ):
        raise ValueError(f"@{fn_name} argument {label}: shape {value.shape} does not match "
                         f"{typ}")
    dtype = numpy_dtype(typ.element_type)
    if value.dtype != dtype:
        raise ValueError(f"@{fn_name} argument {label}: dtype {value.dtype} does not match "
                         f"{typ} (expected {dtype})")
    return value


def run(module: ModuleOp, *args: Any, entry: str = "main", **named: Any) -> tuple[np.ndarray, ...]:
    """Evaluate ``@entry`` of ``module`` on NumPy arrays; returns its results."""
    return ReferenceExecutor(module).run(*args, entry=entry, **named)


__all__ = ["ReferenceExecutor", "run"]
