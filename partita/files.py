"""Writing files so that readers never see half of one."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def cache_root() -> Path:
    """Partita's cache of what compiles make (TensorRT engines, combined parameters):
    ``$PARTITA_CACHE_DIR``, else ``~/.cache/partita``."""
    return Path(os.environ.get("PARTITA_CACHE_DIR") or Path.home() / ".cache" / "partita")


def same_file(a: Path | str, b: Path | str) -> bool:
    """Whether two paths name one existing file (so an output would overwrite an input)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _emit(handle: BinaryIO, data: str | bytes | Callable[[BinaryIO], None]) -> None:
    if callable(data):
        data(handle)  # a writer that streams (a compiled model larger than memory)
    else:
        handle.write(data.encode() if isinstance(data, str) else data)


def write_atomically(path: Path | str, data: str | bytes | Callable[[BinaryIO], None], *,
                     durable: bool = False, parents: bool = False) -> None:
    """Writes through a temporary file in the same directory and renames it into place,
    so a reader (or a concurrent writer of the same content) sees the old file or the
    whole new one, and a failure leaves the old content. ``durable`` also fsyncs, for
    caches that outlive the process.

    Only regular files get that treatment: a special file (``/dev/null``, a FIFO, a
    terminal) is written directly, never replaced by a regular file. A directory, or a
    path spelled as one (``out/``), is an error rather than a file named ``out``; so are a
    read-only file and, unless ``parents``, a missing directory.
    """
    spelled = os.fspath(path)
    if spelled.endswith(os.sep) or (os.altsep and spelled.endswith(os.altsep)):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file name", spelled)
    path = Path(path).resolve()
    try:
        existing = path.stat().st_mode
    except FileNotFoundError:
        existing = None
    except NotADirectoryError:
        raise NotADirectoryError(errno.ENOTDIR, "a parent of the output is not a directory", spelled) from None
    if existing is not None and stat.S_ISDIR(existing):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file name", spelled)
    if existing is not None and not stat.S_ISREG(existing):
        with open(path, "wb") as handle:  # a device or FIFO: write through, keep the node
            _emit(handle, data)
        return
    if existing is not None and not existing & 0o222:  # as a shell redirect would refuse
        raise PermissionError(errno.EACCES, "the file is read-only", spelled)
    if parents:  # caches make their directories; a user's output goes where it is asked
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "its directory does not exist", spelled)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:  # name the file the user asked for, not our temporary one
        raise type(err)(err.errno, f"cannot create a file in {path.parent}: {err.strerror}", spelled) from None
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
            _emit(handle, data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_regular_file(path: Path | str, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes. Opened
    with ``O_NONBLOCK`` so a FIFO never hangs the reader, and refused unless ``S_ISREG``
    (a device such as ``/dev/zero`` never ends). An ``OSError`` says why not."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        if info.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while being read
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
    return data
