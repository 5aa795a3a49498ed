"""Where every partition went: the table ``Executable.report()`` and ``partita-run
--report`` show."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PartitionRow:
    symbol: str
    target: str
    ops: tuple[str, ...]
    composite: str | None = None
    cost: float | None = None
    """Estimated seconds (roofline) on the target."""
    bound: str | None = None
    """What bounds the estimate: ``compute``, ``memory`` or ``launch`` (a kernel whose work
    takes less than its launch overhead, as every kernel of a small model does)."""
    kernel: str | None = None
    """Name of the compiled kernel implementing the partition, when there is one."""
    calls: int = 1
    """Call sites of the function: equal layers share one function, each call runs it."""

    def with_kernel(self, kernel: str | None) -> PartitionRow:
        return dataclasses.replace(self, kernel=kernel)

    @property
    def op_summary(self) -> str:
        counts = Counter(op.removeprefix("nn.") for op in self.ops)
        return ", ".join(f"{name}" + (f" x{n}" if n > 1 else "") for name, n in counts.items())


def format_cost(row: PartitionRow) -> str:
    """A row's estimated time and what bounds it."""
    text = format_seconds(row.cost)
    return text if row.bound is None or row.cost is None else f"{text} ({row.bound})"


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


@dataclass(frozen=True)
class Report:
    rows: list[PartitionRow]
    collage_total: float | None = None
    eager_total: float | None = None
    """Estimated cost of the eager partitioner's plan on the same graph."""
    pipeline: str = ""
    execution: str = ""
    cache_hits: int = 0
    compiles: int = 0
    pass_times: list[tuple[str, float]] = dataclasses.field(default_factory=list)

    @property
    def partitions(self) -> list[PartitionRow]:
        """Rows of compiled functions (not what is left in the host program)."""
        return [row for row in self.rows if not row.symbol.startswith("(")]

    @property
    def total_cost(self) -> float:
        """Every call site counted: a function called by twelve layers costs twelve times."""
        return sum((row.cost or 0.0) * row.calls for row in self.rows)

    def table(self) -> str:
        header = ["partition", "target", "ops", "est. cost", "calls", "kernel"]
        rows = [
            [r.symbol, r.target, r.op_summary, format_cost(r), str(r.calls), r.kernel or "-"]
            for r in self.rows
        ]
        return format_table(header, rows) if rows else "(no partitions: everything runs on the host)"

    def __str__(self) -> str:
        lines = [self.table(), ""]
        lines.append(f"partitions: {len(self.partitions)}, estimated total {format_seconds(self.total_cost)}")
        if self.collage_total is not None:
            eager = format_seconds(self.eager_total) if self.eager_total is not None else "n/a"
            lines.append(f"collage estimate for the whole graph: {format_seconds(self.collage_total)} (eager partitioner: {eager})")
        # NVRTC programs (one cubin each, holding many kernels), not kernels: the
        # execution line below counts kernels.
        lines.append(f"cubins: {self.compiles} compiled by NVRTC, {self.cache_hits} from the cache")
        if self.execution:
            lines.append(f"execution: {self.execution}")
        if self.pass_times:
            lines.append("passes: " + ", ".join(f"{name} {seconds:.2f}s" for name, seconds in self.pass_times))
        return "\n".join(lines)
