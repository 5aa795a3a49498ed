"""``Host``: one single-node candidate on the host target for every op the host can run
(TVM's ``HostPartitionRule``).

What the host runs stays in the caller as a host op. When the caller runs on a device,
the search charges such a candidate the copies of its operands to the host and of its
result back (:func:`partita.collage.cost.host_copy_time`), so a device placement wins
unless the host is really cheaper.
"""

from __future__ import annotations

from collections.abc import Callable

from partita.collage.rules.base import PartitionRule, RuleContext
from partita.collage.search import Candidate

__all__ = ["HOST_LABEL", "Host"]

HOST_LABEL = "host"


class Host(PartitionRule):
    def __init__(self, target: str = "llvm", supports: Callable[[RuleContext, int], bool] | None = None) -> None:
        self.target = target
        self.supports = supports

    def summary(self) -> str:
        return f"Host(target={self.target})"

    def candidates(self, ctx: RuleContext) -> list[Candidate]:
        return [
            Candidate(frozenset((v,)), self.target, HOST_LABEL)
            for v in range(len(ctx.graph))
            if self.supports is None or self.supports(ctx, v)
        ]
