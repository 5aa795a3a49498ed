"""One host-memory budget for a model's import, compile and run.

Separate caps (per fold, per splat, per stage) each let a small input through that,
added up, takes gigabytes. ``partita.compile`` / ``partita.load`` and the tools create one
``MemoryBudget`` per model and make it *active* while they work (a context variable, so
threads and nested compiles each see their own); every stage that builds host memory the
input asks for charges it:

* the ONNX importer, for each tensor it folds at import;
* ``constant_values(buffer=True)``, for each splat constant it materializes;
* the simulated device (whose memory is the host's), for each allocation: the constants,
  splat fills and static arena at load, each shape signature's arena at bind; released
  when freed;
* each host step of a run, for its NumPy copies of its operands and its results; given
  back at the end of the run. (A GPU's memory and the run's returned arrays are not
  charged.)

Compile-time charges are kept for the model's lifetime, a conservative count: the
materialized arrays are gone after their pass, but what they became is in the IR.

Going over the limit is an error located at the op (or node) that asked, naming what was
spent before it. The limit comes from the ``memory_budget`` option (bytes, or a size such
as ``"4G"``), else ``$PARTITA_MEMORY_BUDGET``, else half of the machine's RAM.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from xdsl.ir import Operation

from partita.ir.diagnostics import PartitaError, op_error

__all__ = ["ENV", "MemoryBudget", "active_budget", "charge"]

ENV = "PARTITA_MEMORY_BUDGET"
RAM_FRACTION = 0.5
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _mib(n: int) -> str:
    """A size people read: bytes below a KiB, else KiB, MiB or GiB with one decimal."""
    if n < 1 << 10:
        return f"{n} B"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    raise AssertionError(n)  # pragma: no cover


def parse_size(text: str | int) -> int:
    """Bytes from an int or a size such as ``"512M"``, ``"4G"``, ``"1.5GiB"``."""
    if isinstance(text, int) and not isinstance(text, bool):
        size = text
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", str(text), re.IGNORECASE)
        if match is None:
            raise PartitaError(f"memory budget '{text}' is not a size (bytes, or a number with K, M, G or T)")
        size = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if size <= 0:
        raise PartitaError(f"memory budget '{text}' must be positive")
    return size


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): 16 GiB assumed
        return 16 << 30


class MemoryBudget:
    """Bytes of host memory a model may still ask for; thread-safe."""

    def __init__(self, limit: int):
        self.limit = limit
        self.spent = 0
        self._lock = threading.Lock()

    @classmethod
    def create(cls, limit: int | str | MemoryBudget | None = None) -> MemoryBudget:
        """The budget for ``limit`` (an existing budget is shared, not copied), else
        ``$PARTITA_MEMORY_BUDGET``, else half of the RAM."""
        if isinstance(limit, MemoryBudget):
            return limit
        if limit is None:
            limit = os.environ.get(ENV) or int(_ram_bytes() * RAM_FRACTION)
        return cls(parse_size(limit))

    def charge(self, nbytes: int, what: str, op: Operation | None = None) -> None:
        """Takes ``nbytes`` for ``what``; over the limit, an error at ``op`` (taking nothing)."""
        nbytes = int(nbytes)
        with self._lock:
            if self.spent + nbytes > self.limit:
                message = (f"{what} needs {_mib(nbytes)}, over the memory budget: {_mib(self.spent)} of "
                           f"{_mib(self.limit)} already spent (set memory_budget, --memory-budget or ${ENV})")
                raise op_error(op, message) if op is not None else PartitaError(message)
            self.spent += nbytes

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.spent = max(0, self.spent - int(nbytes))

    @contextmanager
    def active(self) -> Iterator[MemoryBudget]:
        """Within the block, ``charge`` charges this budget."""
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)

    def __repr__(self) -> str:
        return f"MemoryBudget({_mib(self.spent)} of {_mib(self.limit)})"


_active: ContextVar[MemoryBudget | None] = ContextVar("partita_memory_budget", default=None)


def active_budget() -> MemoryBudget | None:
    """The budget charged here (None outside ``partita.compile`` / ``load`` / the tools)."""
    return _active.get()


def charge(nbytes: int, what: str, op: Operation | None = None) -> None:
    """Charges the active budget, if any."""
    budget = _active.get()
    if budget is not None:
        budget.charge(nbytes, what, op)
