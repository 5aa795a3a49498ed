"""Data-movement ``nn`` ops (Relay's "transform" family): pad, reshape, transpose,
concatenate, constants, and ``shape_of``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, IntegerType, TensorType
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
    NNOp,
    OpKind,
    Shape,
    UnaryOp,
    _check_ints,
    _float_prop,
    _init,
    _int_prop,
    _ints_prop,
    _shape,
    _static_product,
    _str_prop,
    _tensor,
    _value,
    dense_from_numpy,
    element_type_of,
    kind_trait,
    merge_dims,
    normalize_axis,
)
from partita.ir.constants import constant_values
from partita.ir.parameters import PARAMETER_THRESHOLD_BYTES, ParameterAttr, mapped_region


def infer_pad_shape(x: Shape, before: Sequence[int], after: Sequence[int]) -> Shape:
    """Constant padding: one non-negative ``before``/``after`` amount per dimension."""
    _check_ints(before, len(x), "pad_before", 0)
    _check_ints(after, len(x), "pad_after", 0)
    return tuple(DYN if d == DYN else d + b + a for d, b, a in zip(x, before, after))


def infer_transpose_shape(x: Shape, perm: Sequence[int]) -> Shape:
    """``out[i] = x[perm[i]]``."""
    if sorted(perm) != list(range(len(x))):
        raise VerifyException(f"perm {list(perm)} is not a permutation of rank {len(x)}")
    return tuple(x[p] for p in perm)


def infer_concatenate_shape(shapes: Sequence[Shape], axis: int) -> Shape:
    """Concatenation along ``axis``; the other dimensions must agree."""
    if not shapes:
        raise VerifyException("concatenate expects at least one input")
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        raise VerifyException("concatenate inputs must have the same rank")
    axis = normalize_axis(axis, rank)
    out = list(shapes[0])
    for s in shapes[1:]:
        for i in range(rank):
            if i == axis:
                out[i] = DYN if DYN in (out[i], s[i]) else out[i] + s[i]
            else:
                out[i] = merge_dims(out[i], s[i], f"concatenate dimension {i} mismatch")
    return tuple(out)


def check_reshape(x: Shape, out: Shape) -> None:
    """At most one ``?`` in ``out`` (inferred at run time); element counts must agree."""
    if out.count(DYN) > 1:
        raise VerifyException("reshape result may have at most one dynamic dimension")
    if DYN in x:
        return
    count, out_static = math.prod(x), _static_product(out)
    if DYN in out:
        if out_static == 0 or count % out_static:
            raise VerifyException(f"cannot reshape {count} elements into {out}")
    elif count != out_static:
        raise VerifyException(f"reshape changes the element count: {count} vs {out_static}")



@irdl_op_definition
class PadOp(UnaryOp):
    """Padding in one of ONNX's modes: ``constant`` (``pad_value``), ``reflect`` (mirror
    without the edge), ``edge`` (repeat the edge) or ``wrap`` (periodic)."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.pad"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    MODES: ClassVar = ("constant", "reflect", "edge", "wrap")
    pad_before_attr = _ints_prop("pad_before")
    pad_after_attr = _ints_prop("pad_after")
    pad_value_attr = _float_prop("pad_value", 0.0)
    mode_attr = _str_prop("mode", "constant")
    pad_before = _value("pad_before")
    pad_after = _value("pad_after")
    pad_value = _value("pad_value")
    mode = _value("mode")

    def __init__(self, input: SSAValue | Operation, pad_before: Sequence[int],
                 pad_after: Sequence[int], pad_value: float | None = None,
                 result_type: Attribute | None = None, mode: str | None = None):
        super().__init__(input, result_type, pad_before=pad_before, pad_after=pad_after,
                         pad_value=None if pad_value is None else float(pad_value),
                         mode=None if mode in (None, "constant") else mode)

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        if self.mode not in self.MODES:
            raise VerifyException(f"mode must be one of {', '.join(self.MODES)}, got "
                                  f"'{self.mode}'")
        if self.mode != "constant":
            for d, b, a in zip(x, self.pad_before, self.pad_after):
                if (b or a) and d == DYN:
                    raise VerifyException(f"{self.mode} padding of a dynamic dimension")
                if (b or a) and (d == 0 or (self.mode == "reflect" and max(b, a) >= d)):
                    raise VerifyException(f"{self.mode} padding of {max(b, a)} does not fit a "
                                          f"dimension of size {d}")
        return infer_pad_shape(x, self.pad_before, self.pad_after)


