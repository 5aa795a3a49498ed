"""Partita's dialects: ``nn`` (graph-level tensor ops) and ``byoc`` (partitions, targets)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect


def get_all_dialects() -> dict[str, Callable[[], Dialect]]:
    """Lazy factories for Partita's dialects, in the shape of ``xdsl.universe``'s table,
    so another xDSL driver can register them with ``Context.register_dialect``."""

    def get_nn() -> Dialect:
        from partita.dialects.nn import NN

        return NN

    def get_byoc() -> Dialect:
        from partita.dialects.byoc import BYOC

        return BYOC

    return {"nn": get_nn, "byoc": get_byoc}
