"""Scaled dot-product attention as one ``nn`` op (``nn.attention``).

``query[B, H, Sq, D]``, ``key[B, Hkv, Skv, D]``, ``value[B, Hkv, Skv, Dv]`` and an optional
``mask`` broadcastable (NumPy rules) to the scores ``[B, H, Sq, Skv]`` give
``[B, H, Sq, Dv]``:

    scores = scale * query @ key^T   (+ mask if it is a float mask; a bool mask keeps the
                                      scores where it is true and makes the rest -inf)
    scores[i, j] = -inf where causal and j > i + (Skv - Sq)
    out = softmax(scores, keys) @ value

The variants are properties, so one kernel or library call covers each form the exporters
write:

- ``scale``: the factor on ``query @ key^T`` (``1/sqrt(D)`` by convention, any value here).
- ``causal``: the causal frontier, aligned to the bottom right (``j <= i + Skv - Sq``: the
  last query sees every key), which is PyTorch's for ``Sq == Skv`` and ONNX ``Attention``'s
  with a past KV cache (FlashAttention's convention).
- the mask kind follows from the mask's element type: ``i1`` is a boolean mask (true =
  attend), the query's float type an additive one, ``i64`` ``[B | 1]`` the last key each
  batch row attends (``mask_kind`` ``"last_key"``: a static KV cache read at a position,
  FlashAttention's ``seqused_k``; ``last-key-mask`` writes it). The keys after it are left
  out, never read; a negative last key hides every key, each scoring ``mask_fill``.
- grouped-query / multi-query attention: ``H`` a multiple of ``Hkv``; query head ``h``
  reads KV head ``h // (H / Hkv)``, as ``repeat_kv`` (``np.repeat`` on the head axis)
  expands them (``groups``).
- ``layout``: ``"BHSD"`` (``[batch, heads, seq, dim]``, the default) or ``"BSHD"``
  (``[batch, seq, heads, dim]``, the layout of the projections before the head-split
  transpose) for query, key, value and the result alike, so the transposes around
  attention fold into the op's indexing instead of running as kernels.
- ``mask_fill``: the score of a key that a boolean mask or the causal rule hides, ``-inf``
  by default. ``masked_fill`` with a finite value (Hugging Face's ``finfo.min``, ``-1e9``)
  keeps it: a row whose keys are all hidden then averages every value, as the exported
  ``where(mask, fill, scores)`` does, instead of being undefined.
- ``zero_undefined_rows``: a row whose softmax is undefined (every key masked, or a NaN
  or +inf score) gives zeros, as the guard ``where(isnan(p), 0, p)`` that PyTorch's and
  ONNX's exports put after the softmax makes it; without it such a row is NaN, as the
  plain softmax gives.

Split-KV decode (``split-kv-attention``) writes attention of one query row as two ops,
so that the keys of one (batch, head) spread over many thread blocks and the partial
results are an ordinary tensor the memory planner places:

- ``nn.attention_partial`` (pass 1): each of ``splits`` contiguous key ranges gives its
  unnormalized output and its softmax statistics (``[B, H, splits, Dv + 2]``, f32);
- ``nn.attention_combine`` (pass 2): the splits rescaled to their common maximum and
  normalized, which is ``nn.attention`` of the row.
"""

from __future__ import annotations

import math
from typing import ClassVar

from xdsl.dialects.builtin import IntegerType, TensorType, f32
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, result_def
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    FLOATS,
    Dims,
    NNOp,
    OpKind,
    Shape,
    ShapeArith,
    _bool_prop,
    _float_prop,
    _fmt,
    _init,
    _int_prop,
    _shape,
    _str_prop,
    _tensor,
    _value,
    broadcast_shapes,
    kind_trait,
    merge_dims,
)


def _fill(value: float | None) -> float | None:
    """A ``mask_fill`` to store: None at the default (``-inf``), so it is not printed."""
    return None if value is None or value == -math.inf else float(value)


def _check_layout(what: str, layout: str) -> None:
    """The family's layouts: ``BHSD`` or ``BSHD`` (module docstring)."""
    if layout not in ("BHSD", "BSHD"):
        raise VerifyException(f"{what} layout must be BHSD or BSHD, got {layout}")


