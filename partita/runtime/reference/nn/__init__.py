"""NumPy references of every ``nn`` op, one module per operator family (as in
``partita.dialects.nn``), for the xDSL interpreter."""

from __future__ import annotations

from typing import Any

from xdsl.dialects import tensor
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.runtime.reference.nn import (
    attention,
    control_flow,
    conv,
    dyn,
    elementwise,
    image,
    indexing,
    linalg,
    normalization,
    random,
    reduction,
    selection,
    spectral,
    text,
    transform,
)


@register_impls
class TensorDimFunctions(InterpreterFunctions):
    """``tensor.dim`` on NumPy arrays (for shape computations of dynamic partitions)."""

    @impl(tensor.DimOp)
    def run_dim(self, interpreter: Interpreter, op: tensor.DimOp, args: tuple[Any, ...]):
        return (int(args[0].shape[args[1]]),)


def _families() -> tuple[type[InterpreterFunctions], ...]:
    """Every ``InterpreterFunctions`` class defined by a family module of this package."""
    modules = (elementwise, linalg, normalization, reduction, conv, image, transform, indexing,
               attention, dyn, selection, random, text, control_flow, spectral)
    return tuple(cls for m in modules for cls in vars(m).values()
                 if isinstance(cls, type) and issubclass(cls, InterpreterFunctions)
                 and cls.__module__ == m.__name__)


NN_FUNCTIONS: tuple[type[InterpreterFunctions], ...] = (*_families(), TensorDimFunctions)
"""The implementation classes the reference executor registers for nn (and tensor.dim):
each family module defines one (or more) ``@register_impls`` classes."""
