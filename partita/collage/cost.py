"""Cost estimation for Collage candidates.

* :class:`RooflineEstimator` -- analytical, deterministic, needs no GPU.
* :class:`MeasuringEstimator` -- times candidates on a real device through a
  callback supplied by the lowering layer.
* :class:`CostCache` -- persistent JSON cache keyed by :func:`structural_key`.
* :class:`MockEstimator` -- fixed costs for tests.

All estimators return seconds and have a ``name`` used in cache keys.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from math import prod
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from partita.collage.graph import DataflowGraph, NodeInfo, TensorInfo, bits
from partita.collage.kinds import node_kind, op_family
from partita.collage.search import Candidate
from partita.dialects.nn import OpKind
from partita.files import write_atomically
from partita.lowering.cuda.records import split_k_slices

__all__ = [
    "CostCache",
    "CostEstimator",
    "KernelFamily",
    "MeasuringEstimator",
    "MockEstimator",
    "RooflineEstimator",
    "device_spec",
    "host_copy_time",
    "load_devices",
    "node_flops",
    "op_class",
    "structural_key",
]


@runtime_checkable
class CostEstimator(Protocol):
    """Estimates the run time in seconds of a candidate on its target."""

    name: str

    def estimate(self, graph: DataflowGraph, candidate: Candidate) -> float: ...


# ------------------------------------------------------------------ devices
@cache
def _load_default_devices() -> dict[str, Any]:
    text = resources.files("partita.collage").joinpath("devices.json").read_text()
    return json.loads(text)


def load_devices(path: str | Path | None = None) -> dict[str, Any]:
    """The device/host/backend specs (``devices.json`` shipped with the package)."""
    if path is None:
        return _load_default_devices()
    return json.loads(Path(path).read_text())


# ------------------------------------------------------------------- FLOPs
def op_class(node: NodeInfo | str) -> str:
    """``gemm``, ``conv``, ``elementwise``, ``reduction``, ``data`` or ``other``: the
    node's pattern kind (its op's ``OpPattern`` trait), a complex op split by family."""
    if isinstance(node, str):
        node = NodeInfo(node, (), (), TensorInfo((), "f32"))
    kind = node_kind(node)
    if kind == OpKind.OUT_EWISE_FUSABLE:
        return "conv" if op_family(node) == "conv" else "gemm"
    if kind <= OpKind.BROADCAST:
        return "elementwise"
    if kind == OpKind.COMM_REDUCE:
        return "reduction"
    if kind == OpKind.INJECTIVE:
        return "data"
    return "other"


def _kernel_out_channels_axis(node: NodeInfo) -> int:
    layout = str(node.attrs.get("kernel_layout", "OIHW"))
    return layout.index("O") if "O" in layout else 0


def node_flops(node: NodeInfo, dynamic_dim_hint: int = 1) -> float:
    """Approximate floating-point operations of one node."""
    h = dynamic_dim_hint
    out = node.out_type.numel(h)
    cls = op_class(node)
    family = op_family(node)
    if node.op == "nn.attention" and len(node.in_types) >= 3:
        # Q·Kᵀ and P·V (2 FLOPs a multiply-add each) plus the softmax, per score.
        q, k = node.in_types[0].concrete_shape(h), node.in_types[1].concrete_shape(h)
        kv_len = k[1] if node.attrs.get("layout") == "BSHD" else k[2]
        rows = node.in_types[0].numel(h) / max(1, q[-1])
        return rows * kv_len * (2.0 * q[-1] + 2.0 * out / max(1, rows) + 5.0)
    if cls == "gemm":
        k = node.in_types[0].concrete_shape(h)[-1] if node.in_types and node.in_types[0].shape else 1
        return 2.0 * out * k
    if cls == "conv":
        # 2*N*P*Q*K*R*S*C/groups = 2 * numel(out) * numel(weight) / K, weight = (K, C/g, R, S)
        if len(node.in_types) >= 2 and node.in_types[1].shape:
            w = node.in_types[1]
            ws = w.concrete_shape(h)
            k = ws[_kernel_out_channels_axis(node) % len(ws)] or 1
            return 2.0 * out * (w.numel(h) / k)
        return 2.0 * out
    if family == "normalization":  # statistics, then a scale per element
        return 5.0 * out
    if cls == "reduction" and family == "conv" and ("pool_size" in node.attrs or "window" in node.attrs):
        ps = node.attrs.get("pool_size", node.attrs.get("window", (1,)))
        win = 1
        for d in (ps if isinstance(ps, (list, tuple)) else (ps,)):
            win *= int(d)
        return float(out * win)
    if cls == "reduction":  # every input element read once
        return float(node.in_types[0].numel(h)) if node.in_types else float(out)
    if cls == "data":
        return 0.0
    return float(out)  # element-wise and opaque ops: one op per output element


def _candidate_bytes(graph: DataflowGraph, mask: int, h: int) -> float:
    """Bytes read from outside the candidate plus bytes of results leaving it.

    Internal edges are free (that is what fusion saves).  Values produced by a
    node outside the candidate are counted once even if used several times.
    """
    total = 0.0
    ext: set[int] = set()
    for v in bits(mask):
        node = graph.nodes[v]
        total += sum(t.nbytes(h) for t in node.in_types)
        for p in node.inputs:  # one entry per operand produced by a node
            total -= graph.nodes[p].out_type.nbytes(h)
            if not (mask >> p & 1):
                ext.add(p)
    total += sum(graph.nodes[p].out_type.nbytes(h) for p in ext)
    for v in graph.output_nodes(mask):
        total += graph.nodes[v].out_type.nbytes(h)
    return max(total, 0.0)


# ------------------------------------------------------------ host copies
def host_copy_time(graph: DataflowGraph, candidate: Candidate, device: Mapping[str, Any]) -> float:
    """Seconds to copy a host placement's operands from the device and its results back,
    when the caller runs on the device: every operand read from outside the candidate
    (weights included: the runtime keeps constants on the device) and every result leaving
    it crosses the host link, each copy paying the link's latency."""
    link = device["host_link"]
    mask = candidate.mask
    nbytes = 0.0
    copies = 0
    for v in bits(mask):
        node = graph.nodes[v]
        inside = [p for p in node.inputs if mask >> p & 1]
        nbytes += sum(t.nbytes() for t in node.in_types) - sum(graph.nodes[p].out_type.nbytes() for p in inside)
        copies += len(node.in_types) - len(inside)
    for v in graph.output_nodes(mask):
        nbytes += graph.nodes[v].out_type.nbytes()
        copies += 1
    return max(nbytes, 0.0) / link["bandwidth"] + copies * link["latency"]


