"""Program assembly: the kernels of several fused functions in one CUDA translation unit
(one NVRTC program), with the headers and device helpers they use, and the line span of
each kernel (to name the function an NVRTC error points into)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.func import FuncOp

from partita.lowering.cuda.cexpr import (
    _HEADERS,
    FLOAT8_FORMATS,
    GATHER_INDEX,
    MMA_DTYPES,
    MMA_INT_DTYPES,
    NARROW_FLOATS,
    SUB_BYTE_INTEGERS,
)
from partita.lowering.cuda.kernel import FusedKernel, _entry_name, emit_kernel
from partita.lowering.cuda.ops.random import PHILOX
from partita.lowering.cuda.row_stats import ONE_PASS_HELPERS, VECTOR16
from partita.lowering.cuda.schedules import (
    _REDUCE_HELPERS,
    ASYNC_COPY_HELPER,
    LDMATRIX_HELPER,
    _mma_helper,
    _row_sum_helper,
)

__all__ = ["FLOAT8_HELPERS", "NARROW_HELPERS", "CudaProgram", "emit_program"]

FLOAT8_HELPERS = r"""
// 8-bit floats (OCP FP8 and the FNUZ variants): E exponent bits, M mantissa bits, BIAS;
// KIND 0: IEEE-like (infinities and NaNs at the top exponent), 1: FN (no infinity, NaN
// S.1..1.1..1), 2: FNUZ (no infinity, no negative zero, NaN 0x80). Written out, not
// cuda_fp8.h's: the same code builds for the host (its tests) and has no satfinite-only
// limit (a non-saturating cast overflows to infinity or NaN, as ONNX says).
template <int E, int M, int BIAS, int KIND>
static __device__ __forceinline__ float partita_f8_decode(unsigned char b) {
  const int e = (b >> M) & ((1 << E) - 1), m = b & ((1 << M) - 1);
  const unsigned sign = (unsigned)(b >> 7) << 31;
  if (KIND == 2 && b == 0x80) return __int_as_float(0x7fc00000);
  if (KIND == 1 && (b & 0x7f) == 0x7f) return __int_as_float(sign | 0x7fc00000u);
  // A NaN keeps its sign and payload (a bitcast back gives the same byte).
  if (KIND == 0 && e == (1 << E) - 1) return __int_as_float(sign | 0x7f800000u | ((unsigned)m << (23 - M)));
  const float v = e == 0 ? ldexpf((float)m, 1 - BIAS - M) : ldexpf((float)(m | (1 << M)), e - BIAS - M);
  return (b >> 7) ? -v : v;
}
// Round to nearest even; past the largest finite value: that value when saturating, else
// infinity (KIND 0) or NaN.
template <int E, int M, int BIAS, int KIND>
static __device__ __forceinline__ unsigned char partita_f8_encode(float f, bool saturate) {
  const float top = ldexpf((float)((2 << M) - (KIND == 1 ? 2 : 1)), (1 << E) - (KIND == 0 ? 2 : 1) - BIAS - M);
  unsigned u;
  memcpy(&u, &f, 4);
  const unsigned char sign = (unsigned char)((u >> 31) << 7);
  const unsigned char nan = KIND == 2 ? 0x80 : (unsigned char)(sign | 0x7f);
  if (f != f) {
    if (KIND != 0) return nan;
    const unsigned payload = (u >> (23 - M)) & ((1u << M) - 1);  // a quiet NaN if it does not show
    return (unsigned char)(sign | (((1 << E) - 1) << M) | (payload ? payload : 1u << (M - 1)));
  }
  float a = fabsf(f);
  if (saturate && a > top) a = top;
  unsigned au;
  memcpy(&au, &a, 4);
  const int emin = 1 - BIAS;  // the exponent of the smallest normal value
  const int e = (int)(au >> 23) - 127;  // floor(log2 a); an f32 subnormal lies far below emin
  const int ulp = (e < emin ? emin : e) - M;
  const float r = ldexpf(rintf(ldexpf(a, -ulp)), ulp);  // exact: a carry only raises the exponent
  if (r > top) return KIND == 0 ? (unsigned char)(sign | (((1 << E) - 1) << M)) : nan;
  if (r == 0.0f) return KIND == 2 ? 0 : sign;
  unsigned ru;
  memcpy(&ru, &r, 4);
  const int re = (int)((ru >> 23) & 0xff) - 127;
  if (re < emin) return (unsigned char)(sign | (unsigned)ldexpf(r, M - emin));  // subnormal
  return (unsigned char)(sign | ((re + BIAS) << M) | ((ru >> (23 - M)) & ((1u << M) - 1)));
}
"""
"""Decoding and encoding of the 8-bit floats (``FLOAT8_FORMATS``), which ``ld_`` / ``st_``
/ ``rn_`` / ``sat_`` (a saturating round) of each format call."""


def _float8_helpers(name: str) -> str:
    args = ", ".join(str(v) for v in FLOAT8_FORMATS[name])
    return (
        f"static __device__ __forceinline__ float ld_{name}(unsigned char x) {{ return partita_f8_decode<{args}>(x); }}\n"
        f"static __device__ __forceinline__ unsigned char st_{name}(float x) {{ return partita_f8_encode<{args}>(x, false); }}\n"
        f"static __device__ __forceinline__ float rn_{name}(float x) {{ return ld_{name}(st_{name}(x)); }}\n"
        f"static __device__ __forceinline__ float sat_{name}(float x) {{ return ld_{name}(partita_f8_encode<{args}>(x, true)); }}\n"
    )


def _sub_byte_helpers(name: str) -> str:
    bits, signed = SUB_BYTE_INTEGERS[name]
    if signed:  # sign-extended from the low bits, whatever the high ones hold
        wrap = f"(int)((unsigned)(x) << {32 - bits}) >> {32 - bits}"
        ct = "int"
    else:
        wrap = f"(x) & {(1 << bits) - 1}u"
        ct = "unsigned int"
    return (
        f"static __device__ __forceinline__ {ct} ld_{name}(unsigned char x) {{ return {wrap}; }}\n"
        f"static __device__ __forceinline__ unsigned char st_{name}({ct} x) {{ return (unsigned char)(x & {(1 << bits) - 1}u); }}\n"
        f"static __device__ __forceinline__ {ct} rn_{name}({ct} x) {{ return {wrap}; }}\n"
    )


NARROW_HELPERS = {
    "f4E2M1FN": r"""
