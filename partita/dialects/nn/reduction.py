"""``nn`` ops: reductions over axes, arg-reductions, top-k, cumulative sums.

Reductions (``nn.reduce_*``) take their ``axes`` as a property, already normalized by the
importer (an empty list reduces nothing; ONNX's "all axes" default is spelled out). Ops
with two ONNX outputs (``TopK``) are two single-result ops over the same input
(``nn.topk_values`` / ``nn.topk_indices``), so the fuser and kernels see one result per op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import IntegerType, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, result_def
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    ELEMENT_TYPES,
    FLOATS,
    NUMERIC_TYPES,
    Dims,
    NNOp,
    OpKind,
    Shape,
    ShapeArith,
    UnaryOp,
    _bool_prop,
    _float_prop,
    _init,
    _int_prop,
    _ints_prop,
    _shape,
    _str_prop,
    _tensor,
    _value,
    kind_trait,
    normalize_axis,
)

INDEX_TYPE = IntegerType(64)
"""Element type of arg-reduction and top-k indices (ONNX: int64)."""


def normalize_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """``axes`` in ``[-rank, rank)`` mapped to ``[0, rank)``, sorted; duplicates rejected."""
    out = sorted(normalize_axis(a, rank, "reduction axis") for a in axes)
    if len(set(out)) != len(out):
        raise VerifyException(f"reduction axes {list(axes)} repeat an axis")
    return tuple(out)


def infer_reduce_shape(x: Shape, axes: Sequence[int], keepdims: bool) -> Shape:
    """The shape of ``x`` reduced over ``axes`` (kept as 1 with ``keepdims``)."""
    reduced = set(normalize_axes(axes, len(x)))
    if keepdims:
        return tuple(1 if k in reduced else d for k, d in enumerate(x))
    return tuple(d for k, d in enumerate(x) if k not in reduced)


def reduce_dims(dims: Sequence, axes: Sequence[int], keepdims: bool) -> list:
    """``dims`` (of any representation) with the normalized ``axes`` reduced."""
    if keepdims:
        return [1 if k in axes else d for k, d in enumerate(dims)]
    return [d for k, d in enumerate(dims) if k not in axes]


class ReduceOp(UnaryOp):
    """Base of the reductions over ``axes`` of their input (no name: not an op)."""
    traits = kind_trait(OpKind.COMM_REDUCE)

    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES
    axes_attr = _ints_prop("axes")
    keepdims_attr = _bool_prop("keepdims", True)
    axes = _value("axes")
    keepdims = _value("keepdims")

    def __init__(self, input: SSAValue | Operation, axes: Sequence[int],
                 keepdims: bool | None = None, result_type: Attribute | None = None,
                 **props: object):
        super().__init__(input, result_type, axes=tuple(axes), keepdims=keepdims, **props)

    def infer_shape(self) -> Shape:
        return infer_reduce_shape(_shape(self.input), self.axes, self.keepdims)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        """The input's dims less (or 1 at) the reduced axes."""
        return reduce_dims(dims(self.input), self.axes, self.keepdims)


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    name = "nn.reduce_sum"


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    name = "nn.reduce_mean"


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """Maximum (``-inf`` / the type's minimum over no elements); on bool, ``any``."""

    name = "nn.reduce_max"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES


@irdl_op_definition
class ReduceMinOp(ReduceOp):
    """Minimum (``+inf`` / the type's maximum over no elements); on bool, ``all``."""

    name = "nn.reduce_min"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES


@irdl_op_definition
class ReduceProdOp(ReduceOp):
    name = "nn.reduce_prod"


@irdl_op_definition
class ReduceL1Op(ReduceOp):
    """Sum of absolute values."""

    name = "nn.reduce_l1"


@irdl_op_definition
class ReduceL2Op(ReduceOp):
    """Square root of the sum of squares."""

    name = "nn.reduce_l2"


@irdl_op_definition
class ReduceSumSquareOp(ReduceOp):
    name = "nn.reduce_sum_square"


@irdl_op_definition
class ReduceLogSumOp(ReduceOp):
    """``log(sum(x))``."""

    name = "nn.reduce_log_sum"


@irdl_op_definition
class ReduceLogSumExpOp(ReduceOp):
    """``log(sum(exp(x)))``, computed shifted by the maximum."""

    name = "nn.reduce_log_sum_exp"


@irdl_op_definition
class ReduceInvStdDevOp(ReduceOp):
    """``1 / sqrt(var(x) + epsilon)`` over ``axes`` (population variance): the
    ``InvStdDev`` output of ONNX LayerNormalization."""

    name = "nn.reduce_inv_std_dev"
    ALLOWED_TYPES: ClassVar = FLOATS
    epsilon_attr = _float_prop("epsilon", 1e-5)
    epsilon = _value("epsilon")

    def __init__(self, input: SSAValue | Operation, axes: Sequence[int],
                 keepdims: bool | None = None, epsilon: float | None = None,
                 result_type: Attribute | None = None):
        super().__init__(input, axes, keepdims, result_type,
                         epsilon=None if epsilon is None else float(epsilon))


