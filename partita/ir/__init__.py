"""IR infrastructure shared by every stage: the context, a locating parser, located
diagnostics and a verifier that stays linear on modules with many functions."""

from partita.ir.context import make_context
from partita.ir.diagnostics import PartitaError, format_location, op_error
from partita.ir.parsing import parse_module
from partita.ir.verifier import symbol_name, verify_module

__all__ = ["PartitaError", "format_location", "make_context", "op_error", "parse_module", "symbol_name", "verify_module"]
