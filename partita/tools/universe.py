"""Partita as an xDSL plugin: its dialects, passes and targets for any xDSL driver.

``pyproject.toml`` names :data:`PARTITA_UNIVERSE` under the ``xdsl.universe`` entry
point, so after ``pip install partita`` a plain ``xdsl-opt -p outline-compiler-functions``
finds Partita's passes and parses ``nn`` / ``byoc`` IR. ``partita-opt`` registers the same
tables itself and skips names the entry point already brought in (registering a dialect
twice raises ``AlreadyRegisteredConstructException``), so it works with the plugin
installed or not. Every factory is lazy: loading the plugin imports no pass or dialect.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from xdsl.universe import Universe
from xdsl.utils.target import Target

from partita.dialects import get_all_dialects
from partita.transforms import get_all_passes

__all__ = ["PARTITA_UNIVERSE", "get_all_targets"]

_TARGETS: dict[str, tuple[str, str]] = {
    "cutlass-cpp": ("partita.lowering.cutlass.codegen", "CutlassCppTarget"),
    "cuda-c": ("partita.lowering.cuda.codegen", "CudaCTarget"),
    "library-records": ("partita.runtime.library_records", "LibraryRecordsTarget"),
}


def _loader(module: str, cls: str) -> Callable[[], type[Target]]:
    def load() -> type[Target]:
        return getattr(importlib.import_module(module), cls)

    return load


def get_all_targets() -> dict[str, Callable[[], type[Target]]]:
    """Lazy factories for Partita's ``-t`` output targets, keyed by target name."""
    return {name: _loader(module, cls) for name, (module, cls) in _TARGETS.items()}


PARTITA_UNIVERSE = Universe(all_dialects=get_all_dialects(), all_passes=get_all_passes(), all_targets=get_all_targets())
