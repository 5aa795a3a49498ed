"""``nn.loop``: ONNX's Loop whose trip count or condition is known only at run time.

A loop whose control folds at import is unrolled into ordinary ``nn`` ops (they run on the
device). One that is not runs as an explicit host step, as TVM's VM and IREE run
data-dependent control flow: its body is a private ``func.func`` of the module, named by the
op, and the op is ``DATA_DEPENDENT`` (see ``selection``): the launch plan stops before it,
reads its operands back, runs it on the host through the reference interpreter (which calls
the body once per iteration) and binds the rest of the plan to the sizes it returned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects import func
from xdsl.dialects.builtin import AnyTensorType, SymbolRefAttr, TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    prop_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import SymbolTable
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import DYN, NNOp, OpKind, Shape, _shape, kind_trait
from partita.dialects.nn.elementwise import BOOL
from partita.dialects.nn.reduction import INDEX_TYPE

NO_TRIP_COUNT = 2**63 - 1
"""The trip count of a loop that has none (ONNX's empty ``M``): ``INT64_MAX``, so only the
condition ends it."""


def _compatible(a: Shape, b: Shape) -> bool:
    """One rank, and every dim equal or dynamic on one side."""
    return len(a) == len(b) and all(DYN in (x, y) or x == y for x, y in zip(a, b))


def _one_element(shape: Shape) -> bool:
    return DYN in shape or math.prod(shape) == 1


@irdl_op_definition
class LoopOp(NNOp):
    """ONNX Loop: runs the private function ``body`` while ``i < trip_count`` and the
    condition holds, ``i`` counting from 0. Each call takes ``(i: i64 [], condition: i1 [],
    carried..., captured...)`` and returns ``(condition: i1 [], carried..., scan elements...)``:
    the next condition, the next carried values, and one element per scan output.

    ``trip_count`` is a one-element ``i64`` tensor and ``condition`` a one-element ``i1``
    tensor; ONNX's absent trip count is ``NO_TRIP_COUNT`` (``INT64_MAX``) and its absent
    condition a ``true`` constant, as the importer materializes them. ``carried`` are the
    loop-carried values' initial values, ``captured`` the outer-scope values the body reads
    (the same in every iteration).

    Results: the final carried values (the initial ones if no iteration runs), then each
    scan output, the iterations' elements stacked along a new leading axis whose length is
    the number of iterations run (``?``). A carried value may change shape from one
    iteration to the next where the body's types say ``?``.
    """

    name = "nn.loop"
    traits = kind_trait(OpKind.OPAQUE)
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    DATA_DEPENDENT: ClassVar[bool] = True
    """The launch plan runs it on the host, and sizes what follows from its results."""
    trip_count = operand_def(TensorType)
    condition = operand_def(TensorType)
    carried = var_operand_def(TensorType)
    captured = var_operand_def(TensorType)
    outputs = var_result_def(AnyTensorType)
    body = prop_def(SymbolRefAttr)
    assembly_format = ("$body `(` $trip_count `,` $condition `:` type($trip_count) `,` type($condition) `)` "
                       "(`carried` `(` $carried^ `:` type($carried) `)`)? "
                       "(`captured` `(` $captured^ `:` type($captured) `)`)? attr-dict `->` type($outputs)")

    def __init__(self, body: str | SymbolRefAttr, trip_count: SSAValue, condition: SSAValue,
                 carried: Sequence[SSAValue], captured: Sequence[SSAValue], result_types: Sequence[Attribute]):
        NNOp.__init__(self, operands=[trip_count, condition, list(carried), list(captured)],
                      result_types=[list(result_types)],
                      properties={"body": SymbolRefAttr(body) if isinstance(body, str) else body})

    @property
    def finals(self) -> Sequence[SSAValue]:
        """The results holding the carried values' final values."""
        return self.outputs[:len(self.carried)]

    @property
    def scans(self) -> Sequence[SSAValue]:
        """The scan outputs."""
        return self.outputs[len(self.carried):]

    def body_function(self) -> func.FuncOp | None:
        """The body, where the op is in a module that has it (``None`` outside a module)."""
        try:
            found = SymbolTable.lookup_symbol(self, self.body)
        except ValueError:  # no module around the op (yet): nothing to look the body up in
            return None
        if not isinstance(found, func.FuncOp) or not found.body.blocks:
            raise VerifyException(f"body {self.body} must name a func.func with a body in the module")
        return found

    def verify_(self) -> None:
        self.verify_tensors()
        for value, what, element in ((self.trip_count, "trip count", INDEX_TYPE), (self.condition, "condition", BOOL[0])):
            if value.type.element_type != element or not _one_element(_shape(value)):
                raise VerifyException(f"the {what} must be a one-element {element} tensor, got {value.type}")
        for k, (init, final) in enumerate(zip(self.carried, self.finals)):
            self._check(init.type, final.type, f"carried value #{k}", "its result")
        fn = self.body_function()
        if fn is not None:
            self._verify_body(fn)

    def _verify_body(self, fn: func.FuncOp) -> None:
        """The op against its body's signature (counts, element types, compatible shapes)."""
        carried, captured = len(self.carried), len(self.captured)
        ins, outs = fn.function_type.inputs.data, fn.function_type.outputs.data
        name = f"body {self.body}"
        if len(ins) != 2 + carried + captured:
            raise VerifyException(f"{name} takes {len(ins)} arguments, expected {2 + carried + captured} "
                                  f"(iteration, condition, {carried} carried, {captured} captured)")
        if len(outs) < 1 + carried:
            raise VerifyException(f"{name} returns {len(outs)} values, expected the condition and "
                                  f"{carried} carried values first")
        if len(self.outputs) != len(outs) - 1:
            raise VerifyException(f"{len(self.outputs)} results, but {name} returns {carried} carried values "
                                  f"and {len(outs) - 1 - carried} scan elements")
        for typ, what, element in ((ins[0], "argument #0 (the iteration)", INDEX_TYPE),
                                   (ins[1], "argument #1 (the condition)", BOOL[0]),
                                   (outs[0], "result #0 (the condition)", BOOL[0])):
            if not isinstance(typ, TensorType) or typ.element_type != element or not _one_element(typ.get_shape()):
                raise VerifyException(f"{name}: {what} must be a one-element {element} tensor, got {typ}")
        for k in range(carried):
            self._check(self.carried[k].type, ins[2 + k], f"carried value #{k}", f"{name} argument #{2 + k}")
            self._check(outs[1 + k], ins[2 + k], f"{name} result #{1 + k}", f"its argument #{2 + k}")
            self._check(self.finals[k].type, ins[2 + k], f"result #{k}", f"{name} argument #{2 + k}")
        for k, value in enumerate(self.captured):
            self._check(value.type, ins[2 + carried + k], f"captured value #{k}", f"{name} argument #{2 + carried + k}")
        for k, (scan, element) in enumerate(zip(self.scans, outs[1 + carried:])):
            if not isinstance(element, TensorType) or scan.type.element_type != element.element_type \
                    or not _compatible(_shape(scan)[1:], tuple(element.get_shape())):
                raise VerifyException(f"scan output #{k} ({scan.type}) must stack {name}'s element {element} "
                                      "along a new leading axis")

    @staticmethod
    def _check(a: Attribute, b: Attribute, what: str, other: str) -> None:
        if not isinstance(a, TensorType) or not isinstance(b, TensorType) or a.element_type != b.element_type \
                or not _compatible(tuple(a.get_shape()), tuple(b.get_shape())):
            raise VerifyException(f"{what} ({a}) does not match {other} ({b})")


__all__ = ["NO_TRIP_COUNT", "LoopOp"]
