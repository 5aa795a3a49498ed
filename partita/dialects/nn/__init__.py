"""The ``nn`` dialect: graph-level tensor operators (Relay/ONNX semantics) that Partita
partitions.

Operands and results are ranked ``tensor``s of an nn element type (``base.ELEMENT_TYPES``:
f16, bf16, f32, f64, i1, signed and unsigned integers); each op says which it accepts.
Dimensions may be dynamic (``?``). Attributes live in properties (printed in the attribute
dictionary).

One module per operator family; each op keeps its shape rule and verifier on its class,
and its reference (``partita/runtime/reference/<family>.py``), ONNX converter
(``partita/frontends/onnx/<family>.py``) and native kernel (``partita/lowering/cuda``) are
registered under the op class, so an op is found from its name in every layer.
"""

from __future__ import annotations

from xdsl.ir import Dialect

from partita.dialects.nn import (
    attention,
    base,
    control_flow,
    conv,
    dyn,
    elementwise,
    image,
    indexing,
    linalg,
    normalization,
    random,
    reduction,
    selection,
    spectral,
    text,
    transform,
)
from partita.dialects.nn.attention import *  # noqa: F403
from partita.dialects.nn.base import *  # noqa: F403
from partita.dialects.nn.control_flow import *  # noqa: F403
from partita.dialects.nn.conv import *  # noqa: F403
from partita.dialects.nn.dyn import *  # noqa: F403
from partita.dialects.nn.elementwise import *  # noqa: F403
from partita.dialects.nn.image import *  # noqa: F403
from partita.dialects.nn.indexing import *  # noqa: F403
from partita.dialects.nn.linalg import *  # noqa: F403
from partita.dialects.nn.normalization import *  # noqa: F403
from partita.dialects.nn.random import *  # noqa: F403
from partita.dialects.nn.reduction import *  # noqa: F403
from partita.dialects.nn.selection import *  # noqa: F403
from partita.dialects.nn.spectral import *  # noqa: F403
from partita.dialects.nn.text import *  # noqa: F403
from partita.dialects.nn.transform import *  # noqa: F403
from partita.ir.parameters import ParameterAttr

FAMILIES = (elementwise, linalg, normalization, reduction, conv, image, transform, indexing,
            attention, dyn, selection, random, text, control_flow, spectral)
"""The operator families, in the order the dialect lists their ops."""


def _ops_of(module) -> list[type]:
    """The concrete (named) nn op classes defined in ``module``, in definition order."""
    return [cls for cls in vars(module).values()
            if isinstance(cls, type) and issubclass(cls, base.NNOp)
            and cls.__module__ == module.__name__ and isinstance(vars(cls).get("name"), str)]


NN = Dialect("nn", [op for family in FAMILIES for op in _ops_of(family)], [ParameterAttr])
