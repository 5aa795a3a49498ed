"""The three BYOC fusion styles as rules (TVM's ``BYOCStyle``), and TVM's default style of a
backend that declares none.

* ``pattern``: each pattern match is one kernel, never combined (CUTLASS, cuBLAS, cuDNN:
  a union of two of their patterns is nothing their codegen can compile);
* ``tvm``: matches are combined the way TVM's FuseOps fuses (an anchor takes its
  element-wise epilogue, injective ops chain), one exit and no taps;
* ``arbitrary``: any touching matches combine (backends that compile whole sub-graphs,
  like TensorRT), still one exit and no taps.
"""

from __future__ import annotations

from partita.backends import FUSION_STYLES, Backend
from partita.collage.rules.base import PartitionRule
from partita.collage.rules.combine import Combine
from partita.collage.rules.combiners import (
    AllSimple,
    ByKind,
    Combiner,
    TupleArg,
    TupleProj,
)
from partita.collage.rules.composite import Composite
from partita.collage.rules.kind import KindFn, OpKind, default_op_kind
from partita.collage.rules.only_valid import OnlyValid, SubGraphConfig
from partita.collage.rules.pattern import DFPattern
from partita.collage.rules.primitive import Primitive

__all__ = [
    "FUSION_STYLES",
    "backend_rule",
    "arbitrary_fusion_rule",
    "default_style",
    "pattern_rule",
    "style_rule",
    "tvm_combiners",
    "tvm_fusion_rule",
]



def tvm_combiners() -> list[Combiner]:
    """FuseOps' rules: an out-element-wise-fusable set takes (broadcasting) element-wise
    consumers, injective sets chain, tuples gather injective arguments, projections join
    their producer."""
    return [
        AllSimple(ByKind(OpKind.OUT_EWISE_FUSABLE, OpKind.BROADCAST), ByKind(OpKind.INJECTIVE, OpKind.INJECTIVE)),
        TupleArg(),
        TupleProj(),
    ]


def _kernel_config(max_depth: int) -> SubGraphConfig:
    return SubGraphConfig(max_depth=max_depth, max_exits=1, allow_taps=False)


def pattern_rule(backend: str) -> PartitionRule:
    return Primitive(Composite(DFPattern(backend)))


def tvm_fusion_rule(backend: str, max_depth: int, kind_of: KindFn = default_op_kind) -> PartitionRule:
    combined = Combine(Composite(DFPattern(backend)), tvm_combiners(), max_depth=max_depth, kind_of=kind_of)
    return Primitive(OnlyValid(combined, _kernel_config(max_depth)))


def arbitrary_fusion_rule(backend: str, max_depth: int) -> PartitionRule:
    anything = ByKind(OpKind.OPAQUE, OpKind.OPAQUE)
    combined = Combine(Composite(DFPattern(backend)), [anything], max_depth=max_depth)
    return Primitive(OnlyValid(combined, _kernel_config(max_depth)))


def default_style(backend: str) -> str:
    """TVM's ``DefaultBYOCFusionStyleForCompiler``: pattern-only for the kernel libraries,
    TVM-style fusion for TensorRT, arbitrary fusion for any other compiler."""
    if backend in ("cutlass", "cublas", "cudnn"):
        return "pattern"
    if backend == "tensorrt":
        return "tvm"
    return "arbitrary"


def style_rule(backend: str, style: str, max_depth: int) -> PartitionRule:
    if style == "pattern":
        return pattern_rule(backend)
    if style == "tvm":
        return tvm_fusion_rule(backend, max_depth)
    if style == "arbitrary":
        return arbitrary_fusion_rule(backend, max_depth)
    raise ValueError(f"unknown fusion style '{style}' (choose from {', '.join(FUSION_STYLES)})")


def backend_rule(backend: Backend, max_depth: int) -> PartitionRule:
    """The Collage partition rule ``backend`` declared (a style or a function), or TVM's
    default style for its name."""
    spec = backend.partition_rule if backend.partition_rule is not None else default_style(backend.name)
    if isinstance(spec, str):
        return style_rule(backend.name, spec, max_depth)
    return spec(backend.name, max_depth)
