"""``outline-compiler-functions``: every ``byoc.partition`` with a compiler becomes a
private function.

Only partitions with a ``byoc.compiler`` are outlined (of ``compiler``, when given), as
TVM outlines only functions with a ``Compiler`` attribute: composite regions inside them
(``partition-eager{merge=true}``) have no compiler and stay in their partition's body,
where the backend's codegen dispatches on their ``byoc.composite``.

TVM's ``OutlineCompilerFunctionsWithExistingGlobalSymbols``: the region is moved (not
copied) into a module-level ``func.func private`` named by a global symbol cache (see
``global_symbol_cache``), and the partition becomes a ``func.call``. The function is
inserted just before the top-level function holding its first caller, so inlining and
outlining again give back the same module.

Partitions are outlined even when they carry ``byoc.inline``, and every attribute is
kept on the function. ``byoc.inline`` is a hint for the Graph/AOT executors to inline the
function back *after* external codegen has seen it: the codegen compiles functions, one
per ``byoc.global_symbol``, and finds its work by ``byoc.compiler``, so a partition that
stayed inline, or a function that lost those attributes, would never be compiled and the
later passes (codegen, ``mark-compiler-functions-as-extern``) would not recognise it.

Names: a name that is not yet a symbol creates the function; a name that is already a
function with the same type, attributes (but the global symbol) and body is reused
("existing global symbols"); anything else under that name is an error naming both,
never an overwrite. With ``dedup=true``, structurally equal partitions share one
function, found in linear time through a structural hash.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation, Region
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from partita.dialects.byoc import GLOBAL_SYMBOL, PartitionOp, YieldOp
from partita.ir import format_location, op_error
from partita.ir.structural import blocks_equal
from partita.transforms.global_symbol_cache import (
    ExistingGlobalSymbolCache,
    GlobalSymbolCache,
    StructuralDedupCache,
    symbol_name,
)

__all__ = ["OutlineCompilerFunctions", "outline_partitions", "function_matches_partition"]


def _top_level_ancestor(op: Operation, module: ModuleOp) -> Operation:
    while (parent := op.parent_op()) is not None and parent is not module:
        op = parent
    return op


def _attributes_but_symbol(op: Operation) -> dict:
    return {k: v for k, v in op.attributes.items() if k != GLOBAL_SYMBOL}


def function_matches_partition(function: func.FuncOp, partition: PartitionOp) -> bool:
    """Could ``partition`` be replaced by a call of ``function``?"""
    return (
        bool(function.body.blocks)
        and function.function_type.inputs.data == partition.inputs.types
        and function.function_type.outputs.data == partition.outputs.types
        and _attributes_but_symbol(function) == _attributes_but_symbol(partition)
        and len(function.body.blocks) == 1
        and blocks_equal(function.body.block, partition.body.block, ignore_terminator_name=True)
    )


def _where(op: Operation) -> str:
    location = format_location(op.location)
    return f" (defined at {location})" if location else ""


def _make_function(partition: PartitionOp, name: str) -> func.FuncOp:
    body = Region()
    partition.body.move_blocks(body)
    terminator = body.block.last_op
    assert isinstance(terminator, YieldOp)
    Rewriter.replace_op(terminator, func.ReturnOp(*terminator.values))
    function = func.FuncOp(name, (partition.inputs.types, partition.outputs.types), body, "private")
    function.attributes.update(partition.attributes)
    function.attributes[GLOBAL_SYMBOL] = StringAttr(name)
    function.location = partition.location
    return function


def outline_partitions(
    module: ModuleOp, cache: GlobalSymbolCache, compiler: str | None = None
) -> dict[PartitionOp, str]:
    """Outlines every partition with a compiler (``compiler``, or any) into the function
    ``cache`` names; returns the name chosen for each partition, in outlining order.

    Inner partitions are outlined before the partitions containing them, so an outer
    partition's identity already reflects its inner calls. Raises ``PartitaError``.
    """
    symbols = {name: op for op in module.ops if (name := symbol_name(op)) is not None}
    partitions = [
        op
        for op in module.walk(region_first=True)
        if isinstance(op, PartitionOp) and op.compiler is not None and (compiler is None or op.compiler == compiler)
    ]
    names: dict[PartitionOp, str] = {}
    trusted = getattr(cache, "confirms_equality", False)
    created: set[str] = set()
    for partition in partitions:
        name = cache.symbol_for(partition)
        existing = symbols.get(name)
        if existing is None:
            function = _make_function(partition, name)
            anchor = _top_level_ancestor(partition, module)
            Rewriter.insert_op(function, InsertPoint.before(anchor))
            symbols[name] = function
            created.add(name)
        elif trusted and name in created:
            pass  # the cache compared this partition with the one outlined as ``name``
        elif not isinstance(existing, func.FuncOp) or not function_matches_partition(existing, partition):
            raise op_error(
                partition,
                f"cannot be outlined as @{name}: the module already has a different "
                f"'{existing.name}' @{name}{_where(existing)}",
            )
        call = func.CallOp(name, list(partition.inputs), partition.outputs.types)
        call.location = partition.location
        Rewriter.replace_op(partition, call)
        names[partition] = name
    return names


@dataclass(frozen=True)
class OutlineCompilerFunctions(ModulePass):
    """Outlines ``byoc.partition`` regions into private functions named by their global
    symbols (``dedup=true``: equal partitions share one, fresh names use ``prefix``)."""

    name = "outline-compiler-functions"

    compiler: str | None = None
    dedup: bool = False
    prefix: str = "tvmgen_default"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        cache: GlobalSymbolCache = (
            StructuralDedupCache(op, prefix=self.prefix) if self.dedup else ExistingGlobalSymbolCache()
        )
        outline_partitions(op, cache, self.compiler)
