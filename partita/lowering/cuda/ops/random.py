"""CUDA lowering rule of ``nn.random``: one thread per output element draws it from
Philox-4x32-10 at its flat index (``PHILOX`` below, emitted into a program where a kernel
calls it), the generator of the reference (``partita.runtime.reference.nn.random``)."""

from __future__ import annotations

from partita.dialects import nn
from partita.lowering.cuda.cexpr import _add, _mul
from partita.lowering.cuda.ops.indexing import derived_dims, literal
from partita.lowering.cuda.rules import injective

__all__ = ["PHILOX"]

PHILOX = r"""
// Philox-4x32-10 (Salmon et al., cuRAND's and JAX's counter-based generator): the first
// two output words at counter (i, 0, 0) under the 64-bit key (partita.runtime.reference.nn.random).
static __device__ __forceinline__ void partita_philox(unsigned long long i, unsigned long long key,
                                                      unsigned& x0, unsigned& x1) {
  unsigned c0 = (unsigned)i, c1 = (unsigned)(i >> 32), c2 = 0u, c3 = 0u;
  unsigned k0 = (unsigned)key, k1 = (unsigned)(key >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    const unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;
    c1 = (unsigned)p1; c3 = (unsigned)p0; c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  x0 = c0; x1 = c1;
}
// loc + scale * draw in double, rounded once each (no fused multiply-add: the reference's
// NumPy arithmetic rounds the product, then the sum).
static __device__ __forceinline__ double partita_affine(double loc, double scale, double draw) {
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
  return __dadd_rn(loc, __dmul_rn(scale, draw));
#else  // a host build of the kernel (tests): x86-64 has no FMA unless asked
  return loc + scale * draw;
#endif
}
// A uniform draw in [0, 1): 53 random bits, 27 of the first word and 26 of the second.
static __device__ __forceinline__ double partita_random_uniform(unsigned long long i, unsigned long long key,
                                                                double loc, double scale) {
  unsigned x0, x1;
  partita_philox(i, key, x0, x1);
  return partita_affine(loc, scale, ((double)(x0 >> 5) * 67108864.0 + (double)(x1 >> 6)) * 1.1102230246251565e-16);
}
// A standard normal draw by Box-Muller: u1 in (0, 1] (no log of 0), u2 in [0, 1).
static __device__ __forceinline__ double partita_random_normal(unsigned long long i, unsigned long long key,
                                                               double loc, double scale) {
  unsigned x0, x1;
  partita_philox(i, key, x0, x1);
  const double u1 = ((double)x0 + 1.0) * 2.3283064365386963e-10, u2 = (double)x1 * 2.3283064365386963e-10;
  return partita_affine(loc, scale, sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
"""


@injective(nn.RandomOp, dims=derived_dims)
def _random(emitter, op: nn.RandomOp, index: list[str]) -> str:
    dims = derived_dims(emitter, op)
    flat = index[0] if index else "0"
    for d, i in zip(dims[1:], index[1:]):  # the element's row-major flat index
        flat = _add(_mul(f"(unsigned long long){flat}", d), i)
    draw = (f"partita_random_{op.distribution}((unsigned long long)({flat}), {op.seed}ull, "
            f"{literal(op.loc, 'double')}, {literal(op.scale, 'double')})")
    # f16 / bf16 / f32 results are rounded to f32 first (then stored), as the reference does
    return draw if emitter.ctype(op.result) == "double" else f"(float){draw}"
