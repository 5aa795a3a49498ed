"""``collage-partition``: cost-driven partitioning across backends (TVM's Collage).

A thin wrapper over :func:`partita.transforms.collage.partitioner.collage_partition`: candidates
from the backends' pattern tables and native fusion, the cheapest cover under a cost
model, chosen BYOC candidates outlined (equal ones share ``collage_<backend>_<k>``).

Options:

* ``targets``: the target list (any order), e.g. ``"cutlass,cublas,cudnn,cuda,llvm"``.
* ``cost``: ``roofline`` (device spec, deterministic), ``measure`` (compiles ``cutlass``
  and native ``cuda`` candidates and times them on the CUDA device, see
  ``partita.transforms.collage.measure``; candidates of other targets get the roofline cost; without
  a device it is an error, never a silent change of cost model), or ``mock`` with
  ``costs="llvm=1,cutlass=2"`` (cost per candidate by label, else by target; for tests).
* ``device``: the roofline device (``h100``, ``a100``, ``h200``); with ``cost=measure``,
  the model for the candidates that are not measured.
* ``dynamic-dim``: the size assumed for dynamic dimensions (roofline and measured inputs).
* ``cache-dir``: the cubin cache of ``cost=measure`` (default ``$PARTITA_CACHE_DIR``).
* ``max-depth``: native fusion group size and combined-candidate depth.
* ``cache``: a JSON file of costs keyed by structural hash and target (a second run
  estimates nothing, so with ``cost=measure`` it compiles and launches nothing). Without
  it, ``cost=measure`` still keeps its costs in memory for the run, so equal candidates
  (the same layer repeated) are measured once.
* ``native``: where ops no backend takes may run: ``auto`` (where the function runs:
  the default device's primary target, else the host), ``none`` (every op must go to a
  backend; an op none can run is an error at the op), or a list of native kinds.
* ``fallback-device``: device type of ops no backend takes (``cpu`` is TVM's default;
  by default the only device type besides the host, see ``CompilationConfig``).
* ``coalesce``: MaxCoalesce after the search (default true): adjacent chosen groups of
  one target merge when the target's rule allows it and the merge is cheaper.
* ``combine``: backends whose matches are combined arbitrarily, whatever partition rule
  they declared (default: none; each backend's own rule, see ``partita.backends``).
* ``report``: print the report (and the eager partitioner's total) to stderr.
* ``baseline``: also cost the eager partitioner's plan (implied by ``report``).

Each run's report is kept by the pass instance that made it (``CollagePartition.reports``,
``last_report``), so the compile driver reads it from the pipeline it ran. ``cost=measure``
times candidates on the pass's ``measure_device`` when its owner gives one (left open: the
owner closes it), else on a CUDA device the run opens and closes itself.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from partita.collage.cost import CostCache, CostEstimator, KernelFamily, MockEstimator, RooflineEstimator
from partita.ir import PartitaError
from partita.runtime.contracts import TimingDevice
from partita.transforms.collage.families import kernel_families
from partita.transforms.collage.measure import CandidateTimer, measuring_estimator, open_timing_device
from partita.transforms.collage.partitioner import CollageReport, collage_partition, parse_config
from partita.transforms.partition_utils import func_bodies

__all__ = ["CollagePartition", "make_estimator"]


def _items(value: str | tuple[str, ...] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = tuple(value.split(","))
    return [v.strip() for v in value if v.strip()]


def parse_costs(value: str | tuple[str, ...] | None) -> dict[str, float]:
    """``"llvm=1,cutlass=2"`` (or its tuple form) -> ``{"llvm": 1.0, "cutlass": 2.0}``."""
    costs: dict[str, float] = {}
    for item in _items(value):
        key, sep, number = item.partition("=")
        try:
            if not sep or not key.strip():
                raise ValueError
            costs[key.strip()] = float(number)
        except ValueError:
            raise PartitaError(f"collage-partition: invalid mock cost '{item}' (expected name=number)") from None
    return costs


def _roofline(device: str, dynamic_dim: int, families: Mapping[str, KernelFamily] | None = None) -> RooflineEstimator:
    if dynamic_dim < 1:
        raise PartitaError(f"collage-partition: dynamic-dim must be >= 1, got {dynamic_dim}")
    try:
        return RooflineEstimator(device, dynamic_dim_hint=dynamic_dim, families=families)
    except ValueError as err:
        raise PartitaError(f"collage-partition: {err}") from None


def make_estimator(
    cost: str = "roofline",
    device: str = "h100",
    costs: str | tuple[str, ...] | None = None,
    cache: str | None = None,
    *,
    dynamic_dim: int = 1,
    cache_dir: str | None = None,
    measure_device: TimingDevice | None = None,
    families: Mapping[str, KernelFamily] | None = None,
) -> CostEstimator:
    """The estimator named by the pass options, wrapped in a persistent cache if asked.
    ``cost=measure`` needs ``measure_device``, the device to time candidates on;
    ``families``: the kernel families of the roofline (``kernel_families``)."""
    estimator: CostEstimator
    if cost == "roofline":
        estimator = _roofline(device, dynamic_dim, families)
    elif cost == "mock":
        table = parse_costs(costs)
        if not table:
            raise PartitaError("collage-partition: cost=mock needs costs=\"target=cost,...\"")
        estimator = MockEstimator(table)
    elif cost == "measure":
        fallback = _roofline(device, dynamic_dim, families)  # the options are checked before the device is opened
        if measure_device is None:
            raise PartitaError("collage-partition: cost=measure needs a device to measure on")
        timer = CandidateTimer(measure_device, cache_dir=cache_dir or None, dynamic_dim=dynamic_dim)
        estimator = measuring_estimator(timer, fallback)
        if not cache:
            estimator = CostCache(None, estimator)  # measure each distinct candidate once per run
    else:
        raise PartitaError(f"collage-partition: unknown cost model '{cost}'; expected roofline, measure or mock")
    if cache:
        estimator = CostCache(cache, estimator)
    return estimator


@dataclass(frozen=True)
class CollagePartition(ModulePass):
    """Partitions ``@main`` (every function with a body) by least estimated cost."""

    name = "collage-partition"

    targets: str | tuple[str, ...] = "cutlass,cublas,cudnn,cuda,llvm"
    cost: str = "roofline"
    device: str = "h100"
    max_depth: int = 3
    cache: str = ""
    costs: str | tuple[str, ...] = ""
    native: str | tuple[str, ...] = "auto"
    combine: str | tuple[str, ...] = ""
    report: bool = False
    baseline: bool = False
    dynamic_dim: int = 1
    cache_dir: str = ""
    fallback_device: str = ""
    coalesce: bool = True
    measure_device: TimingDevice | None = field(default=None, compare=False, repr=False)
    """The device ``cost=measure`` times candidates on, owned (and closed) by whoever
    made the pass; ``None``: each run opens the first CUDA device and closes it."""
    reports: list[CollageReport] = field(default_factory=list, init=False, compare=False, repr=False)
    """The report of each run of this pass, oldest first."""

    @property
    def last_report(self) -> CollageReport | None:
        return self.reports[-1] if self.reports else None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        func_bodies(op)  # refuses multi-block functions, located, before any costing
        with ExitStack() as stack:
            self.reports.append(self._partition(ctx, op, stack))
        if self.report:
            print(self.reports[-1].format(), file=sys.stderr)

    def _partition(self, ctx: Context, op: ModuleOp, stack: ExitStack) -> CollageReport:
        device = self.measure_device
        if self.cost == "measure" and device is None:
            _roofline(self.device, self.dynamic_dim)  # the options are checked before the device is opened
            device = open_timing_device(stack, "collage-partition: cost=measure", "use cost=roofline")
        config = parse_config(_items(self.targets), self.fallback_device or None)
        estimator = make_estimator(
            self.cost, self.device, self.costs, self.cache or None,
            dynamic_dim=self.dynamic_dim, cache_dir=self.cache_dir or None, measure_device=device,
            families=kernel_families(config),
        )
        return collage_partition(
            op,
            config,
            estimator,
            self.max_depth,
            combine=_items(self.combine) or None,
            native=self.native,
            baseline=self.report or self.baseline,
            coalesce=self.coalesce,
            ctx=ctx,
        )
