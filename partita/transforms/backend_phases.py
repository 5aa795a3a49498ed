"""The backends' phase passes (TVM UMA's ``before_partitioning`` / ``after_partitioning``),
run by the partitioners. A phase pass is a pass instance or a pipeline string resolved
against every xDSL and Partita pass, so it sits above the pass registry it reads."""

from __future__ import annotations

from collections.abc import Iterable

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import PassPipeline
from xdsl.transforms import get_all_passes as xdsl_passes

from partita.backends import PHASES, resolve_backends
from partita.dialects import make_context
from partita.ir import PartitaError
from partita.transforms import get_all_passes
from partita.transforms.pass_options import quote_option_values

__all__ = ["run_phase"]


def _pipeline(spec: str) -> PassPipeline:
    available = {**xdsl_passes(), **get_all_passes()}
    try:
        return PassPipeline.parse_spec(available, quote_option_values(spec))
    except (Exception, BaseException) as err:  # ArgSpecParseError is a BaseException
        if isinstance(err, KeyboardInterrupt | SystemExit):
            raise
        raise PartitaError(f"invalid phase pass pipeline '{spec}': {err}") from None


def run_phase(
    module: ModuleOp,
    phase: str,
    backends: str | Iterable[str] | None = None,
    ctx: Context | None = None,
) -> list[str]:
    """Run the ``phase`` passes of ``backends`` (registration order, then each backend's
    own order) on ``module``; returns the names of the passes run."""
    if phase not in PHASES:
        raise PartitaError(f"unknown backend phase '{phase}'; phases: {', '.join(PHASES)}")
    if ctx is None:
        ctx = make_context()
    ran: list[str] = []
    for backend in resolve_backends(backends):
        for p in backend.passes(phase):
            passes = _pipeline(p).passes if isinstance(p, str) else (p,)
            for one in passes:
                one.apply(ctx, module)
                ran.append(one.name)
    return ran
