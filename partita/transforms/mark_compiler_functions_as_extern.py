"""``mark-compiler-functions-as-extern``: partition functions become extern declarations.

TVM's ``MarkCompilerFunctionsAsExtern``, run after external codegen: the compiled code now
implements each function of ``compiler`` (all compilers when none is given), so the
function becomes a body-less private declaration carrying only ``byoc.extern`` (the
other attributes described a body that no longer exists here). Calls stay ``func.call``s.

The semantics are not thrown away (``keep-reference=true``, the default): the body moves
to a private sibling ``@<name>_reference`` tagged ``byoc.reference_impl = @<name>``. The
reference executor runs it to emulate the external code on the CPU when no device is
present, and ``lower-extern-calls`` derives shape functions for dynamic results from it.
The link lives on the sibling because the declaration may only carry ``byoc.extern``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, SymbolRefAttr, UnitAttr
from xdsl.ir import Region
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from partita.dialects.byoc import EXTERN, REFERENCE_IMPL
from partita.ir import format_location, op_error, symbol_name
from partita.dialects.byoc import is_partition_function

__all__ = ["REFERENCE_SUFFIX", "MarkCompilerFunctionsAsExtern", "mark_extern", "reference_name"]

REFERENCE_SUFFIX = "_reference"


def reference_name(extern_name: str) -> str:
    """Name of the private sibling keeping the body of extern function ``extern_name``."""
    return extern_name + REFERENCE_SUFFIX


@dataclass(frozen=True)
class MarkCompilerFunctionsAsExtern(ModulePass):
    """Turns partition functions of ``compiler`` (or all) into ``byoc.extern``
    declarations, keeping each body in a ``@<name>_reference`` sibling unless
    ``keep-reference=false``."""

    name = "mark-compiler-functions-as-extern"

    compiler: str | None = None
    keep_reference: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        mark_extern(op, [f for f in op.ops if is_partition_function(f, self.compiler)], self.keep_reference)


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
