"""The schedules of anchored native CUDA kernels: rows (``rowwise``: softmax, layer_norm,
rms_norm and the row reductions of ``@rowwise`` rules, a warp or a block per row, one
statistics pass, 128-bit vector loads, element-wise producers of the row computed where it
is read: ``row_stats``), SIMT and
tensor-core (``mma.sync``) GEMM tiles, and pool windows, with the device helpers they call.
``ScheduleMixin`` is mixed into ``KernelEmitter``: its methods read the emitter's state
(``dims``, ``lines``, ``anchor``, ``index_type``, ``out_dims``)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import BlockArgument, Operation, SSAValue

from partita.dialects import nn
from partita.lowering.cuda.cexpr import _C_COMPUTE, _C_TYPES, MMA_DTYPES, Dim, _c_float, _dtype, _mul, _paren, _product
from partita.lowering.cuda.fusion import _SPATIAL, _rule_for, _rules
from partita.lowering.cuda.row_stats import (
    RowElement,
    RowSchedule,
    fold_pass,
    row_schedule,
    softmax_stats,
    square_stats,
    unroll_row,
    welford_stats,
)
from partita.lowering.cuda.rules import RowReduction, TiledProduct, WholeKernel

BLOCK_SIZE = 256
"""Threads per block of every fused kernel."""
WARP_WINDOW_BLOCK = 256
"""Threads a block of the warp-per-output window schedule: 8 warps, 8 outputs at a time."""
GEMM_TILE = 16
"""Output tile edge (and K step) of the SIMT GEMM kernels: 16x16 threads per block."""
MMA_TILE = 128
"""Output tile edge of the tensor-core GEMM kernels (f16 / bf16 operands; i8 / u8 ones
alike, with m16n8k32 products: ``MmaFamily``): 8 warps, 2 x 4, each a 64x32 register tile
of 4x4 ``mma.sync`` m16n8k16 products per k16 (CUTLASS's 128x128 threadblock of 64x32
warp tiles: 6 ``ldmatrix`` fragment loads feed 16 MMAs)."""
MMA_THREADS = 256
MMA_MIN_BLOCKS = 2
"""Blocks per SM the tensor-core tiles' registers must allow (``__launch_bounds__``): two
(16 warps; 40 KiB of shared memory each), which caps them at 128 registers, where the 64
accumulators, a k16's fragments and the prefetched vectors fit without spilling (ptxas
chooses 160 for one block)."""
MMA_K = 32
"""K per shared-memory stage of the 16-bit tensor-core tiles (64 bytes a tile row; 8-bit
operands take 64, ``MmaFamily.stage_k``): two k16 MMA steps a barrier. Two
stages: a step's copies are issued before the MMAs of the step before, into the other
stage (aligned K-contiguous vectors by ``cp.async``, ``ASYNC_COPY_HELPER``), or into
registers written to it after them (vectors along M or N, unaligned ones, and a 4-bit
weight's codes, dequantized as they are stored); one barrier a step separates writes and
reads."""
MMA_PAD = 8
"""Elements (16 bytes; 16 of 8-bit operands) each shared-memory row of a tile is padded
by: rows 80 bytes apart put the 8 rows x 4 lanes of a fragment's 32-bit loads in 32
distinct banks."""
SPLIT_K_MAX = 8
"""K slices at most of a tensor-core tile GEMM (split-K): a product of few 128x128 tiles (a
short prefill, a batched decode step's rows) runs its K range in up to this many slices,
each a block writing its partial tile to a workspace (``k_slices > 1``), then one block a
tile adds the slices in order and runs the epilogue (``k_slices < 0``): two launches, no
atomics, the same sums at any schedule. ``records.GemmRecord.slices`` chooses the count at
launch."""


def split_k_slots(sms: int) -> int:
    """Tensor-core tiles a device of ``sms`` SMs runs at once (``MMA_MIN_BLOCKS`` each):
    split-K fills up to this many; products of at least half as many tiles are not split."""
    return sms * MMA_MIN_BLOCKS


SPLIT_K_SLOTS = split_k_slots(132)
"""An H100 / H200's slots (132 SMs): the default where the device is not known (the
simulated device, a record read alone); a plan loaded on a GPU counts its own SMs."""
SPLIT_K_MIN_K = 256
"""K a slice takes at least (8 stages of halves, 4 of bytes): shorter slices cost more in
partial tiles written and read than their MMAs save."""
SPLIT_K_SLOT_WORDS = 64 * 256 + 256
"""32-bit words a slice's partial tile takes in the workspace: each thread's 64
accumulators (element ``e`` of thread ``t`` at ``e * 256 + t``: coalesced), then its zero
point row sum (integer products)."""
GEMV_ROWS = 4
"""Rows (M, known at launch) up to which a product with both a warp-per-output and a tile
schedule (``Rule.warp`` and ``Rule.tiles``: a weight-only 4-bit GEMM) runs the former: a
decode step's few rows read each weight row once per row, 128 bits a load, over a grid of
an output per warp that fills the device; more rows (a prefill) take the tiles (128x128
on tensor cores for f16 / bf16, 16x16 SIMT for f32), each weight tile staged once per tile
of rows. An estimate (the warp schedule rereads the weight from L2 per row; the
tensor-core tiles' first 128 rows fill only ``N / 128`` blocks), to be measured on a GPU."""


ROW_BLOCK_FEW = 1024
"""Threads per block of a row reduction with few long rows (a block per row cannot fill
the device, so each block takes as many threads as it may)."""


def _vector_width(dtype: str, cols: Dim) -> int:
    """Elements per 128-bit load of a row of ``cols`` elements (0: scalar loads). Rows
    start 16-byte aligned when their length is a multiple of the width (buffers are
    256-byte aligned by plan-memory and the allocator)."""
    width = {"f16": 8, "bf16": 8, "f32": 4}.get(dtype, 0)
    return width if width and isinstance(cols, int) and cols % width == 0 else 0


def _row_block(rows: Dim, cols: Dim) -> int:
    """Threads per block of a row reduction: the row's length rounded up to a power of
    two, 32 (a warp) to ``BLOCK_SIZE``; ``ROW_BLOCK_FEW`` for at most 16 rows of 8192
    elements or more; ``BLOCK_SIZE`` when the length is known at run time only."""
    if isinstance(cols, str):
        return BLOCK_SIZE
    if isinstance(rows, int) and rows <= 16 and cols >= 8192:
        return ROW_BLOCK_FEW
    return min(BLOCK_SIZE, max(32, 1 << (cols - 1).bit_length()))


@dataclass(frozen=True)
class MmaFamily:
    """The ``mma.sync`` the tensor-core tiles issue for one operand width, and what their
    staging follows from it: every family reads 32 bytes of K an instruction and stages 64
    bytes of K a tile row (two instructions a barrier), in 16-byte vectors."""

    bytes: int
    """Bytes an operand element."""
    k: int
    """K of one instruction: m16n8k16 for 16-bit operands, m16n8k32 for 8-bit ones."""
    acc: str
    """The accumulators' C type: f32 for float products, s32 (exact) for integer ones."""

    @property
    def stage_k(self) -> int:
        """K of a shared-memory stage: ``MMA_K``'s 64 bytes of a tile row."""
        return MMA_K * 2 // self.bytes

    @property
    def pad(self) -> int:
        """Elements a tile row is padded by: ``MMA_PAD``'s 16 bytes."""
        return MMA_PAD * 2 // self.bytes

    @property
    def vector(self) -> int:
        """Elements a 16-byte vector of the staging."""
        return 16 // self.bytes

    @property
    def per_register(self) -> int:
        """Elements a 32-bit fragment register."""
        return 4 // self.bytes

    def helper(self, a: str, b: str) -> str:
        """The device function of one instruction for A's and B's types (``_mma_helper``)."""
        return f"partita_mma_{a}" if self.bytes == 2 else f"partita_mma_{a}_{b}"


MMA_FAMILIES = {"f16": MmaFamily(2, 16, "float"), "bf16": MmaFamily(2, 16, "float"),
                "i8": MmaFamily(1, 32, "int"), "ui8": MmaFamily(1, 32, "int")}
"""The tensor-core family of each operand type the tiles take (``MMA_DTYPES`` and
``MMA_INT_DTYPES``)."""
_PTX_TYPES = {"f16": "f16", "bf16": "bf16", "i8": "s8", "ui8": "u8"}


def _mma_helper(a: str, b: str | None = None) -> str:
    """``partita_mma_<a>[_<b>](c, a, b)``: ``c += A·B`` for one warp's m16n8k16 tile (16-bit
    operands, f32 ``c``) or m16n8k32 tile (8-bit ones, s8 / u8 on either side, exact s32
    ``c``), the fragments in PTX's layout as 32-bit registers of 2 (4) elements, the lower
    index in the lower bits. With ``h`` = K / 2 and ``p`` the elements a register, lane =
    4 * group + t: a[0..3] = A[g][p*t..], A[g+8][p*t..], A[g][h+p*t..], A[g+8][h+p*t..];
    b[0..1] = B[p*t..][g], B[h+p*t..][g]; c[0..3] = C[g][2t..2t+1], C[g+8][2t..]. sm_80 and
    later: one ``mma.sync`` (HMMA / IMMA). Host builds (and older arches): the warp's lanes
    exchange their registers through memory between two block barriers (every thread of
    the block calls it alike), then each lane sums its four outputs over k in order (f32,
    or s32)."""
    b = b or a
    family = MMA_FAMILIES[a]
    ta, tb, acc = _PTX_TYPES[a], _PTX_TYPES[b], family.acc
    h, p, k = family.k // 2, family.per_register, family.k
    tc = "f32" if acc == "float" else "s32"
    shape = f"m16n8k{k}.row.col.{tc}.{ta}.{tb}.{tc}"
    c = "f" if acc == "float" else "r"
    if family.bytes == 2:
        half = _C_TYPES[a]
        element = ("  auto element = [](unsigned reg, int e, bool) -> float {\n"
                   f"    const unsigned short bits = (unsigned short)(reg >> (16 * e)); {half} x; memcpy(&x, &bits, 2);\n"
                   f"    return ld_{a}(x);\n"
                   "  };\n")
    else:
        element = ("  auto element = [](unsigned reg, int e, bool is_signed) -> int {\n"
                   "    const unsigned byte = (reg >> (8 * e)) & 255u;\n"
                   "    return is_signed ? (int)(signed char)byte : (int)byte;\n"
                   "  };\n")
    return (
        f"static __device__ __forceinline__ void {family.helper(a, b)}({acc}* c, const unsigned* a, const unsigned* b) {{\n"
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
        f'  asm volatile("mma.sync.aligned.{shape} "\n'
        '               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\\n"\n'
        f'               : "+{c}"(c[0]), "+{c}"(c[1]), "+{c}"(c[2]), "+{c}"(c[3])\n'
        '               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));\n'
        "#else\n"
        "  __shared__ unsigned sa[32][32][4], sb[32][32][2];  // per warp, per lane\n"
        "  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;\n"
        "  memcpy(sa[w][lane], a, 16); memcpy(sb[w][lane], b, 8);\n"
        "  __syncthreads();\n"
        f"{element}"
        f"  {acc} out[4];\n"
        "  for (int e = 0; e < 4; ++e) {\n"
        "    const int r = (lane >> 2) + 8 * (e >> 1), n = (lane & 3) * 2 + (e & 1);\n"
        f"    {acc} acc = c[e];\n"
        f"    // A[r][k]: lane (r % 8) * 4 + (k % {h}) / {p}, register r / 8 + 2 (k / {h}); B[k][n]: lane 4n + (k % {h}) / {p},\n"
        f"    // register k / {h}; element k % {p} of the register\n"
        f"    for (int k = 0; k < {k}; ++k)\n"
        f"      acc += element(sa[w][(r & 7) * 4 + (k % {h}) / {p}][(r >> 3) + 2 * (k / {h})], k % {p}, {str(a == 'i8').lower()})\n"
        f"           * element(sb[w][n * 4 + (k % {h}) / {p}][k / {h}], k % {p}, {str(b == 'i8').lower()});\n"
        "    out[e] = acc;\n"
        "  }\n"
        "  __syncthreads();\n"
        "  memcpy(c, out, 16);\n"
        "#endif\n"
        "}\n"
    )


LDMATRIX_HELPER = (
    "// partita_ldmatrix_x4(r, row): four 8x8 matrices of 16-bit pairs from shared memory, lane\n"
    "// l giving the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned); register j\n"
    "// of lane l is matrix j's row l / 4, pair l % 4: the mma.sync fragments of 16-bit (and, a\n"
    "// pair a register, 8-bit) operands. Host builds: the lanes exchange row addresses through\n"
    "// memory between two block barriers (every thread of the block calls it alike).\n"
    "static __device__ __forceinline__ void partita_ldmatrix_x4(unsigned* r, const void* row) {\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750\n"
    "  const unsigned address = (unsigned)__cvta_generic_to_shared(row);\n"
    '  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n"\n'
    '               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));\n'
    "#else\n"
    "  __shared__ const void* rows[32][32];  // per warp, per lane\n"
    "  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;\n"
    "  rows[w][lane] = row;\n"
    "  __syncthreads();\n"
    "  for (int j = 0; j < 4; ++j) memcpy(&r[j], (const char*)rows[w][j * 8 + (lane >> 2)] + (lane & 3) * 4, 4);\n"
    "  __syncthreads();\n"
    "#endif\n"
    "}\n"
)
"""The fragment loads of the tensor-core tiles (``ldmatrix``, sm_75 and later): one
instruction for a 16x16 A fragment or two n8 B ones, in place of four 32-bit shared loads
each; the padded tile rows (80 bytes apart) keep its 8 row reads a matrix conflict-free."""


ASYNC_COPY_HELPER = (
    "// partita_cp_async16(dst, src, bytes): 16 bytes global -> shared without registers (cp.async,\n"
    "// LDGSTS, sm_80 and later), zero-filled when bytes is 0; partita_cp_async_wait(): this\n"
    "// thread's copies have landed (a barrier then publishes them). Host builds: at once.\n"
    "static __device__ __forceinline__ void partita_cp_async16(void* dst, const void* src, int bytes) {\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
    "  const unsigned address = (unsigned)__cvta_generic_to_shared(dst);\n"
    '  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\\n" :: "r"(address), "l"(src), "r"(bytes));\n'
    "#else\n"
    "  if (bytes) memcpy(dst, src, 16); else memset(dst, 0, 16);\n"
    "#endif\n"
    "}\n"
    "static __device__ __forceinline__ void partita_cp_async_wait() {\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
    '  asm volatile("cp.async.wait_all;\\n" ::);\n'
    "#endif\n"
    "}\n"
)
"""The tensor-core tiles' staging of aligned K-contiguous vectors (an operand read as it
lies): the next stage's copies are in flight during this one's MMAs, as the register
prefetch's loads are, without the registers or the store after them."""


def _row_sum_helper(dtype: str) -> str:
    """``partita_row_sum_<dtype>(row)``: the sum of a tile row's 64 8-bit elements (one K
    stage), for the zero-point terms of an integer product: four 16-byte shared loads, a
    4-way dot product with ones a word (``dp4a``, sm_61 and later)."""
    signed = dtype == "i8"
    t = "int" if signed else "unsigned"
    return (
        f"static __device__ __forceinline__ int partita_row_sum_{dtype}(const void* row) {{\n"
        f"  {t} s = 0;\n"
        "  #pragma unroll\n"
        "  for (int q = 0; q < 4; ++q) {\n"
        "    const partita_v16 v = ((const partita_v16*)row)[q];\n"
        "    #pragma unroll\n"
        "    for (int e = 0; e < 4; ++e) {\n"
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610\n"
        f"      s = __dp4a(({t})v.w[e], ({t})0x01010101, s);\n"
        "#else\n"
        f"      for (int j = 0; j < 4; ++j) s += ({t})({'(signed char)' if signed else ''}(v.w[e] >> (8 * j) & 255u));\n"
        "#endif\n"
        "    }\n"
        "  }\n"
        "  return (int)s;\n"
        "}\n"
    )


_REDUCE_HELPERS = (
    "// Block-wide reductions: warp shuffles, then one value per warp through red[32];\n"
    "// every thread gets the result (blockDim.x a multiple of 32, at most 1024).\n"
    "static __device__ __forceinline__ float partita_warp_sum(float v) {\n"
    "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "  return v;\n"
    "}\n"
    "static __device__ __forceinline__ float partita_warp_max(float v) {\n"
    "  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
    "  return v;\n"
    "}\n"
    "static __device__ __forceinline__ float partita_block_sum(float v, float* red) {\n"
    "  const int lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;\n"
    "  v = partita_warp_sum(v);\n"
    "  if (lane == 0) red[threadIdx.x >> 5] = v;\n"
    "  __syncthreads();\n"
    "  v = partita_warp_sum(lane < warps ? red[lane] : 0.0f);\n"
    "  __syncthreads();\n"
    "  return v;\n"
    "}\n"
    "static __device__ __forceinline__ float partita_block_max(float v, float* red) {\n"
    "  const int lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;\n"
    "  v = partita_warp_max(v);\n"
    "  if (lane == 0) red[threadIdx.x >> 5] = v;\n"
    "  __syncthreads();\n"
    "  v = partita_warp_max(lane < warps ? red[lane] : __int_as_float(0xff800000));\n"
    "  __syncthreads();\n"
    "  return v;\n"
    "}\n"
    "// The same for any compute type and combine (reduce_* / argmax / argmin rows).\n"
    "template <class T> static __device__ __forceinline__ T partita_shfl_xor(T v, int o) {\n"
    "  return __shfl_xor_sync(0xffffffffu, v, o);\n"
    "}\n"
    "static __device__ __forceinline__ bool partita_shfl_xor(bool v, int o) {\n"
    "  return __shfl_xor_sync(0xffffffffu, (int)v, o) != 0;\n"
    "}\n"
    "struct partita_add { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };\n"
    "struct partita_mul { template <class T> __device__ T operator()(T a, T b) const { return a * b; } };\n"
    "// max / min propagate a NaN from either side (a != a only for a float NaN).\n"
    "struct partita_max { template <class T> __device__ T operator()(T a, T b) const { return (b > a || b != b) ? b : a; } };\n"
    "struct partita_min { template <class T> __device__ T operator()(T a, T b) const { return (b < a || b != b) ? b : a; } };\n"
    "template <class T, class Op>\n"
    "static __device__ __forceinline__ T partita_block_reduce(T v, T identity, T* red, Op op) {\n"
    "  const int lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;\n"
    "  for (int o = 16; o > 0; o >>= 1) v = op(v, partita_shfl_xor(v, o));\n"
    "  if (lane == 0) red[threadIdx.x >> 5] = v;\n"
    "  __syncthreads();\n"
    "  v = lane < warps ? red[lane] : identity;\n"
    "  for (int o = 16; o > 0; o >>= 1) v = op(v, partita_shfl_xor(v, o));\n"
    "  __syncthreads();\n"
    "  return v;\n"
    "}\n"
    "// (value, index) pairs; better(t, k, b, j): t at k beats b at j (an index < 0 is none).\n"
    "template <class T, class Better>\n"
    "static __device__ __forceinline__ void partita_block_arg(T& v, long long& at, T* red, long long* red_at, Better better) {\n"
    "  const int lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const T w = partita_shfl_xor(v, o);\n"
    "    const long long k = partita_shfl_xor(at, o);\n"
    "    if (better(w, k, v, at)) { v = w; at = k; }\n"
    "  }\n"
    "  if (lane == 0) { red[threadIdx.x >> 5] = v; red_at[threadIdx.x >> 5] = at; }\n"
    "  __syncthreads();\n"
    "  if (lane < warps) { v = red[lane]; at = red_at[lane]; } else { at = -1; }\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const T w = partita_shfl_xor(v, o);\n"
    "    const long long k = partita_shfl_xor(at, o);\n"
    "    if (better(w, k, v, at)) { v = w; at = k; }\n"
    "  }\n"
    "  __syncthreads();\n"
    "}\n"
)



class ScheduleMixin:
    """The schedules of ``KernelEmitter`` (see the module docstring)."""

    anchor: Operation | None
    block: object
    dims: dict[SSAValue, list[Dim]]
    lines: list[str]
    prelude: list[str]
    index_type: str
    out_dims: list[Dim]
    out_index: list[str]

    def _epilogue(self, indent: str, store: str) -> list[str]:
        return [indent + line[4:] for line in [*self.lines, store]]

    def _row_element(self, x: SSAValue, cols: Dim, vector: bool = True) -> RowElement:
        """``x`` (the anchor's row input) at element ``j`` of row ``r``: a load of the row
        ``xr`` (an argument), or the expression of its fused element-wise producers at the
        element's linear index ``xi`` (their operands of ``x``'s shape read from memory at
        ``xi``). With ``vector``, rows of a multiple of 16 bytes are read as 16-byte
        vectors: ``xr``'s, or those of the producers' operands that have ``x``'s shape."""
        T = self.index_type
        if isinstance(x, BlockArgument):
            xt = _dtype(x.type)
            if vector and (width := _vector_width(xt, cols)):
                return RowElement(width, self._load("e[u]", xt), vector=(
                    "const partita_v16 w = ((const partita_v16*)xr)[jv];",
                    f"const {_C_TYPES[xt]}* e = (const {_C_TYPES[xt]}*)&w;"))
            return RowElement(0, self._load("xr[j]", xt))
        saved = self.lines, self.memo
        self.lines, self.memo = [], {}  # the producers' lines go into the row pass, not the epilogue
        try:
            expr = self.value(x, self._decompose("xi", self.dims[x]))
            body = [line.strip() for line in self.lines]
        finally:
            self.lines, self.memo = saved
        lines = [f"const {T} xi = r * cols + j;", *body]
        text = "\n".join(body)
        rows = [a for a in self.block.args if self.dims[a] == self.dims[x] and f"in{a.index}[xi]" in text]
        width = _vector_width(_dtype(rows[0].type), cols) if vector and rows else 0
        if not width:
            return RowElement(0, expr, tuple(lines))
        loads: list[str] = []
        for a in rows:
            if _vector_width(_dtype(a.type), cols) == width:
                ct = _C_TYPES[_dtype(a.type)]
                loads += [f"const partita_v16 w{a.index} = ((const partita_v16*)(in{a.index} + r * cols))[jv];",
                          f"const {ct}* e{a.index} = (const {ct}*)&w{a.index};"]
                lines = [line.replace(f"in{a.index}[xi]", f"e{a.index}[u]") for line in lines]
        return RowElement(width, expr, tuple(lines), tuple(loads))

    def _row_pointer(self, x: SSAValue) -> list[str]:
        """The declaration of ``xr``, row ``r`` of ``x`` when it is an argument."""
        if not isinstance(x, BlockArgument):
            return []
        return [f"    const {_C_TYPES[_dtype(x.type)]}* xr = in{x.index} + r * cols;"]

    def _schedule(self, x: SSAValue, rows: Dim, cols: Dim) -> tuple[RowSchedule, RowElement]:
        """The row schedule (``row_stats.row_schedule``) and the statistics pass's element."""
        element = self._row_element(x, cols)
        return row_schedule(rows, cols, element.width, _row_block(rows, cols)), element

    def _rowwise(self, split: int, used: str, store: str, out_dtype: str) -> tuple[list[str], RowSchedule]:
        """Rows by the schedule (a block or a warp each, grid-stride), threads stride along
        the row: one pass over the row for its statistics (``row_stats``), one for the
        output."""
        anchor = self.anchor
        assert anchor is not None
        T = self.index_type
        x = anchor.operands[0]
        rows, cols = _product(self.out_dims[:split]), _product(self.out_dims[split:])
        stats_of = (softmax_stats if isinstance(anchor, nn.SoftmaxOp)
                    else square_stats if isinstance(anchor, nn.RMSNormOp) else welford_stats)
        sched, element = self._schedule(x, rows, cols)
        lines = [
            f"  const {T} rows = {rows};",
            f"  const {T} cols = {cols};",
            *([] if sched.warp else ["  __shared__ float red[32];"]),
            *sched.row_loop(T),
            *self._row_pointer(x),
            *stats_of(T, element, sched),
        ]
        # The output pass reads the row in 16-byte vectors too, and stores each thread's
        # ``width`` outputs with one 128-bit store, when the kernel's output (the anchor's,
        # or its epilogue's) has the same elements per vector (a scalar loop otherwise).
        out_t = _dtype(anchor.results[0].type)
        element = self._row_element(x, cols)
        width = element.width if element.width and element.width == _vector_width(out_dtype, cols) else 0
        if not width:
            element = self._row_element(x, cols, vector=False)
        xj = element.expr
        if isinstance(anchor, nn.SoftmaxOp):
            y = f"expf({xj} - mx) / sum"
        elif isinstance(anchor, nn.RMSNormOp):
            s = self._arg(anchor.scale)
            tail = self.out_dims[split:]
            at = self._linear(self.dims[s], self._broadcast_dims_index(self.dims[s], tail, self._decompose("j", tail)))
            lines.append(f"    const float rs = sqrtf(ms + {_c_float(float(anchor.epsilon))});")
            y = f"{xj} / rs * {self._load(f'in{s.index}[{at}]', _dtype(s.type))}"
        else:
            assert isinstance(anchor, nn.LayerNormOp)
            g, b = self._arg(anchor.gamma), self._arg(anchor.beta)
            lines.append(f"    const float sd = sqrtf(var + {_c_float(float(anchor.epsilon))});")
            gj = self._load(f"in{g.index}[j]", _dtype(g.type))
            bj = self._load(f"in{b.index}[j]", _dtype(b.type))
            y = f"({xj} - mean) / sd * {gj} + {bj}"
        if not width:
            lines += [
                *unroll_row(element),
                f"    for ({T} j = {sched.lane}; {sched.live}j < cols; j += {sched.stride}) {{",
                *(f"      {line}" for line in element.lines),
                f"      const {T} i = r * cols + j;",
                *self._axis_lines("r", range(split), used, "      "),
                *self._axis_lines("j", range(split, len(self.out_dims)), used, "      "),
                f"      const float y = {self._round(y, out_t)};",
                *self._epilogue("      ", store),
                "    }",
                "  }",
            ]
            return lines, sched
        ot = _C_TYPES[out_dtype]
        lines += [
            *unroll_row(element),
            f"    for ({T} jv = {sched.lane}; {sched.live}jv < cols / {width}; jv += {sched.stride}) {{",
            *(f"      {line}" for line in element.vector),
            "      partita_v16 wo;",
            f"      {ot}* eo = ({ot}*)&wo;",
            "      #pragma unroll",
            f"      for (int u = 0; u < {width}; ++u) {{",
            f"        const {T} j = jv * {width} + u;",
            *(f"        {line}" for line in element.lines),
            f"        const {T} i = r * cols + j;",
            *self._axis_lines("r", range(split), used, "        "),
            *self._axis_lines("j", range(split, len(self.out_dims)), used, "        "),
            f"        const float y = {self._round(y, out_t)};",
            *self._epilogue("        ", store.replace("out[i] =", "eo[u] =")),
            "      }",
            "      ((partita_v16*)(out + r * cols))[jv] = wo;",
            "    }",
            "  }",
        ]
        return lines, sched

    def _row_reduction(self, red: RowReduction, split: int, cols: Dim, used: str,
                       store: str) -> tuple[list[str], RowSchedule]:
        """One block per row (grid-stride over rows): each fold runs over the row with the
        threads striding along it (coalesced), then combines across the block; thread 0
        computes ``y`` and runs the epilogue. A row is the input's trailing ``cols``
        elements, whose output element's linear index is the row's."""
        T = self.index_type
        x = red.input
        rows = _product(self.out_dims[:split])
        sched, element = self._schedule(x, rows, cols)
        lines = [
            f"  const {T} rows = {rows};",
            f"  const {T} cols = {cols};",
            *(f"  __shared__ {f.ctype} red_{f.acc}[32];" for f in red.folds if not sched.warp),
            *(f"  __shared__ long long red_{f.acc}_at[32];" for f in red.folds if f.is_arg and not sched.warp),
            *sched.row_loop(T),
            *self._row_pointer(x),
        ]
        for f in red.folds:
            lines.append(f"    {f.ctype} {f.acc} = {f.init};")
            if f.is_arg:
                lines.append(f"    long long {f.acc}_at = -1;")
            lines += fold_pass(T, element, f.step("j"), _C_COMPUTE[_dtype(x.type)], sched)
            if f.is_arg:
                better = (f"[](const {f.ctype} t, const long long k, const {f.ctype} b, const long long j) "
                          f"{{ return {f.better('t', 'k', 'b', 'j')}; }}")
                lines.append(f"    {sched.reduce('arg', f.acc, f'{f.acc}_at', better, shared=(f'red_{f.acc}', f'red_{f.acc}_at'))};"
                             if sched.warp else
                             f"    partita_block_arg({f.acc}, {f.acc}_at, red_{f.acc}, red_{f.acc}_at, {better});")
            else:
                op = f"partita_{ {'+': 'add', '*': 'mul', 'max': 'max', 'min': 'min'}[f.combine]}()"
                call = (f"partita_warp_reduce({f.acc}, {op})" if sched.warp
                        else f"partita_block_reduce({f.acc}, ({f.ctype})({f.init}), red_{f.acc}, {op})")
                lines.append(f"    {f.acc} = {call};")
            lines += [f"    {line}" for line in f.then]
        result = _dtype(self.anchor.results[0].type)  # type: ignore[union-attr]
        lines += [
            f"    if ({'live && lane' if sched.warp else 'threadIdx.x'} == 0) {{",
            f"      const {T} i = r;",
            *self._axis_lines("r", range(split), used, "      "),
            f"      const {_C_COMPUTE[result]} y = {self._round(red.y, result)};",
            *self._epilogue("      ", store),
            "    }",
            "  }",
        ]
        return lines, sched

    def _injective_vectors(self, used: str, store: str, out_dtype: str) -> tuple[list[str], str]:
        """The 16-byte vector loop of an injective kernel (``[]`` when its output type has
        no vector width) and the first element the scalar loop then takes: each thread
        computes the ``width`` consecutive outputs of a vector and stores them with one
        128-bit store, the operands read at the output index (same shape and element
        size) loaded as 16-byte vectors too; the scalar loop finishes the ``n % width``
        tail. Vector ``iv`` starts at byte ``16 * iv`` of every such buffer, so any length
        is aligned (buffers are 256-byte aligned)."""
        T = self.index_type
        widths = {"f16": 8, "bf16": 8, "f32": 4}
        width = widths.get(out_dtype, 0)
        if not width:
            return [], "0"
        body = "\n".join(self.lines)
        loads: list[str] = []
        lines = list(self.lines)
        for a in self.block.args:
            at = f"in{a.index}[i]"
            if self.dims[a] == self.out_dims and at in body and widths.get(_dtype(a.type)) == width:
                ct = _C_TYPES[_dtype(a.type)]
                loads += [f"    const partita_v16 w{a.index} = ((const partita_v16*)in{a.index})[iv];",
                          f"    const {ct}* e{a.index} = (const {ct}*)&w{a.index};"]
                lines = [line.replace(at, f"e{a.index}[u]") for line in lines]
        ot = _C_TYPES[out_dtype]
        return [
            f"  for ({T} iv = ({T})blockIdx.x * blockDim.x + threadIdx.x; iv < n / {width}; iv += ({T})gridDim.x * blockDim.x) {{",
            *loads,
            "    partita_v16 wo;",
            f"    {ot}* eo = ({ot}*)&wo;",
            "    #pragma unroll",
            f"    for (int u = 0; u < {width}; ++u) {{",
            f"      const {T} i = iv * {width} + u;",
            *self._axis_lines("i", range(len(self.out_dims)), used, "      "),
            *(f"  {line}" for line in lines),
            "  " + store.replace("out[i] =", "eo[u] ="),
            "    }",
            "    ((partita_v16*)out)[iv] = wo;",
            "  }",
        ], f"n / {width} * {width}"

    def _whole_kernel(self, result: SSAValue) -> WholeKernel | None:
        """A window rule's whole-kernel schedule, when the kernel is its anchor alone."""
        if self.anchor is None or result is not self.anchor.results[0]:
            return None
        rule = _rule_for(self.anchor, _rules()[1])
        return rule.kernel(self, self.anchor) if rule is not None and rule.kernel is not None else None

    def _warp_window(self, numel, used_by_epilogue: str, store: str) -> list[str] | None:
        """The warp-per-output body of a window kernel whose anchor's rule has one
        (``Rule.warp``): each warp takes one output (the output index declared from it),
        its lanes add their shares of the reduction, a shuffle tree sums them and lane 0
        declares ``y``, runs the epilogue and stores. Blocks step over groups of
        ``blockDim.x / 32`` outputs together (every warp of a block runs the same
        iterations, so the shuffles of a block stay in step)."""
        anchor = self.anchor
        rule = _rule_for(anchor, _rules()[1]) if anchor is not None else None
        partial = rule.warp(self, anchor) if rule is not None and rule.warp is not None else None
        if partial is None:
            return None
        lines, y = partial
        T = self.index_type
        used = "\n".join([*lines, y, used_by_epilogue])
        return [
            f"  const {T} n = {numel};",
            "  const int lane = threadIdx.x & 31;",
            f"  for ({T} base = ({T})blockIdx.x * (blockDim.x >> 5); base < n; base += ({T})gridDim.x * (blockDim.x >> 5)) {{",
            f"    const {T} slot = base + (threadIdx.x >> 5);",
            "    const bool live = slot < n;",
            f"    const {T} i = live ? slot : 0;",
            *self._axis_lines("i", range(len(self.out_dims)), used, "    "),
            "    float acc = 0.0f;",
            "    if (live) {",
            *lines,
            "    }",
            "    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);",
            "    if (live && lane == 0) {",
            f"    const float y = {y};",
            *self.lines,
            store,
            "    }",
            "  }",
        ]

    def _tiled_window(self, numel, used: str, store: str) -> tuple[list[str], dict] | None:
        """The body of a window kernel whose anchor's rule has a tile schedule
        (``Rule.tiles``, launched as a ``gemm`` kernel: ``_tiles``, tensor-core ones for
        f16 / bf16 operands); with a warp
        schedule too, the kernel takes it for at most ``GEMV_ROWS`` rows (a branch every
        thread takes alike; the record sizes the grid to match). Returns the body and its
        record's launch fields (``gemv_rows``: the rows the warp schedule takes, 0: none)."""
        anchor = self.anchor
        rule = _rule_for(anchor, _rules()[1]) if anchor is not None else None
        product = rule.tiles(self, anchor) if rule is not None and rule.tiles is not None else None
        if product is None:
            return None
        rows = _product(self.out_dims[:-1])
        tiles, record = self._tiles(product, product.dtype in MMA_DTYPES, rows, self.out_dims[-1], [], [], 0, used,
                                    store)
        warp = self._warp_window(numel, used, store)
        if warp is None:
            return tiles, {**record, "gemv_rows": 0}
        return [f"  if ({rows} <= {GEMV_ROWS}) {{", *(f"  {line}" for line in warp), "  } else {",
                *(f"  {line}" for line in tiles), "  }"], {**record, "gemv_rows": GEMV_ROWS}

    def _window(self) -> list[str]:
        """The anchor's value ``y`` at the output index: a loop over its window."""
        anchor = self.anchor
        assert anchor is not None
        if (rule := _rule_for(anchor, _rules()[1])) is not None:
            return rule.emit(self, anchor)
        T = self.index_type
        x = self._arg(anchor.operands[0])
        xt, xd = _dtype(x.type), self.dims[x]
        c_ax, h_ax, w_ax = _SPATIAL[anchor.layout]
        o = self.out_index
        lines = []
        at = ["0"] * 4
        at[0], at[c_ax], at[h_ax], at[w_ax] = o[0], o[c_ax], "ih", "iw"
        load = self._load(f"in{x.index}[{self._linear(xd, at)}]", xt)
        # Windowed pools go through the conv family's rule above; the global pool is left.
        assert isinstance(anchor, nn.GlobalAvgPool2DOp)
        lines += [
            "    float acc = 0.0f;",
            f"    for ({T} ih = 0; ih < {xd[h_ax]}; ++ih)",
            f"      for ({T} iw = 0; iw < {xd[w_ax]}; ++iw) acc += {load};",
            f"    const float y = {self._round(f'acc / (float)({_product([xd[h_ax], xd[w_ax]])})', _dtype(anchor.result.type))};",
        ]
        return lines

    def _gemm_problem(self, split: int) -> tuple:
        """What both GEMM schedules share: the operands, whether each is stored with its
        GEMM rows contiguous-last (``a[m, k]``, ``b[k, n]``), the problem dims M, N, K, the
        batch dims (the output's first ``split``), and each operand's pointer at batch
        ``bz`` (broadcast operands repeat their batch)."""
        anchor = self.anchor
        assert anchor is not None
        a, b = self._arg(anchor.operands[0]), self._arg(anchor.operands[1])
        ad, bd = self.dims[a], self.dims[b]
        (am, ak), (bk, bn) = self._gemm_axes(anchor)
        if isinstance(anchor, nn.DenseOp):
            m: Dim = _product(ad[:-1])
            a_batch: list[Dim] = []
            b_batch: list[Dim] = []
        else:
            m, a_batch, b_batch = ad[am], ad[:-2], bd[:-2]
        n, k = bd[bn], ad[ak]
        batch_dims = self.out_dims[:split]
        batch_index = self._decompose("bz", batch_dims)

        def pointer(value, dims: list[Dim], size: Dim) -> str:
            linear = self._linear(dims, self._broadcast_dims_index(dims, batch_dims, batch_index))
            return f"in{value.index}" + ("" if linear == "0" else f" + {_paren(linear)} * {_paren(size)}")

        return (a, b, (am, ak) == (-2, -1), (bk, bn) == (-2, -1), m, n, k, batch_dims,
                pointer(a, a_batch, _mul(m, k)), pointer(b, b_batch, _mul(k, n)))

    def _gemm(self, split: int, used: str, store: str) -> tuple[list[str], dict]:
        """The tiles of an ``nn`` GEMM anchor (``_tiles``; tensor-core ones when
        ``_mma_dtypes`` says so): each operand read at its batch's pointer along its
        contiguous axis."""
        anchor = self.anchor
        a, b, a_rows, b_rows, m, n, k, batch_dims, a_ptr, b_ptr = self._gemm_problem(split)
        at, bt = _dtype(a.type), _dtype(b.type)
        mma = self._mma_dtypes()
        ma, mb = mma or (at, bt)
        zero_points: tuple[str, ...] = ()
        if isinstance(anchor, nn.MatmulIntegerOp):  # one element each, read once a batch
            zero_points = tuple(f"(int){self._load(f'in{self._arg(z).index}[0]', _dtype(z.type))}"
                                for z in (anchor.lhs_zero_point, anchor.rhs_zero_point))
        product = TiledProduct(ma, k, a=self._load("a[mm * K + kk]" if a_rows else "a[kk * M + mm]", at),
                               b=self._load("b[kk * N + nn]" if b_rows else "b[nn * K + kk]", bt),
                               a_rows=a_rows, b_rows=b_rows,  # copied as they lie when of the MMA type
                               a_ptr="a" if mma and at == ma else "", b_ptr="b" if mma and bt == mb else "",
                               b_dtype=mb if mb != ma else "", zero_points=zero_points,
                               k_source=(a.index, len(self.dims[a]) + self._gemm_axes(anchor)[0][1]))
        setup = [f"const {_C_TYPES[at]}* a = {a_ptr};", f"const {_C_TYPES[bt]}* b = {b_ptr};"]
        return self._tiles(product, mma is not None, m, n, batch_dims, setup, split, used, store)

    def _tiles(self, product: TiledProduct, mma: bool, m: Dim, n: Dim, batch_dims: list[Dim], setup: list[str],
               split: int, used: str, store: str) -> tuple[list[str], dict]:
        """The body of ``product``'s tiles, tensor-core (``_mma_tiles``) or SIMT
        (``_simt_tiles``), and its ``gemm`` record's launch fields."""
        body = (self._mma_tiles if mma else self._simt_tiles)(product, m, n, batch_dims, setup, split, used, store)
        if mma:  # split-K: K read at launch from an input's axis, or (-1, K) when static
            source = product.k_source or ((-1, product.k) if isinstance(product.k, int) else ())
            return body, {"kind": "gemm", "split": split, "tile": MMA_TILE, "block": MMA_THREADS,
                          "min_blocks": MMA_MIN_BLOCKS, "split_k": SPLIT_K_MAX if source else 0,
                          "k_source": source}
        return body, {"kind": "gemm", "split": split, "tile": GEMM_TILE, "block": GEMM_TILE * GEMM_TILE}

    def _simt_tiles(self, product: TiledProduct, m: Dim, n: Dim, batch_dims: list[Dim], setup: list[str],
                    split: int, used: str, store: str) -> list[str]:
        """16x16 output tiles, a thread each, K in steps of 16 through shared memory (each
        operand's element staged by the thread that walks its contiguous axis)."""
        anchor = self.anchor
        assert anchor is not None
        assert product.stage_b is None, "a product's own staging fills the tensor-core tiles' buffers"
        T, tile = self.index_type, GEMM_TILE
        # Each load walks the operand's contiguous axis with threadIdx.x.
        a_load = ("m0 + ty", "k0 + tx", "As[ty][tx]") if product.a_rows else ("m0 + tx", "k0 + ty", "As[tx][ty]")
        b_load = ("k0 + ty", "n0 + tx", "Bs[ty][tx]") if product.b_rows else ("k0 + tx", "n0 + ty", "Bs[tx][ty]")
        return [
            f"  const {T} M = {m};",
            f"  const {T} N = {n};",
            f"  const {T} K = {product.k};",
            f"  const {T} batch = {_product(batch_dims)};",
            f"  const {T} mtiles = (M + {tile - 1}) / {tile};",
            f"  __shared__ float As[{tile}][{tile + 1}];",
            f"  __shared__ float Bs[{tile}][{tile + 1}];",
            "  const int tx = threadIdx.x, ty = threadIdx.y;",
            f"  for ({T} bz = blockIdx.z; bz < batch; bz += gridDim.z) {{",
            *(f"    {line}" for line in setup),
            f"    for ({T} mt = blockIdx.y; mt < mtiles; mt += gridDim.y) {{",
            f"      const {T} m0 = mt * {tile}, n0 = ({T})blockIdx.x * {tile};",
            "      float acc = 0.0f;",
            f"      for ({T} k0 = 0; k0 < K; k0 += {tile}) {{",
            f"        {{ const {T} mm = {a_load[0]}, kk = {a_load[1]}; {a_load[2]} = mm < M && kk < K ? {product.a} : 0.0f; }}",
            f"        {{ const {T} kk = {b_load[0]}, nn = {b_load[1]}; {b_load[2]} = kk < K && nn < N ? {product.b} : 0.0f; }}",
            "        __syncthreads();",
            f"        for (int q = 0; q < {tile}; ++q) acc += As[ty][q] * Bs[q][tx];",
            "        __syncthreads();",
            "      }",
            f"      const {T} m = m0 + ty, n = n0 + tx;",
            "      if (m < M && n < N) {",
            f"        const {T} i = (bz * M + m) * N + n;",
            *self._axis_lines("bz", range(split), used, "        "),
            *self._axis_lines("m", range(split, len(self.out_dims) - 1), used, "        "),
            *self._axis_lines("n", [len(self.out_dims) - 1], used, "        "),
            f"        const float y = {self._round('acc', _dtype(anchor.results[0].type))};",
            *self._epilogue("        ", store),
            "      }",
            "    }",
            "  }",
        ]

    def _mma_dtypes(self) -> tuple[str, str] | None:
        """A's and B's types on the tensor cores: both operands f16, or both bf16; f16 for
        8-bit float operands (``nn.matmul_float8``), which it holds exactly (E4M3 and E5M2
        values are f16 values), their products exact and summed in f32 as the op says; i8 /
        u8 as they are for ``nn.matmul_integer`` (exact s32 sums, either signedness on
        either side)."""
        anchor = self.anchor
        assert anchor is not None
        if isinstance(anchor, nn.MatmulFloat8Op):
            return "f16", "f16"
        a, b = (_dtype(v.type) for v in anchor.operands[:2])
        if isinstance(anchor, nn.MatmulIntegerOp):
            return a, b
        return (a, b) if a == b and a in MMA_DTYPES else None

    def _mma_operand(self, name: str, product: TiledProduct) -> tuple[list[str], list[str], list[str]]:
        """One operand's staging into the tensor-core tiles (a stage ``stage_k`` deep, 64
        bytes a row): its declared registers, the lines fetching a thread's vector ``i`` of K
        step ``kn`` into them, and the lines storing it to stage ``nb`` of ``As`` / ``Bs``
        (``[128][stage_k + pad]``, K contiguous). A vector is 16 bytes along the operand's
        contiguous axis (8 halves, 16 bytes). Where the pointer is 16-byte aligned and the
        axis a multiple of the vector long, a K-contiguous vector goes global -> shared by
        ``cp.async`` (nothing to store after the MMAs) and one along M (N) is a 16-byte
        load, stored a row down a column; else bounds-checked element loads (zeros past the
        edges), stored as the vector lies."""
        T = self.index_type
        is_a = name == "a"
        dtype = product.dtype if is_a else product.b_type
        ct, family = _C_TYPES[dtype], MMA_FAMILIES[dtype]
        vec = family.vector
        tile = "As" if is_a else "Bs"
        staging = None if is_a else product.stage_b
        k_contiguous = staging is not None or (product.a_rows if is_a else not product.b_rows)
        per_k = MMA_TILE // vec  # vectors down a column of the tile
        rc = (f"const int v = tid + i * {MMA_THREADS}, "  # K-contiguous: 4 vectors a row; else a column's a k
              + (f"r = v >> 2, c = (v & 3) * {vec};" if k_contiguous
                 else f"r = (v & {per_k - 1}) * {vec}, c = v >> {per_k.bit_length() - 1};"))
        if staging is not None:  # the product's own vectors
            fetch = [f"{{ {rc}", *(f"  {line}" for line in staging.fetch), "}"]
            store = [f"{{ {rc} partita_v16 vec;", *(f"  {line}" for line in staging.store),
                     f"  *(partita_v16*)&{tile}[nb][r][c] = vec; }}"]
            return list(staging.declare), fetch, store
        rows, extent = ("mm", "M") if is_a else ("nn", "N")
        expr, ptr = (product.a, product.a_ptr) if is_a else (product.b, product.b_ptr)
        reg = f"r{name}"
        if k_contiguous:  # r = row, c = first k
            linear, at, element = f"{rows}0 * K + kk0", f"{rows} * K + kk", (f"{rows}0", "kk0 + j")
            store = [f"{{ {rc} *(partita_v16*)&{tile}[nb][r][c] = {reg}[i]; }}"]
        else:  # r = first row, c = k
            whole = f"{rows}0 + {vec} <= {extent} && kk0 < K"
            linear, at, element = f"kk0 * {extent} + {rows}0", f"kk * {extent} + {rows}", (f"{rows}0 + j", "kk0")
            store = [f"{{ {rc} const {ct}* e = (const {ct}*)&{reg}[i];",
                     "  #pragma unroll",
                     f"  for (int j = 0; j < {vec}; ++j) {tile}[nb][r + j][c] = e[j]; }}"]
        # Element by element: a pointer of the MMA type is copied from, raw; else the
        # product's expression is rounded to the MMA type.
        zero = f"st_{dtype}(0.0f)" if family.acc == "float" else "0"
        value = f"{ptr}[{at}]" if ptr else f"st_{dtype}({expr})"
        if ptr and k_contiguous:
            # 16-byte vectors go global -> shared with cp.async (no registers, zero-filled
            # past M or K: K a multiple of the vector, so a vector is whole or past it);
            # the register path stays for what is not aligned
            vector = [f"  if ({name}_vec) {{ const bool inside = {rows}0 < {extent} && kk0 < K;",
                      f"    partita_cp_async16(&{tile}[nb][r][c], {ptr} + (inside ? {linear} : 0), inside ? 16 : 0); }}",
                      "  else"]
            store = [f"{{ {rc} if (!{name}_vec) *(partita_v16*)&{tile}[nb][r][c] = {reg}[i]; }}"]
        elif ptr:
            vector = [f"  if ({name}_vec && {whole}) {reg}[i] = *(const partita_v16*)({ptr} + {linear});", "  else"]
        else:
            vector = []
        fetch = [
            f"{{ {rc}",
            f"  const {T} {rows}0 = {'m0' if is_a else 'n0'} + r; const int kk0 = kn + c;",
            *vector,
            f"  {{ {ct}* e = ({ct}*)&{reg}[i];",
            "    #pragma unroll",
            f"    for (int j = 0; j < {vec}; ++j) {{",
            f"      const {T} {rows} = {element[0]}, kk = {element[1]};",
            f"      e[j] = {rows} < {extent} && kk < K ? {value} : {zero};",
            "    }",
            "  }",
            "}",
        ]
        return [f"partita_v16 {reg}[2];"], fetch, store

    @staticmethod
    def _mma_vector_checks(product: TiledProduct) -> list[str]:
        """Whether each operand's vectors may be 16-byte loads: its pointer 16-byte aligned
        and its contiguous axis a multiple of the vector long (the same for every vector)."""
        lines = []
        for name, ptr, axis, dtype in (("a", product.a_ptr, "K" if product.a_rows else "M", product.dtype),
                                       ("b", product.b_ptr, "N" if product.b_rows else "K", product.b_type)):
            if ptr:
                lines.append(f"const bool {name}_vec = {axis} % {MMA_FAMILIES[dtype].vector} == 0 "
                             f"&& ((unsigned long long)({ptr}) & 15) == 0;")
        return lines

    @staticmethod
    def _zero_point_terms(product: TiledProduct) -> tuple[list[str], list[str], list[str], str]:
        """An integer product's zero points (``TiledProduct.zero_points``): the lines
        declaring them; the lines adding this thread's tile row of the current stage to
        ``zsum`` (threads 0-127 sum A's rows when B's zero point is not 0, threads 128-255
        B's when A's is not: a warp-uniform branch, no MMA spent); the lines reading, after
        the main loop, the terms of this thread's 8 rows (``zr``) and 8 columns (``zc``)
        from the tile's sums (``zs``); and what the epilogue subtracts from an
        accumulator."""
        if not product.zero_points:
            return [], [], [], ""
        za, zb = product.zero_points
        declare = [f"const int za = {za}, zb = {zb};"]
        add = [f"if (tid < {MMA_TILE}) {{ if (zb != 0) zsum += partita_row_sum_{product.dtype}(&As[cur][tid][0]); }}",
               f"else if (za != 0) zsum += partita_row_sum_{product.b_type}(&Bs[cur][tid - {MMA_TILE}][0]);"]
        terms = [
            "zs[tid] = zsum;",
            "__syncthreads();",
            "int zr[4][2], zc[4][2];  // zb * (row sum of A) - K * za * zb; za * (row sum of B)",
            "#pragma unroll",
            "for (int q = 0; q < 8; ++q) {",
            "  zr[q >> 1][q & 1] = zb * zs[wm + (q >> 1) * 16 + g + (q & 1) * 8] - za * zb * (int)K;",
            f"  zc[q >> 1][q & 1] = za * zs[{MMA_TILE} + wn + (q >> 1) * 8 + t4 * 2 + (q & 1)];",
            "}",
        ]
        return declare, add, terms, " - zr[mi][ce >> 1] - zc[ni][ce & 1]"

    def _mma_tiles(self, product: TiledProduct, m: Dim, n: Dim, batch_dims: list[Dim], setup: list[str], split: int,
                   used: str, store: str) -> list[str]:
        """128x128 output tiles on tensor cores (``MMA_TILE``, ``MMA_K``, ``MMA_PAD``; per
        operand width, ``MmaFamily``): K in stages of 64 bytes a row through two
        shared-memory stages of the operands' own types, each operand staged in 16-byte
        vectors along its contiguous axis (``_mma_operand``: bounds-checked, so any
        alignment and layout; ``product`` says how an element is read), the next stage
        fetched (``cp.async``, or into registers) while the current one multiplies; then per warp 4x4
        ``mma.sync`` (m16n8k16 for halves, m16n8k32 for 8-bit integers) per instruction
        step, fragments read with ``ldmatrix`` (no conversion in the loop), f32 or s32
        accumulators in registers (``partita_mma_*``: PTX's fragment layout). An integer
        product's zero points are applied in the epilogue (``_zero_point_terms``).
        ``setup`` declares what the loads read at batch ``bz``. Split-K (``SPLIT_K_MAX``):
        the kernel's ``k_slices`` parameter is 1 for the whole K range, ``s > 1`` for the
        pass of ``s`` slices (grid z = batch x s; each block's partial tile, and its zero
        point row sum, stored to ``ws``), ``-s`` for the pass adding them (in slice order)
        and running the epilogue."""
        anchor = self.anchor
        assert anchor is not None
        T, tile, k = self.index_type, MMA_TILE, product.k
        family = MMA_FAMILIES[product.dtype]
        stage, step, acc_t = family.stage_k, family.k, family.acc
        a_declare, a_fetch, a_store = self._mma_operand("a", product)
        b_declare, b_fetch, b_store = self._mma_operand("b", product)
        z_declare, z_add, z_read, z_terms = self._zero_point_terms(product)
        asynchronous = any("partita_cp_async16(" in line for line in (*a_fetch, *b_fetch))
        h = family.k // 2  # elements of a K half (16 bytes)
        result = _dtype(anchor.results[0].type)
        y = (f"{self._round('acc[mi][ni][ce]', result)}" if not z_terms
             else f"acc[mi][ni][ce]{z_terms}")

        def each_vector(lines: list[str], indent: str) -> list[str]:  # a thread's 2 vectors of 512
            return [f"{indent}#pragma unroll", f"{indent}for (int i = 0; i < 2; ++i) {{",
                    *(f"{indent}  {line}" for line in lines), f"{indent}}}"]

        accumulators = "acc[e >> 4][(e >> 2) & 3][e & 3]"
        zsum_at = f"[{64 * MMA_THREADS} + tid]"  # after the accumulators in a slot
        # what is not needed in the main loop is computed after it, from the loop indices
        # (registers: the 64 accumulators leave none to keep it)
        slices = [  # the partial pass stores its tile; the adding pass reads the slices'
            f"      const {T} bz = k_slices > 1 ? z / k_slices : z;  // again: not kept through the loop",
            "      const int slices = k_slices < 0 ? -k_slices : k_slices;",
            f"      const {T} tile = (bz * mtiles + mt) * gridDim.x + blockIdx.x;  // its slices' place in ws",
            "      if (k_slices > 1) {",
            f"        {acc_t}* slot = ({acc_t}*)ws + (tile * slices + z % slices) * {SPLIT_K_SLOT_WORDS};",
            "        #pragma unroll",
            f"        for (int e = 0; e < 64; ++e) slot[e * {MMA_THREADS} + tid] = {accumulators};",
            *([f"        ((int*)slot){zsum_at} = zsum;"] if z_terms else []),
            "        continue;",
            "      }",
            "      for (int s = 0; k_slices < 0 && s < slices; ++s) {",
            f"        const {acc_t}* slot = (const {acc_t}*)ws + (tile * slices + s) * {SPLIT_K_SLOT_WORDS};",
            "        #pragma unroll",
            f"        for (int e = 0; e < 64; ++e) {accumulators} += slot[e * {MMA_THREADS} + tid];",
            *([f"        zsum += ((const int*)slot){zsum_at};"] if z_terms else []),
            "      }",
        ]

        return [
            f"  const {T} M = {m};",
            f"  const int N = {n}, K = {k};  // one dim each (int parameters): 32-bit registers",
            f"  const {T} batch = {_product(batch_dims)};",
            f"  const {T} mtiles = (M + {tile - 1}) / {tile};",
            f"  alignas(16) __shared__ {_C_TYPES[product.dtype]} As[2][{tile}][{stage + family.pad}];",
            f"  alignas(16) __shared__ {_C_TYPES[product.b_type]} Bs[2][{tile}][{stage + family.pad}];",
            *([f"  __shared__ int zs[{2 * tile}];  // the tile's row sums of A, then of B"] if z_terms else []),
            "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;",
            "  const int g = lane >> 2, t4 = lane & 3;",
            "  const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;",
            f"  for ({T} z = blockIdx.z; z < batch * (k_slices > 1 ? k_slices : 1); z += gridDim.z) {{",
            f"    const {T} bz = k_slices > 1 ? z / k_slices : z;",
            "    // this block's K: a slice of whole stages, or all of it (none: the adding pass)",
            f"    const int chunk = k_slices > 1 ? ((K + {stage - 1}) / {stage} + k_slices - 1) / k_slices * {stage} : K;",
            "    const int kb = k_slices > 1 ? (int)(z % k_slices) * chunk : 0;",
            "    const int ke = k_slices < 0 ? 0 : (kb + chunk < K ? kb + chunk : K);",
            *(f"    {line}" for line in setup),
            *(f"    {line}" for line in self._mma_vector_checks(product)),
            *(f"    {line}" for line in z_declare),
            f"    for ({T} mt = blockIdx.y; mt < mtiles; mt += gridDim.y) {{",
            f"      const {T} m0 = mt * {tile}, n0 = ({T})blockIdx.x * {tile};",
            f"      {acc_t} acc[4][4][4];",
            "      #pragma unroll",
            "      for (int e = 0; e < 64; ++e) acc[e >> 4][(e >> 2) & 3][e & 3] = 0;",
            *(["      int zsum = 0;"] if z_terms else []),
            *(f"      {line}" for line in (*a_declare, *b_declare)),
            f"      if (kb < ke) {{ const int kn = kb, nb = (kb / {stage}) & 1;  // the first step",
            *each_vector([*a_fetch, *b_fetch, *a_store, *b_store], "        "),
            *(["        partita_cp_async_wait();"] if asynchronous else []),
            "        __syncthreads();",
            "      }",
            f"      for (int k0 = kb; k0 < ke; k0 += {stage}) {{",
            f"        const int cur = (k0 / {stage}) & 1, nb = cur ^ 1;  // kb is whole stages",
            f"        const int kn = k0 + {stage};",
            "        const bool more = kn < ke;",
            "        if (more) {  // the next step's loads in flight during this one's MMAs",
            *each_vector([*a_fetch, *b_fetch], "          "),
            "        }",
            "        #pragma unroll",
            f"        for (int ks = 0; ks < {stage}; ks += {step}) {{",
            "          unsigned af[4][4], bf[2][4];  // bf[q]: n8 blocks 2q and 2q + 1, two K halves each",
            "          #pragma unroll",  # matrices: rows 0-7 and 8-15 of the K half lane / 16
            "          for (int mi = 0; mi < 4; ++mi)",
            f"            partita_ldmatrix_x4(af[mi], &As[cur][wm + mi * 16 + (lane & 15)][ks + (lane >> 4) * {h}]);",
            "          #pragma unroll",  # matrices: both K halves of block 2q, then of block 2q + 1
            "          for (int q = 0; q < 2; ++q)",
            f"            partita_ldmatrix_x4(bf[q], &Bs[cur][wn + (2 * q + (lane >> 4)) * 8 + (lane & 7)][ks + ((lane >> 3) & 1) * {h}]);",
            "          #pragma unroll",
            "          for (int mi = 0; mi < 4; ++mi)",
            "            #pragma unroll",
            f"            for (int ni = 0; ni < 4; ++ni) {family.helper(product.dtype, product.b_type)}(acc[mi][ni], af[mi], &bf[ni >> 1][(ni & 1) * 2]);",
            "        }",
            *(f"        {line}" for line in z_add),
            "        if (more) {",
            *each_vector([*a_store, *b_store], "          "),
            "        }",
            *(["        partita_cp_async_wait();  // this thread's copies of the next stage landed"] if asynchronous else []),
            "        __syncthreads();",
            "      }",
            *slices,
            *(f"      {line}" for line in z_read),
            "      #pragma unroll",  # register accumulators: every index must be static
            "      for (int e = 0; e < 64; ++e) {",
            "        const int mi = e >> 4, ni = (e >> 2) & 3, ce = e & 3;",
            f"        const {T} m = m0 + wm + mi * 16 + g + (ce >> 1) * 8, n = n0 + wn + ni * 8 + t4 * 2 + (ce & 1);",
            "        if (m < M && n < N) {",
            f"          const {T} i = (bz * M + m) * N + n;",
            *self._axis_lines("bz", range(split), used, "          "),
            *self._axis_lines("m", range(split, len(self.out_dims) - 1), used, "          "),
            *self._axis_lines("n", [len(self.out_dims) - 1], used, "          "),
            f"          const {acc_t} y = {y};",
            *self._epilogue("          ", store),
            "        }",
            "      }",
            "    }",
            "  }",
        ]
