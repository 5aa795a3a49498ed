"""Partita's dialects: ``nn`` (graph-level tensor ops) and ``byoc`` (partitions, targets)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

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
    for name, factory in _dialect_factories().items():
        ctx.register_dialect(name, factory)
    return ctx


@cache
def _dialect_factories() -> dict[str, Callable[[], Dialect]]:
    """Every installed dialect's factory, looked up once per process: the multiverse reads
    the ``xdsl.universe`` entry points of every installed package (milliseconds, per
    context). With Partita's own plugin installed it already holds ``nn`` and ``byoc``:
    each name is registered once (twice raises)."""
    return {**Universe.get_multiverse().all_dialects, **get_all_dialects()}


# Not lazy: the byoc module registers the check of ``byoc.*`` function attributes with the
# verifier, which must run even on a module whose only byoc content is such attributes.
from partita.dialects import byoc as _byoc  # noqa: E402,F401
