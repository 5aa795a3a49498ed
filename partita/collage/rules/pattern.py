"""``DFPattern``: one candidate per match of a backend's patterns (TVM's
``DFPatternPartitionRule``).

Matches are those of the backend's pattern table with its predicates applied
(:func:`partita.backends.match_patterns`); each candidate is labelled with the qualified
pattern name and carries the match in ``data``. Wrap the rule in ``Composite`` to make
each match a composite function.
"""

from __future__ import annotations

from partita.backends import match_patterns
from partita.collage.rules.base import PartitionRule, RuleContext, unique
from partita.collage.search import Candidate

__all__ = ["DFPattern"]


class DFPattern(PartitionRule):
    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.name = backend

    def summary(self) -> str:
        return f"DFPattern(backend={self.backend})"

    def candidates(self, ctx: RuleContext) -> list[Candidate]:
        if ctx.block is None:
            raise ValueError("DFPattern needs the IR block of the graph (RuleContext.block)")
        index = {op: v for v, op in enumerate(ctx.ops)}
        out = []
        for m in match_patterns(ctx.block, self.backend, sm=ctx.sm):
            nodes = [index.get(op) for op in m.ops]
            if any(v is None for v in nodes):
                continue  # the match holds an op that is not a node (a constant)
            out.append(Candidate(frozenset(nodes), m.backend, m.name, data=m))  # type: ignore[arg-type]
        return unique(out)
