"""ONNX inputs that parameterize an op (pads, a target shape, slice bounds, split sizes,
``k``) given at run time: ``nn.dyn`` ops, sized when a launch plan binds the values.

A graph input giving such values is part of the run's shape signature; a value computed
inside the graph starts a new stage of the plan: the device computes it, the host reads
it back and binds the rest to it (``partita.runtime.plan_bind``)."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue

from partita.dialects import nn
from partita.frontends.onnx.values import Value, fail, is_const, is_symbolic, shape_of


def run_time(v: Value) -> bool:
    """Whether ``v`` is an operand known only at run time (not a constant)."""
    return v is not None and not is_const(v)


def dyn(cx, kind: str, inputs: list[SSAValue], params: dict[str, Value], rank: int,
        element_type: Attribute, what: str, known: list[int] | None = None, **options: object) -> SSAValue:
    """An ``nn.dyn`` of ``kind`` with a ``rank``-D result of ``?`` dims, but for the static
    dims in ``known`` (``nn.DYN`` elsewhere: what the model declares; a bound value that
    contradicts one is an error when the plan binds it)."""
    operands: dict[str, SSAValue] = {}
    for name, v in params.items():
        if v is None:
            continue
        if is_symbolic(v):
            fail(f"{what} mixing dynamic dimensions and run-time values is not supported")
        operands[name] = cx.emit(nn.ConstantOp(np.asarray(v))) if is_const(v) else v
    result = TensorType(element_type, tuple(known) if known is not None else (nn.DYN,) * rank)
    return cx.emit(nn.DynOp(kind, inputs, operands, result, **options))


def known_entries(v: SSAValue) -> list[int | None] | None:
    """The entries of a 1-D run-time integer operand of static length that the graph fixes
    (``None`` for the others; ``None`` for an operand of another shape): a target shape
    ``Concat(N, [2, 3])`` whose ``N`` a run reads still says that the result's last two
    dims are 2 and 3. Follows concatenations of constants."""
    shape = shape_of(v)
    if len(shape) != 1 or shape[0] == nn.DYN:
        return None
    owner = v.owner
    if isinstance(owner, nn.ConstantOp):
        return [int(e) for e in owner.to_numpy().reshape(-1)]
    if isinstance(owner, nn.ConcatenateOp) and owner.axis == 0:
        pieces = [known_entries(piece) for piece in owner.inputs]
        if all(p is not None for p in pieces):
            return [e for p in pieces for e in p]
    return [None] * shape[0]


def static_length(v: SSAValue, what: str) -> int:
    """The number of values of a 1-D run-time operand (the rank it adds or removes)."""
    shape = shape_of(v)
    if len(shape) != 1 or shape[0] == nn.DYN:
        fail(f"{what} given at run time must be 1-D of a static length")
    return shape[0]
