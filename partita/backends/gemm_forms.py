"""The GEMM forms CUTLASS takes: which ``op(a) @ op(b)`` with NumPy batch broadcasting is
one (batched) CUTLASS GEMM, and which add after a GEMM is a residual its epilogue reads.
Below the lowering: the ``cutlass`` pattern table asks it which matches to take, and the
CUTLASS codegen reads the same problem dims and residual off it, so the two never
disagree."""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, OpResult, SSAValue

from partita.ir.constants import constant_values

__all__ = ["INT8_GEMM_MAX_K", "batched_gemm", "is_zero_constant", "residual_of", "why_not_int8_gemm"]

INT8_GEMM_MAX_K = 1 << 16
"""The longest K an int8 tensor-core GEMM takes: each product of shifted 8-bit values is
at most 255 * 128 in magnitude, so an i32 sum of 2**16 of them stays below the IMMA's
saturation (past it the kernel would clamp where the i32 reference wraps)."""


def is_zero_constant(value: SSAValue) -> bool:
    """Whether ``value`` is a constant of zeros (an int8 GEMM's zero points the IMMA kernel
    need not read)."""
    return isinstance(value, OpResult) and value.op.name in ("nn.constant", "arith.constant") \
        and not constant_values(value.op).any()


def why_not_int8_gemm(N: int | None, K: int | None) -> str:
    """Why an int8 TN GEMM ``[M, K] x [N, K]^T`` is no CUTLASS IMMA kernel ('' when it
    is): 16-byte (16 element) operand accesses need K % 16 == 0, 16-byte i32 output
    accesses N % 4 == 0."""
    if K is None or K % 16:
        return f"int8 tensor-op GEMMs read 16 elements per access: K = {K} is not a multiple of 16"
    if N is None or N % 4:
        return f"int8 tensor-op GEMMs write 4 i32 per access: N = {N} is not a multiple of 4"
    if K > INT8_GEMM_MAX_K:
        return f"K = {K} > {INT8_GEMM_MAX_K}: the IMMA's i32 sums could saturate"
    return ""


def residual_of(add: Operation, gemm: Operation) -> SSAValue | None:
    """``r`` of ``add(gemm, r)`` / ``add(r, gemm)`` when it is a residual CUTLASS reads as
    its epilogue's source C: of the GEMM result's shape (not a bias row broadcast over it)
    and no operand of the GEMM (a kernel argument has one role); else None."""
    result = gemm.results[0]
    operands = list(add.operands)
    if operands.count(result) != 1:
        return None
    residual = operands[1 - operands.index(result)]
    if residual in gemm.operands:
        return None
    values = (residual, result, add.results[0])
    if not all(isinstance(v.type, TensorType) for v in values):
        return None
    return residual if len({tuple(v.type.get_shape()) for v in values}) == 1 else None  # type: ignore[attr-defined]


def _dim_or_none(d: int) -> int | None:
    return None if d < 0 else d


def _prod_or_none(dims: Sequence[int]) -> int | None:
    return None if any(d < 0 for d in dims) else math.prod(dims)


def batched_gemm(a: Sequence[int], b: Sequence[int], transpose_a: bool, transpose_b: bool
                 ) -> dict[str, object] | str:
    """The batched-GEMM reading of ``op(a) @ op(b)`` with NumPy batch broadcasting (shapes
    with -1 for run-time dims): ``batch``, ``M``, ``N``, ``K`` (``None`` if dynamic) and
    which operand is broadcast over the batch; or why CUTLASS cannot take it. A plain
    ``a[..., M, K]`` times a matrix folds the batch into M (one GEMM)."""
    if len(a) < 2 or len(b) < 2:
        return "CUTLASS GEMMs need operands of rank >= 2"
    bat_a, bat_b = tuple(a[:-2]), tuple(b[:-2])
    M = _dim_or_none(a[-1] if transpose_a else a[-2])
    K = _dim_or_none(a[-2] if transpose_a else a[-1])
    N = _dim_or_none(b[-2] if transpose_b else b[-1])
    dims: dict[str, object] = {"M": M, "N": N, "K": K, "broadcast_a": False, "broadcast_b": False}
    ones_a, ones_b = all(d == 1 for d in bat_a), all(d == 1 for d in bat_b)
    if ones_b and not transpose_a and len(a) >= len(b):
        dims.update(batch=1, M=_prod_or_none(a[:-1]))   # one GEMM over every row of a
    elif ones_b:
        dims.update(batch=_prod_or_none(bat_a), broadcast_b=len(bat_a) > 0)
    elif ones_a and len(b) >= len(a):
        dims.update(batch=_prod_or_none(bat_b), broadcast_a=True)
    elif len(bat_a) == len(bat_b) and all(x == y or (x < 0 and y != 1) or (y < 0 and x != 1)
                                          for x, y in zip(bat_a, bat_b)):
        # equal batch dims (a run-time one is checked against the other side at every call)
        dims.update(batch=_prod_or_none([max(x, y) if min(x, y) >= 0 or max(x, y) > 1 else -1
                                         for x, y in zip(bat_a, bat_b)]))
    else:
        return f"CUTLASS batched GEMMs broadcast a whole operand, not batch dims {list(bat_a)} against {list(bat_b)}"
    if dims["broadcast_a"] and dims["batch"] == 1:
        dims["broadcast_a"] = False
    if dims["broadcast_b"] and dims["batch"] == 1:
        dims["broadcast_b"] = False
    return dims
