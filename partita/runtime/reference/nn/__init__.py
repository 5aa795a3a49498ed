"""NumPy references of every ``nn`` op, one module per operator family (as in
``partita.dialects.nn``), for the xDSL interpreter."""

from __future__ import annotations

from typing import Any

from xdsl.dialects import tensor
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.runtime.reference.nn.conv import ConvFunctions
from partita.runtime.reference.nn.elementwise import ElementwiseFunctions
from partita.runtime.reference.nn.linalg import LinalgFunctions
from partita.runtime.reference.nn.normalization import NormalizationFunctions
from partita.runtime.reference.nn.transform import TransformFunctions


@register_impls
class TensorDimFunctions(InterpreterFunctions):
    """``tensor.dim`` on NumPy arrays (for shape computations of dynamic partitions)."""

    @impl(tensor.DimOp)
    def run_dim(self, interpreter: Interpreter, op: tensor.DimOp, args: tuple[Any, ...]):
        return (int(args[0].shape[args[1]]),)


NN_FUNCTIONS: tuple[type[InterpreterFunctions], ...] = (
    ElementwiseFunctions, LinalgFunctions, NormalizationFunctions, ConvFunctions,
    TransformFunctions, TensorDimFunctions,
)
"""The implementation classes the reference executor registers for nn (and tensor.dim)."""
