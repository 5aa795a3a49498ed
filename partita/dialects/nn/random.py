"""Random draws: ``nn.random`` fills its result with uniform or normal draws of a
counter-based generator (Philox-4x32-10, as cuRAND's and JAX's): element ``i`` of the
flattened result is a function of the op's ``seed`` (a key below 2^63) and of ``i`` alone, so the
reference and the device kernel draw the same values, and a run draws the same values as
the run before (an inference graph's random masks and noise are reproducible).

ONNX ``RandomUniform`` / ``RandomNormal`` and their ``Like`` forms import as this op
(``Bernoulli`` as a uniform draw below its probability); its result shape is static or sized by
``refs`` (the ``Like`` input's dynamic dims), as ``nn.arange``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, result_def, var_operand_def
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    FLOATS,
    NNOp,
    OpKind,
    Shape,
    _float_prop,
    _int_prop,
    _ints_prop,
    _props,
    _shape,
    _str_prop,
    _value,
    kind_trait,
)
from partita.dialects.nn.indexing import FORMAT_OPERANDS, RefDimsMixin, _refs_props

__all__ = ["DISTRIBUTIONS", "RandomOp"]

DISTRIBUTIONS = ("uniform", "normal")
"""``uniform``: ``loc + scale * u`` with ``u`` in [0, 1); ``normal``: ``loc + scale * z``
with ``z`` standard normal (Box-Muller)."""


@irdl_op_definition
class RandomOp(RefDimsMixin, NNOp):
    """``loc + scale * draw`` for each element of the result, ``draw`` from
    ``distribution`` by Philox-4x32-10 keyed by ``seed`` at the element's flat index."""

    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.random"
    ALLOWED_TYPES: ClassVar = FLOATS
    refs = var_operand_def(TensorType)
    result = result_def(TensorType)
    distribution_attr = _str_prop("distribution", "uniform")
    loc_attr = _float_prop("loc", 0.0)
    scale_attr = _float_prop("scale", 1.0)
    seed_attr = _int_prop("seed", 0)
    ref_axes_attr = _ints_prop("ref_axes", ())
    targets_attr = _ints_prop("targets", ())
    distribution = _value("distribution")
    loc = _value("loc")
    scale = _value("scale")
    seed = _value("seed")
    ref_axes = _value("ref_axes")
    targets = _value("targets")
    assembly_format = FORMAT_OPERANDS

    def __init__(self, distribution: str, shape: Sequence[int], element_type: Attribute, *, loc: float = 0.0,
                 scale: float = 1.0, seed: int = 0, refs: Sequence[tuple[SSAValue, int, int]] = ()):
        ref_values, props = _refs_props(refs)
        IRDLOperation.__init__(self, operands=[ref_values], result_types=[TensorType(element_type, list(shape))],
                               properties=_props(distribution=distribution, loc=float(loc), scale=float(scale),
                                                 seed=int(seed), **props))

    def verify_element_types(self) -> None:
        self.check_element_type(self.result.type.element_type, "element type")
        if self.distribution not in DISTRIBUTIONS:
            raise VerifyException(f"distribution must be one of {', '.join(DISTRIBUTIONS)}, got '{self.distribution}'")
        if not 0 <= self.seed < 2**63:
            raise VerifyException(f"seed {self.seed} is not a key in [0, 2^63)")

    def infer_shape(self) -> Shape:
        shape = _shape(self.result)
        sized = {t % len(shape) for t in self.targets} if shape else set()
        unsized = [k for k, d in enumerate(shape) if d == DYN and k not in sized]
        if unsized:
            raise VerifyException(f"dim {unsized[0]} is '?' but no shape reference sizes it")
        return self.ref_shape(shape)

    def result_dims(self, dims, arith):
        return self.apply_refs(list(_shape(self.result)), dims, arith)
