"""NumPy references of the ``nn`` linear-algebra ops."""

from __future__ import annotations

import numpy as np
from xdsl.interpreter import InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.runtime.reference.nn.base import (
    channel,
    in_compute_type,
)


@register_impls
class LinalgFunctions(InterpreterFunctions):
    """Reference semantics of the ``nn`` linear-algebra ops."""

    # -- linear algebra ----------------------------------------------------------------
    run_det = impl(nn.DetOp)(in_compute_type(lambda op, x: np.linalg.det(x)))
    run_dense = impl(nn.DenseOp)(in_compute_type(lambda op, x, w: x @ w.T))
    run_matmul = impl(nn.MatmulOp)(in_compute_type(lambda op, a, b: a @ b))

    @impl(nn.BatchMatmulOp)
    @in_compute_type
    def run_batch_matmul(op: nn.BatchMatmulOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if op.transpose_a:
            a = a.transpose(0, 2, 1)
        if op.transpose_b:
            b = b.transpose(0, 2, 1)
        return a @ b

    @impl(nn.MatmulIntegerOp)
    def run_matmul_integer(self, interpreter, op: nn.MatmulIntegerOp, args):
        a, b, za, zb = (np.asarray(v).astype(np.int32) for v in args)
        if op.transpose_b:
            b = np.swapaxes(b, -1, -2)
        return ((a - za.reshape(())) @ (b - zb.reshape(())),)

    @impl(nn.MatmulFloat8Op)
    def run_matmul_float8(self, interpreter, op: nn.MatmulFloat8Op, args):
        # Products of 8-bit floats are exact in f32; the sum is taken in f64 and rounded
        # once, the most accurate of the orders a GEMM's f32 accumulation may use.
        a, b = (np.asarray(v).astype(np.float64) for v in args)
        if op.transpose_b:
            b = np.swapaxes(b, -1, -2)
        return ((a @ b).astype(np.float32),)

    @impl(nn.MatmulNBitsOp)
    def run_matmul_nbits(self, interpreter, op: nn.MatmulNBitsOp, args):
        x, packed, scales, zero_points = (np.asarray(v) for v in args)
        codes = nn.unpack_nibbles(packed)  # [N, K]
        blocks = np.repeat(np.arange(scales.shape[1]), op.block_size)
        weight = (codes.astype(np.float32) - zero_points[:, blocks]) * scales[:, blocks].astype(np.float32)
        return ((x.astype(np.float32) @ weight.T).astype(x.dtype),)

    @impl(nn.BiasAddOp)
    @in_compute_type
    def run_bias_add(op: nn.BiasAddOp, x: np.ndarray, bias: np.ndarray) -> np.ndarray:
        return x + channel(bias, x.ndim, op.axis % x.ndim)
