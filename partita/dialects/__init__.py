"""Partita's dialects: ``nn`` (graph-level tensor ops) and ``byoc`` (partitions, targets)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.context import Context
from xdsl.ir import Dialect
from xdsl.universe import Universe


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


def make_context(*, allow_unregistered: bool = False) -> Context:
    """The context every Partita tool and pass uses: every xDSL dialect and ``nn``/``byoc``,
    all registered lazily."""
    ctx = Context(allow_unregistered=allow_unregistered)
    # With Partita's own ``xdsl.universe`` plugin installed, the multiverse already holds
    # ``nn`` and ``byoc``: each name is registered once (twice raises).
    for name, factory in {**Universe.get_multiverse().all_dialects, **get_all_dialects()}.items():
        ctx.register_dialect(name, factory)
    return ctx


# Not lazy: the byoc module registers the check of ``byoc.*`` function attributes with the
# verifier, which must run even on a module whose only byoc content is such attributes.
from partita.dialects import byoc as _byoc  # noqa: E402,F401
