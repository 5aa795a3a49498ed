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

__all__ = ["ONE_PASS_HELPERS", "ROW_UNROLL", "VECTOR16", "RowElement", "RowSchedule", "fold_pass", "row_schedule",
           "softmax_stats", "square_stats", "unroll_row", "welford_stats"]

_NEG_INF = "__int_as_float(0xff800000)"

VECTOR16 = (
    "// 16 bytes, read or written with one 128-bit access (LDG.E.128 / STG.E.128).\n"
    "struct alignas(16) partita_v16 { unsigned w[4]; };\n"
)
"""The vector type of the row and injective kernels' 16-byte accesses (emitted when used)."""

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
    "// Warp-wide versions (a warp per row): xor shuffles only, every lane gets the result.\n"
    "static __device__ __forceinline__ void partita_warp_softmax(float& m, float& s) {\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);\n"
    "    partita_softmax_merge(m, s, m2, s2);\n"
    "  }\n"
    "}\n"
    "static __device__ __forceinline__ void partita_warp_welford(float& n, float& mean, float& m2) {\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const float nb = __shfl_xor_sync(0xffffffffu, n, o), mb = __shfl_xor_sync(0xffffffffu, mean, o);\n"
    "    const float qb = __shfl_xor_sync(0xffffffffu, m2, o);\n"
    "    partita_welford_merge(n, mean, m2, nb, mb, qb);\n"
    "  }\n"
    "}\n"
    "template <class T, class Op>\n"
    "static __device__ __forceinline__ T partita_warp_reduce(T v, Op op) {\n"
    "  for (int o = 16; o > 0; o >>= 1) v = op(v, partita_shfl_xor(v, o));\n"
    "  return v;\n"
    "}\n"
    "template <class T, class Better>\n"
    "static __device__ __forceinline__ void partita_warp_arg(T& v, long long& at, Better better) {\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const T w = partita_shfl_xor(v, o);\n"
    "    const long long k = partita_shfl_xor(at, o);\n"
    "    if (better(w, k, v, at)) { v = w; at = k; }\n"
    "  }\n"
    "}\n"
)
"""Device helpers of the one-pass statistics and of warp-per-row kernels (after the
row-reduction helpers)."""

WARP_ROW_ITERATIONS = 256
"""Rows of at most this many loads (16-byte vectors, or elements for scalar rows: 8 per
lane) take a warp each; longer rows a block each."""
WARP_ROWS_PER_BLOCK = 4
"""Rows (warps) per block of the warp-per-row schedule: 128 threads."""
ROW_UNROLL = 4
"""Iterations of a pass over a row unrolled together (``#pragma unroll``): their loads
independent, a thread has this many 16-byte vectors in flight rather than one, which a
bandwidth-bound kernel needs to cover DRAM latency (Apex's and PyTorch's row kernels load
4 vectors a thread ahead of use)."""


@dataclass(frozen=True)
class RowSchedule:
    """How a ``rowwise`` kernel maps rows to threads, a named choice made from the row's
    length (``row_schedule``) and written in the kernel's record:

    * ``block-per-row``: a block strides along each row (grid-stride over rows), partial
      results combined across the block (warp shuffles, then shared memory);
    * ``warp-per-row``: each warp of the block takes its own row (short rows: a block per
      row would leave most threads idle and pay block barriers for nothing), combined with
      warp shuffles alone; ``rows_per_block`` rows per block.

    Both read the row in 16-byte vectors when its length allows (``RowElement.width``).
    The C spelled here is what the row passes use: ``lane`` / ``stride`` (the thread's
    first index along the row, and the step), ``live`` (the guard of a warp past the last
    row), ``reduce`` (the warp or block combine of a helper)."""

    name: str
    threads: int
    rows_per_block: int = 1

    @property
    def warp(self) -> bool:
        return self.rows_per_block > 1

    @property
    def lane(self) -> str:
        return "lane" if self.warp else "threadIdx.x"

    @property
    def stride(self) -> str:
        return "32" if self.warp else str(self.threads)

    @property
    def live(self) -> str:
        return "live && " if self.warp else ""

    def reduce(self, helper: str, *args: str, shared: tuple[str, ...] = ()) -> str:
        """The call combining ``args`` across the row's threads (``shared``: the block
        version's shared arrays)."""
        scope = "warp" if self.warp else "block"
        return f"partita_{scope}_{helper}({', '.join([*args, *(() if self.warp else shared)])})"

    def row_loop(self, T: str) -> list[str]:
        """The loop over the rows (``r``) a block takes, opened (one ``}`` closes it)."""
        if not self.warp:
            return [f"  for ({T} r = blockIdx.x; r < rows; r += gridDim.x) {{"]
        n = self.rows_per_block
        return [
            "  const int lane = threadIdx.x & 31;",
            f"  for ({T} r0 = ({T})blockIdx.x * {n}; r0 < rows; r0 += ({T})gridDim.x * {n}) {{",
            f"    const {T} r = r0 + (threadIdx.x >> 5);",
            "    const bool live = r < rows;  // every warp keeps going: the block's loop is uniform",
        ]


