"""Slices of the IR: the ops a value is computed from."""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

__all__ = ["producers"]


def producers(value: SSAValue) -> list[Operation]:
    """The ops ``value`` is computed from, its own first, then depth first through their
    operands (each once; block arguments end the walk), so an op comes before the ops it
    reads."""
    seen: list[Operation] = []
    pending = [value]
    while pending:
        v = pending.pop()
        if isinstance(v.owner, Operation) and v.owner not in seen:
            seen.append(v.owner)
            pending.extend(v.owner.operands)
    return seen