def _swap_bshd(layout: str):
    """``[B, S, H, D] <-> [B, H, S, D]`` in BSHD (shapes of rank 3 and more), else the identity."""
    if layout == "BSHD":
        return lambda s: (s[0], s[2], s[1], *s[3:]) if len(s) >= 3 else s
    return lambda s: s


LAST_KEY_TYPE = IntegerType(64)
"""The element type of a last-key mask (ONNX positions are int64)."""


def _check_last_keys(what: str, mask: Shape, batch: int) -> None:
    if len(mask) != 1 or mask[0] not in (1, batch, DYN):
        raise VerifyException(f"{what}'s last-key mask must be {_fmt([batch])} (one per batch row) or [1], "
                              f"got {_fmt(mask)}")


def infer_attention_shape(q: Shape, k: Shape, v: Shape, mask: Shape | None) -> Shape:
    """``[B, H, Sq, D] x [B, Hkv, Skv, D] x [B, Hkv, Skv, Dv] -> [B, H, Sq, Dv]``."""
    if (len(q), len(k), len(v)) != (4, 4, 4):
        raise VerifyException(f"attention expects rank 4 query, key and value, got ranks "
                              f"{len(q)}, {len(k)} and {len(v)}")
    batch = merge_dims(merge_dims(q[0], k[0], "attention batch mismatch (query, key)"), v[0],
                       "attention batch mismatch (key, value)")
    kv_heads = merge_dims(k[1], v[1], "attention KV heads mismatch (key, value)")
    if DYN not in (q[1], kv_heads) and (kv_heads == 0 or q[1] % kv_heads):
        raise VerifyException(f"{q[1]} query heads cannot share {kv_heads} KV heads")
    merge_dims(q[3], k[3], "attention head dim mismatch (query, key)")
    kv_len = merge_dims(k[2], v[2], "attention KV length mismatch (key, value)")
    if mask is not None:
        if len(mask) > 4:
            raise VerifyException(f"attention mask must have rank <= 4, got {len(mask)}")
        scores = (batch, q[1], q[2], kv_len)
        try:
            broadcast_shapes(mask, scores)
        except VerifyException:
            raise VerifyException(f"attention mask {_fmt(mask)} does not broadcast to the "
                                  f"scores {_fmt(scores)}") from None
    return (batch, q[1], q[2], v[3])


@irdl_op_definition
class AttentionOp(NNOp):
    """Scaled dot-product attention (see the module docstring)."""
    traits = kind_trait(OpKind.OPAQUE)  # its own kernels (fuse-attention), no epilogue

    name = "nn.attention"
    ALLOWED_TYPES: ClassVar = FLOATS[:3]
    query = operand_def(TensorType)
    key = operand_def(TensorType)
    value = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    result = result_def(TensorType)
    scale_attr = _float_prop("scale")
    causal_attr = _bool_prop("causal", False)
    zero_undefined_rows_attr = _bool_prop("zero_undefined_rows", False)
    mask_fill_attr = _float_prop("mask_fill", -math.inf)
    layout_attr = _str_prop("layout", "BHSD")
    layout = _value("layout")
    scale = _value("scale")
    causal = _value("causal")
    zero_undefined_rows = _value("zero_undefined_rows")
    mask_fill = _value("mask_fill")
    assembly_format = ("$query `,` $key `,` $value (`,` $mask^)? attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, query: SSAValue | Operation, key: SSAValue | Operation,
                 value: SSAValue | Operation, mask: SSAValue | Operation | None = None, *,
                 scale: float, causal: bool | None = None,
                 zero_undefined_rows: bool | None = None, layout: str | None = None,
                 mask_fill: float | None = None, result_type: Attribute | None = None):
        _init(self, [query, key, value, [] if mask is None else [mask]], result_type,
              scale=float(scale), causal=causal, zero_undefined_rows=zero_undefined_rows,
              layout=layout, mask_fill=_fill(mask_fill))

    @property
    def mask_kind(self) -> str:
        """``"none"``, ``"boolean"`` (an ``i1`` mask: true attends), ``"last_key"`` (an
        ``i64`` mask: the last key of each batch row) or ``"additive"``."""
        if self.mask is None:
            return "none"
        element = _tensor(self.mask).element_type
        return "boolean" if element == IntegerType(1) else "last_key" if element == LAST_KEY_TYPE else "additive"

    @property
    def groups(self) -> int | None:
        """Query heads per KV head (1: multi-head, H: multi-query); None if dynamic."""
        axis = self.heads_axis
        h, hkv = _shape(self.query)[axis], _shape(self.key)[axis]
        return None if DYN in (h, hkv) else h // hkv

    @property
    def heads_axis(self) -> int:
        """The heads axis of query, key, value and result (1 in BHSD, 2 in BSHD)."""
        return 2 if self.layout == "BSHD" else 1

    def verify_element_types(self) -> None:
        t = _tensor(self.query).element_type
        self.check_element_type(t, "element type")
        for v, what in ((self.key, "key"), (self.value, "value"), (self.result, "result")):
            self.check_element_type(_tensor(v).element_type, f"{what} element type", (t,))
        if self.mask is not None:
            self.check_element_type(_tensor(self.mask).element_type, "mask element type",
                                    (t, IntegerType(1), LAST_KEY_TYPE))

    def infer_shape(self) -> Shape:
        _check_layout("attention", self.layout)
        last_key = self.mask_kind == "last_key"
        mask = None if self.mask is None or last_key else _shape(self.mask)
        swap = _swap_bshd(self.layout)
        out = infer_attention_shape(swap(_shape(self.query)), swap(_shape(self.key)),
                                    swap(_shape(self.value)), mask)
        if last_key:
            _check_last_keys("attention", _shape(self.mask), out[0])
        return swap(out)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        q, v = dims(self.query), dims(self.value)  # the same positions in both layouts
        return [q[0], q[1], q[2], v[3]]


