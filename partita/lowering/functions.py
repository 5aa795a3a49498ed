"""The partition functions a codegen compiles, before and after.

Before: ``outline_partitions`` turns the ``byoc.partition`` regions of a compiler into
private functions named by a global symbol cache (``outline-compiler-functions``; a codegen
given inline partitions outlines its own first). After: ``mark_extern`` turns compiled
functions into ``byoc.extern`` declarations, each body kept in its ``@<name>_reference``
sibling (``mark-compiler-functions-as-extern``; a codegen marks what it compiled). The
passes are in ``partita.transforms``; the codegens below them share this module.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, SymbolRefAttr, UnitAttr
from xdsl.ir import Operation, Region
from xdsl.rewriter import InsertPoint, Rewriter

from partita.analysis.global_symbols import ExistingGlobalSymbolCache, GlobalSymbolCache, symbol_name
from partita.dialects.byoc import (
    EXTERN,
    GLOBAL_SYMBOL,
    REFERENCE_IMPL,
    PartitionOp,
    YieldOp,
    is_partition_function,
    reference_name,
)
from partita.ir import format_location, op_error
from partita.ir.structural import blocks_equal

__all__ = [
    "function_matches_partition",
    "mark_compiler_functions",
    "mark_extern",
    "outline_compiler_partitions",
    "outline_partitions",
]


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


def mark_extern(module: ModuleOp, functions: Sequence[func.FuncOp], keep_reference: bool = True) -> None:
    """Turns ``functions`` (top-level functions with a body) into ``byoc.extern``
    declarations, each body kept in a ``@<name>_reference`` sibling when
    ``keep_reference``; shared with codegens that select functions otherwise."""
    symbols = {name: sym for sym in module.ops if (name := symbol_name(sym)) is not None}
    for function in functions:
        name = function.sym_name.data
        body = Region()
        function.body.move_blocks(body)
        if keep_reference:
            sibling_name = reference_name(name)
            if (clash := symbols.get(sibling_name)) is not None:
                where = format_location(clash.location)
                raise op_error(
                    function,
                    f"cannot keep the body of @{name} as @{sibling_name}: that symbol already "
                    f"exists" + (f" (defined at {where})" if where else ""),
                )
            sibling = func.FuncOp(sibling_name, function.function_type, body, "private",
                                  arg_attrs=function.arg_attrs, res_attrs=function.res_attrs)
            sibling.attributes[REFERENCE_IMPL] = SymbolRefAttr(name)
            sibling.location = function.location
            Rewriter.insert_op(sibling, InsertPoint.after(function))
            symbols[sibling_name] = sibling
        function.attributes.clear()
        function.attributes[EXTERN] = UnitAttr()
        function.sym_visibility = StringAttr("private")
        # Argument names belong to the body; a declaration has none.
        function.arg_attrs = None


def outline_compiler_partitions(module: ModuleOp, compiler: str | None) -> dict[PartitionOp, str]:
    """``outline-compiler-functions{compiler=...}``: the partitions of ``compiler`` (or
    all) outlined under their existing global symbols."""
    return outline_partitions(module, ExistingGlobalSymbolCache(), compiler)


def mark_compiler_functions(module: ModuleOp, compiler: str | None, keep_reference: bool = True) -> None:
    """``mark-compiler-functions-as-extern{compiler=...}``: every partition function of
    ``compiler`` (or all) becomes an extern declaration."""
    mark_extern(module, [f for f in module.ops if is_partition_function(f, compiler)], keep_reference)
