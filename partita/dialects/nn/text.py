"""Text features: ``nn.tfidf_vectorizer`` counts the n-grams of a pool in each row of
integer tokens (ONNX ``TfIdfVectorizer`` with an ``int64`` pool; string pools and string
tensors have no nn element type).

The pool is one flat list of ``int64`` tokens cut into sections by ``ngram_counts``:
section ``n`` (1-based) starts at ``ngram_counts[n - 1]``, ends where section ``n + 1``
starts (the last at the end of the pool) and holds n-grams of ``n`` tokens. The pool's
n-grams, numbered in pool order across sections, are written to the result coordinates
``ngram_indexes``; the result is ``f32`` of width ``max(ngram_indexes) + 1``. Coordinates
no n-gram maps to stay 0; the weighted values of n-grams mapped to one coordinate add up
(onnxruntime's do in modes TF and TFIDF; in mode IDF it keeps the weight of whichever
n-gram its scan found last, an order this op does not reproduce).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import DenseArrayBase, Float32Type, IntegerType, TensorType, f32
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    FORMAT_UNARY,
    Dims,
    NNOp,
    OpKind,
    Shape,
    ShapeArith,
    _init,
    _int_prop,
    _ints_prop,
    _shape,
    _str_prop,
    _value,
    kind_trait,
)

__all__ = ["TFIDF_MODES", "NgramSection", "TfIdfVectorizerOp"]

TFIDF_MODES = ("TF", "IDF", "TFIDF")
"""``TF``: each n-gram's count; ``IDF``: 1 where it occurs at all, times its weight;
``TFIDF``: its count times its weight (ONNX's spellings)."""


@dataclass(frozen=True)
class NgramSection:
    """The pool's n-grams of one ``length``: ``grams`` (``[count, length]`` int64), the first
    of them numbered ``first`` among all the pool's n-grams."""

    length: int
    first: int
    grams: np.ndarray


def _f32s(values: Sequence[float]) -> DenseArrayBase:
    return DenseArrayBase.from_list(f32, [float(v) for v in values])


@irdl_op_definition
class TfIdfVectorizerOp(NNOp):
    """Per row of ``input`` (``[C]`` or ``[N, C]`` tokens, i32 or i64), the count of each
    pool n-gram of ``min_gram_length`` to ``max_gram_length`` tokens, taken at every skip
    from 0 to ``max_skip_count`` (tokens ``s, s + k + 1, ..., s + (n - 1)(k + 1)``: each
    start and skip that fits in the row counts once; a 1-gram counts once per position),
    weighted by ``mode`` with ``weights`` (one per pool n-gram; none means all 1).
    Tokens match the pool's int64 values exactly (an i32 token never matches a pool
    value outside the i32 range)."""

    traits = kind_trait(OpKind.OPAQUE)  # hashing n-grams: no kernel, a host step

    name = "nn.tfidf_vectorizer"
    ALLOWED_TYPES: ClassVar = (IntegerType(32), IntegerType(64))
    input = operand_def(TensorType)
    result = result_def(TensorType)
    mode_attr = _str_prop("mode", "TF")
    min_gram_length_attr = _int_prop("min_gram_length")
    max_gram_length_attr = _int_prop("max_gram_length")
    max_skip_count_attr = _int_prop("max_skip_count", 0)
    pool_attr = _ints_prop("pool")
    ngram_counts_attr = _ints_prop("ngram_counts")
    ngram_indexes_attr = _ints_prop("ngram_indexes")
    weights_attr = prop_def(DenseArrayBase.constr(f32), prop_name="weights", default_value=_f32s(()))
    mode = _value("mode")
    min_gram_length = _value("min_gram_length")
    max_gram_length = _value("max_gram_length")
    max_skip_count = _value("max_skip_count")
    pool = _value("pool")
    ngram_counts = _value("ngram_counts")
    ngram_indexes = _value("ngram_indexes")
    weights = _value("weights")
    assembly_format = FORMAT_UNARY

    def __init__(self, input: SSAValue | Operation, *, mode: str, min_gram_length: int, max_gram_length: int,
                 max_skip_count: int, pool: Sequence[int], ngram_counts: Sequence[int],
                 ngram_indexes: Sequence[int], weights: Sequence[float] = ()):
        rows = _shape(SSAValue.get(input))[:-1]
        width = max(ngram_indexes, default=-1) + 1
        _init(self, [input], TensorType(Float32Type(), [*rows, width]), mode=mode,
              min_gram_length=int(min_gram_length), max_gram_length=int(max_gram_length),
              max_skip_count=int(max_skip_count), pool=[int(v) for v in pool],
              ngram_counts=[int(v) for v in ngram_counts], ngram_indexes=[int(v) for v in ngram_indexes],
              weights=_f32s(weights))

    def sections(self) -> list[NgramSection]:
        """The pool cut into its n-gram sections (checked by the verifier: run it first)."""
        pool, counts = np.asarray(self.pool, dtype=np.int64), self.ngram_counts
        out, first = [], 0
        for n, start in enumerate(counts, start=1):
            end = counts[n] if n < len(counts) else len(pool)
            grams = pool[start:end].reshape(-1, n)
            out.append(NgramSection(n, first, grams))
            first += len(grams)
        return out

    def verify_element_types(self) -> None:
        self.check_element_type(self.input.type.element_type, "input element type")
        if self.result.type.element_type != Float32Type():
            raise VerifyException(f"result element type must be f32, got {self.result.type.element_type}")
        if self.mode not in TFIDF_MODES:
            raise VerifyException(f"mode must be one of {', '.join(TFIDF_MODES)}, got '{self.mode}'")
        self._verify_pool()

    def _verify_pool(self) -> None:
        lo, hi, counts = self.min_gram_length, self.max_gram_length, self.ngram_counts
        if not 1 <= lo <= hi:
            raise VerifyException(f"gram lengths must satisfy 1 <= min_gram_length <= max_gram_length, "
                                  f"got {lo} and {hi}")
        if hi > len(counts):
            raise VerifyException(f"max_gram_length {hi} exceeds the {len(counts)} n-gram lengths "
                                  f"ngram_counts gives the pool")
        if self.max_skip_count < 0:
            raise VerifyException(f"max_skip_count must be >= 0, got {self.max_skip_count}")
        bounds = [*counts, len(self.pool)]
        if any(not 0 <= a <= b for a, b in zip(bounds, bounds[1:])):
            raise VerifyException(f"ngram_counts {list(counts)} must be non-decreasing starts in the pool "
                                  f"of {len(self.pool)} values")
        for n, (start, end) in enumerate(zip(bounds, bounds[1:]), start=1):
            if (end - start) % n:
                raise VerifyException(f"the pool's {n}-gram section [{start}, {end}) holds {end - start} "
                                      f"values, not a multiple of {n}")
        total = sum((end - start) // n for n, (start, end) in enumerate(zip(bounds, bounds[1:]), start=1))
        if total == 0:
            raise VerifyException("the pool holds no n-gram")
        if len(self.ngram_indexes) != total:
            raise VerifyException(f"ngram_indexes must give one coordinate per pool n-gram ({total}), "
                                  f"got {len(self.ngram_indexes)}")
        if min(self.ngram_indexes) < 0:
            raise VerifyException(f"ngram_indexes must be >= 0, got {min(self.ngram_indexes)}")
        if self.weights and len(self.weights) != total:
            raise VerifyException(f"weights must give one weight per pool n-gram ({total}), "
                                  f"got {len(self.weights)}")
        for section in self.sections():
            _, where, seen = np.unique(section.grams, axis=0, return_index=True, return_counts=True)
            if (seen > 1).any():
                gram = section.grams[where[seen > 1][0]]
                raise VerifyException(f"n-gram ({', '.join(str(t) for t in gram)}) appears more than once "
                                      f"in the pool")

    @property
    def width(self) -> int:
        """The result's last dim: one past the largest coordinate an n-gram maps to."""
        return max(self.ngram_indexes) + 1

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        if len(x) not in (1, 2):
            raise VerifyException(f"input must have rank 1 or 2, got rank {len(x)}")
        return (*x[:-1], self.width)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return [*dims(self.input)[:-1], self.width]

