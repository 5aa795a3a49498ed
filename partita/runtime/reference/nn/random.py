"""NumPy reference of ``nn.random``: Philox-4x32-10 over the flat element index, the
draws the device kernel makes (``partita.lowering.cuda.ops.random``), computed the same
way: uniform draws bit for bit, normal ones to the last bits of the double-precision
``log`` and ``cos`` (the device's and the host's libm may differ by an ulp there)."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.runtime.reference.nn.base import store
from partita.runtime.reference.nn.indexing import with_refs

__all__ = ["philox4x32", "random_draws"]

PHILOX_M = (0xD2511F53, 0xCD9E8D57)
"""Philox-4x32's round multipliers."""
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
"""Its key schedule's increments (the golden ratio and sqrt(3) - 1, in 32 bits)."""
PHILOX_ROUNDS = 10
_MASK = np.uint64(0xFFFFFFFF)


def philox4x32(counter: tuple[np.ndarray, ...], key: int) -> tuple[np.ndarray, ...]:
    """Philox-4x32-10 of the counters given as their four 32-bit words (arrays of one
    shape, uint64 holding 32 bits) under the 64-bit ``key``: its four output words."""
    c = [np.asarray(w, dtype=np.uint64) for w in counter]
    k0, k1 = np.uint64(key & 0xFFFFFFFF), np.uint64(key >> 32)
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    for r in range(PHILOX_ROUNDS):
        p0, p1 = m0 * c[0], m1 * c[2]  # 32 x 32 -> 64 bits: exact in uint64
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & _MASK, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & _MASK]
        if r + 1 < PHILOX_ROUNDS:
            k0 = (k0 + np.uint64(PHILOX_W[0])) & _MASK
            k1 = (k1 + np.uint64(PHILOX_W[1])) & _MASK
    return tuple(c)


def random_draws(distribution: str, size: int, seed: int) -> np.ndarray:
    """The ``size`` draws of ``nn.random`` (float64, before ``loc`` and ``scale``):
    element ``i`` from the first two words of Philox at counter ``(i, 0)`` (its low and
    high words, then two zeros)."""
    index = np.arange(size, dtype=np.uint64)
    zero = np.zeros_like(index)
    x0, x1, _, _ = philox4x32((index & _MASK, index >> np.uint64(32), zero, zero), seed)
    if distribution == "uniform":
        # 53 random bits: 27 from the first word, 26 from the second (exact in float64)
        return ((x0 >> np.uint64(5)).astype(np.float64) * 67108864.0
                + (x1 >> np.uint64(6)).astype(np.float64)) * 2.0 ** -53
    # Box-Muller: u1 in (0, 1] (no log of 0), u2 in [0, 1)
    u1 = (x0.astype(np.float64) + 1.0) * 2.0 ** -32
    u2 = x1.astype(np.float64) * 2.0 ** -32
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


@register_impls
class RandomFunctions(InterpreterFunctions):
    """Reference semantics of the random draws."""

    @impl(nn.RandomOp)
    def run_random(self, interpreter: Interpreter, op: nn.RandomOp, args: tuple[Any, ...]):
        shape = with_refs(op, list(op.result.type.get_shape()), args)
        draws = random_draws(op.distribution, int(np.prod(shape, dtype=np.int64)), op.seed)
        values = op.loc + op.scale * draws  # float64, as the kernel computes it
        dtype = nn.numpy_dtype(op.result.type.element_type)
        if dtype != np.float64:  # the kernel rounds to f32 first, then to a narrower type
            values = values.astype(np.float32)
        return store(op, values.reshape(shape))
