"""The xDSL context every Partita tool and pass uses: all of xDSL's dialects plus ours."""

from __future__ import annotations

from xdsl.context import Context
from xdsl.universe import Universe

from partita.dialects import get_all_dialects


def make_context(*, allow_unregistered: bool = False) -> Context:
    """A context with every xDSL dialect and ``nn``/``byoc`` registered lazily."""
    ctx = Context(allow_unregistered=allow_unregistered)
    for name, factory in Universe.get_multiverse().all_dialects.items():
        ctx.register_dialect(name, factory)
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    return ctx
