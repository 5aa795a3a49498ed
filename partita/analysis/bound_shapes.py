"""The shapes of a function's values once its dynamic dims are known (at bind time).

The verifier checks an ``nn`` op against its operand types, where a dynamic dim is
compatible with anything: ``nn.dense`` of ``tensor<?x?xf32>`` by a ``6x8`` weight verifies,
yet cannot run on a 3-column input. When the launch plan binds a shape signature, every
op whose operands have dynamic dims is checked again with the concrete shapes, by the
op's own ``infer_shape`` rule (on a scratch copy whose operands carry those shapes), so an
input that does not fit is a located error before any step runs, never a NumPy error from
inside the interpreter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.ir import Block, SSAValue
from xdsl.utils.exceptions import VerifyException

from partita.analysis.shape_functions import ShapeBuilder, result_dims
from partita.dialects import nn
from partita.ir import op_error

__all__ = ["bound_function_shapes", "bound_result_shape"]


def _fmt(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"


def bound_result_shape(op: nn.NNOp, shapes: Callable[[SSAValue], Any]) -> tuple[int, ...]:
    """The concrete result shape of the single-result ``op`` whose tensor operands have
    the shapes ``shapes(value)``; a located error naming ``op`` when they do not fit it."""
    typ = op.result.type  # type: ignore[attr-defined]
    assert isinstance(typ, TensorType)
    declared = tuple(typ.get_shape())
    dynamic = [v for v in op.operands if isinstance(v.type, TensorType) and DYNAMIC_INDEX in v.type.get_shape()]
    if not dynamic:  # the verifier saw every dim
        if DYNAMIC_INDEX in declared:
            return _fits(op, _by_rule(op, shapes))
        return declared
    scratch_block = Block()
    operands = []
    for value in op.operands:
        if value in dynamic:
            concrete = TensorType(value.type.element_type, list(shapes(value)))  # type: ignore[attr-defined]
            operands.append(scratch_block.insert_arg(concrete, len(scratch_block.args)))
        else:
            operands.append(value)  # static: its defining op (a constant index) stays visible
    scratch = type(op).create(operands=operands, result_types=[typ], properties=dict(op.properties),
                              attributes=dict(op.attributes))
    try:
        inferred = tuple(scratch.infer_shape())
    except VerifyException as err:
        given = ", ".join(_fmt(shapes(v)) if isinstance(v.type, TensorType) else "index" for v in op.operands)
        raise op_error(op, f"cannot run on operands of shapes ({given}) bound from these inputs: {err}") from None
    except (AttributeError, TypeError, IndexError):  # a rule that reads more than operand types
        return _fits(op, _by_rule(op, shapes))
    finally:
        scratch.drop_all_references()
    if len(inferred) != len(declared) or any(d not in (DYNAMIC_INDEX, i) and i != DYNAMIC_INDEX
                                             for d, i in zip(declared, inferred)):
        raise op_error(op, f"its result would be {_fmt(inferred)} with these inputs, but its type says {typ}")
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


def bound_function_shapes(function: func.FuncOp, inputs: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The result shapes of ``function`` (a single block of ``nn`` ops, such as a partition's
    reference body) called on tensors of shapes ``inputs``: each op checked as above."""
    block = function.body.block
    values: dict[SSAValue, tuple[int, ...]] = dict(zip(block.args, (tuple(s) for s in inputs)))
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            return [values[v] for v in op.arguments]
        if isinstance(op, nn.NNOp) and len(op.results) == 1:
            values[op.results[0]] = bound_result_shape(op, values.__getitem__)
        else:
            for result in op.results:
                if isinstance(result.type, TensorType):
                    if DYNAMIC_INDEX in result.type.get_shape():
                        raise op_error(op, "its result shape cannot be bound from its input shapes")
                    values[result] = tuple(result.type.get_shape())
    raise op_error(function, "must end with 'func.return'")
