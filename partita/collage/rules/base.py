"""The partition-rule interface: what every rule of the algebra is (TVM's ``PartitionRule``).

A rule turns a function body (a :class:`RuleContext`) into candidate partitions
(:class:`~partita.collage.search.Candidate`: a sub-graph, the target it would run on, a
label). Leaf rules find sub-graphs (pattern matches, single calls); the others wrap rules
to change, combine or filter their candidates. Rules are values: build a tree once, apply
it to every function.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from partita.collage.graph import DataflowGraph
from partita.collage.search import Candidate

__all__ = ["PartitionRule", "RuleContext", "unique"]


@dataclass(frozen=True)
class RuleContext:
    """What a rule looks at: the data-flow graph and, for rules over IR (patterns, the
    native fuser's predicates), the op behind each node, the block they live in and the
    device's arch."""

    graph: DataflowGraph
    ops: Sequence[Any] = ()
    block: Any = None
    sm: int = 0
    """The device's compute capability (``90``) pattern rows are checked against (0: any)."""

    def op(self, v: int) -> Any:
        if not self.ops:
            raise ValueError("this rule needs the IR ops of the graph (RuleContext.ops)")
        return self.ops[v]


class PartitionRule(ABC):
    """A node of the rule algebra. ``name`` prefixes the rules it wraps in ``describe``."""

    name: str = ""

    @abstractmethod
    def candidates(self, ctx: RuleContext) -> list[Candidate]:
        """The candidates of this rule on ``ctx``, without duplicates."""

    def children(self) -> tuple[PartitionRule, ...]:
        return ()

    def coalesce_config(self) -> Any:
        """When chosen candidates of this rule's target may be merged after the search
        (MaxCoalesce, a ``Coalescing``): the first ``OnlyValid``'s config without its depth
        bound, and the combiners of the ``Combine`` below it; ``None`` (never merge) for
        rules that validate nothing, such as pattern-only ones."""
        for child in self.children():
            config = child.coalesce_config()
            if config is not None:
                return config
        return None

    def summary(self) -> str:
        """One line: the rule's class and parameters (children excluded)."""
        return type(self).__name__

    def describe(self, indent: int = 0) -> str:
        """The rule tree, one rule a line (TVM prints rules the same way)."""
        lines = ["  " * indent + self.summary()]
        lines += [c.describe(indent + 1) for c in self.children()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.describe()


def unique(cands: Iterable[Candidate]) -> list[Candidate]:
    """Candidates without repeats of the same (nodes, target, label), first kept."""
    seen: set[tuple[int, str, str]] = set()
    out = []
    for c in cands:
        key = (c.mask, c.target, c.label)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