REDUCE_OPS: tuple[type[ReduceOp], ...] = (
    ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceMinOp, ReduceProdOp, ReduceL1Op,
    ReduceL2Op, ReduceSumSquareOp, ReduceLogSumOp, ReduceLogSumExpOp, ReduceInvStdDevOp,
)


@irdl_op_definition
class DynamicReduceOp(NNOp):
    """A reduction whose ``axes`` are a run-time ``i64`` tensor (ONNX Reduce* with an
    ``axes`` input that is no constant): ``reduction`` names the ``nn.reduce_*`` op it
    computes (``sum`` for ``nn.reduce_sum``). Its result dims depend on the values of ``axes``, so they are ``?``
    (ones stay ones) until a launch plan binds them from those values
    (``result_shape_from_values``): the op runs as a host step."""

    name = "nn.dynamic_reduce"
    traits = kind_trait(OpKind.OPAQUE)  # sized at bind time, on the host: no rule fuses it
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    SIZED_BY: ClassVar = ("axes",)
    """The operands whose values (not only shapes) size the result."""
    input = operand_def(TensorType)
    axes = operand_def(TensorType)
    result = result_def(TensorType)
    reduction_attr = _str_prop("reduction", "sum")
    reduction = _value("reduction")
    keepdims_attr = _bool_prop("keepdims", True)
    keepdims = _value("keepdims")
    noop_with_empty_axes_attr = _bool_prop("noop_with_empty_axes", False)
    noop_with_empty_axes = _value("noop_with_empty_axes")
    assembly_format = "$input `,` $axes attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue | Operation, axes: SSAValue | Operation, reduction: str,
                 keepdims: bool = True, noop_with_empty_axes: bool = False):
        _init(self, [input, axes], None, reduction=reduction, keepdims=keepdims,
              noop_with_empty_axes=noop_with_empty_axes)

    @property
    def static_op(self) -> type[ReduceOp]:
        """The ``nn.reduce_*`` op this one computes once its axes are known."""
        return _REDUCE_BY_NAME[self.reduction]

    def verify_element_types(self) -> None:
        if self.reduction not in _REDUCE_BY_NAME:
            raise VerifyException(f"unknown reduction '{self.reduction}' (one of {', '.join(_REDUCE_BY_NAME)})")
        self.check_element_type(_tensor(self.input).element_type, "element type", self.static_op.ALLOWED_TYPES)
        if _tensor(self.axes).element_type != INDEX_TYPE:
            raise VerifyException(f"axes must be i64, got {_tensor(self.axes).element_type}")
        if _tensor(self.result).element_type != _tensor(self.input).element_type:
            raise VerifyException("the result must have the input's element type")

    def infer_shape(self) -> Shape:
        x, axes = _shape(self.input), _shape(self.axes)
        if len(axes) != 1:
            raise VerifyException(f"axes must be 1-D, got rank {len(axes)}")
        if self.keepdims:
            return tuple(1 if d == 1 else DYN for d in x)
        if axes[0] == DYN:
            raise VerifyException("without keepdims the number of axes must be static (it is the rank lost)")
        if axes[0] == 0:  # no axes: every axis, or none with noop_with_empty_axes
            return x if self.noop_with_empty_axes else ()
        return (DYN,) * (len(x) - axes[0])

    def reduced_axes(self, axes: Sequence[int], rank: int) -> tuple[int, ...] | None:
        """The normalized axes a run reduces for ``axes`` (``None``: the identity)."""
        if not len(axes):
            return None if self.noop_with_empty_axes else tuple(range(rank))
        return normalize_axes([int(a) for a in axes], rank)

    def result_shape_from_values(self, shape: Callable[[SSAValue], tuple[int, ...]],
                                 value: Callable[[SSAValue], Any]) -> tuple[int, ...]:
        x = shape(self.input)
        axes = self.reduced_axes(value(self.axes).reshape(-1).tolist(), len(x))
        return x if axes is None else infer_reduce_shape(x, axes, self.keepdims)


_REDUCE_BY_NAME: dict[str, type[ReduceOp]] = {
    op.name.removeprefix("nn.reduce_"): op for op in REDUCE_OPS if op is not ReduceInvStdDevOp}


class IndexResultOp(UnaryOp):
    """A numeric input and an ``i64`` result (index-valued ops)."""

    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES

    def infer_element_type(self) -> Attribute:
        return INDEX_TYPE

    def verify_element_types(self) -> None:
        self.check_element_type(_tensor(self.input).element_type, "input element type")
        self.check_element_type(_tensor(self.result).element_type, "result element type",
                                (INDEX_TYPE,))


