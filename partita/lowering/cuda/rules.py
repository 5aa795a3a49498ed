"""How each nn op becomes CUDA C in a fused kernel: the per-op lowering rules.

An op reaches a native kernel through one of two rule kinds, registered under its class by
the family modules of ``partita.lowering.cuda.ops`` (mirroring ``partita.dialects.nn``):

* ``@injective(OpClass)``: the op's value at an output index is a C expression of its
  operands' values at other indices (TVM's ``kElemWise`` / ``kBroadcast`` /
  ``kInjective``). The rule gets the emitter, the op and the index (one C expression per
  axis) and returns the expression, typed in the result's compute type
  (``KernelEmitter.ctype``). It reads operands with ``emitter.value(operand, index)``, so
  injective producers are inlined (``compute_inline``). Such ops chain freely in a group.
* ``@window(OpClass)``: the op anchors a kernel in which one thread computes one output
  element with a loop over the operand elements it needs (reductions over any axes,
  arg-reductions, scans, direct convolutions, ...; TVM's ``kCommReduce`` /
  ``kOutEWiseFusable`` scheduled naively). Its operands are kernel arguments, read with
  ``emitter.load(argument, index)``; the rule returns the C lines that declare ``y``, the
  op's value at ``emitter.out_index``. Element-wise consumers join as an epilogue.

Both take ``supports(op) -> bool`` (e.g. static dims only), and, for results with
dynamic dims, ``dims(emitter, op) -> list[Dim]`` deriving them from the kernel's
run-time dims (without it, an op with a dynamic result stays on the host).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xdsl.ir import Operation

if TYPE_CHECKING:  # pragma: no cover
    from partita.lowering.cuda.emitter import Dim, KernelEmitter

__all__ = ["INJECTIVE", "WINDOW", "Rule", "injective", "window"]


@dataclass(frozen=True)
class Rule:
    emit: Callable[..., Any]
    """Injective: ``(emitter, op, index) -> str``; window: ``(emitter, op) -> list[str]``."""
    supports: Callable[[Operation], bool] | None = None
    dims: Callable[[KernelEmitter, Operation], list[Dim]] | None = None
    elementwise: bool = False
    """Injective rules only: the op reads each operand at the (broadcast) output index,
    so it may follow an anchor in its epilogue."""

    def accepts(self, op: Operation) -> bool:
        return self.supports is None or bool(self.supports(op))


INJECTIVE: dict[type[Operation], Rule] = {}
"""Injective rules by op class (a registration table, filled at import)."""
WINDOW: dict[type[Operation], Rule] = {}
"""Window (per-output-element loop) rules by op class."""


def _register(table: dict[type[Operation], Rule], op_types, supports, dims, elementwise=False):
    def decorate(fn):
        for t in op_types:
            if t in INJECTIVE or t in WINDOW:
                raise ValueError(f"{t.name} already has a CUDA lowering rule")
            table[t] = Rule(fn, supports, dims, elementwise)
        return fn

    return decorate


def injective(*op_types: type[Operation], supports=None, dims=None, elementwise=False):
    """Register ``fn(emitter, op, index) -> C expression`` for ``op_types``; pass
    ``elementwise=True`` when the op reads its operands at the broadcast output index."""
    return _register(INJECTIVE, op_types, supports, dims, elementwise)


def window(*op_types: type[Operation], supports=None, dims=None):
    """Register ``fn(emitter, op) -> lines declaring y`` for ``op_types``."""
    return _register(WINDOW, op_types, supports, dims)
