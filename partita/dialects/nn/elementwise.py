"""Element-wise ``nn`` ops: arithmetic with NumPy broadcasting, activations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    ELEMENT_TYPES,
    NUMERIC_TYPES,
    FORMAT_BINARY,
    FORMAT_UNARY,
    NNOp,
    Shape,
    UnaryOp,
    _bool_prop,
    _check_ints,
    _float_prop,
    _fmt,
    _init,
    _int_prop,
    _ints_prop,
    _shape,
    _static_product,
    _str_prop,
    _tensor,
    _value,
    broadcast_shapes,
    check_channel_vector,
    dense_from_numpy,
    dense_to_numpy,
    merge_dims,
    normalize_axis,
)


class ElementwiseBinaryOp(NNOp):
    """Elementwise binary op with NumPy broadcasting."""

    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = FORMAT_BINARY

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation,
                 result_type: Attribute | None = None):
        _init(self, [lhs, rhs], result_type)

    def infer_shape(self) -> Shape:
        return broadcast_shapes(_shape(self.lhs), _shape(self.rhs))


@irdl_op_definition
class AddOp(ElementwiseBinaryOp):
    name = "nn.add"


@irdl_op_definition
class SubtractOp(ElementwiseBinaryOp):
    name = "nn.subtract"


@irdl_op_definition
class MultiplyOp(ElementwiseBinaryOp):
    name = "nn.multiply"


@irdl_op_definition
class DivideOp(ElementwiseBinaryOp):
    name = "nn.divide"



@irdl_op_definition
class ReluOp(UnaryOp):
    name = "nn.relu"


@irdl_op_definition
class SigmoidOp(UnaryOp):
    name = "nn.sigmoid"


@irdl_op_definition
class TanhOp(UnaryOp):
    name = "nn.tanh"


@irdl_op_definition
class GeluOp(UnaryOp):
    """GELU; ``approximate`` is "none" (erf form) or "tanh"."""

    name = "nn.gelu"
    approximate_attr = _str_prop("approximate", "none")
    approximate = _value("approximate")

    def __init__(self, input: SSAValue | Operation, approximate: str | None = None,
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, approximate=approximate)

    def infer_shape(self) -> Shape:
        if self.approximate not in ("none", "tanh"):
            raise VerifyException(
                f"approximate must be \"none\" or \"tanh\", got {self.approximate!r}")
        return super().infer_shape()


@irdl_op_definition
class ClipOp(UnaryOp):
    """Clamp to ``[min, max]``."""

    name = "nn.clip"
    min_attr = _float_prop("min")
    max_attr = _float_prop("max")
    min = _value("min")
    max = _value("max")

    def __init__(self, input: SSAValue | Operation, min: float, max: float,
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, min=float(min), max=float(max))

    def infer_shape(self) -> Shape:
        if self.min > self.max:
            raise VerifyException(f"clip min {self.min} is greater than max {self.max}")
        return super().infer_shape()


