"""``nn`` ops whose result sizes are known only once they run: ``nonzero``, ``unique``,
``non_max_suppression`` (ONNX's NonZero, Unique, NonMaxSuppression; Compress is a
``take`` of a ``nonzero``) and ``choose`` (an ONNX If on a run-time condition whose
branches give different shapes).

Every other op sizes its result from its operands' shapes (``indexing``'s "data-independent
shape functions"). These select as many rows as their operands' *values* pass, so their
result carries a ``?`` that no shape function computes: ``DATA_DEPENDENT``. A launch plan
stops before such an op, runs it on the host once the device has computed its operands,
and binds the rest of the plan to the sizes it returned (see ``partita.runtime.plan_bind``),
as TVM's VM and IREE do with a device-to-host read of the size. Ops after it see an
ordinary dynamic dim.
"""

from __future__ import annotations

import math
from typing import ClassVar

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, result_def
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    ELEMENT_TYPES,
    FLOATS,
    NNOp,
    OpKind,
    Shape,
    _int_prop,
    _props,
    _shape,
    _str_prop,
    _tensor,
    _value,
    kind_trait,
    normalize_axis,
)
from partita.dialects.nn.elementwise import BOOL
from partita.dialects.nn.reduction import INDEX_TYPE

UNIQUE_RESULTS = ("values", "indices", "inverse", "counts")
"""ONNX Unique's four results, in its order; ``nn.unique`` computes the one it names."""


class SelectionOp(NNOp):
    """An op whose result size depends on its operands' values (never fused: no kernel
    rule; the plan runs it on the host at a stage boundary)."""

    traits = kind_trait(OpKind.OPAQUE)
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    DATA_DEPENDENT: ClassVar[bool] = True
    """The launch plan must run it before it can size what follows."""

    def _create(self, operands: list[SSAValue], result: Attribute, **props: object) -> None:
        NNOp.__init__(self, operands=operands, result_types=[result], properties=_props(**props))


@irdl_op_definition
class NonZeroOp(SelectionOp):
    """The indices of the non-zero elements of ``input``, one column per element in
    row-major order: ``i64`` of shape ``rank x ?``."""

    name = "nn.nonzero"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue):
        self._create([input], TensorType(INDEX_TYPE, [len(_shape(SSAValue.get(input))), DYN]))

    def verify_element_types(self) -> None:
        self.check_element_type(_tensor(self.input).element_type, "input element type")
        self.check_element_type(_tensor(self.result).element_type, "result element type", (INDEX_TYPE,))

    def infer_shape(self) -> Shape:
        rank = len(_shape(self.input))
        if rank == 0:
            raise VerifyException("the input must have rank 1 or more")
        return (rank, DYN)


@irdl_op_definition
class UniqueOp(SelectionOp):
    """One result of ONNX Unique along ``axis``: the unique slices (``values``, sorted
    ascending or, without ``sorted``, in order of first occurrence), the index of each
    one's first occurrence (``indices``), the index in ``values`` of every slice of the
    input (``inverse``) or how often each occurs (``counts``). ONNX's Unique without an
    axis is this op on the flattened input."""

    name = "nn.unique"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", 0)
    sorted_attr = _int_prop("sorted", 1)
    output_attr = _str_prop("output", "values")
    axis = _value("axis")
    sorted = _value("sorted")
    output = _value("output")
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, axis: int, sorted: bool, output: str):
        shape = list(_shape(SSAValue.get(input)))
        axis_n = normalize_axis(axis, len(shape)) if shape else 0
        if output == "values":
            result = TensorType(_tensor(SSAValue.get(input)).element_type,
                                [DYN if k == axis_n else d for k, d in enumerate(shape)])
        elif output == "inverse":
            result = TensorType(INDEX_TYPE, [shape[axis_n] if shape else DYN])
        else:
            result = TensorType(INDEX_TYPE, [DYN])
        self._create([input], result, axis=axis, sorted=int(bool(sorted)), output=output)

    @property
    def DATA_DEPENDENT(self) -> bool:  # noqa: N802 - the trait's name on every selection op
        return self.output != "inverse"

    def verify_element_types(self) -> None:
        if self.output not in UNIQUE_RESULTS:
            raise VerifyException(f"output must be one of {', '.join(UNIQUE_RESULTS)}, got '{self.output}'")
        self.check_element_type(_tensor(self.input).element_type, "input element type")
        want = (_tensor(self.input).element_type,) if self.output == "values" else (INDEX_TYPE,)
        self.check_element_type(_tensor(self.result).element_type, "result element type", want)

    def infer_shape(self) -> Shape:
        shape = _shape(self.input)
        if not shape:
            raise VerifyException("the input must have rank 1 or more (flatten a scalar)")
        axis = normalize_axis(self.axis, len(shape))
        if self.output == "values":
            return tuple(DYN if k == axis else d for k, d in enumerate(shape))
        if self.output == "inverse":
            return (shape[axis],)
        return (DYN,)


