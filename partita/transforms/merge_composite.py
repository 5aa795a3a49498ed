"""``merge-composite``: wrap every pattern-table match into a composite region.

TVM's MergeComposite. Ops of each function body are visited in reverse order; at each op
not yet claimed, the first pattern-table row (priority order) that matches there, claims
no op already taken and satisfies its predicate wins, so the largest pattern ending at a
root is preferred (``dense_bias_gelu`` before ``dense``). Each match becomes a
``byoc.partition`` carrying ``byoc.composite = "<backend>.<name>"`` and no compiler yet;
``annotate-target`` adds ``byoc.compiler`` and ``partition-graph`` turns the same op
into the finished partition, so the composite name stays visible on the partition.

Ops inside existing ``byoc.partition`` regions are never visited. Constants feeding a
match stay outside (partition operands) unless ``bind-constants=true``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from partita.backends import get_pattern_table, greedy_matches
from partita.dialects.byoc import COMPOSITE
from partita.transforms.partition_utils import create_partition, func_bodies


@dataclass(frozen=True)
class MergeComposite(ModulePass):
    name = "merge-composite"

    backend: str | tuple[str, ...] | None = None
    """Backend whose pattern table is used (comma-separated list allowed); default: all."""

    bind_constants: bool = False
    """Clone constant inputs into the composite instead of passing them as operands."""

    sm: int = 0
    """The device's compute capability (``90``): rows that need a newer one are skipped
    (0: every row applies)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        backends = self.backend if not isinstance(self.backend, tuple) else list(self.backend)
        table = get_pattern_table(backends)
        for block in func_bodies(op):
            for m in greedy_matches(block, table, self.sm):
                create_partition(
                    m.match.ops, {COMPOSITE: StringAttr(m.name)}, bind_constants=self.bind_constants
                )
