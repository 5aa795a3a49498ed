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
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from partita.analysis.global_symbols import (
    ExistingGlobalSymbolCache,
    GlobalSymbolCache,
    StructuralDedupCache,
)
from partita.lowering.functions import function_matches_partition, outline_partitions

__all__ = ["OutlineCompilerFunctions", "function_matches_partition", "outline_partitions"]


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
