"""``partition-eager``: TVM's BYOC flow, one backend after another.

For each selected backend in registration (priority) order: ``merge-composite``,
``annotate-target``, ``merge-compiler-regions``, ``partition-graph``. The backends'
"before partitioning" passes run first and their "after partitioning" passes last
(registration order). Ops already inside a partition are never re-partitioned, so an
earlier backend keeps what it took (cutlass before cublas for ``nn.dense``).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from partita.backends import resolve_backends
from partita.transforms.annotate_target import AnnotateTarget, backend_option
from partita.transforms.backend_phases import run_phase
from partita.transforms.merge_compiler_regions import MergeCompilerRegions
from partita.transforms.merge_composite import MergeComposite
from partita.transforms.partition_graph import PartitionGraph


@dataclass(frozen=True)
class PartitionEager(ModulePass):
    name = "partition-eager"

    backends: str | tuple[str, ...] | None = None
    """Backends to partition for (default: every registered backend)."""

    bind_constants: bool = False
    """Clone constants into the partitions instead of passing them as operands."""

    merge: bool = False
    """Merge adjacent composites of one backend into a single partition."""

    sm: int = 0
    """The device's compute capability (``90``): pattern rows that need a newer one (FP8
    tensor cores) are skipped; 0 keeps every row."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        backends = resolve_backends(backend_option(self.backends))
        names = [b.name for b in backends]
        run_phase(op, "before_partitioning", names, ctx)
        for backend in backends:
            name = backend.name
            MergeComposite(backend=name, bind_constants=self.bind_constants, sm=self.sm).apply(ctx, op)
            AnnotateTarget(backends=name).apply(ctx, op)
            # Backends that compile whole sub-graphs (the arbitrary style: TensorRT) get
            # adjacent composites merged, as TVM's TensorRT flow merges compiler regions.
            merge = self.merge or backend.partition_rule == "arbitrary"
            MergeCompilerRegions(merge=merge, bind_constants=self.bind_constants).apply(ctx, op)
            PartitionGraph(bind_constants=self.bind_constants).apply(ctx, op)
        run_phase(op, "after_partitioning", names, ctx)
