"""One-pass row statistics of the ``rowwise`` normalization kernels.

Softmax, layer_norm and rms_norm read their row once for its statistics and once more for
the output (the old schedules took two or three passes before the output one):

* softmax keeps an *online* ``(max, sum of exp(x - max))`` pair per thread (Milakov and
  Gimelshein, "Online normalizer calculation for softmax", 2018): a larger maximum rescales
  the sum, and two partial pairs merge the same way across the block;
* layer_norm keeps Welford's ``(count, mean, M2)`` per thread, folded one 16-byte vector at a
  time (the vector's own mean and M2, then Chan et al.'s parallel merge) or one element at a
  time (scalar rows), and merged across the block with the same rule: f32 throughout, no
  ``E[x^2] - E[x]^2`` cancellation;
* rms_norm needs the sum of squares only (one fold).

The C helpers below join the program's row-reduction helpers (``partita_v16``, the warp /
block reductions); the emitter calls ``softmax_stats`` / ``welford_stats`` / ``square_stats``
for the lines of the statistics pass. NaN and infinities follow NumPy's two-pass
reference: a NaN in the row makes it NaN, a row of ``-inf`` gives NaN, masked (``-inf``)
elements weigh nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ONE_PASS_HELPERS", "RowElement", "fold_pass", "softmax_stats", "square_stats", "welford_stats"]

_NEG_INF = "__int_as_float(0xff800000)"

ONE_PASS_HELPERS = (
    "// Online softmax statistics: (m, s) = (running max, sum of exp(x - m)).\n"
    "static __device__ __forceinline__ void partita_softmax_merge(float& m, float& s, float m2, float s2) {\n"
    "  const float mn = fmaxf(m, m2);\n"
    f"  if (mn == {_NEG_INF}) {{ s += s2; return; }}  // both empty (0) or NaN\n"
    "  s = s * expf(m - mn) + s2 * expf(m2 - mn);\n"
    "  m = mn;\n"
    "}\n"
    "static __device__ __forceinline__ void partita_block_softmax(float& m, float& s, float* red_m, float* red_s) {\n"
    "  const int lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);\n"
    "    partita_softmax_merge(m, s, m2, s2);\n"
    "  }\n"
    "  if (lane == 0) { red_m[threadIdx.x >> 5] = m; red_s[threadIdx.x >> 5] = s; }\n"
    "  __syncthreads();\n"
    f"  m = lane < warps ? red_m[lane] : {_NEG_INF};\n"
    "  s = lane < warps ? red_s[lane] : 0.0f;\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);\n"
    "    partita_softmax_merge(m, s, m2, s2);\n"
    "  }\n"
    "  __syncthreads();\n"
    "}\n"
    "// Welford statistics (count n, mean, M2 = sum of squared deviations); Chan's merge.\n"
    "static __device__ __forceinline__ void partita_welford_merge(float& n, float& mean, float& m2,\n"
    "                                                             float nb, float meanb, float m2b) {\n"
    "  if (nb == 0.0f) return;\n"
    "  const float nn = n + nb, delta = meanb - mean, wb = nb / nn;\n"
    "  mean += delta * wb;\n"
    "  m2 += m2b + delta * delta * n * wb;\n"
    "  n = nn;\n"
    "}\n"
    "static __device__ __forceinline__ void partita_block_welford(float& n, float& mean, float& m2, float* red) {\n"
    "  const int lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const float nb = __shfl_xor_sync(0xffffffffu, n, o), mb = __shfl_xor_sync(0xffffffffu, mean, o);\n"
    "    const float qb = __shfl_xor_sync(0xffffffffu, m2, o);\n"
    "    partita_welford_merge(n, mean, m2, nb, mb, qb);\n"
    "  }\n"
    "  if (lane == 0) { const int w = threadIdx.x >> 5; red[w] = n; red[32 + w] = mean; red[64 + w] = m2; }\n"
    "  __syncthreads();\n"
    "  n = lane < warps ? red[lane] : 0.0f;\n"
    "  mean = lane < warps ? red[32 + lane] : 0.0f;\n"
    "  m2 = lane < warps ? red[64 + lane] : 0.0f;\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const float nb = __shfl_xor_sync(0xffffffffu, n, o), mb = __shfl_xor_sync(0xffffffffu, mean, o);\n"
    "    const float qb = __shfl_xor_sync(0xffffffffu, m2, o);\n"
    "    partita_welford_merge(n, mean, m2, nb, mb, qb);\n"
    "  }\n"
    "  __syncthreads();\n"
    "}\n"
)
"""Device helpers of the one-pass statistics (after the row-reduction helpers)."""


@dataclass(frozen=True)
class RowElement:
    """How a pass over row ``r`` gets one of its elements as a float: with ``width``
    elements per iteration ``jv`` (one 16-byte vector of each operand read at the element,
    loaded by ``vector``), or one element ``j`` per iteration (``width`` 0); ``lines`` run per
    element (``j`` declared) before ``expr`` is its value. A plain row is a load of ``xr``; a
    row computed by fused element-wise producers is their expression, inlined."""

    width: int
    expr: str
    lines: tuple[str, ...] = ()
    vector: tuple[str, ...] = ()


def _loop(T: str, x: RowElement, body: list[str]) -> list[str]:
    """A pass over the row, ``body`` seeing the element as ``t`` (scalar rows) or the
    iteration's elements as ``f[0..width)`` (vector rows)."""
    if not x.width:
        return [
            f"    for ({T} j = threadIdx.x; j < cols; j += blockDim.x) {{",
            *(f"      {line}" for line in x.lines),
            f"      const float t = {x.expr};",
            *(f"      {line}" for line in body),
            "    }",
        ]
    w = x.width
    return [
        f"    for ({T} jv = threadIdx.x; jv < cols / {w}; jv += blockDim.x) {{",
        *(f"      {line}" for line in x.vector),
        f"      float f[{w}];",
        "      #pragma unroll",
        f"      for (int u = 0; u < {w}; ++u) {{",
        *([f"        const {T} j = jv * {w} + u;"] if x.lines else []),  # the producers' index
        *(f"        {line}" for line in x.lines),
        f"        f[u] = {x.expr};",
        "      }",
        *(f"      {line}" for line in body),
        "    }",
    ]


