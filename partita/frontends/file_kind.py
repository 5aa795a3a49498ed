"""What a model file holds, decided by its content (the extension only breaks ties).

Tools must not parse an ONNX protobuf or a compiled ``.partita`` file as IR text (the
user then sees "Operation ... is not registered" or an internal error), and a file with
an unfamiliar extension or none (``encoder_model``) should still be read for what it is.
"""

from __future__ import annotations

import enum
from pathlib import Path

from partita.ir.diagnostics import PartitaError

__all__ = ["FileKind", "file_kind", "require_kind"]

# The compiled-model magic (partita.artifact.MAGIC without its version), restated here
# because the artifact module sits in the driver layer above the frontends.
_PARTITA_MAGIC = b"PARTITA-MODEL\0"
_SNIFF_BYTES = 4096
_WHITESPACE = frozenset(b"\t\n\r\f\v")


class FileKind(enum.Enum):
    MLIR = "textual IR"
    ONNX = "an ONNX model"
    PARTITA = "a compiled Partita model"
    BINARY = "a binary file of unknown format"


def _looks_like_onnx(head: bytes) -> bool:
    # A ModelProto is a protobuf whose fields all have small numbers: its first byte is
    # the key of field 1 (ir_version, varint: 0x08) or of another ModelProto field.
    return bool(head) and head[0] in (0x08, 0x12, 0x1A, 0x22, 0x2A, 0x32, 0x3A, 0x42)


def file_kind(path: Path | str) -> FileKind:
    """The kind of the file at ``path``; an ``OSError`` when it cannot be read."""
    with open(path, "rb") as handle:
        head = handle.read(_SNIFF_BYTES)
    if head.startswith(_PARTITA_MAGIC):
        return FileKind.PARTITA
    # Text never holds control bytes other than whitespace; a protobuf starts with one.
    # Bytes that are merely not UTF-8 stay text, so the parser can say where they are.
    if any(byte < 0x20 and byte not in _WHITESPACE for byte in head):
        return FileKind.ONNX if str(path).endswith(".onnx") or _looks_like_onnx(head) else FileKind.BINARY
    return FileKind.MLIR


_HINTS = {
    FileKind.ONNX: "import it with 'partita-import {path}', or compile and run it with partita-compile / partita-run",
    FileKind.PARTITA: "run it with 'partita-run {path}'",
    FileKind.BINARY: "expected textual IR (.mlir), an ONNX model (.onnx) or a compiled model (.partita)",
    FileKind.MLIR: "pass it to partita-opt or partita-run",
}


def require_kind(path: Path | str, allowed: tuple[FileKind, ...], tool: str) -> FileKind:
    """The file's kind, or a ``PartitaError`` saying what it is and what to do with it."""
    try:
        kind = file_kind(path)
    except IsADirectoryError:
        raise PartitaError(f"'{path}' is a directory, not a model file") from None
    except OSError as err:
        raise PartitaError(f"cannot read '{path}': {err.strerror or err}") from None
    if kind not in allowed:
        hint = _HINTS[kind].format(path=path)
        wanted = " or ".join(k.value for k in allowed)
        raise PartitaError(f"'{path}' is {kind.value}, not {wanted} as {tool} takes: {hint}")
    return kind
