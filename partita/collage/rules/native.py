"""The rules of the native targets: what the caller's own target fuses and runs.

* :func:`cuda_rule`: the native ``cuda`` target, by-kind fusion over the kinds the native
  fuser gives ops (:func:`cuda_kind`, from ``fuse-native-kernels``' own predicates
  ``is_anchor`` / ``is_fusable``, so an op the fuser learns is a candidate here too): an
  anchor (GEMM, row reduction, pool) takes an element-wise epilogue, injective ops chain,
  one exit, no taps, at most ``max_depth`` ops a group. Ops the fuser cannot put in a
  kernel run on the host inside the caller: they get ``Host`` candidates, which the search
  charges the device-host copies.
* :func:`host_rule`: a caller on the host fuses any op by kind (TVM's default rule).
"""

from __future__ import annotations

from partita.collage.graph import DataflowGraph
from partita.collage.rules.base import PartitionRule, RuleContext
from partita.collage.rules.combine import Combine
from partita.collage.rules.host import Host
from partita.collage.rules.kind import OpKind, default_op_kind
from partita.collage.rules.only_valid import OnlyValid, SubGraphConfig
from partita.collage.rules.op_call_by_kind import OpCallByKind
from partita.collage.rules.styles import tvm_combiners
from partita.collage.rules.union import Union
from partita.lowering.cuda import fusion

__all__ = ["cuda_kind", "cuda_rule", "host_rule", "native_rule"]


def cuda_kind(graph: DataflowGraph, v: int) -> OpKind:
    """The kind of node ``v`` for the native CUDA fuser (needs the graph's IR ops): an op
    that anchors a kernel takes an epilogue, one no kernel computes is opaque, the others
    keep their declared kind. (The predicates are read through the fusion module, so a
    test or a new anchor that patches them is seen here too.)"""
    op = graph.ops[v]  # type: ignore[attr-defined]  (an OpGraph)
    if fusion.is_anchor(op):
        return OpKind.OUT_EWISE_FUSABLE
    if not fusion.is_fusable(op):
        return OpKind.OPAQUE
    return default_op_kind(graph, v)


def _fuses(max_depth: int, target: str, kind_of, max_kind: OpKind) -> PartitionRule:
    seeds = OpCallByKind(target, kind_of=kind_of, max_kind=max_kind)
    combined = Combine(seeds, tvm_combiners(), max_depth=max_depth, max_nodes=max_depth, kind_of=kind_of,
                       suffix="fused")
    return OnlyValid(combined, SubGraphConfig(max_depth=max_depth, max_exits=1, allow_taps=False))


def cuda_rule(max_depth: int, host: str = "llvm", target: str = "cuda") -> PartitionRule:
    def on_host(ctx: RuleContext, v: int) -> bool:
        return cuda_kind(ctx.graph, v) == OpKind.OPAQUE

    return Union(_fuses(max_depth, target, cuda_kind, OpKind.OUT_EWISE_FUSABLE), Host(host, supports=on_host))


def host_rule(max_depth: int, target: str = "llvm") -> PartitionRule:
    return _fuses(max_depth, target, default_op_kind, OpKind.OPAQUE)


def native_rule(target: str, max_depth: int, host: str = "llvm") -> PartitionRule:
    """The rule of a native target kind: ``cuda``'s own, by-kind fusion for the others."""
    if target == "cuda":
        return cuda_rule(max_depth, host)
    return host_rule(max_depth, target)
