"""Partita: partition tensor programs across backends and lower them, on xDSL.

The public entry points are imported lazily so that ``import partita`` stays cheap
(the command-line tools start quickly and importing CUDA libraries is deferred).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover
    from partita.driver import Executable, compile, load

__all__ = ["compile", "Executable", "load", "__version__"]


def __dir__() -> list[str]:
    # The lazy names are attributes too: tab completion and dir() should show them.
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name in ("compile", "Executable", "load"):
        from partita import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'partita' has no attribute {name!r}")
