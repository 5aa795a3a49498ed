"""Normalization ``nn`` ops: softmax / log_softmax / hardmax on any axis, layer, RMS, group
(and instance), batch, Lp and mean-variance norms, local response norm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    FLOATS,
    Dims,
    NNOp,
    OpKind,
    Shape,
    ShapeArith,
    UnaryOp,
    _float_prop,
    _fmt,
    _init,
    _int_prop,
    _ints_prop,
    _shape,
    _value,
    broadcast_shapes,
    check_channel_vector,
    kind_trait,
    merge_dims,
    normalize_axis,
)
from partita.dialects.nn.reduction import normalize_axes


class AxisNormOp(UnaryOp):
    """Base of the ops normalizing along one ``axis`` (no name: not an op)."""
    traits = kind_trait(OpKind.COMM_REDUCE)

    ALLOWED_TYPES: ClassVar = FLOATS
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
class SoftmaxOp(AxisNormOp):
    name = "nn.softmax"


@irdl_op_definition
class LogSoftmaxOp(AxisNormOp):
    name = "nn.log_softmax"


@irdl_op_definition
class HardmaxOp(AxisNormOp):
    """1 at the first maximum along ``axis``, 0 elsewhere."""

    name = "nn.hardmax"


@irdl_op_definition
class LpNormOp(AxisNormOp):
    """``x / ||x||_p`` along ``axis`` (p = 1 or 2; a zero norm gives 0)."""

    name = "nn.lp_norm"
    p_attr = _int_prop("p", 2)
    p = _value("p")

    def __init__(self, input: SSAValue | Operation, axis: int | None = None,
                 p: int | None = None, result_type: Attribute | None = None):
        UnaryOp.__init__(self, input, result_type, axis=axis, p=p)

    def infer_shape(self) -> Shape:
        if self.p not in (1, 2):
            raise VerifyException(f"lp_norm p must be 1 or 2, got {self.p}")
        return super().infer_shape()


@irdl_op_definition
class MeanVarianceNormOp(UnaryOp):
    """``(x - mean) / (std + 1e-9)`` over ``axes`` (ONNX MeanVarianceNormalization; the
    variance is ``E[x^2] - E[x]^2``)."""
    traits = kind_trait(OpKind.COMM_REDUCE)

    name = "nn.mean_variance_norm"
    ALLOWED_TYPES: ClassVar = FLOATS
    axes_attr = _ints_prop("axes")
    axes = _value("axes")

    def __init__(self, input: SSAValue | Operation, axes: Sequence[int],
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, axes=tuple(axes))

    def infer_shape(self) -> Shape:
        shape = super().infer_shape()
        normalize_axes(self.axes, len(shape))
        return shape


@irdl_op_definition
class LRNOp(UnaryOp):
    """Local response normalization across ``axis`` (ONNX: alpha is divided by size)."""
    traits = kind_trait(OpKind.OPAQUE)  # a window across channels: TVM keeps it opaque

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
    traits = kind_trait(OpKind.COMM_REDUCE)

    name = "nn.layer_norm"
    ALLOWED_TYPES: ClassVar = FLOATS
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
class RMSNormOp(NNOp):
    """``x / sqrt(mean(x^2 over axis..end) + epsilon) * scale``; ``scale`` broadcasts to
    ``input[axis:]``."""
    traits = kind_trait(OpKind.COMM_REDUCE)

    name = "nn.rms_norm"
    ALLOWED_TYPES: ClassVar = FLOATS
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", -1)
    epsilon_attr = _float_prop("epsilon", 1e-5)
    axis = _value("axis")
    epsilon = _value("epsilon")
    assembly_format = "$input `,` $scale attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue | Operation, scale: SSAValue | Operation,
                 axis: int | None = None, epsilon: float | None = None,
                 result_type: Attribute | None = None):
        _init(self, [input, scale], result_type, axis=axis,
              epsilon=None if epsilon is None else float(epsilon))

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return list(dims(self.input))

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        norm = x[normalize_axis(self.axis, len(x)):]
        s = _shape(self.scale)
        if len(s) > len(norm) or broadcast_shapes(norm, s) != tuple(norm):
            raise VerifyException(f"scale of shape {_fmt(s)} does not broadcast to "
                                  f"{_fmt(norm)}")
        if self.epsilon < 0:
            raise VerifyException(f"epsilon must be >= 0, got {self.epsilon}")
        return x


@irdl_op_definition
class GroupNormOp(NNOp):
    """Normalize ``input[N, C, ...]`` over each of ``num_groups`` channel groups (and the
    spatial dims), then scale and shift per channel (``scale``, ``bias``: ``[C]``).
    Instance norm is the case ``num_groups = C``."""
    traits = kind_trait(OpKind.COMM_REDUCE)

    name = "nn.group_norm"
    ALLOWED_TYPES: ClassVar = FLOATS
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    result = result_def(TensorType)
    num_groups_attr = _int_prop("num_groups")
    epsilon_attr = _float_prop("epsilon", 1e-5)
    num_groups = _value("num_groups")
    epsilon = _value("epsilon")
    assembly_format = ("$input `,` $scale `,` $bias attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, input: SSAValue | Operation, scale: SSAValue | Operation,
                 bias: SSAValue | Operation, num_groups: int, epsilon: float | None = None,
                 result_type: Attribute | None = None):
        _init(self, [input, scale, bias], result_type, num_groups=num_groups,
              epsilon=None if epsilon is None else float(epsilon))

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return list(dims(self.input))

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        if len(x) < 2:
            raise VerifyException(f"group_norm expects rank >= 2, got {len(x)}")
        g = self.num_groups
        if g < 1 or (x[1] != DYN and x[1] % g):
            raise VerifyException(f"num_groups {g} does not divide the {x[1]} channels")
        check_channel_vector(x, _shape(self.scale), 1, "scale")
        check_channel_vector(x, _shape(self.bias), 1, "bias")
        if self.epsilon < 0:
            raise VerifyException(f"epsilon must be >= 0, got {self.epsilon}")
        return x


@irdl_op_definition
class BatchNormOp(NNOp):
    """Inference-mode batch norm with per-channel ``gamma, beta, mean, variance``."""
    traits = kind_trait(OpKind.BROADCAST)

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


