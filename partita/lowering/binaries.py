"""The bytes of a ``byoc.binary``, checked against its recorded digest before any of them
reach the CUDA driver.

A binary's bytes come either from its ``path`` (a cubin in the cache, as compiled) or
from a compiled-model file, which carries them embedded (``partita.artifact``). Either
way ``BinaryImage.read`` returns them only when their sha256 equals the ``sha256`` the
``byoc.binary`` op records; a file changed or truncated since the compile is a clear
error instead of an ELF parse failure inside the driver.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp, StringAttr

from partita.dialects import byoc
from partita.files import read_regular_file
from partita.ir import PartitaError

MAX_BINARY_BYTES = 1 << 30
"""No cubin is larger; a path naming something bigger (or endless) is not one."""


@dataclass(frozen=True)
class BinaryImage:
    symbol: str
    path: Path | None
    digest: str | None
    data: bytes | None = None
    """Embedded bytes (a loaded compiled model); ``path`` is then not read."""

    def read(self) -> bytes:
        if self.data is not None:
            data = self.data
        elif self.path is None:
            raise PartitaError(f"byoc.binary @{self.symbol} has neither a path nor embedded bytes")
        elif self.digest is None:  # a file no compile vouched for never reaches the driver
            raise PartitaError(f"byoc.binary @{self.symbol} names '{self.path}' but records no sha256; "
                               "compile the model again")
        else:
            try:
                data = read_regular_file(self.path, MAX_BINARY_BYTES)
            except OSError as err:
                state = "is gone" if isinstance(err, FileNotFoundError) else "is unusable"
                raise PartitaError(
                    f"the cubin of @{self.symbol} {state} ({err.strerror}: {self.path}); compile the model again"
                ) from None
        if self.digest is not None and hashlib.sha256(data).hexdigest() != self.digest:
            where = "embedded bytes" if self.data is not None else f"'{self.path}'"
            raise PartitaError(
                f"the cubin of @{self.symbol} ({where}) does not match the sha256 recorded at compile time; "
                "it was changed or damaged: compile the model again"
            )
        return data


def _string(op: byoc.BinaryOp, name: str) -> str | None:
    attr = op.attributes.get(name)
    return attr.data if isinstance(attr, StringAttr) else None


def binary_images(module: ModuleOp, embedded: Mapping[str, bytes] | None = None) -> dict[str, BinaryImage]:
    """Every ``byoc.binary`` of ``module`` with bytes of its own (a cubin, not library
    records), by symbol; ``embedded`` supplies bytes by symbol."""
    images = {}
    for op in module.ops:
        if isinstance(op, byoc.BinaryOp) and not op.is_inline:
            symbol = op.sym_name.data
            path = _string(op, "path")
            images[symbol] = BinaryImage(
                symbol,
                Path(path) if path else None,
                _string(op, byoc.DIGEST),
                (embedded or {}).get(symbol),
            )
    return images