// FP4 (E2M1): the values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives in the low nibble.
static __device__ __forceinline__ float ld_f4E2M1FN(unsigned char b) {
  const int e = (b >> 1) & 3, m = b & 1;
  const float v = e == 0 ? 0.5f * (float)m : ldexpf(1.0f + 0.5f * (float)m, e - 1);
  return (b & 8) ? -v : v;
}
// Round to nearest even; past 6: 6 (the format has no infinity); a NaN becomes the zero of
// the other sign (ml_dtypes' conversion, which the reference is).
static __device__ __forceinline__ unsigned char partita_f4_encode(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  const unsigned char sign = (unsigned char)((u >> 31) << 3);
  if (f != f) return sign ^ 8;
  const float a = fabsf(f);
  const unsigned char code = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3
                           : a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.0f ? 6 : 7;
  return sign | code;
}
static __device__ __forceinline__ unsigned char st_f4E2M1FN(float x) { return partita_f4_encode(x); }
static __device__ __forceinline__ float rn_f4E2M1FN(float x) { return ld_f4E2M1FN(partita_f4_encode(x)); }
static __device__ __forceinline__ float sat_f4E2M1FN(float x) { return rn_f4E2M1FN(x); }
""",
    "f8E8M0FNU": r"""
// E8M0 (an MX block scale): the byte is a float's biased exponent (bias 127, no sign, no
// mantissa), 0xFF NaN; byte 0 is 2^-127, an f32 subnormal.
static __device__ __forceinline__ float ld_f8E8M0FNU(unsigned char b) {
  return __int_as_float(b == 0xFF ? 0x7fc00000 : b == 0 ? 0x00400000 : (int)b << 23);
}
// ONNX Cast's round_mode: 0 up (any fraction raises the exponent), 1 down, 2 nearest (half
// or more; for a subnormal, more than half). NaN and infinity become NaN; a carry past
// 2^127 is NaN unless saturating.
static __device__ __forceinline__ unsigned char partita_e8m0_encode(float f, int mode, bool saturate) {
  unsigned u;
  memcpy(&u, &f, 4);
  const unsigned e = (u >> 23) & 0xFF, fraction = u & 0x7FFFFF;
  if (e == 0xFF) return 0xFF;
  bool carry = mode == 0 ? fraction != 0
             : mode == 2 && (fraction & 0x400000) && ((fraction & 0x3FFFFF) || e > 0);
  if (saturate && e == 0xFE) carry = false;
  return (unsigned char)(e + carry);
}
// Storing an E8M0 value (a power of two or NaN) keeps it: rounding down is exact there.
static __device__ __forceinline__ unsigned char st_f8E8M0FNU(float x) { return partita_e8m0_encode(x, 1, true); }
static __device__ __forceinline__ float rn_f8E8M0FNU(float x) { return ld_f8E8M0FNU(st_f8E8M0FNU(x)); }
""",
}
"""Decoding and encoding of FP4 and E8M0 (``NARROW_FLOATS``), by type."""
TRUNCATE_IN_RANGE = r"""
// A float into a sub-byte integer as the reference defines it (ml_dtypes >= 0.7, ONNX's
// reference with it): truncated toward zero, and 0 where that is outside [lo, hi] (NaN
// and infinities too). Compared in the float's own type before any conversion, so the
// host's x86 and the GPU, whose out-of-range conversions differ, agree.
template <class T>
static __device__ __forceinline__ int partita_trunc_in(T f, int lo, int hi) {
  return f > (T)(lo - 1) && f < (T)(hi + 1) ? (int)f : 0;
}
"""


_HELPERS = {
    "f16": (
        "static __device__ __forceinline__ float ld_f16(__half x) { return __half2float(x); }\n"
        "static __device__ __forceinline__ __half st_f16(float x) { return __float2half_rn(x); }\n"
        "static __device__ __forceinline__ float rn_f16(float x) { return __half2float(__float2half_rn(x)); }\n"
    ),
    "bf16": (
        "static __device__ __forceinline__ float ld_bf16(__nv_bfloat16 x) { return __bfloat162float(x); }\n"
        "static __device__ __forceinline__ __nv_bfloat16 st_bf16(float x) { return __float2bfloat16_rn(x); }\n"
        "static __device__ __forceinline__ float rn_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }\n"
    ),
}


@dataclass(frozen=True)
class CudaProgram:
    """The CUDA C of several kernels, in one NVRTC program."""

    code: str
    kernels: dict[str, FusedKernel]
    """By function name, in module order."""
    lines: dict[str, tuple[int, int]]
    """By function name: the first and last line (1-based) of its kernel in ``code``."""

    def entries_at_line(self, line: int) -> list[str]:
        """Functions whose kernel spans ``line`` (NVRTC errors name them)."""
        return [name for name, (lo, hi) in self.lines.items() if lo <= line <= hi]


def emit_program(functions: Sequence[FuncOp], arch: str = "") -> CudaProgram:
    """One translation unit with the kernel of every function, entries named after them,
    for ``arch`` (default: each function's cuda target's)."""
    taken: set[str] = set()
    kernels = {f.sym_name.data: emit_kernel(f, _entry_name(f.sym_name.data, taken), arch) for f in functions}
    dtypes = {k.output_dtype for k in kernels.values()} | {t for k in kernels.values() for t in k.dtypes}
    codes = [k.code for k in kernels.values()]

    def uses(text: str) -> bool:  # a helper is emitted where some kernel calls it
        return any(text in code for code in codes)

    # An f16 / bf16 value may live only inside a kernel (an f32 one rounding through f16
    # where to-mixed-precision casts around its ops): its helpers follow the code too.
    halves = [t for t in ("f16", "bf16") if t in dtypes or uses(f"_{t}(")]
    head = "// Fused kernels generated by Partita (cuda-codegen)\n"
    head += "".join(f"#include <{_HEADERS[t]}>\n" for t in halves)
    head += "".join(_HELPERS[t] for t in halves)

    float8 = [t for t in FLOAT8_FORMATS if uses(f"_{t}(")]
    if float8:
        head += FLOAT8_HELPERS + "".join(_float8_helpers(t) for t in float8)
    head += "".join(_sub_byte_helpers(t) for t in SUB_BYTE_INTEGERS if uses(f"_{t}("))
    head += "".join(NARROW_HELPERS[t] for t in NARROW_FLOATS if uses(f"_{t}("))
    if uses("partita_trunc_in("):
        head += TRUNCATE_IN_RANGE
    head += "".join(_mma_helper(t) for t in MMA_DTYPES if uses(f"partita_mma_{t}("))
    head += "".join(_mma_helper(a, b) for a in MMA_INT_DTYPES for b in MMA_INT_DTYPES
                    if uses(f"partita_mma_{a}_{b}("))
    if uses("partita_ldmatrix_x4("):
        head += LDMATRIX_HELPER
    if uses("partita_cp_async16("):
        head += ASYNC_COPY_HELPER
    if uses("partita_random_"):
        head += PHILOX
    if uses("partita_gather_index("):
        head += GATHER_INDEX
    if uses("partita_v16"):
        head += VECTOR16
    head += "".join(_row_sum_helper(t) for t in MMA_INT_DTYPES if uses(f"partita_row_sum_{t}("))
    if any(k.kind == "rowwise" for k in kernels.values()):
        head += _REDUCE_HELPERS + ONE_PASS_HELPERS
    parts = [head]
    lines: dict[str, tuple[int, int]] = {}
    line = head.count("\n") + 1
    for name, kernel in kernels.items():
        parts.append("\n" + kernel.code)
        first = line + 1
        line += 1 + kernel.code.count("\n")
        lines[name] = (first, line - 1)
    return CudaProgram("".join(parts), kernels, lines)
