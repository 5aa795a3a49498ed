"""Normalization ``nn`` ops: softmax, layer/batch norm, local response norm."""

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


@irdl_op_definition
class SoftmaxOp(UnaryOp):
    name = "nn.softmax"
    axis_attr = _int_prop("axis", -1)
    axis = _value("axis")

    def __init__(self, input: SSAValue | Operation, axis: int | None = None,
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, axis=axis)

    def infer_shape(self) -> Shape:
        shape = super().infer_shape()
        normalize_axis(self.axis, len(shape))
        return shape


@irdl_op_definition
class LRNOp(UnaryOp):
    """Local response normalization across ``axis`` (ONNX: alpha is divided by size)."""

    name = "nn.lrn"
    size_attr = _int_prop("size")
    axis_attr = _int_prop("axis", 1)
    alpha_attr = _float_prop("alpha", 1e-4)
    beta_attr = _float_prop("beta", 0.75)
    bias_attr = _float_prop("bias", 1.0)
    size = _value("size")
    axis = _value("axis")
    alpha = _value("alpha")
    beta = _value("beta")
    bias = _value("bias")

    def __init__(self, input: SSAValue | Operation, size: int, axis: int | None = None,
                 alpha: float | None = None, beta: float | None = None,
                 bias: float | None = None, result_type: Attribute | None = None):
        super().__init__(input, result_type, size=size, axis=axis,
                         alpha=None if alpha is None else float(alpha),
                         beta=None if beta is None else float(beta),
                         bias=None if bias is None else float(bias))

    def infer_shape(self) -> Shape:
        shape = super().infer_shape()
        normalize_axis(self.axis, len(shape))
        if self.size < 1:
            raise VerifyException(f"lrn size must be >= 1, got {self.size}")
        return shape



@irdl_op_definition
class LayerNormOp(NNOp):
    """Normalize over dims ``axis..end``; ``gamma``/``beta`` have shape ``input[axis:]``."""

    name = "nn.layer_norm"
    input = operand_def(TensorType)
    gamma = operand_def(TensorType)
    beta = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", -1)
    epsilon_attr = _float_prop("epsilon", 1e-5)
    axis = _value("axis")
    epsilon = _value("epsilon")
    assembly_format = ("$input `,` $gamma `,` $beta attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, input: SSAValue | Operation, gamma: SSAValue | Operation,
                 beta: SSAValue | Operation, axis: int | None = None,
                 epsilon: float | None = None, result_type: Attribute | None = None):
        _init(self, [input, gamma, beta], result_type, axis=axis,
              epsilon=None if epsilon is None else float(epsilon))

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        norm = x[normalize_axis(self.axis, len(x)):]
        for name, v in (("gamma", self.gamma), ("beta", self.beta)):
            s = _shape(v)
            if len(s) != len(norm):
                raise VerifyException(f"{name} must have shape {_fmt(norm)}, got {_fmt(s)}")
            for a, b in zip(norm, s):
                merge_dims(a, b, f"{name} must have shape {_fmt(norm)}, got {_fmt(s)}")
        if self.epsilon < 0:
            raise VerifyException(f"epsilon must be >= 0, got {self.epsilon}")
        return x


@irdl_op_definition
class BatchNormOp(NNOp):
    """Inference-mode batch norm with per-channel ``gamma, beta, mean, variance``."""

    name = "nn.batch_norm"
    input = operand_def(TensorType)
    gamma = operand_def(TensorType)
    beta = operand_def(TensorType)
    mean = operand_def(TensorType)
    variance = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", 1)
    epsilon_attr = _float_prop("epsilon", 1e-5)
    axis = _value("axis")
    epsilon = _value("epsilon")
    assembly_format = ("$input `,` $gamma `,` $beta `,` $mean `,` $variance attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, input, gamma, beta, mean, variance, axis: int | None = None,
                 epsilon: float | None = None, result_type: Attribute | None = None):
        _init(self, [input, gamma, beta, mean, variance], result_type, axis=axis,
              epsilon=None if epsilon is None else float(epsilon))

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        axis = normalize_axis(self.axis, len(x))
        for name in ("gamma", "beta", "mean", "variance"):
            check_channel_vector(x, _shape(getattr(self, name)), axis, name)
        if self.epsilon < 0:
            raise VerifyException(f"epsilon must be >= 0, got {self.epsilon}")
        return x


