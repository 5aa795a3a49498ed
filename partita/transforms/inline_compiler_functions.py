"""``inline-compiler-functions``: calls of partition functions become ``byoc.partition``s.

The inverse of ``outline-compiler-functions`` (TVM's ``InlineCompilerFunctionsBoundTo``):
each ``func.call`` of a function carrying ``byoc.compiler`` (of ``compiler`` only, when
given) is replaced by a ``byoc.partition`` holding a clone of the body and ALL of the
function's discardable attributes. A function without ``byoc.global_symbol`` gets its
own name as one, so that outlining gives the same function back. Partition functions
whose calls were all inlined are removed; calls inside inlined bodies (partition
functions calling partition functions) are inlined too.

``symbols=a,b`` restricts the pass to the partitions bound to those global symbols
(functions by ``byoc.global_symbol``, else their name, and inline ``byoc.partition``
regions by ``byoc.global_symbol``); a symbol that names none is an error. With
``dissolve=true`` those partitions are undone instead: their ops go back into the caller,
composite regions inside them included, as if never partitioned (TVM's use of
``InlineCompilerFunctionsBoundTo``: reject a partition after looking at its body).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from partita.dialects.byoc import (
    GLOBAL_SYMBOL,
    PartitionOp,
    YieldOp,
    is_partition_function,
)
from partita.ir import PartitaError, op_error

__all__ = ["InlineCompilerFunctions"]


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


def _global_symbol(op: Operation) -> str | None:
    attr = op.attributes.get(GLOBAL_SYMBOL)
    if isinstance(attr, StringAttr):
        return attr.data
    return op.sym_name.data if isinstance(op, func.FuncOp) else None


def _splice(block: Block, args: list[SSAValue], before: Operation) -> list[SSAValue]:
    """Moves the ops of ``block`` (a clone, or a region about to be erased) before
    ``before``, its arguments replaced by ``args``; returns the values it yielded. Nested
    partitions (composites) are dissolved too."""
    terminator = block.last_op
    assert terminator is not None
    nested = [op for op in block.ops if isinstance(op, PartitionOp)]
    Rewriter.inline_block(block, InsertPoint.before(before), args)
    for partition in nested:
        _dissolve_partition(partition)
    results = list(terminator.operands)  # read after the nested ones are gone
    Rewriter.erase_op(terminator)
    return results


def _replace_results(op: Operation, values: list[SSAValue]) -> None:
    for result, value in zip(op.results, values, strict=True):
        result.replace_all_uses_with(value)
    Rewriter.erase_op(op)


def _dissolve_partition(partition: PartitionOp) -> None:
    values = _splice(partition.body.block, list(partition.inputs), partition)
    _replace_results(partition, values)


def _dissolve_call(call: func.CallOp, function: func.FuncOp) -> None:
    if len(function.body.blocks) != 1:
        raise op_error(function, "has several blocks: a partition function must have a single block")
    body = function.body.clone()
    values = _splice(body.block, list(call.arguments), call)
    _replace_results(call, values)


@dataclass(frozen=True)
class InlineCompilerFunctions(ModulePass):
    """Inlines every call of a partition function (of ``compiler``, or all; bound to
    ``symbols``, or any) as a ``byoc.partition`` region, or dissolves it into the caller
    (``dissolve``), and removes functions left without callers."""

    name = "inline-compiler-functions"

    compiler: str | None = None
    symbols: str | tuple[str, ...] = ()
    dissolve: bool = False

    def _symbols(self) -> set[str]:
        items = self.symbols.split(",") if isinstance(self.symbols, str) else self.symbols
        return {s.strip() for s in items if s.strip()}

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        wanted = self._symbols()
        functions = {
            f.sym_name.data: f for f in op.ops
            if is_partition_function(f, self.compiler) and (not wanted or _global_symbol(f) in wanted)
        }
        regions = [
            p for p in op.walk() if isinstance(p, PartitionOp) and wanted and _global_symbol(p) in wanted
            and (self.compiler is None or p.compiler == self.compiler)
        ]
        missing = wanted - {_global_symbol(f) for f in functions.values()} - {_global_symbol(p) for p in regions}
        if missing:
            raise PartitaError(
                f"inline-compiler-functions: no partition function or partition is bound to "
                f"{', '.join(repr(m) for m in sorted(missing))}"
            )
        if self.dissolve:
            self._dissolve(op, functions, regions)
            return
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

    @staticmethod
    def _dissolve(module: ModuleOp, functions: dict[str, func.FuncOp], regions: list[PartitionOp]) -> None:
        for partition in regions:
            _dissolve_partition(partition)
        calls = [c for c in module.walk() if isinstance(c, func.CallOp) and c.callee.string_value() in functions]
        for call in calls:
            if call.parent_op() in functions.values():
                raise op_error(call, f"calls @{call.callee.string_value()} from the function being dissolved")
            _dissolve_call(call, functions[call.callee.string_value()])
        still_called = {c.callee.string_value() for c in module.walk() if isinstance(c, func.CallOp)}
        for name in sorted(set(functions) - still_called):
            Rewriter.erase_op(functions[name])