class ArgReduceOp(IndexResultOp):
    """Index of the extreme value along ``axis`` (the first one unless
    ``select_last_index``)."""
    traits = kind_trait(OpKind.COMM_REDUCE)

    axis_attr = _int_prop("axis", 0)
    keepdims_attr = _bool_prop("keepdims", True)
    select_last_index_attr = _bool_prop("select_last_index", False)
    axis = _value("axis")
    keepdims = _value("keepdims")
    select_last_index = _value("select_last_index")

    def __init__(self, input: SSAValue | Operation, axis: int | None = None,
                 keepdims: bool | None = None, select_last_index: bool | None = None,
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, axis=axis, keepdims=keepdims,
                         select_last_index=select_last_index)

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        axis = normalize_axis(self.axis, len(x))
        if x[axis] == 0:
            raise VerifyException("arg-reduction over an empty axis")
        return infer_reduce_shape(x, [axis], self.keepdims)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        x = dims(self.input)
        return reduce_dims(x, [self.axis % len(x)], self.keepdims)


@irdl_op_definition
class ArgMaxOp(ArgReduceOp):
    name = "nn.argmax"


@irdl_op_definition
class ArgMinOp(ArgReduceOp):
    name = "nn.argmin"


def infer_topk_shape(x: Shape, k: int, axis: int) -> Shape:
    axis = normalize_axis(axis, len(x))
    if k < 0:
        raise VerifyException(f"topk k must be >= 0, got {k}")
    if x[axis] != DYN and k > x[axis]:
        raise VerifyException(f"topk k = {k} exceeds the axis size {x[axis]}")
    return tuple(k if a == axis else d for a, d in enumerate(x))


class _TopK:
    """Properties of the top-k ops: the ``k`` largest (or smallest) along ``axis``, in
    order (ties: the lower index first)."""

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        out = list(dims(self.input))
        out[self.axis % len(out)] = self.k
        return out

    k_attr = _int_prop("k")
    axis_attr = _int_prop("axis", -1)
    largest_attr = _bool_prop("largest", True)
    k = _value("k")
    axis = _value("axis")
    largest = _value("largest")


@irdl_op_definition
class TopKValuesOp(UnaryOp, _TopK):
    """The values of ONNX ``TopK`` (``Values`` output)."""
    traits = kind_trait(OpKind.OPAQUE)

    name = "nn.topk_values"
    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES
    k_attr = _TopK.k_attr
    axis_attr = _TopK.axis_attr
    largest_attr = _TopK.largest_attr

    def __init__(self, input: SSAValue | Operation, k: int, axis: int | None = None,
                 largest: bool | None = None, result_type: Attribute | None = None):
        super().__init__(input, result_type, k=k, axis=axis, largest=largest)

    def infer_shape(self) -> Shape:
        return infer_topk_shape(_shape(self.input), self.k, self.axis)


@irdl_op_definition
class TopKIndicesOp(IndexResultOp, _TopK):
    """The indices (``i64``) of ONNX ``TopK`` (``Indices`` output)."""
    traits = kind_trait(OpKind.OPAQUE)

    name = "nn.topk_indices"
    k_attr = _TopK.k_attr
    axis_attr = _TopK.axis_attr
    largest_attr = _TopK.largest_attr

    def __init__(self, input: SSAValue | Operation, k: int, axis: int | None = None,
                 largest: bool | None = None, result_type: Attribute | None = None):
        super().__init__(input, result_type, k=k, axis=axis, largest=largest)

    def infer_shape(self) -> Shape:
        return infer_topk_shape(_shape(self.input), self.k, self.axis)


class CumulativeOp(UnaryOp):
    """Base of the running sums and products along ``axis`` (no name: not an op);
    ``exclusive`` leaves the current element out, ``reverse`` runs from the end."""
    traits = kind_trait(OpKind.OPAQUE)

    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES
    axis_attr = _int_prop("axis")
    exclusive_attr = _bool_prop("exclusive", False)
    reverse_attr = _bool_prop("reverse", False)
    axis = _value("axis")
    exclusive = _value("exclusive")
    reverse = _value("reverse")

    def __init__(self, input: SSAValue | Operation, axis: int, exclusive: bool | None = None,
                 reverse: bool | None = None, result_type: Attribute | None = None):
        super().__init__(input, result_type, axis=axis, exclusive=exclusive, reverse=reverse)

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        normalize_axis(self.axis, len(x))
        return x


@irdl_op_definition
class CumSumOp(CumulativeOp):
    """Running sum along ``axis`` (ONNX CumSum)."""

    name = "nn.cumsum"


@irdl_op_definition
class CumProdOp(CumulativeOp):
    """Running product along ``axis`` (ONNX CumProd); an exclusive product starts at 1."""

    name = "nn.cumprod"