@irdl_op_definition
class ReshapeOp(NNOp):
    """Reshape to the result type's shape. A ``?`` is the size of a dim of a shape
    reference (result axis ``targets[k]`` has the size of dim ``ref_axes[k]`` of
    ``refs[k]``, as in ``nn.broadcast_to``); at most one other ``?``, inferred like -1."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.reshape"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    input = operand_def(TensorType)
    refs = var_operand_def(TensorType)
    result = result_def(TensorType)
    ref_axes_attr = _ints_prop("ref_axes", ())
    targets_attr = _ints_prop("targets", ())
    ref_axes = _value("ref_axes")
    targets = _value("targets")
    assembly_format = "operands attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue | Operation, shape: Sequence[int],
                 refs: Sequence[tuple[SSAValue, int, int]] = ()):
        _init(self, [input, [r for r, _, _ in refs]],
              TensorType(_tensor(input).element_type, tuple(shape)),
              ref_axes=[a for _, a, _ in refs] or None, targets=[t for _, _, t in refs] or None)

    def verify_element_types(self) -> None:
        if self.input.type.element_type != self.result.type.element_type:
            raise VerifyException("input and result must have the same element type")
        self.check_element_type(self.result.type.element_type, "element type")

    def infer_shape(self) -> Shape:
        out = _shape(self.result)
        if not len(self.refs) == len(self.ref_axes) == len(self.targets):
            raise VerifyException("refs, ref_axes and targets must have the same length")
        for t in self.targets:
            if not 0 <= t < len(out) or out[t] != DYN:
                raise VerifyException(f"target {t} is not a dynamic result axis")
        if not self.targets:
            check_reshape(_shape(self.input), out)
        elif [d for k, d in enumerate(out) if k not in self.targets].count(DYN) > 1:
            raise VerifyException("reshape result may have at most one inferred dimension")
        return out

    def result_dims(self, dims, arith) -> list:
        """The ``?`` dims: refs, then the inferred one (element count / the others)."""
        out = list(_shape(self.result))
        for ref, axis, target in zip(self.refs, self.ref_axes, self.targets):
            out[target] = dims(ref)[axis]
        if DYN in out:
            count, known = 1, 1
            for d in dims(self.input):
                count = arith.mul(count, d)
            for d in out:
                if d != DYN:
                    known = arith.mul(known, d)
            out[out.index(DYN)] = arith.floordiv(count, known)
        return out


@irdl_op_definition
class TransposeOp(UnaryOp):
    traits = kind_trait(OpKind.INJECTIVE)
    name = "nn.transpose"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    perm_attr = _ints_prop("perm")
    perm = _value("perm")

    def __init__(self, input: SSAValue | Operation, perm: Sequence[int],
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, perm=perm)

    def infer_shape(self) -> Shape:
        return infer_transpose_shape(_shape(self.input), self.perm)


@irdl_op_definition
class ConcatenateOp(NNOp):
    traits = kind_trait(OpKind.INJECTIVE)
    name = "nn.concatenate"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis")
    axis = _value("axis")
    assembly_format = "$inputs attr-dict `:` functional-type(operands, results)"

    def __init__(self, inputs: Sequence[SSAValue | Operation], axis: int,
                 result_type: Attribute | None = None):
        _init(self, [list(inputs)], result_type, axis=axis)

    def infer_shape(self) -> Shape:
        return infer_concatenate_shape([_shape(v) for v in self.inputs], self.axis)


@irdl_op_definition
class ShapeOfOp(NNOp):
    """The input's dims as a rank-1 ``i64`` tensor (Relay ``shape_of``, ONNX ``Shape``).
    The importer folds shapes it knows; it emits this op only where a run-time dim is used
    as data (``Range`` bounds, mask index arithmetic); the input's elements are not read."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.shape_of"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    input = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue | Operation):
        rank = len(_shape(SSAValue.get(input)))
        IRDLOperation.__init__(self, operands=[input],
                               result_types=[TensorType(IntegerType(64), (rank,))])

    def infer_shape(self) -> Shape:
        return (len(_shape(self.input)),)

    def verify_element_types(self) -> None:
        self.check_element_type(_tensor(self.input).element_type, "operand element type")
        if _tensor(self.result).element_type != IntegerType(64):
            raise VerifyException(f"result element type must be i64, got {_tensor(self.result).element_type}")