def partial_row_size(value_dim: int) -> int:
    """Floats of one split's partial: the unnormalized output (``Dv``), then ``m`` and ``l``."""
    return value_dim + 2


@irdl_op_definition
class AttentionPartialOp(NNOp):
    """Pass 1 of split-KV decode attention: ``query[B, H, 1, D]`` (``[B, 1, H, D]`` in
    BSHD), ``key`` / ``value`` and the optional ``mask`` as in ``nn.attention`` (same
    ``scale``, ``layout``, mask kinds and head groups) give f32 ``[B, H, splits, Dv + 2]``
    (always head-major: it is the op's own intermediate).

    Split ``s`` takes the keys ``[s * c, min(Skv, (s + 1) * c))`` with
    ``c = ceil(Skv / splits)`` (a split past the keys has none). With the scores ``x_j`` of
    ``nn.attention`` for those keys (``mask_fill`` where a boolean mask is false, the float
    mask added), its row ``[o[0..Dv), m, l]`` is:

        m    = max_j x_j                      (-inf: no key, or every score -inf)
        l    = sum_j exp(x_j - m)             (0 when m = -inf)
        o[c] = sum_j exp(x_j - m) * v[j, c]   (a key with probability 0 still multiplies
                                               its value: 0 * NaN is NaN, as p @ v)

    and ``o``, ``m`` and ``l`` are all NaN when a score of the split is NaN or +inf (the
    row's softmax is undefined, whatever the other splits hold).

    There is no ``causal`` property: for one query row the bottom-right causal frontier
    (``j <= 0 + Skv - 1``) keeps every key, so ``split-kv-attention`` drops the flag.

    With a last-key mask the keys after it are left out as keys past ``Skv`` are (a split
    past it has no key)."""
    traits = kind_trait(OpKind.OPAQUE)  # its own kernel (grid-strided over splits), no epilogue

    name = "nn.attention_partial"
    ALLOWED_TYPES: ClassVar = FLOATS[:3]
    query = operand_def(TensorType)
    key = operand_def(TensorType)
    value = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    result = result_def(TensorType)
    scale_attr = _float_prop("scale")
    splits_attr = _int_prop("splits")
    layout_attr = _str_prop("layout", "BHSD")
    mask_fill_attr = _float_prop("mask_fill", -math.inf)
    layout = _value("layout")
    scale = _value("scale")
    splits = _value("splits")
    mask_fill = _value("mask_fill")
    assembly_format = ("$query `,` $key `,` $value (`,` $mask^)? attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, query: SSAValue | Operation, key: SSAValue | Operation,
                 value: SSAValue | Operation, mask: SSAValue | Operation | None = None, *,
                 scale: float, splits: int, layout: str | None = None,
                 mask_fill: float | None = None, result_type: Attribute | None = None):
        _init(self, [query, key, value, [] if mask is None else [mask]], result_type,
              scale=float(scale), splits=int(splits), layout=layout, mask_fill=_fill(mask_fill))

    mask_kind = AttentionOp.mask_kind
    groups = AttentionOp.groups
    heads_axis = AttentionOp.heads_axis

    def infer_element_type(self) -> Attribute:
        return f32

    def verify_element_types(self) -> None:
        t = _tensor(self.query).element_type
        self.check_element_type(t, "element type")
        for v, what in ((self.key, "key"), (self.value, "value")):
            self.check_element_type(_tensor(v).element_type, f"{what} element type", (t,))
        self.check_element_type(_tensor(self.result).element_type, "result element type", (f32,))
        if self.mask is not None:
            self.check_element_type(_tensor(self.mask).element_type, "mask element type",
                                    (t, IntegerType(1), LAST_KEY_TYPE))

    def infer_shape(self) -> Shape:
        _check_layout("attention_partial", self.layout)
        if self.splits < 1:
            raise VerifyException(f"attention_partial needs at least one split, got {self.splits}")
        swap = _swap_bshd(self.layout)
        last_key = self.mask_kind == "last_key"
        mask = None if self.mask is None or last_key else _shape(self.mask)
        b, h, rows, dv = infer_attention_shape(swap(_shape(self.query)), swap(_shape(self.key)),
                                               swap(_shape(self.value)), mask)
        if last_key:
            _check_last_keys("attention_partial", _shape(self.mask), b)
        if rows not in (1, DYN):
            raise VerifyException(f"attention_partial takes one query row, got {rows}")
        return (b, h, self.splits, DYN if dv == DYN else partial_row_size(dv))

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        q, v = dims(self.query), dims(self.value)
        return [q[0], q[self.heads_axis], self.splits, arith.add(v[3], partial_row_size(0))]


