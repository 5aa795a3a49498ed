"""``annotate-target``: mark what each backend will compile (TVM's AnnotateTarget).

Instead of TVM's ``compiler_begin``/``compiler_end`` annotation ops, the chosen compiler
is recorded as the discardable attribute ``byoc.compiler`` on the unit itself:

* a composite region (``byoc.partition`` with ``byoc.composite`` and no compiler yet) is
  claimed by the backend named in its composite name, if that backend is selected;
* a plain top-level op is claimed by the first selected backend (registration order)
  that lists the op among its single supported ops (``register_backend(ops=...)``).

Existing partitions (with a ``byoc.global_symbol``) and their contents are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from partita.backends import resolve_backends
from partita.backends.pattern import CONSTANT_OPS
from partita.dialects.byoc import COMPILER, COMPOSITE, GLOBAL_SYMBOL, PartitionOp
from partita.transforms.partition_utils import func_bodies


def backend_option(value: str | tuple[str, ...] | None) -> list[str] | None:
    """A pass option naming backends (``backends=a,b`` arrives as a tuple)."""
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


@dataclass(frozen=True)
class AnnotateTarget(ModulePass):
    name = "annotate-target"

    backends: str | tuple[str, ...] | None = None
    """Backends to annotate for (default: every registered backend)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        selected = resolve_backends(backend_option(self.backends))
        names = {b.name for b in selected}
        for block in func_bodies(op):
            for unit in block.ops:
                if COMPILER in unit.attributes:
                    continue
                if isinstance(unit, PartitionOp):
                    composite = unit.attributes.get(COMPOSITE)
                    if GLOBAL_SYMBOL in unit.attributes or not isinstance(composite, StringAttr):
                        continue
                    backend = composite.data.split(".", 1)[0]
                    if backend in names:
                        unit.attributes[COMPILER] = StringAttr(backend)
                elif unit.name.startswith("nn.") and unit.name not in CONSTANT_OPS:
                    for b in selected:
                        if unit.name in b.ops:
                            unit.attributes[COMPILER] = StringAttr(b.name)
                            break
