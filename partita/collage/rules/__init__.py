"""Collage's partition-rule algebra (TVM's ``partition_rule.h``), one concept a module.

Leaf rules find sub-graphs: :class:`DFPattern` (a backend's pattern matches),
:class:`OpCallByKind` (single ops up to a kind), :class:`Host` (single ops on the host).
Wrappers change or filter them: :class:`Composite`, :class:`Primitive`, :class:`Union`,
:class:`Combine` with the combiners of :mod:`.combiners`, :class:`OnlyValid` with a
:class:`SubGraphConfig` (``max_depth``, ``max_exits``, taps). :mod:`.styles` builds the
BYOC fusion styles a backend declares at registration; :mod:`.native` the rules of the
native ``cuda`` target and of the host::

    rule = Primitive(OnlyValid(
        Combine(Composite(DFPattern("mybe")), [ByKind(OpKind.OUT_EWISE_FUSABLE, OpKind.BROADCAST)],
                max_depth=3),
        SubGraphConfig(max_exits=1, allow_taps=False)))
    register_backend("mybe", patterns=..., partition_rule=lambda backend, depth: rule)
"""

from partita.collage.rules.base import PartitionRule, RuleContext
from partita.collage.rules.combine import Combine
from partita.collage.rules.combiners import (
    AllSimple,
    Always,
    ByKind,
    Combiner,
    TupleArg,
    TupleProj,
)
from partita.collage.rules.composite import Composite
from partita.collage.rules.host import HOST_LABEL, Host
from partita.collage.rules.kind import OpKind, default_op_kind
from partita.collage.rules.native import cuda_kind, cuda_rule, host_rule, native_rule
from partita.collage.rules.only_valid import OnlyValid, SubGraphConfig
from partita.collage.rules.op_call_by_kind import OpCallByKind
from partita.collage.rules.pattern import DFPattern
from partita.collage.rules.primitive import Primitive
from partita.collage.rules.styles import (
    FUSION_STYLES,
    arbitrary_fusion_rule,
    backend_rule,
    default_style,
    pattern_rule,
    style_rule,
    tvm_fusion_rule,
)
from partita.collage.rules.union import Union

__all__ = [
    "FUSION_STYLES",
    "HOST_LABEL",
    "AllSimple",
    "Always",
    "ByKind",
    "Combine",
    "Combiner",
    "Composite",
    "DFPattern",
    "Host",
    "OnlyValid",
    "OpCallByKind",
    "OpKind",
    "PartitionRule",
    "Primitive",
    "RuleContext",
    "SubGraphConfig",
    "TupleArg",
    "TupleProj",
    "Union",
    "arbitrary_fusion_rule",
    "backend_rule",
    "cuda_kind",
    "cuda_rule",
    "default_op_kind",
    "default_style",
    "host_rule",
    "native_rule",
    "pattern_rule",
    "style_rule",
    "tvm_fusion_rule",
]
