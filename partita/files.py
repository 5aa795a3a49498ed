"""Writing files so that readers never see half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def same_file(a: Path | str, b: Path | str) -> bool:
    """Whether two paths name one existing file (so an output would overwrite an input)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def write_atomically(path: Path | str, data: str | bytes, *, durable: bool = False) -> None:
    """Writes through a temporary file in the same directory and renames it into place,
    so a reader (or a concurrent writer of the same content) sees the old file or the
    whole new one, and a failure leaves the old content. ``durable`` also fsyncs, for
    caches that outlive the process."""
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file private; give it the mode a plain open() would have.
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
