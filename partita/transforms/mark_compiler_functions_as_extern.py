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

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from partita.dialects.byoc import REFERENCE_SUFFIX, reference_name
from partita.lowering.functions import mark_compiler_functions, mark_extern

__all__ = ["REFERENCE_SUFFIX", "MarkCompilerFunctionsAsExtern", "mark_extern", "reference_name"]


@dataclass(frozen=True)
class MarkCompilerFunctionsAsExtern(ModulePass):
    """Turns partition functions of ``compiler`` (or all) into ``byoc.extern``
    declarations, keeping each body in a ``@<name>_reference`` sibling unless
    ``keep-reference=false``."""

    name = "mark-compiler-functions-as-extern"

    compiler: str | None = None
    keep_reference: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        mark_compiler_functions(op, self.compiler, self.keep_reference)