def softmax_stats(T: str, x: RowElement) -> list[str]:
    """Lines leaving the row's max in ``mx`` and ``sum(exp(x - mx))`` in ``sum`` (every
    thread), from one read of the row."""
    if x.width:
        body = [
            f"float vm = {_NEG_INF};",
            "#pragma unroll",
            f"for (int u = 0; u < {x.width}; ++u) vm = fmaxf(vm, f[u]);",
            "const float mn = fmaxf(mx, vm);",
            "if (mn > mx) { sum *= expf(mx - mn); mx = mn; }",
            "#pragma unroll",
            f"for (int u = 0; u < {x.width}; ++u) sum += f[u] == {_NEG_INF} ? 0.0f : expf(f[u] - mx);",
        ]
    else:
        body = [
            "const float mn = fmaxf(mx, t);",
            "if (mn > mx) { sum *= expf(mx - mn); mx = mn; }",
            f"sum += t == {_NEG_INF} ? 0.0f : expf(t - mx);",
        ]
    return [
        "    __shared__ float red_s[32];",
        f"    float mx = {_NEG_INF}, sum = 0.0f;",
        *_loop(T, x, body),
        "    partita_block_softmax(mx, sum, red, red_s);",
    ]


def welford_stats(T: str, x: RowElement) -> list[str]:
    """Lines leaving the row's ``mean`` and (biased) ``var`` in every thread, from one read
    of the row (Welford per thread, Chan's merge per vector and across the block)."""
    if x.width:
        w = x.width
        body = [
            "float vs = 0.0f, vq = 0.0f;",
            "#pragma unroll",
            f"for (int u = 0; u < {w}; ++u) vs += f[u];",
            f"const float vmean = vs * {1.0 / w!r}f;",
            "#pragma unroll",
            f"for (int u = 0; u < {w}; ++u) {{ const float d = f[u] - vmean; vq += d * d; }}",
            f"partita_welford_merge(wn, mean, wq, {w}.0f, vmean, vq);",
        ]
    else:
        body = ["wn += 1.0f;", "const float d = t - mean;", "mean += d / wn;", "wq += d * (t - mean);"]
    return [
        "    __shared__ float red_w[96];",
        "    float wn = 0.0f, mean = 0.0f, wq = 0.0f;",
        *_loop(T, x, body),
        "    partita_block_welford(wn, mean, wq, red_w);",
        "    const float var = wq / (float)cols;",
    ]


def square_stats(T: str, x: RowElement) -> list[str]:
    """Lines leaving the row's mean square ``ms`` in every thread (one read of the row)."""
    body = (["#pragma unroll", f"for (int u = 0; u < {x.width}; ++u) ms += f[u] * f[u];"]
            if x.width else ["ms += t * t;"])
    return ["    float ms = 0.0f;", *_loop(T, x, body),
            "    ms = partita_block_sum(ms, red) / (float)cols;"]


def fold_pass(T: str, x: RowElement, step: list[str], ctype: str) -> list[str]:
    """A pass folding each element, as ``v`` of C type ``ctype``, with the ``step`` lines
    (a row reduction's fold; ``j`` is the element's index along the row)."""
    if not x.width:
        return [
            f"    for ({T} j = threadIdx.x; j < cols; j += blockDim.x) {{",
            *(f"      {line}" for line in x.lines),
            f"      const {ctype} v = {x.expr};",
            *(f"      {line}" for line in step),
            "    }",
        ]
    w = x.width
    return [
        f"    for ({T} jv = threadIdx.x; jv < cols / {w}; jv += blockDim.x) {{",
        *(f"      {line}" for line in x.vector),
        f"      for (int u = 0; u < {w}; ++u) {{",
        f"        const {T} j = jv * {w} + u;",
        *(f"        {line}" for line in x.lines),
        f"        const {ctype} v = {x.expr};",
        *(f"        {line}" for line in step),
        "      }",
        "    }",
    ]
