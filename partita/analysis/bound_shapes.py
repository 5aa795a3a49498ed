"""The shapes of a function's values once its dynamic dims are known (at bind time).

The verifier checks an ``nn`` op against its operand types, where a dynamic dim is
compatible with anything: ``nn.dense`` of ``tensor<?x?xf32>`` by a ``6x8`` weight verifies,
yet cannot run on a 3-column input. When the launch plan binds a shape signature, every
op whose operands have dynamic dims is checked again with the concrete shapes, by the
op's own ``infer_shape`` rule (reading the concrete shapes through ``nn.operand_shapes``), so an
input that does not fit is a located error before any step runs, never a NumPy error from
inside the interpreter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from partita.analysis.shape_functions import ShapeBuilder, result_dims
from partita.dialects import nn
from partita.ir import op_error

__all__ = ["FunctionShapes", "bound_result_shape"]


def _fmt(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"


def bound_result_shape(op: nn.NNOp, shapes: Callable[[SSAValue], Any]) -> tuple[int, ...]:
    """The concrete result shape of the single-result ``op`` whose tensor operands have
    the shapes ``shapes(value)``; a located error naming ``op`` when they do not fit it."""
    typ = op.result.type  # type: ignore[attr-defined]
    assert isinstance(typ, TensorType)
    return _bound_result_shape(op, _dynamic_operands(op), tuple(typ.get_shape()), shapes)


def _dynamic_operands(op: Operation) -> tuple[SSAValue, ...]:
    return tuple(v for v in op.operands if isinstance(v.type, TensorType) and DYNAMIC_INDEX in v.type.get_shape())


def _bound_result_shape(op: nn.NNOp, dynamic: Sequence[SSAValue], declared: tuple[int, ...],
                        shapes: Callable[[SSAValue], Any]) -> tuple[int, ...]:
    if not dynamic:  # the verifier saw every dim
        if DYNAMIC_INDEX in declared:
            return _fits(op, _by_rule(op, shapes))
        return declared
    try:
        with nn.operand_shapes({v: tuple(shapes(v)) for v in dynamic}):
            inferred = tuple(op.infer_shape())
    except VerifyException as err:
        given = ", ".join(_fmt(shapes(v)) if isinstance(v.type, TensorType) else "index" for v in op.operands)
        raise op_error(op, f"cannot run on operands of shapes ({given}) bound from these inputs: {err}") from None
    except (AttributeError, TypeError, IndexError):  # a rule that reads more than operand shapes
        return _fits(op, _by_rule(op, shapes))
    if len(inferred) != len(declared) or any(d not in (DYNAMIC_INDEX, i) and i != DYNAMIC_INDEX
                                             for d, i in zip(declared, inferred)):
        raise op_error(op, f"its result would be {_fmt(inferred)} with these inputs, but its type says "
                           f"{op.results[0].type}")
    if DYNAMIC_INDEX in inferred:  # a dim the rule cannot tell from shapes alone
        ruled = _by_rule(op, shapes)
        inferred = tuple(r if i == DYNAMIC_INDEX else i for i, r in zip(inferred, ruled))
    return _fits(op, tuple(d if d != DYNAMIC_INDEX else i for d, i in zip(declared, inferred)))


def _fits(op: nn.NNOp, shape: tuple[int, ...]) -> tuple[int, ...]:
    try:
        itemsize = nn.numpy_dtype(op.results[0].type.element_type).itemsize  # type: ignore[attr-defined]
        nn.check_dims_fit(shape, itemsize, "bound result shape")
    except VerifyException as err:
        raise op_error(op, str(err)) from None
    return shape


def _by_rule(op: nn.NNOp, shapes: Callable[[SSAValue], Any]) -> tuple[int, ...]:
    dims = result_dims(op, lambda v: list(shapes(v)), ShapeBuilder(Block()))
    if not all(isinstance(d, int) for d in dims):
        raise op_error(op, "its result shape could not be computed from its input shapes")
    return tuple(int(d) for d in dims)


class FunctionShapes:
    """The result shapes of ``function`` (a single block of ``nn`` ops, such as a partition's
    reference body) for any input shapes, each op checked as ``bound_result_shape`` does.
    What binding needs of its IR is read once: the ops with a dynamic operand or result
    (the only ones a binding checks again), and the declared shapes of the rest."""

    def __init__(self, function: func.FuncOp):
        block = function.body.block
        self.function = function
        self.args = tuple(block.args)
        self.steps: list[tuple[nn.NNOp, tuple[SSAValue, ...], tuple[int, ...]]] = []
        """``(op, its dynamic operands, its declared result shape)`` to bind, in order."""
        self.static: dict[SSAValue, tuple[int, ...]] = {}
        """The results whose shapes no input changes."""
        self.results: tuple[SSAValue, ...] | None = None
        self.unbound: Operation | None = None
        """An op whose result shape no rule binds (an error when a binding reaches it)."""
        for op in block.ops:
            if isinstance(op, func.ReturnOp):
                self.results = tuple(op.arguments)
                break
            single = isinstance(op, nn.NNOp) and len(op.results) == 1
            dynamic = _dynamic_operands(op)
            for result in op.results:
                if not isinstance(result.type, TensorType):
                    continue
                declared = tuple(result.type.get_shape())
                if single and (dynamic or DYNAMIC_INDEX in declared):
                    self.steps.append((op, dynamic, declared))  # type: ignore[arg-type]
                elif DYNAMIC_INDEX in declared:
                    self.unbound = self.unbound or op
                else:
                    self.static[result] = declared

    def bind(self, inputs: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """The result shapes for tensors of shapes ``inputs``; a located error naming the
        first op they do not fit."""
        if self.unbound is not None:
            raise op_error(self.unbound, "its result shape cannot be bound from its input shapes")
        if self.results is None:
            raise op_error(self.function, "must end with 'func.return'")
        values: dict[SSAValue, tuple[int, ...]] = dict(self.static)
        values.update(zip(self.args, (tuple(s) for s in inputs)))
        for op, dynamic, declared in self.steps:
            values[op.results[0]] = _bound_result_shape(op, dynamic, declared, values.__getitem__)
        return [values[v] for v in self.results]