@irdl_op_definition
class ConstantOp(NNOp):
    """A constant tensor; ``nn.constant dense<...> : tensor<...>``, or a named parameter
    whose bytes stay in their file, ``nn.constant #nn.parameter<"w" : tensor<...>, file
    "..." at N>`` (``partita.ir.parameters``)."""
    traits = kind_trait(OpKind.OPAQUE)

    name = "nn.constant"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    value = prop_def(DenseIntOrFPElementsAttr | ParameterAttr)
    result = result_def(TensorType)

    def __init__(self, value: DenseIntOrFPElementsAttr | ParameterAttr | np.ndarray, name: str | None = None):
        """A whole array mapped from a file (``np.memmap``, as the ONNX importer reads
        external data) of ``PARAMETER_THRESHOLD_BYTES`` or more becomes a parameter named
        ``name`` (else after its file and offset): its bytes are not copied into the IR."""
        if isinstance(value, np.ndarray):
            value = constant_attr(value, name)
        super(NNOp, self).__init__(result_types=[value.type], properties={"value": value})

    def infer_shape(self) -> Shape:
        if self.value.type != self.result.type:
            raise VerifyException(
                f"value type {self.value.type} does not match result type {self.result.type}")
        shape = tuple(self.value.get_shape())
        if isinstance(self.value, ParameterAttr):
            return shape
        if len(self.value) not in (1, math.prod(shape)):  # one element stands for a splat
            raise VerifyException(f"value holds {len(self.value)} elements, its type {math.prod(shape)}")
        return shape

    def to_numpy(self, *, buffer: bool = False) -> np.ndarray:
        """The values as a NumPy array of the storage dtype; a splat is a read-only view
        unless ``buffer`` asks for an array of its own (see ``constant_values``)."""
        return constant_values(self, buffer=buffer)

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        # Partita's parser keeps ``dense<v> : tensor<...>`` a splat (partita.ir.parsing).
        value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr | ParameterAttr):
            parser.raise_error(f"expected a dense elements attribute or an #nn.parameter, got {value}")
        op = cls(value)
        op.attributes.update(parser.parse_optional_attr_dict())
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.value)
        printer.print_op_attributes(self.attributes)




def constant_attr(array: np.ndarray, name: str | None = None) -> DenseIntOrFPElementsAttr | ParameterAttr:
    """The value attribute of a constant holding ``array``: a parameter naming the file
    region ``array`` is mapped from (or a permutation of its axes), when it is one and large
    enough, else a dense attribute over its bytes."""
    region = mapped_region(array) if array.nbytes >= PARAMETER_THRESHOLD_BYTES and array.dtype != np.bool_ else None
    if region is None:
        return dense_from_numpy(array)
    file, offset, perm, given = region
    key = name or given or f"{Path(file).name}@{offset}"
    return ParameterAttr.make(key, TensorType(element_type_of(array.dtype), array.shape), file, offset,
                              perm=perm)