@irdl_op_definition
class AttentionCombineOp(NNOp):
    """Pass 2 of split-KV decode attention: the partials ``[B, H, splits, Dv + 2]`` of
    ``nn.attention_partial`` give the row ``[B, H, 1, Dv]`` (``[B, 1, H, Dv]`` in BSHD) of
    the result type (f16, bf16 or f32):

        M = max_s m_s,  w_s = exp(m_s - M) (0 where m_s = -inf)
        out[c] = sum_s w_s * o_s[c] / sum_s w_s * l_s

    which is ``nn.attention``'s row: a split with a NaN ``m`` (a NaN or +inf score) or
    ``M = -inf`` (every key masked) leaves the softmax undefined, and the row is NaN, or
    zeros with ``zero_undefined_rows``."""
    traits = kind_trait(OpKind.OPAQUE)  # a reduction over splits with its own rule

    name = "nn.attention_combine"
    ALLOWED_TYPES: ClassVar = FLOATS[:3]
    partial = operand_def(TensorType)
    result = result_def(TensorType)
    zero_undefined_rows_attr = _bool_prop("zero_undefined_rows", False)
    layout_attr = _str_prop("layout", "BHSD")
    layout = _value("layout")
    zero_undefined_rows = _value("zero_undefined_rows")
    assembly_format = "$partial attr-dict `:` functional-type(operands, results)"

    def __init__(self, partial: SSAValue | Operation, *, result_type: Attribute,
                 zero_undefined_rows: bool | None = None, layout: str | None = None):
        _init(self, [partial], result_type, zero_undefined_rows=zero_undefined_rows, layout=layout)

    @property
    def value_dim(self) -> int:
        """``Dv``: the partial's row less ``m`` and ``l``."""
        return _shape(self.partial)[3] - partial_row_size(0)

    def verify_element_types(self) -> None:
        self.check_element_type(_tensor(self.partial).element_type, "partial element type", (f32,))
        self.check_element_type(_tensor(self.result).element_type, "result element type")

    def infer_shape(self) -> Shape:
        _check_layout("attention_combine", self.layout)
        p = _shape(self.partial)
        if len(p) != 4 or p[3] == DYN or p[3] < partial_row_size(1):
            raise VerifyException(f"attention_combine expects partials [B, H, splits, Dv + 2] with a "
                                  f"static Dv >= 1, got {_fmt(p)}")
        return _swap_bshd(self.layout)((p[0], p[1], 1, self.value_dim))

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        p = dims(self.partial)
        return list(_swap_bshd(self.layout)((p[0], p[1], 1, self.value_dim)))


