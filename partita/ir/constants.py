"""Dense constants without Python-sized blow-ups.

xDSL 0.74 parses ``dense<1.0> : tensor<30000000x4xf32>`` by building a Python list of
120 million floats (10-19 GB) before packing it. ``parse_dense_constant`` recognises the
splat form itself, checks the size it would take against ``MATERIALIZE_LIMIT_BYTES`` and
then fills the payload with NumPy, which costs exactly the bytes of the tensor.
A splat over the limit is an error that names the op, at the op's location.

Works for every element type of the builtin dense attribute (floats, integers, ``i1``,
``index``); the dtype comes from the element type, never a fixed list of floats.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from math import prod

import numpy as np
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    TensorType,
)
from xdsl.ir import Attribute
from xdsl.parser import Parser

MATERIALIZE_LIMIT_BYTES = 256 << 20
"""The largest constant Partita builds from a splat (256 MiB, several times the largest
weight of the bundled models); larger ones are errors."""

_SPLAT = re.compile(
    r"dense<\s*(?P<value>[-+]?(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|inf|nan)|true|false)\s*>\s*:\s*",
)


def storage_dtype(element_type: Attribute) -> np.dtype:
    """The little-endian NumPy dtype of a dense attribute's payload."""
    if isinstance(element_type, Float16Type):
        return np.dtype("<f2")
    if isinstance(element_type, Float32Type):
        return np.dtype("<f4")
    if isinstance(element_type, Float64Type):
        return np.dtype("<f8")
    if isinstance(element_type, BFloat16Type):
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if isinstance(element_type, IndexType):
        return np.dtype("<i8")
    if isinstance(element_type, IntegerType):
        width = element_type.width.data
        bytes_ = element_type.compile_time_size
        if width == 1:
            return np.dtype(np.uint8)
        signed = not element_type.signedness.data.name == "UNSIGNED"
        return np.dtype(f"<{'i' if signed else 'u'}{bytes_}")
    raise ValueError(f"no dense payload for element type {element_type}")


def splat_bytes(type_: TensorType) -> int:
    """Bytes a splat of ``type_`` takes once materialized."""
    return prod(type_.get_shape()) * storage_dtype(type_.element_type).itemsize


def materialize_splat(type_: TensorType, literal: str) -> DenseIntOrFPElementsAttr:
    """The dense attribute of ``type_`` with every element equal to ``literal``."""
    dtype = storage_dtype(type_.element_type)
    if literal in ("true", "false"):
        scalar: int | float = int(literal == "true")
    elif isinstance(type_.element_type, AnyFloat):
        scalar = float.fromhex(literal) if "0x" in literal.lower() else float(literal)
    else:
        scalar = int(literal, 0)
    payload = np.full(prod(type_.get_shape()), scalar, dtype=dtype)
    return DenseIntOrFPElementsAttr(type_, BytesAttr(payload.tobytes()))


_limit: ContextVar[int | None] = ContextVar("partita_materialize_limit", default=MATERIALIZE_LIMIT_BYTES)


@contextmanager
def materialize_limit(limit: int | None) -> Iterator[None]:
    """Within the block, splats are materialized up to ``limit`` bytes (None: no limit).
    Loading a compiled model uses this: its weights are placeholders replaced at once."""
    token = _limit.set(limit)
    try:
        yield
    finally:
        _limit.reset(token)


def parse_dense_constant(parser: Parser, op_name: str) -> Attribute:
    """Parses a constant's value attribute; a splat of a static tensor type is built with
    NumPy, after checking it stays within the materialization limit."""
    limit = _limit.get()
    start = parser._current_token.span.start
    text = parser.lexer.input.content
    match = _SPLAT.match(text, start) if isinstance(text, str) else None
    if match is None:
        return parser.parse_attribute()
    state = parser._parser_state
    parser._resume_from(match.end())
    type_ = parser.parse_optional_type()
    if not isinstance(type_, TensorType) or -1 in type_.get_shape():
        parser._resume_from(state)  # not a static tensor: let xDSL parse and report it
        return parser.parse_attribute()
    try:
        size = splat_bytes(type_)
    except ValueError:
        parser._resume_from(state)
        return parser.parse_attribute()
    if limit is not None and size > limit:
        parser.raise_error(
            f"'{op_name}' op splat constant of type {type_} would take {size / 2**20:.0f} MiB, over the "
            f"materialization limit of {limit / 2**20:.0f} MiB",
            start,
            match.end(),
        )
    try:
        return materialize_splat(type_, match.group("value"))
    except (ValueError, OverflowError) as err:
        parser.raise_error(f"'{op_name}' op bad splat value '{match.group('value')}' for {type_}: {err}", start, match.end())
