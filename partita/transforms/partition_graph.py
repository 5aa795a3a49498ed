"""``partition-graph``: turn compiler regions into partitions (TVM's PartitionGraph).

Every top-level ``byoc.partition`` with a ``byoc.compiler`` but no ``byoc.global_symbol``
(a merged region or an annotated composite) gets the partition attributes
``byoc.primitive``, ``byoc.inline`` and a fresh ``byoc.global_symbol``
(``tvmgen_default_<compiler>_main_<k>``, ``k`` counted per compiler in module order,
after any symbol already used). A composite keeps its ``byoc.composite`` name on the
partition. A plain op still carrying ``byoc.compiler`` becomes a partition of its own;
a composite nobody claimed (no compiler) is inlined back. Finished partitions are
untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from partita.analysis.global_symbols import FreshSymbolNames
from partita.dialects.byoc import COMPILER, COMPOSITE, GLOBAL_SYMBOL, PartitionOp
from partita.transforms.partition_utils import (
    create_partition,
    dissolve_partition,
    func_bodies,
    partition_attributes_for,
)


@dataclass(frozen=True)
class PartitionGraph(ModulePass):
    name = "partition-graph"

    bind_constants: bool = False
    """Clone constant inputs into partitions made from single annotated ops."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        namer = FreshSymbolNames.continuing(op)
        for block in func_bodies(op):
            for unit in list(block.ops):
                compiler = unit.attributes.get(COMPILER)
                if isinstance(unit, PartitionOp):
                    if GLOBAL_SYMBOL in unit.attributes:
                        continue
                    if isinstance(compiler, StringAttr):
                        self._finish(unit, compiler.data, namer)
                    elif COMPOSITE in unit.attributes:
                        dissolve_partition(unit)
                elif isinstance(compiler, StringAttr):
                    del unit.attributes[COMPILER]
                    region = create_partition([unit], {COMPILER: compiler}, bind_constants=self.bind_constants)
                    self._finish(region, compiler.data, namer)

    @staticmethod
    def _finish(partition: PartitionOp, compiler: str, namer: FreshSymbolNames) -> None:
        extra = {k: v for k, v in partition.attributes.items() if k != COMPILER}
        partition.attributes.clear()
        partition.attributes.update(partition_attributes_for(compiler, namer.fresh(compiler), extra))
        for inner in partition.body.walk():
            if inner is not partition and isinstance(inner, PartitionOp):
                inner.attributes.pop(COMPILER, None)
