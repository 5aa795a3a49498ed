"""``inline-compiler-functions``: calls of partition functions become ``byoc.partition``s.

The inverse of ``outline-compiler-functions`` (TVM's ``InlineCompilerFunctionsBoundTo``):
each ``func.call`` of a function carrying ``byoc.compiler`` (of ``compiler`` only, when
given) is replaced by a ``byoc.partition`` holding a clone of the body and ALL of the
function's discardable attributes. A function without ``byoc.global_symbol`` gets its
own name as one, so that outlining gives the same function back. Partition functions
whose calls were all inlined are removed; calls inside inlined bodies (partition
functions calling partition functions) are inlined too.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from partita.dialects.byoc import COMPILER, GLOBAL_SYMBOL, PartitionOp, YieldOp
from partita.ir import op_error

__all__ = ["InlineCompilerFunctions", "is_partition_function"]


def is_partition_function(op: Operation, compiler: str | None = None) -> bool:
    """A ``func.func`` with a body and ``byoc.compiler`` (equal to ``compiler`` if given)."""
    if not isinstance(op, func.FuncOp) or not op.body.blocks:
        return False
    attr = op.attributes.get(COMPILER)
    return isinstance(attr, StringAttr) and (compiler is None or attr.data == compiler)


def _partition_for(call: func.CallOp, function: func.FuncOp) -> PartitionOp:
    if len(function.body.blocks) != 1:
        raise op_error(function, "has several blocks: a partition function must have a single block")
    body = function.body.clone()
    terminator = body.block.last_op
    if not isinstance(terminator, func.ReturnOp):
        raise op_error(function, "must end with 'func.return' to be inlined as a partition")
    Rewriter.replace_op(terminator, YieldOp(*terminator.arguments))
    attributes = dict(function.attributes)
    attributes.setdefault(GLOBAL_SYMBOL, StringAttr(function.sym_name.data))
    partition = PartitionOp(list(call.arguments), call.result_types, body, attributes)
    partition.location = call.location
    return partition


@dataclass(frozen=True)
class InlineCompilerFunctions(ModulePass):
    """Inlines every call of a partition function (of ``compiler``, or all) as a
    ``byoc.partition`` region, and removes functions left without callers."""

    name = "inline-compiler-functions"

    compiler: str | None = None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        functions = {f.sym_name.data: f for f in op.ops if is_partition_function(f, self.compiler)}
        if not functions:
            return
        # (call, partition functions it was cloned out of): the chain detects recursion.
        worklist = deque(
            (call, frozenset[str]()) for call in op.walk()
            if isinstance(call, func.CallOp) and call.callee.string_value() in functions
        )
        inlined: set[str] = set()
        while worklist:
            call, chain = worklist.popleft()
            name = call.callee.string_value()
            if name in chain:
                raise op_error(call, f"calls partition function @{name} recursively: cannot inline it")
            partition = _partition_for(call, functions[name])
            Rewriter.replace_op(call, partition)
            inlined.add(name)
            worklist.extend(
                (nested, chain | {name}) for nested in partition.body.walk()
                if isinstance(nested, func.CallOp) and nested.callee.string_value() in functions
            )
        still_called = {
            call.callee.string_value() for call in op.walk() if isinstance(call, func.CallOp)
        }
        for name in sorted(inlined - still_called):
            Rewriter.erase_op(functions[name])
