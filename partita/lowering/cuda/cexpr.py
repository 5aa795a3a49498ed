"""C types and C expressions of the native CUDA kernels: element types and their storage and
compute types, and dims as C expressions (``Dim``: a literal, or an expression over the
``int`` dim parameters) with the arithmetic that keeps literals folded."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.ir import Attribute, SSAValue

from partita.dialects.nn import type_name

_C_TYPES = {
    "f32": "float", "f16": "__half", "bf16": "__nv_bfloat16", "f64": "double", "i1": "bool",
    "i8": "signed char", "i16": "short", "i32": "int", "i64": "long long",
    "ui8": "unsigned char", "ui16": "unsigned short", "ui32": "unsigned int",
    "ui64": "unsigned long long",
    "f8E4M3FN": "unsigned char", "f8E5M2": "unsigned char", "f8E4M3FNUZ": "unsigned char",
    "f8E5M2FNUZ": "unsigned char",
    "i4": "unsigned char", "ui4": "unsigned char", "i2": "unsigned char", "ui2": "unsigned char",
    "f4E2M1FN": "unsigned char", "f8E8M0FNU": "unsigned char",
}
"""Storage type of each element type (its MLIR spelling) in kernel memory."""
FLOAT8_FORMATS = {"f8E4M3FN": (4, 3, 7, 1), "f8E5M2": (5, 2, 15, 0), "f8E4M3FNUZ": (4, 3, 8, 2),
                  "f8E5M2FNUZ": (5, 2, 16, 2)}
"""The 8-bit floats a kernel stores (``unsigned char``) and computes in float: exponent
bits, mantissa bits, exponent bias, and kind (0: IEEE-like, with infinities; 1: ``FN``, no
infinity, NaN all ones; 2: ``FNUZ``, no infinity nor negative zero, NaN ``0x80``)."""
SUB_BYTE_INTEGERS = {"i4": (4, True), "ui4": (4, False), "i2": (2, True), "ui2": (2, False)}
"""ONNX's INT4 / UINT4 / INT2 / UINT2 in kernel memory: bits and signedness. A byte each, the
value in its low bits and the high bits zero (``ml_dtypes``' layout, which the runtime's
host arrays have); computed as ``int`` / ``unsigned int`` and wrapped into the bits."""
NARROW_FLOATS = ("f4E2M1FN", "f8E8M0FNU")
"""FP4 (E2M1, no infinity nor NaN) and the MX block scale (E8M0, a power of two or NaN): a
byte each, computed in float."""
CONVERTED = ("f16", "bf16", *FLOAT8_FORMATS, *SUB_BYTE_INTEGERS, *NARROW_FLOATS)
"""Element types stored otherwise than they are computed: read with ``ld_<t>``, stored with
``st_<t>``, every op's result rounded (or wrapped) with ``rn_<t>`` (as the reference stores
it)."""
GATHER_INDEX = (
    "// An index read at run time (ONNX Gather's): negative counts from the end, clamped into [0, n).\n"
    "static __device__ __forceinline__ long long partita_gather_index(long long k, long long n) {\n"
    "  if (k < 0) k += n;\n"
    "  return k < 0 ? 0 : (k < n ? k : n - 1);\n"
    "}\n"
)
"""The device helper of a gather read through as an index view (a pure expression, no
lines: view reads sit inside loops and conditions)."""
MMA_DTYPES = ("f16", "bf16")
"""Operand types of the native tensor-core (``mma.sync`` m16n8k16) GEMM tiles."""
MMA_INT_DTYPES = ("i8", "ui8")
"""Operand types of the native integer tensor-core (``mma.sync`` m16n8k32, s32 sums)
tiles of ``nn.matmul_integer``, either on either side."""
_C_COMPUTE = {
    "f32": "float", "f16": "float", "bf16": "float", "f64": "double", "i1": "bool",
    "i8": "int", "i16": "int", "i32": "int", "i64": "long long",
    "ui8": "unsigned int", "ui16": "unsigned int", "ui32": "unsigned int",
    "ui64": "unsigned long long", **dict.fromkeys(FLOAT8_FORMATS, "float"),
    **{t: "int" if signed else "unsigned int" for t, (_, signed) in SUB_BYTE_INTEGERS.items()},
    **dict.fromkeys(NARROW_FLOATS, "float"),
}
"""Type a kernel computes each element type in (f16/bf16 in float, rounded per op, as the
reference executor does; narrow integers promoted as C does and wrapped on store)."""
DTYPES = tuple(_C_TYPES)
"""Element types a kernel reads and writes."""
FLOAT_DTYPES = ("f32", "f16", "bf16")
"""Element types of the float-only schedules (row reductions, GEMMs, pools)."""
_HEADERS = {"f16": "cuda_fp16.h", "bf16": "cuda_bf16.h"}
_INT_MAX = 2**31 - 1

Dim = int | str
"""A dimension in a kernel: a literal, or a C expression over the ``int`` dim parameters."""


def _dtype(typ: Attribute) -> str:
    assert isinstance(typ, TensorType)
    name = type_name(typ.element_type)
    assert name in _C_TYPES
    return name


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def _record_shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(-1 if d == DYNAMIC_INDEX else d for d in _shape(value))


def _c_float(value: float) -> str:
    if math.isnan(value):
        return "__int_as_float(0x7fc00000)"
    if math.isinf(value):
        return "__int_as_float(0x7f800000)" if value > 0 else "__int_as_float(0xff800000)"
    text = repr(float(value))
    return f"{text}f" if any(c in text for c in ".e") else f"{text}.0f"


def _mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 1:
        return b
    if b == 1:
        return a
    return f"{_paren(a)} * {_paren(b)}"  # operands may be sums (dynamic pads, slices)


def _product(dims: Sequence[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = _mul(out, d)
    return out


def _paren(d: Dim) -> str:
    if isinstance(d, int) or re.fullmatch(r"\w+", d):
        return str(d)
    if d.startswith("("):  # already parenthesized if its first "(" closes at the end
        depth = 0
        for k, c in enumerate(d):
            depth += {"(": 1, ")": -1}.get(c, 0)
            if depth == 0:
                if k == len(d) - 1:
                    return d
                break
    return f"({d})"


def _add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if a == 0:
        return b
    if b == 0:
        return a
    return f"{_paren(a)} + {_paren(b)}"


def _broadcast(a: Dim, b: Dim) -> Dim:
    if a == 1:
        return b
    if b == 1 or a == b:
        return a
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return f"({a} == 1 ? {b} : {a})"



def ctype(v: SSAValue) -> str:
    """The C type ``v`` is computed in (``float`` for f16/bf16/f32)."""
    return _C_COMPUTE[_dtype(v.type)]


def broadcast_dims(x: list[Dim], y: list[Dim]) -> list[Dim]:
    """NumPy broadcasting of two dim lists (aligned at the end)."""
    rank = max(len(x), len(y))
    x = [1] * (rank - len(x)) + x
    y = [1] * (rank - len(y)) + y
    return [_broadcast(a, b) for a, b in zip(x, y)]