@irdl_op_definition
class RotaryEmbeddingOp(NNOp):
    """Rotary position embedding (RoPE, ONNX ``RotaryEmbedding``) of ``input[B, H, S, D]``
    with ``cos`` and ``sin`` ``[B | 1, S, R / 2]`` (already gathered at the positions): the
    first ``R`` dims of each head (``rotary_dim``; 0: all ``D``) are rotated in pairs, the
    rest copied. A pair is ``(d, d + R / 2)`` (halves, the exporters' ``rotate_half``) or
    ``(2i, 2i + 1)`` (``interleaved``); with ``c, s`` at the pair's index ``i``:

        out[first] = x[first] * c - x[second] * s
        out[second] = x[second] * c + x[first] * s

    ``layout`` is ``"BHSD"`` (the default) or ``"BSHD"`` (``input`` and result
    ``[B, S, H, D]``, the projections before the head-split transpose), as ``nn.attention``'s,
    so a head-split transpose moves past the op and folds into the attention after it.
    """
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.rotary_embedding"
    ALLOWED_TYPES: ClassVar = FLOATS[:3]
    input = operand_def(TensorType)
    cos = operand_def(TensorType)
    sin = operand_def(TensorType)
    result = result_def(TensorType)
    interleaved_attr = _bool_prop("interleaved", False)
    rotary_dim_attr = _int_prop("rotary_dim", 0)
    layout_attr = _str_prop("layout", "BHSD")
    interleaved = _value("interleaved")
    rotary_dim = _value("rotary_dim")
    layout = _value("layout")
    assembly_format = "$input `,` $cos `,` $sin attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue | Operation, cos: SSAValue | Operation, sin: SSAValue | Operation, *,
                 interleaved: bool | None = None, rotary_dim: int | None = None, layout: str | None = None,
                 result_type: Attribute | None = None):
        _init(self, [input, cos, sin], result_type, interleaved=interleaved, rotary_dim=rotary_dim,
              layout=layout)

    @property
    def seq_axis(self) -> int:
        """The sequence axis of the input and result (2 in BHSD, 1 in BSHD)."""
        return 1 if self.layout == "BSHD" else 2

    @property
    def rotated_dims(self) -> int | None:
        """``R``: the rotated dims of each head (None while the head dim is dynamic)."""
        d = _shape(self.input)[3]
        return self.rotary_dim or (None if d == DYN else d)

    def verify_element_types(self) -> None:
        t = _tensor(self.input).element_type
        self.check_element_type(t, "element type")
        for v, what in ((self.cos, "cos"), (self.sin, "sin"), (self.result, "result")):
            self.check_element_type(_tensor(v).element_type, f"{what} element type", (t,))

    def infer_shape(self) -> Shape:
        _check_layout("rotary_embedding", self.layout)
        x, c, s = _shape(self.input), _shape(self.cos), _shape(self.sin)
        if len(x) != 4 or len(c) != 3 or len(s) != 3:
            raise VerifyException(f"rotary_embedding expects input [B, H, S, D] (or [B, S, H, D]) and cos / sin "
                                  f"[B, S, R / 2], got ranks {len(x)}, {len(c)} and {len(s)}")
        rotated = self.rotated_dims
        if self.rotary_dim < 0 or (rotated is not None and (rotated % 2 or (x[3] != DYN and rotated > x[3]))):
            raise VerifyException(f"rotary_dim {self.rotary_dim} must be even and at most the head dim {x[3]}")
        merge_dims(c[2], s[2], "rotary_embedding cos / sin mismatch")
        if rotated is not None and DYN not in (c[2],) and c[2] != rotated // 2:
            raise VerifyException(f"rotary_embedding cos / sin have {c[2]} columns, expected {rotated // 2}")
        for d in (c, s):
            if d[0] != 1:  # a batch of 1 is shared by every batch row
                merge_dims(d[0], x[0], "rotary_embedding batch mismatch")
            merge_dims(d[1], x[self.seq_axis], "rotary_embedding sequence mismatch")
        return x

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return list(dims(self.input))
