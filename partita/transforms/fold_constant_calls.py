"""fold-constant-calls: replace calls to constant functions by the constants.

Every target lives in one module, so a caller can use facts from a callee on another
target (TVM's cross-target constant propagation): a ``func.call`` whose callee returns
only constants is replaced by copies of those constants placed before the call. A
returned value is constant when it is an ``arith.constant`` or ``nn.constant``, or when it
is computed from constants only: a clone of the callee is canonicalized (xDSL folds
integer arithmetic) and the integer comparisons, logic and selects xDSL 0.74 does not fold
(``arith.cmpi``, ``andi``/``ori``/``xori``, ``select``, ``min``/``max``) are evaluated
here; the callee itself is left as it was.  The call itself is erased when
the callee's body has no side effects (``nn`` ops have value semantics; other ops count
as side-effect free only if xDSL says so); otherwise it stays, with unused results.

A host-side ``scf.if`` on such a value then folds away with ``canonicalize`` (xDSL
0.74's ``scf.if`` canonicalization replaces an if on a constant condition by the taken
branch), so this pass does not fold branches itself: ``-p fold-constant-calls,canonicalize``.
Callees left without calls stay in the module (xDSL has no symbol-dce).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, IntegerType, ModuleOp
from xdsl.dialects.func import CallOp, FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import is_side_effect_free

from partita.dialects import nn
from partita.transforms.target_utils import func_index

_CONSTANT_OPS = (arith.ConstantOp, nn.ConstantOp)


def constant_results(callee: FuncOp) -> list[Operation] | None:
    """The constant op defining each returned value, or ``None`` if one is not constant."""
    if len(callee.body.blocks) != 1:
        return None
    terminator = callee.body.block.last_op
    if not isinstance(terminator, ReturnOp):
        return None
    owners: list[Operation] = []
    for value in terminator.arguments:
        owner = value.owner
        if not isinstance(owner, _CONSTANT_OPS):
            return None
        owners.append(owner)
    return owners


_CMPI = (
    lambda a, b: a == b, lambda a, b: a != b, lambda a, b: a < b, lambda a, b: a <= b,
    lambda a, b: a > b, lambda a, b: a >= b,
)
"""``arith.cmpi`` predicates 0-5 (eq, ne, slt, sle, sgt, sge); 6-9 are the unsigned ones."""

_BINARY = {
    arith.AndIOp: lambda a, b: a & b,
    arith.OrIOp: lambda a, b: a | b,
    arith.XOrIOp: lambda a, b: a ^ b,
    arith.MaxSIOp: max,
    arith.MinSIOp: min,
}


def _integer(value: SSAValue, known: dict[SSAValue, int]) -> int | None:
    if value in known:
        return known[value]
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    return None


def _width(value: SSAValue) -> int | None:
    return value.type.width.data if isinstance(value.type, IntegerType) else None


def _normalize(x: int, width: int) -> int:
    """``x`` as the signed value of a ``width``-bit integer (i1: 0 or -1 is true)."""
    x &= (1 << width) - 1
    return x - (1 << width) if width > 1 and x >> (width - 1) else x


def _evaluate(op: Operation, known: dict[SSAValue, int]) -> int | None:
    """The integer result of ``op`` when its operands are known, else ``None``."""
    args = [_integer(v, known) for v in op.operands]
    if None in args or not op.results or _width(op.results[0]) is None:
        return None
    width = _width(op.results[0])
    if isinstance(op, arith.CmpiOp):
        a, b = args
        pred = op.predicate.value.data
        if pred >= 6:  # unsigned: compare the bit patterns
            w = _width(op.operands[0]) or 64
            a, b, pred = a & ((1 << w) - 1), b & ((1 << w) - 1), pred - 4
        return int(_CMPI[pred](a, b))
    if isinstance(op, arith.SelectOp):
        cond, then, other = args
        return then if cond & 1 else other
    fn = _BINARY.get(type(op))
    if fn is None:
        return None
    result = fn(*args)
    return result & 1 if width == 1 else _normalize(result, width)


def folded_results(callee: FuncOp, ctx: Context) -> list[Operation] | None:
    """Constant ops for the callee's results when it computes them from constants only
    (see the module docstring), else ``None``. Works on a clone."""
    from xdsl.transforms.canonicalize import CanonicalizePass

    if len(callee.body.blocks) != 1 or callee.body.block.args:
        return None
    clone = callee.clone()
    CanonicalizePass().apply(ctx, ModuleOp([clone]))
    known: dict[SSAValue, int] = {}
    for op in clone.body.block.ops:
        value = _evaluate(op, known)
        if value is not None:
            known[op.results[0]] = value
    terminator = clone.body.block.last_op
    if not isinstance(terminator, ReturnOp):
        return None
    out: list[Operation] = []
    for value in terminator.arguments:
        if isinstance(value.owner, _CONSTANT_OPS):
            out.append(value.owner)
        elif value in known:
            typ = value.type
            assert isinstance(typ, IntegerType)
            out.append(arith.ConstantOp(IntegerAttr(known[value], typ)))
        else:
            return None
    return out


def _is_pure(callee: FuncOp) -> bool:
    for op in callee.body.walk():
        if isinstance(op, ReturnOp) or op.name.startswith("nn."):
            continue
        if not is_side_effect_free(op):
            return False
    return True


@dataclass(frozen=True)
class FoldConstantCalls(ModulePass):
    name = "fold-constant-calls"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        funcs = func_index(op)
        facts: dict[str, tuple[list[Operation], bool] | None] = {}
        for call in [c for c in op.walk() if isinstance(c, CallOp)]:
            name = call.callee.string_value()
            if name not in facts:
                callee = funcs.get(name)
                constants = None
                if callee is not None:
                    constants = constant_results(callee) or folded_results(callee, ctx)
                facts[name] = None if constants is None else (constants, _is_pure(callee))
            fact = facts[name]
            if fact is None:
                continue
            constants, pure = fact
            clones = [c.clone() for c in constants]
            Rewriter.insert_op(clones, InsertPoint.before(call))
            for result, clone in zip(call.results, clones, strict=True):
                result.replace_all_uses_with(clone.results[0])
            if pure:
                Rewriter.erase_op(call)
