"""fold-constant-calls: replace calls to constant functions by the constants.

Every target lives in one module, so a caller can use facts from a callee on another
target (TVM's cross-target constant propagation): a ``func.call`` whose callee returns
only values defined by ``arith.constant`` or ``nn.constant`` in its body is replaced by
copies of those constant ops placed before the call.  The call itself is erased when
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
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import CallOp, FuncOp, ReturnOp
from xdsl.ir import Operation
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
                constants = constant_results(callee) if callee is not None else None
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
