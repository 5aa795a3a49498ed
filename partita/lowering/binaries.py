"""The bytes of a ``byoc.binary``, checked against its recorded digest before any of them
reach the CUDA driver.

Lowered IR names a cubin by its content, never by a file of the machine that compiled it:
a ``byoc.binary`` carries the cubin's ``sha256``, and its bytes are the cache entry
``<cache>/<sha256>.cubin`` of the content-addressed cubin cache (``partita.lowering.nvrtc``),
where the codegen stored them. The cache is ``$PARTITA_CACHE_DIR`` (default
``~/.cache/partita/cubins``) at load time, or the ``cache_dir`` the binary records when its
codegen was given a cache of its own (``cutlass-codegen{cache-dir=...}``, the CUTLASS
``tmp_dir`` option, or a private cache when the default one was unusable). Printed IR
therefore moves between machines: with the same pinned NVRTC and headers, compiling the same
module reproduces the same digests.

A compiled-model file carries the bytes embedded instead (``partita.artifact``). Either
way ``BinaryImage.read`` returns them only when their sha256 equals the recorded one; a
missing, changed or truncated cache entry is a clear error instead of an ELF parse failure
inside the driver. IR written before cubins were named by digest (a ``path`` attribute) is
still read from that path.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp, StringAttr

from partita.dialects import byoc
from partita.files import read_regular_file
from partita.ir import PartitaError, symbol_name
from partita.lowering.nvrtc import default_cache_dir, nvrtc_version

CACHE_DIR = "cache_dir"
"""The ``byoc.binary`` attribute naming a cache other than the default one."""
NVRTC = "nvrtc"
"""The ``byoc.binary`` attribute recording the NVRTC ``major.minor`` that compiled it."""

MAX_BINARY_BYTES = 1 << 30
"""No cubin is larger; a path naming something bigger (or endless) is not one."""


@dataclass(frozen=True)
class BinaryImage:
    symbol: str
    path: Path | None
    digest: str | None
    data: bytes | None = None
    """Embedded bytes (a loaded compiled model); ``path`` is then not read."""
    nvrtc: str | None = None
    """The NVRTC version that compiled it, when recorded."""

    def read(self) -> bytes:
        if self.data is not None:
            data = self.data
        elif self.path is None:
            raise PartitaError(f"byoc.binary @{self.symbol} has neither a sha256 nor embedded bytes")
        elif self.digest is None:  # a file no compile vouched for never reaches the driver
            raise PartitaError(f"byoc.binary @{self.symbol} names '{self.path}' but records no sha256; "
                               "compile the model again")
        else:
            try:
                data = read_regular_file(self.path, MAX_BINARY_BYTES)
            except OSError as err:
                if not isinstance(err, FileNotFoundError):  # a FIFO, a device, too large
                    raise PartitaError(f"the cubin of @{self.symbol} is unusable ({err.strerror}: {self.path}); "
                                       "compile the model again") from None
                raise PartitaError(self._missing(err)) from None
        if self.digest is not None and hashlib.sha256(data).hexdigest() != self.digest:
            where = "embedded bytes" if self.data is not None else f"'{self.path}'"
            raise PartitaError(
                f"the cubin of @{self.symbol} ({where}) does not match the sha256 recorded at compile time; "
                "it was changed or damaged: compile the model again"
            )
        return data

    def _missing(self, err: OSError) -> str:
        assert self.path is not None
        if self.digest is not None and self.path.name == f"{self.digest}.cubin":
            made = f", compiled by NVRTC {self.nvrtc}" if self.nvrtc else ""
            return (
                f"the cubin of @{self.symbol} (sha256 {self.digest}{made}) is not in the cubin cache "
                f"'{self.path.parent}': compile the module on this machine (its codegen fills the cache; "
                "set PARTITA_CACHE_DIR to use another cache), or run a compiled-model file "
                "(partita-compile), which carries its cubins"
            )
        return f"the cubin of @{self.symbol} is gone ({err.strerror}: {self.path}); compile the model again"


def _string(op: byoc.BinaryOp, name: str) -> str | None:
    attr = op.attributes.get(name)
    return attr.data if isinstance(attr, StringAttr) else None


def cubin_file(op: byoc.BinaryOp, cache_dir: Path | str | None = None) -> Path | None:
    """Where the cubin of ``op`` lies on this machine: ``<cache>/<sha256>.cubin`` in the
    binary's own cache, ``cache_dir``, or the default cache (in that order); a legacy
    ``path`` as written. ``None`` when the binary names neither."""
    legacy = _string(op, "path")
    if legacy:
        return Path(legacy)
    digest = _string(op, byoc.DIGEST)
    if digest is None:
        return None
    cache = _string(op, CACHE_DIR) or cache_dir
    return (Path(cache) if cache else default_cache_dir()).expanduser() / f"{digest}.cubin"


def fresh_symbol(module: ModuleOp, base: str) -> str:
    """``base``, or ``base_1``, ``base_2``... : the first name no top-level symbol of
    ``module`` has (a codegen's ``byoc.binary`` beside earlier ones)."""
    taken = {name for op in module.ops if (name := symbol_name(op)) is not None}
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name


def cache_attributes(cubin_path: Path) -> dict[str, StringAttr]:
    """What a codegen records beside the ``sha256`` of a cubin it stored at ``cubin_path``:
    the NVRTC that compiled it (``nvrtc = "13.0"``: another version gives other digests),
    and the cache it used unless that is the default one (the IR then names no path of this
    machine)."""
    major, minor = nvrtc_version()
    attributes = {NVRTC: StringAttr(f"{major}.{minor}")}
    cache = Path(cubin_path).parent.absolute()
    if cache != default_cache_dir().expanduser().absolute():
        attributes[CACHE_DIR] = StringAttr(str(cache))
    return attributes


def binary_images(module: ModuleOp, embedded: Mapping[str, bytes] | None = None,
                  cache_dir: Path | str | None = None) -> dict[str, BinaryImage]:
    """Every ``byoc.binary`` of ``module`` with bytes of its own (a cubin, not library
    records), by symbol; ``embedded`` supplies bytes by symbol."""
    images = {}
    for op in module.ops:
        if isinstance(op, byoc.BinaryOp) and not op.is_inline:
            symbol = op.sym_name.data
            images[symbol] = BinaryImage(
                symbol,
                cubin_file(op, cache_dir),
                _string(op, byoc.DIGEST),
                (embedded or {}).get(symbol),
                _string(op, NVRTC),
            )
    return images