@irdl_op_definition
class NonMaxSuppressionOp(SelectionOp):
    """ONNX NonMaxSuppression: per batch and class, the boxes kept by greedy suppression
    (highest score first; a box is dropped when its IoU with a kept one exceeds
    ``iou_threshold`` or its score is not above ``score_threshold``), at most
    ``max_output_boxes_per_class`` of them, as ``[batch, class, box]`` rows: ``? x 3``
    ``i64``. ``boxes``: ``B x N x 4`` corners (``center_point_box = 0``, either diagonal)
    or centre and size (``1``); ``scores``: ``B x C x N``; the three limits are one-element
    tensors (run-time values, as ONNX passes them)."""

    name = "nn.non_max_suppression"
    boxes = operand_def(TensorType)
    scores = operand_def(TensorType)
    max_output_boxes_per_class = operand_def(TensorType)
    iou_threshold = operand_def(TensorType)
    score_threshold = operand_def(TensorType)
    result = result_def(TensorType)
    center_point_box_attr = _int_prop("center_point_box", 0)
    center_point_box = _value("center_point_box")
    assembly_format = "operands attr-dict `:` functional-type(operands, results)"

    def __init__(self, boxes: SSAValue, scores: SSAValue, max_output_boxes_per_class: SSAValue,
                 iou_threshold: SSAValue, score_threshold: SSAValue, center_point_box: int = 0):
        self._create([boxes, scores, max_output_boxes_per_class, iou_threshold, score_threshold],
                     TensorType(INDEX_TYPE, [DYN, 3]), center_point_box=center_point_box)

    def verify_element_types(self) -> None:
        for name in ("boxes", "scores", "iou_threshold", "score_threshold"):
            self.check_element_type(_tensor(getattr(self, name)).element_type, name, FLOATS)
        self.check_element_type(_tensor(self.max_output_boxes_per_class).element_type,
                                "max_output_boxes_per_class", (INDEX_TYPE,))
        self.check_element_type(_tensor(self.result).element_type, "result element type", (INDEX_TYPE,))

    def infer_shape(self) -> Shape:
        boxes, scores = _shape(self.boxes), _shape(self.scores)
        if len(boxes) != 3 or boxes[2] not in (4, DYN):
            raise VerifyException(f"boxes must be batch x boxes x 4, got {list(boxes)}")
        if len(scores) != 3:
            raise VerifyException(f"scores must be batch x classes x boxes, got {list(scores)}")
        for a, b, what in ((boxes[0], scores[0], "batches"), (boxes[1], scores[2], "boxes")):
            if DYN not in (a, b) and a != b:
                raise VerifyException(f"boxes and scores disagree on the number of {what} ({a} and {b})")
        for name in ("max_output_boxes_per_class", "iou_threshold", "score_threshold"):
            shape = _shape(getattr(self, name))
            if DYN not in shape and math.prod(shape) != 1:
                raise VerifyException(f"{name} must hold one value, got shape {list(shape)}")
        if self.center_point_box not in (0, 1):
            raise VerifyException(f"center_point_box must be 0 or 1, got {self.center_point_box}")
        return (DYN, 3)


@irdl_op_definition
class ChooseOp(SelectionOp):
    """``on_true`` if the one-element ``condition`` holds, else ``on_false``: whole operands of
    one element type and rank whose shapes may differ (the results of an ONNX If's two
    branches, both computed). A dim the two share stays; one they differ in is ``?``, known
    once the condition is. Branches of one shape select element-wise instead (``nn.where``),
    on the device."""

    name = "nn.choose"
    condition = operand_def(TensorType)
    on_true = operand_def(TensorType)
    on_false = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$condition `,` $on_true `,` $on_false attr-dict `:` functional-type(operands, results)"

    def __init__(self, condition: SSAValue, on_true: SSAValue, on_false: SSAValue):
        a, b = _shape(SSAValue.get(on_true)), _shape(SSAValue.get(on_false))
        shape = [x if x == y else DYN for x, y in zip(a, b)] if len(a) == len(b) else a
        self._create([condition, on_true, on_false], TensorType(_tensor(SSAValue.get(on_true)).element_type, shape))

    def verify_element_types(self) -> None:
        self.check_element_type(_tensor(self.condition).element_type, "condition element type", BOOL)
        types = {_tensor(v).element_type for v in (self.on_true, self.on_false, self.result)}
        if len(types) > 1:
            raise VerifyException(f"on_true, on_false and the result must have one element type, got "
                                  f"{', '.join(sorted(str(t) for t in types))}")

    def infer_shape(self) -> Shape:
        condition, a, b = _shape(self.condition), _shape(self.on_true), _shape(self.on_false)
        if DYN not in condition and math.prod(condition) != 1:
            raise VerifyException(f"the condition must hold one value, got shape {list(condition)}")
        if len(a) != len(b):
            raise VerifyException(f"on_true and on_false must have one rank, got {list(a)} and {list(b)}")
        return tuple(x if x == y else DYN for x, y in zip(a, b))


__all__ = ["UNIQUE_RESULTS", "ChooseOp", "NonMaxSuppressionOp", "NonZeroOp", "SelectionOp", "UniqueOp"]