def row_schedule(rows, cols, width: int, block: int) -> RowSchedule:
    """The schedule of rows of ``cols`` elements (an ``int``, or a C expression when known at
    run time only) read ``width`` at a time (0: one), given the block a block-per-row
    schedule would take."""
    if isinstance(cols, int) and -(-cols // max(width, 1)) <= WARP_ROW_ITERATIONS:
        return RowSchedule("warp-per-row", 32 * WARP_ROWS_PER_BLOCK, WARP_ROWS_PER_BLOCK)
    return RowSchedule("block-per-row", block)


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


def unroll_row(x: RowElement) -> list[str]:
    """``ROW_UNROLL`` for a pass whose elements are plain loads of the row; a row computed
    by fused producers (gathers, several operands) keeps one iteration at a time, whose
    registers its expression needs."""
    return [] if x.lines else [f"    #pragma unroll {ROW_UNROLL}"]


def _loop(T: str, x: RowElement, body: list[str], s: RowSchedule) -> list[str]:
    """A pass over the row, ``body`` seeing the element as ``t`` (scalar rows) or the
    iteration's elements as ``f[0..width)`` (vector rows)."""
    if not x.width:
        return [
            *unroll_row(x),
            f"    for ({T} j = {s.lane}; {s.live}j < cols; j += {s.stride}) {{",
            *(f"      {line}" for line in x.lines),
            f"      const float t = {x.expr};",
            *(f"      {line}" for line in body),
            "    }",
        ]
    w = x.width
    return [
        *unroll_row(x),
        f"    for ({T} jv = {s.lane}; {s.live}jv < cols / {w}; jv += {s.stride}) {{",
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


def softmax_stats(T: str, x: RowElement, s: RowSchedule) -> list[str]:
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
        *([] if s.warp else ["    __shared__ float red_s[32];"]),
        f"    float mx = {_NEG_INF}, sum = 0.0f;",
        *_loop(T, x, body, s),
        f"    {s.reduce('softmax', 'mx', 'sum', shared=('red', 'red_s'))};",
    ]


def welford_stats(T: str, x: RowElement, s: RowSchedule) -> list[str]:
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
        *([] if s.warp else ["    __shared__ float red_w[96];"]),
        "    float wn = 0.0f, mean = 0.0f, wq = 0.0f;",
        *_loop(T, x, body, s),
        f"    {s.reduce('welford', 'wn', 'mean', 'wq', shared=('red_w',))};",
        "    const float var = wq / (float)cols;",
    ]


def square_stats(T: str, x: RowElement, s: RowSchedule) -> list[str]:
    """Lines leaving the row's mean square ``ms`` in every thread (one read of the row)."""
    body = (["#pragma unroll", f"for (int u = 0; u < {x.width}; ++u) ms += f[u] * f[u];"]
            if x.width else ["ms += t * t;"])
    return ["    float ms = 0.0f;", *_loop(T, x, body, s),
            f"    ms = {s.reduce('sum', 'ms', shared=('red',))} / (float)cols;"]


def fold_pass(T: str, x: RowElement, step: list[str], ctype: str, s: RowSchedule) -> list[str]:
    """A pass folding each element, as ``v`` of C type ``ctype``, with the ``step`` lines
    (a row reduction's fold; ``j`` is the element's index along the row)."""
    if not x.width:
        return [
            *unroll_row(x),
            f"    for ({T} j = {s.lane}; {s.live}j < cols; j += {s.stride}) {{",
            *(f"      {line}" for line in x.lines),
            f"      const {ctype} v = {x.expr};",
            *(f"      {line}" for line in step),
            "    }",
        ]
    w = x.width
    return [
        *unroll_row(x),
        f"    for ({T} jv = {s.lane}; {s.live}jv < cols / {w}; jv += {s.stride}) {{",
        *(f"      {line}" for line in x.vector),
        f"      for (int u = 0; u < {w}; ++u) {{",
        f"        const {T} j = jv * {w} + u;",
        *(f"        {line}" for line in x.lines),
        f"        const {ctype} v = {x.expr};",
        *(f"        {line}" for line in step),
        "      }",
        "    }",
    ]
