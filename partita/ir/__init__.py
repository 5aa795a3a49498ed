"""IR infrastructure shared by every stage, below the dialects: a locating parser, located
diagnostics and a verifier that stays linear on modules with many functions."""

from partita.ir.diagnostics import PartitaError, format_location, op_error
from partita.ir.parsing import parse_module
from partita.ir.verifier import symbol_name, verify_module

__all__ = ["PartitaError", "format_location", "op_error", "parse_module", "symbol_name", "verify_module"]