def device_spec(estimator: Any, default: str = "h100") -> Mapping[str, Any]:
    """The device spec an estimator models (a roofline, possibly inside a cache or as a
    measuring estimator's fallback); the default device's spec otherwise."""
    seen = 0
    while estimator is not None and seen < 8:
        dev = getattr(estimator, "dev", None)
        if isinstance(dev, Mapping):
            return dev
        estimator = getattr(estimator, "inner", None) or getattr(estimator, "fallback", None)
        seen += 1
    return load_devices()["devices"][default]


# ---------------------------------------------------------------- roofline
@dataclass(frozen=True)
class KernelFamily:
    """Which of a target's backend specs (``devices.json``) costs a candidate: the kernel
    family its codegen would build for it (CUTLASS's Hopper TMA + wgmma kernels on
    ``sm_90a``, its Sm80 ones for what those do not take). ``choose`` names one of ``specs``."""

    name: str
    specs: tuple[str, ...]
    choose: Callable[[DataflowGraph, Candidate], str]

    def __call__(self, graph: DataflowGraph, candidate: Candidate) -> str:
        spec = self.choose(graph, candidate)
        assert spec in self.specs, spec
        return spec


class RooflineEstimator:
    """Analytical roofline model: ``max(compute, memory) + launch overhead``.

    Compute time sums, per node, ``flops / (peak(dtype) * efficiency(backend,
    op class))``; GEMM-like ops (dense/matmul/conv) of a dtype with tensor-core
    support on a backend with ``tensor_cores`` (``true``, or the op classes and
    types it names) use the tensor-core peak, every other op the CUDA-core peak;
    a backend of fixed GEMM tiles (``gemm_tile``) reaches only the share of the
    device its tiles fill (``_filled``: wave quantization).  Memory time is the candidate's external
    traffic over ``bandwidth * bandwidth_efficiency``.  Each GPU candidate is one
    kernel launch; host (``kind: host``, e.g. ``llvm``) candidates use the
    device's host CPU spec and no launch overhead.  The target of a candidate is
    the backend name (``candidate.target``).
    """

    def __init__(
        self,
        device: str = "h100",
        *,
        dynamic_dim_hint: int = 1,
        specs: Mapping[str, Any] | None = None,
        specs_path: str | Path | None = None,
        families: Mapping[str, KernelFamily] | None = None,
    ) -> None:
        self.specs = dict(specs) if specs is not None else load_devices(specs_path)
        devices = self.specs["devices"]
        if device not in devices:
            raise ValueError(f"unknown device {device!r}; known: {sorted(devices)}")
        self.device = device
        self.dev = devices[device]
        self.host = self.specs["hosts"][self.dev["host"]]
        self.backends = self.specs["backends"]
        self.dynamic_dim_hint = dynamic_dim_hint
        self.families = dict(families or {})
        for family in self.families.values():
            for name in family.specs:
                self._backend(name)  # every spec a family names is in the file
        named = "".join(f":{target}={family.name}" for target, family in sorted(self.families.items()))
        # the specs' digest: a persistent cost cache keyed by this name forgets estimates
        # made from other figures
        digest = hashlib.sha256(json.dumps(self.specs, sort_keys=True).encode()).hexdigest()[:8]
        self.name = f"roofline:{device}:h{dynamic_dim_hint}{named}:{digest}"

    def _backend(self, target: str) -> Mapping[str, Any]:
        be = self.backends.get(target)
        if be is None:
            raise ValueError(f"unknown backend {target!r}; known: {sorted(self.backends)}")
        return be

    def _filled(self, be: Mapping[str, Any], node: NodeInfo, flops: float) -> tuple[float, int, int]:
        """The share of the device a backend's fixed GEMM tiles keep busy (``gemm_tile``
        outputs a side, ``gemm_blocks_per_sm`` of them an SM), the K slices it splits them
        into and the tiles: a product of few tiles takes up to ``gemm_split_k`` slices,
        chosen as the kernel's record chooses them at launch (``split_k_slices``, on this
        device's slots), then the blocks over the slots of the waves they take. (1, 1, 0)
        for a backend without fixed tiles."""
        tile, per_sm, sms = be.get("gemm_tile"), be.get("gemm_blocks_per_sm", 1), self.dev.get("sms")
        out = node.out_type.concrete_shape(self.dynamic_dim_hint)
        if not tile or not sms or len(out) < 2 or not prod(out):
            return 1.0, 1, 0
        # nn.dense flattens its leading axes into rows; the others batch them
        batch, rows = (1, prod(out[:-1])) if node.op == "nn.dense" else (prod(out[:-2]), out[-2])
        tiles = batch * -(-rows // tile) * -(-out[-1] // tile)
        slots = sms * per_sm
        k = int(flops / (2 * prod(out)))  # a GEMM's 2 M N K
        slices = split_k_slices(tiles, k, slots, be.get("gemm_split_k", 1))
        blocks = tiles * slices
        return blocks / (-(-blocks // slots) * slots), slices, tiles

    def _rate(self, be: Mapping[str, Any], node: NodeInfo, cls: str) -> tuple[float, bool]:
        """The peak FLOP/s ``node`` runs at on backend ``be``, and whether on tensor cores."""
        dtype = (node.in_types[0].dtype if node.in_types else node.out_type.dtype)
        if be.get("kind") == "host":
            table = self.host["flops"]
            return table.get(dtype, table["f32"]), False
        # IMMA multiplies u8 and s8 at one rate, FP8 tensor cores E4M3 and E5M2: the sheets
        # list them as i8 and f8
        key = "i8" if dtype == "ui8" else "f8" if dtype.startswith("f8") else dtype
        tensor_cores = be.get("tensor_cores")
        # true: every GEMM and convolution of a type the device multiplies on tensor cores;
        # a mapping: only the classes and types it names (the native tiles: f16 / bf16 /
        # 8-bit GEMMs, not f32 GEMMs nor convolutions)
        if tensor_cores is True and cls in ("gemm", "conv") or (
                isinstance(tensor_cores, Mapping) and key in tensor_cores.get(cls, ())):
            # A backend whose kernels run a type on another's units (CUTLASS's Sm89 FP8
            # kernels: f16 HMMA on Hopper) is costed at that type's peak.
            key = be.get("tensor_peak_as", {}).get(key, key)
            peak = self.dev["tensor_flops"].get(key)
            if peak is not None:
                return peak, True
        table = self.dev["cuda_core_flops"]
        return table.get(dtype, table["f32"]), False

    def breakdown(self, graph: DataflowGraph, candidate: Candidate) -> dict[str, float]:
        """flops, bytes, compute/memory/launch times and the total time. Reshapes alone
        cost nothing: they become buffer aliases, not kernels (``fuse-native-kernels``)."""
        family = self.families.get(candidate.target)
        be = self._backend(family(graph, candidate) if family is not None else candidate.target)
        if all(graph.nodes[v].op == "nn.reshape" for v in candidate.nodes):
            return dict.fromkeys(("flops", "bytes", "compute_time", "memory_time", "launch_overhead", "time"), 0.0)
        h = self.dynamic_dim_hint
        eff = be["efficiency"]
        flops = compute = 0.0
        split_bytes, split_launches = 0.0, 0
        for v in sorted(candidate.nodes):
            node = graph.nodes[v]
            f = node_flops(node, h)
            if f:
                cls = op_class(node)
                flops += f
                peak, tensor = self._rate(be, node, cls)
                if tensor and cls == "gemm":
                    filled, slices, tiles = self._filled(be, node, f)
                    peak *= filled
                    if slices > 1:  # the partial tiles (f32) written and read again, a launch more
                        split_bytes += 2 * 4 * tiles * slices * be["gemm_tile"] ** 2
                        split_launches += 1
                compute += f / (peak * eff.get(cls, eff["other"]))
        nbytes = _candidate_bytes(graph, candidate.mask, h) + split_bytes
        host = be.get("kind") == "host"
        bw = (self.host if host else self.dev)["mem_bandwidth"] * be.get("bandwidth_efficiency", 1.0)
        memory = nbytes / bw
        launch = be.get("launch_overhead", 0.0 if host else self.dev["launch_overhead"]) * (1 + split_launches)
        return {
            "flops": flops,
            "bytes": nbytes,
            "compute_time": compute,
            "memory_time": memory,
            "launch_overhead": launch,
            "time": max(compute, memory) + launch,
        }

    def estimate(self, graph: DataflowGraph, candidate: Candidate) -> float:
        return self.breakdown(graph, candidate)["time"]


# --------------------------------------------------------------- measuring
class MeasuringEstimator:
    """Times candidates on a real device.

    ``build_and_time(graph, candidate)`` is provided by the lowering layer: it
    compiles the candidate, runs it N times with CUDA events and returns the
    median in seconds (or the list of timings, whose median is taken here).
    This estimator is only meant to be used when a device exists: the
    ``available()`` check is injected (e.g. "a CUDA device is present").  When
    it is false, ``fallback`` (e.g. a :class:`RooflineEstimator`) is used if
    given, otherwise :meth:`estimate` raises ``RuntimeError``.  Wrap it in a
    :class:`CostCache` so that a second compilation measures nothing.
    """

    def __init__(
        self,
        build_and_time: Callable[[DataflowGraph, Candidate], float | Sequence[float]],
        *,
        available: Callable[[], bool] | None = None,
        fallback: CostEstimator | None = None,
        name: str = "measured",
    ) -> None:
        self.build_and_time = build_and_time
        self._available = available
        self.fallback = fallback
        self.name = name
        self.calls = 0

    def available(self) -> bool:
        return True if self._available is None else bool(self._available())

    def estimate(self, graph: DataflowGraph, candidate: Candidate) -> float:
        if not self.available():
            if self.fallback is not None:
                return self.fallback.estimate(graph, candidate)
            raise RuntimeError("MeasuringEstimator: no device available to time candidates on")
        self.calls += 1
        r = self.build_and_time(graph, candidate)
        if isinstance(r, (int, float)):
            return float(r)
        return float(statistics.median(r))


# -------------------------------------------------------------------- mock
class MockEstimator:
    """Fixed costs for tests.

    ``costs`` maps a label or a target to a cost (the label wins), or is a
    callable ``(graph, candidate) -> float``.  ``calls`` counts estimates.
    """

    def __init__(
        self,
        costs: Mapping[str, float] | Callable[[DataflowGraph, Candidate], float],
        default: float | None = None,
        name: str = "mock",
    ) -> None:
        self.costs = costs
        self.default = default
        self.name = name
        self.calls = 0

    def estimate(self, graph: DataflowGraph, candidate: Candidate) -> float:
        self.calls += 1
        if callable(self.costs):
            return float(self.costs(graph, candidate))
        if candidate.label in self.costs:
            return float(self.costs[candidate.label])
        if candidate.target in self.costs:
            return float(self.costs[candidate.target])
        if self.default is not None:
            return float(self.default)
        raise KeyError(f"MockEstimator has no cost for {candidate!r}")


# ------------------------------------------------------------------- cache
def _type_key(t: TensorInfo) -> list[Any]:
    return [list(t.shape), t.dtype]


def structural_key(graph: DataflowGraph, candidate: Candidate) -> str:
    """Hash of the candidate's structure, independent of absolute node ids.

    Covers, per node in topological order: op name, attrs, operand and result
    types, internal edges (as indices relative to the candidate), which
    external producer (numbered by first use) feeds it, and whether its result
    leaves the candidate.  Equal sub-graphs at different places share a key.
    (Isomorphic sub-graphs whose nodes are ordered differently may get
    different keys; that only costs a cache miss.)
    """
    nodes = sorted(candidate.nodes)
    rel = {v: i for i, v in enumerate(nodes)}
    ext: dict[int, int] = {}
    mask = candidate.mask
    leaving = set(graph.output_nodes(mask))
    desc = []
    for v in nodes:
        n = graph.nodes[v]
        ins = []
        for p in n.inputs:
            if p in rel:
                ins.append(rel[p])
            else:
                ins.append(f"x{ext.setdefault(p, len(ext))}")
        desc.append(
            [
                n.op,
                dict(sorted((str(k), repr(a)) for k, a in n.attrs.items())),
                [_type_key(t) for t in n.in_types],
                _type_key(n.out_type),
                ins,
                v in leaving,
            ]
        )
    text = json.dumps(desc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class CostCache:
    """Persistent cost cache wrapping another estimator.

    Entries are keyed by ``inner.name``, the candidate's target and label, and
    :func:`structural_key`.  With a ``path``, the cache is loaded from that
    JSON file and rewritten atomically (temporary file + ``os.replace``) after
    every miss (``autosave``) or on :meth:`save`.  ``hits``/``misses`` count
    look-ups; a miss calls ``inner.estimate``.
    """

    VERSION = 1

    def __init__(self, path: str | Path | None, inner: CostEstimator, *, autosave: bool = True) -> None:
        self.path = Path(path) if path is not None else None
        self.inner = inner
        self.autosave = autosave
        self.name = getattr(inner, "name", type(inner).__name__)
        self.hits = 0
        self.misses = 0
        self.entries: dict[str, float] = {}
        self._dirty = False
        if self.path is not None and self.path.exists():
            try:
                data = json.loads(self.path.read_text())
                if data.get("version") == self.VERSION:
                    self.entries = {str(k): float(x) for k, x in data["entries"].items()}
            except (OSError, ValueError, KeyError, AttributeError, TypeError):
                self.entries = {}  # unreadable cache: start afresh, overwrite on save

    def key(self, graph: DataflowGraph, candidate: Candidate) -> str:
        return f"{self.name}|{candidate.target}|{candidate.label}|{structural_key(graph, candidate)}"

    def __len__(self) -> int:
        return len(self.entries)

    def estimate(self, graph: DataflowGraph, candidate: Candidate) -> float:
        k = self.key(graph, candidate)
        x = self.entries.get(k)
        if x is not None:
            self.hits += 1
            return x
        self.misses += 1
        x = float(self.inner.estimate(graph, candidate))
        self.entries[k] = x
        self._dirty = True
        if self.autosave:
            self.save()
        return x

    def save(self) -> None:
        """Write the cache file atomically (no-op without a path or changes)."""
        if self.path is None or not self._dirty:
            return
        payload = json.dumps({"version": self.VERSION, "entries": self.entries}, sort_keys=True, indent=0)
        write_atomically(self.path, payload, durable=True, parents=True)
        self._dirty = False

    def __enter__(self) -> CostCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.save()
