"""User-facing errors in MLIR's ``file:line:col: error: message`` form."""

from __future__ import annotations

from xdsl.dialects.builtin import FileLineColLoc, LocationAttr, NameLoc
from xdsl.ir import Operation
from xdsl.utils.exceptions import DiagnosticException


def format_location(location: LocationAttr | None) -> str | None:
    if isinstance(location, FileLineColLoc):
        return f"{location.filename.data}:{location.line.data}:{location.column.data}"
    if isinstance(location, NameLoc):  # e.g. an op imported from an ONNX node
        return location.desc.data
    return None


class PartitaError(DiagnosticException):
    """An error in the user's input or options, reported without a traceback.

    It derives from xDSL's ``DiagnosticException`` so that xDSL's own machinery (pass
    pipelines, ``--verify-diagnostics``) treats it like any other diagnostic.
    """

    def __init__(self, message: str, location: LocationAttr | str | None = None):
        self.message = message
        self.location = format_location(location) if isinstance(location, LocationAttr) else location
        super().__init__(str(self))

    def __str__(self) -> str:
        prefix = f"{self.location}: " if self.location else ""
        return f"{prefix}error: {self.message}"


def op_error(op: Operation, message: str) -> PartitaError:
    """An error located at ``op``, worded like MLIR's ``'nn.dense' op ...``."""
    return PartitaError(f"'{op.name}' op {message}", op.location)


class RemarkWarning(UserWarning):
    """A remark (MLIR's ``remark:``) a pass raises with ``warnings.warn``; its text
    starts with the location (``file:line:col: ...``) when it is about an op."""
