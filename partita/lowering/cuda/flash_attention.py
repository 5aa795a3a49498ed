"""Partita's fused attention kernel, FlashAttention-2 style, as CUDA C for NVRTC.

One thread block computes ``BLOCK_M`` query rows of one (batch, head); each of its
``WARPS`` warps owns ``16 * MT`` rows (``FlashConfig.m_tiles``: two m16 tiles up to D = 128,
one above). The schedule, as named choices:

- **Q in registers** up to D = 64: a warp loads its query rows once, as ``mma.sync`` A
  fragments (per m-tile ``D / 16`` k-steps x 4 registers of two halves).
- **Q in shared memory** above (``FlashConfig.q_in_smem``, FlashAttention-2's form there):
  the block's query rows are copied once (``cp.async``, with key tile 0), and each pair of
  k-steps' A fragments is loaded per key tile (``ldmatrix.x4``) just before the MMAs using
  it: held in registers, two m-tiles' Q fragments would spill up to D = 128, and above
  they would leave room for 16-key tiles only. Q and two stages of K and V (68 KiB at
  D = 128, 99 KiB at 256) pass the 48 KiB of static shared memory, so they are one dynamic
  array the launch gives and the kernel is opted in to at load
  (``FlashConfig.dynamic_smem``, ``WindowRecord.smem``).
- **Two m-tiles a warp** (FlashAttention-2's 128-row block): every K and V fragment a warp
  loads from shared memory feeds the MMAs of both, which halves the shared-memory reads
  per MMA, and each key tile copied serves twice the query rows, which halves the K / V
  traffic from L2. Above D = 128 the second tile's S and O accumulators would spill.
- **K / V streamed through shared memory, double-buffered**: tiles of ``BLOCK_N`` keys x D
  copied by the whole block with ``cp.async`` (16 bytes a copy, global to shared without
  registers: LDGSTS; a fixed, unrolled count of copies a thread, at the same offsets every
  tile), two stages: tile t + 1 is in flight while tile t is computed
  (``cp.async.wait_group 1``). K and V both kept as ``[key][dim]``, rows padded by 16
  bytes (conflict-free ``ldmatrix.x4`` fragment loads: four 8x8 matrices, the B operands
  of two MMAs, per instruction; V's through ``ldmatrix.trans``); keys past ``kv_len`` are
  zero-filled by the copy and masked.
- **S = Q K^T** with ``mma.sync.m16n8k16`` (f16 or bf16 in, f32 accumulate): for each of
  the ``BLOCK_N / 8`` key columns of the tile, ``D / 16`` MMAs. K's rows are the B
  operand's columns, so the B fragments come from ``ldmatrix`` without transposition.
- **Online softmax** (FlashAttention-2): per row a running max ``m`` and sum ``l``; a tile
  whose max grows rescales ``l`` and the output accumulators by ``exp(m_old - m_new)``.
  A lane holds two rows (``lane / 4`` and ``+ 8``); row reductions are two
  ``__shfl_xor_sync`` within the quad. Scores are kept in the log2 domain
  (``s * scale * log2 e``), so a probability is one subtraction and one ``MUFU.EX2``; a row
  with no key yet subtracts 0 rather than ``-inf``, so no score is tested.
- **Whole tiles, then masked ones** (FlashAttention-2's split of the key loop): the tiles
  inside ``kv_len``, before the block's first row's causal frontier and with no key mask
  run a body without any mask code; the rest (a partial last tile, the tiles the causal
  diagonal crosses, every tile under a key mask) run the masked body, the same code with
  the mask tests compiled in (a compile-time tag). For sequences of 1024 and more nearly
  every tile is whole.
- **P V without writing the scores**: the f32 accumulator layout of two adjacent n8 tiles
  of S is exactly the A fragment layout of one k16 step, so P is packed to halves in
  registers and multiplied by V (B fragments: ``ldmatrix`` from the transposed tile).
- **Epilogue**: ``O / l`` rounded to the storage type, written per fragment (two
  consecutive halves per store); a row with no defined softmax (every key masked, or a
  NaN / +inf score) is 0 with ``zero_undefined_rows``, else NaN (the reference's).
- **Masks**: causal (bottom-right aligned, ``j <= i + kv_len - q_len``: tiles entirely
  above the frontier are skipped), a key padding mask ``key_mask[B, Skv]`` (nonzero =
  attend; optional; the tile function takes its batch and key strides, 0 where a
  ``[1, 1, 1, Skv]`` or ``[B, 1, 1, 1]`` mask broadcasts), and ``kv_len`` itself (run-time:
  dynamic sequence lengths). A key the mask hides scores ``mask_fill`` (``-inf``, or
  masked_fill's finite value, DistilBERT's and GPT-2's ``finfo.min``: a row the mask hides
  wholly then averages every value). With causal and a finite fill, the tiles past the
  frontier are still skipped when they add exactly nothing (every row's max far above the
  fill, ``__syncthreads_or`` of the block), else visited with every key filled.
- **wgmma** (``FlashConfig.wgmma``, ``sm_90a``, every head dim: FlashAttention-3's
  instruction): a block is one warpgroup (4 warps) of 64 query rows streaming 64-key
  tiles (32 past D = 128, so a thread's O, S and P stay in its registers), two or more
  blocks an SM (one's GEMMs run while another's softmax does: the
  overlap FlashAttention-3 gets from its warpgroups' ping-pong). Q, K and V wait in one
  dynamic shared array as 8x8 core matrices (8 rows of 16 bytes, 128
  contiguous bytes, no swizzle), ordered ``[row / 8][dim / 8]``, which the copies fill 16
  bytes a thread in order; the tensor cores read them through matrix descriptors (Q and K
  K-major, V transposed: MN-major). S = Q K^T is one ``wgmma.mma_async`` m64nBNk16 a
  k-step, O += P V one m64nDk16 a 16 keys (N = D up to wgmma's 256) with P's fragments from registers (the m16k16
  fragment of mma.sync, so the softmax code is the same); each GEMM is fenced
  (``wgmma.fence``), committed and waited for before its accumulators are read, and the
  ``cp.async`` copies are made visible to the tensor cores (``fence.proxy.async``) before
  the block barrier. The host emulation computes each wgmma from its descriptors and the
  fragment layouts (checked against CuTe's in ``tests/lowering/test_flash_wgmma_layouts.py``).
- **GQA / MQA**: query head ``h`` reads KV head ``h / (H / Hkv)``.
- **Decode (split-KV)**: ``DecodeConfig`` / ``flash_decode_source``, pass 1 of
  ``nn.attention_partial``: one block per (split, batch x head) pair streams the split's
  ``ceil(kv_len / splits)`` keys once and writes its partial row ``[o[D], m, l]``. No
  tensor cores (one query row): a group of lanes holds one key row in 16-byte vectors
  (``LDG.E.128``: 8 halves or 4 floats a lane), loads 4 keys' K and V before using any,
  reduces the dot product by xor shuffles; groups, then warps merge their online softmax.
  f16 / bf16 / f32, either layout, no mask or a boolean / additive key padding mask.
  ``nn.attention_combine`` (pass 2) is a plain window kernel of ``ops/attention.py``.

Layouts: Q ``[B, H, Sq, D]``, K / V ``[B, Hkv, Skv, D]``, O ``[B, H, Sq, D]``, all
contiguous, or the same in ``[B, S, H, D]`` (``layout = "BSHD"``: the head transposes
folded into the strides), whose Q, K and V token rows are ``q_row``, ``k_row``, ``v_row``
apart (run-time: ``H * D`` when contiguous, ``3 * H * D`` for head views of a packed QKV
projection, GPT-2's ``c_attn``, read where they lie; O is contiguous). Head dims below a
multiple of 32 (the fixtures' 8, say) are padded in registers and shared memory, loaded and
stored at their own size. Built by a host compiler (``PARTITA_HOST_EMULATION``, set when
neither NVRTC nor nvcc compiles it), the same kernel runs on the host
(``tests/support/cuda_host.py``'s shim): each ``mma.sync`` is emulated by the warp's lanes
exchanging fragments through shared memory between two block barriers, which is exact in
f32 accumulation order per k-step (each wgmma likewise, by its warpgroup).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from partita.lowering.cuda.cexpr import _c_float

__all__ = ["HEAD_DIMS", "DecodeConfig", "FlashConfig", "flash_attention_source", "flash_decode_source",
           "head_dim_supported"]

HEAD_DIMS = (32, 64, 96, 128, 160, 192, 224, 256)
"""Head dims the kernel computes at their own size (multiples of 32 from 32 to 256)."""


def head_dim_supported(head_dim: int) -> bool:
    """Any multiple of 8 up to 256: the others are padded to the next of ``HEAD_DIMS`` in
    registers and shared memory (zeros), and loaded and stored at their own size."""
    return head_dim % 8 == 0 and 8 <= head_dim <= 256


def _padded(head_dim: int) -> int:
    """The head dim the MMAs run at: rounded up to a multiple of 32 (two k16 steps)."""
    return -(-head_dim // 32) * 32


@dataclass(frozen=True)
class FlashConfig:
    """One instantiation: element type, head dim, layout and the tile shape."""

    dtype: str  # "f16" or "bf16"
    head_dim: int
    causal: bool = False
    zero_undefined_rows: bool = True
    layout: str = "BHSD"  # or "BSHD": [batch, seq, heads, dim], read through its strides
    mask_fill: float = -math.inf  # the score of a key the mask hides (nn.attention's mask_fill)
    positive_scale: bool = True
    """The op's scale is positive (as 1 / sqrt(D) is): the whole tiles' scores stay
    unscaled, their row max is scaled after (a positive factor keeps the order) and each
    probability is one FFMA and one EX2, ``2^(s * scale * log2 e - m)``, where a product, a
    difference and an EX2 were (FlashAttention's ``softmax_scale_log2``). A kernel of this
    form must be called with a positive scale."""
    wgmma: bool = False
    """Hopper's warpgroup MMA (``sm_90a``, FlashAttention-3's instruction; every head dim):
    a warpgroup of 64 rows a block, each GEMM of a key tile one ``wgmma.mma_async`` a k16 step,
    Q, K and V read by the tensor cores from shared memory through descriptors (the
    module's **wgmma**)."""

    def __post_init__(self):
        if self.dtype not in ("f16", "bf16"):
            raise ValueError(f"flash attention takes f16 or bf16, not {self.dtype}")
        if not head_dim_supported(self.head_dim):
            raise ValueError(f"flash attention head dim must be a multiple of 8 from 8 to 256, got {self.head_dim}")
        if self.layout not in ("BHSD", "BSHD"):
            raise ValueError(f"flash attention layout must be BHSD or BSHD, got {self.layout}")

    @property
    def padded_dim(self) -> int:
        """The head dim the MMAs run at: ``head_dim`` rounded up to a multiple of 32 (two
        k16 steps per ``ldmatrix.x4``)."""
        return _padded(self.head_dim)

    @property
    def warps(self) -> int:
        """Warps per block: 4 (with wgmma, one warpgroup)."""
        return 4

    @property
    def m_tiles(self) -> int:
        """m16 tiles of query rows a warp holds: 2 (32 rows, FlashAttention-2's 128-row
        block) up to D = 128, where the S and O accumulators of both (``MT * (block_n / 2 +
        D / 2)`` registers a lane, plus ``MT * D / 4`` of Q fragments up to D = 64, Q from
        shared memory above: ``q_in_smem``) fit without spilling; each K and V fragment a
        warp loads from shared memory then feeds two MMAs, and each key tile serves twice
        the rows. 1 (16 rows) above, and with wgmma (a warp's 16 rows of its warpgroup's
        m64 tile)."""
        return 2 if self.padded_dim <= 128 and not self.wgmma else 1

    @property
    def q_in_smem(self) -> bool:
        """Whether Q is staged in shared memory (FlashAttention-2's form above D = 64): with
        two m-tiles up to D = 128 the Q fragments held in registers (``MT * D / 4`` a lane)
        would spill, and above, with one, they would leave room for 16-key tiles only; so a
        warp loads each k-step's from shared memory instead (``ldmatrix``, once a key tile).
        The block's Q rows and two stages of K and V then pass the 48 KiB of static shared
        memory: dynamic, opted in at load (``dynamic_smem``). With wgmma always: S = Q K^T
        reads both operands from shared memory (its A from registers would spill)."""
        return self.padded_dim > 64 or self.wgmma

    @property
    def block_m(self) -> int:
        return 16 * self.m_tiles * self.warps

    @property
    def block_n(self) -> int:
        """Keys per shared-memory tile: 64 up to D = 64, 32 above, so that the registers of
        a warp's m-tiles (see ``m_tiles``) stay within 255 without spilling (64 keys spill
        16 bytes at D = 128, 36 at D = 256). Fewer keys a tile would mean more block
        barriers a key (16-key tiles at D = 256 with Q in registers: est. 60% of the peak,
        against 66% for 32 with Q in shared memory). With wgmma 64 up to D = 128: a thread
        holds one m64 tile's S, P and O (``BN / 2 + BN / 4 + D / 2`` registers; 173 in all
        at D = 128, no spills), and a block's Q and two stages of K and V (80 KiB at D = 128)
        leave room for a second block on an SM (two warpgroups of 128 keys a block: 200
        registers, 160 KiB, one block an SM whose warpgroups run each phase together); 32
        above, where O alone is up to 128 registers a thread (193 in all at D = 256, no
        spills; 96 KiB, two blocks an SM)."""
        if self.wgmma:
            return 64 if self.padded_dim <= 128 else 32
        return 64 if self.padded_dim <= 64 else 32

    @property
    def min_blocks(self) -> int:
        """Blocks per SM the register allocation must allow (``__launch_bounds__``): 1,
        ptxas's choice (asking 3 at D = 128 caps it at 168 registers and spills 52 bytes)."""
        return 1

    @property
    def entry(self) -> str:
        mode = ("c" if self.causal else "n") + ("z" if self.zero_undefined_rows else "u")
        layout = "_bshd" if self.layout == "BSHD" else ""
        fill = "" if self.mask_fill == -math.inf else f"_f{struct.unpack('<I', struct.pack('<f', self.mask_fill))[0]:08x}"
        sign = "" if self.positive_scale else "_ns"
        return f"flash_attention_{self.dtype}_d{self.head_dim}_{mode}{layout}{fill}{sign}{'_wg' if self.wgmma else ''}"

    @property
    def shared_bytes(self) -> int:
        """Shared memory per block: two stages of K and V (and the block's Q rows), halves,
        rows padded by 8 (wgmma: unpadded 8x8 core matrices)."""
        rows = 4 * self.block_n + (self.block_m if self.q_in_smem else 0)
        return 2 * rows * (self.padded_dim + (0 if self.wgmma else 8))

    @property
    def dynamic_smem(self) -> int:
        """Bytes of dynamic shared memory the launch gives (0: all of it static). With wgmma
        always: one array, whose offsets the descriptors' start addresses are."""
        return self.shared_bytes if self.q_in_smem or self.wgmma else 0

    def grid(self, batch: int, heads: int, q_len: int) -> tuple[int, int, int]:
        return ((q_len + self.block_m - 1) // self.block_m, batch * heads, 1)

    @property
    def block(self) -> tuple[int, int, int]:
        return (32 * self.warps, 1, 1)


_PRELUDE = r"""
#if !defined(__CUDACC_RTC__) && !defined(__CUDACC__) && !defined(PARTITA_HOST_EMULATION)
#define PARTITA_HOST_EMULATION
#endif
#ifdef PARTITA_HOST_EMULATION
#ifndef PARTITA_FLASH_HOST
#define PARTITA_FLASH_HOST
struct uint4 { unsigned x, y, z, w; };
#define __align__(n) __attribute__((aligned(n)))
#define __expf expf
#undef __launch_bounds__
#define __launch_bounds__(...)
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
#endif
#endif
#ifndef PARTITA_FLASH_PRELUDE
#define PARTITA_FLASH_PRELUDE
#ifndef PARTITA_HOST_EMULATION
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif
// Two halves (f16 or bf16 bits) in one 32-bit register, low half first, as mma.sync reads.
static __device__ __forceinline__ unsigned fa_pack_f16(float lo, float hi) {
  __half a = __float2half_rn(lo), b = __float2half_rn(hi);
  unsigned short ua, ub; memcpy(&ua, &a, 2); memcpy(&ub, &b, 2);
  return (unsigned)ua | ((unsigned)ub << 16);
}
static __device__ __forceinline__ unsigned fa_pack_bf16(float lo, float hi) {
  __nv_bfloat16 a = __float2bfloat16_rn(lo), b = __float2bfloat16_rn(hi);
  unsigned short ua, ub; memcpy(&ua, &a, 2); memcpy(&ub, &b, 2);
  return (unsigned)ua | ((unsigned)ub << 16);
}
// A compile-time bool a generic lambda can take (no <type_traits> under NVRTC).
template <bool B> struct fa_bool { static constexpr bool value = B; };
#ifdef PARTITA_HOST_EMULATION
static inline float fa_exp2(float x) { return exp2f(x); }
#else
// 2^x by MUFU.EX2 (subnormal results flushed to 0, as __expf's).
static __device__ __forceinline__ float fa_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#endif
static __device__ __forceinline__ void fa_store_f16(__half* p, float x) { *p = __float2half_rn(x); }
static __device__ __forceinline__ void fa_store_bf16(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
static __device__ __forceinline__ float fa_f16(unsigned short bits) {
  __half h; memcpy(&h, &bits, 2); return __half2float(h);
}
static __device__ __forceinline__ float fa_bf16(unsigned short bits) {
  __nv_bfloat16 h; memcpy(&h, &bits, 2); return __bfloat162float(h);
}
#ifdef PARTITA_HOST_EMULATION
// The warp's lanes exchange fragments through shared memory: d = a * b + c for the
// m16n8k16 layouts (A row-major 16x16, B col-major 16x8, C/D 16x8 f32).
static unsigned fa_stage_a[32][32][4], fa_stage_b[32][32][2];
template <bool BF16>
static void fa_mma(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
  const unsigned t = threadIdx.x, w = t / 32, lane = t % 32;
  memcpy(fa_stage_a[w][lane], a, 16); memcpy(fa_stage_b[w][lane], b, 8);
  __syncthreads();
  auto half = [](unsigned reg, int hi) -> float {
    const unsigned short bits = (unsigned short)(hi ? reg >> 16 : reg & 0xffffu);
    return BF16 ? fa_bf16(bits) : fa_f16(bits);
  };
  // A[r][k]: lane (r % 8) * 4 + (k % 8) / 2, register (r / 8) + 2 * (k / 8), half k % 2.
  auto A = [&](int r, int k) { return half(fa_stage_a[w][(r % 8) * 4 + (k % 8) / 2][(r / 8) + 2 * (k / 8)], k % 2); };
  // B[k][n]: lane n * 4 + (k % 8) / 2, register k / 8, half k % 2.
  auto B = [&](int k, int n) { return half(fa_stage_b[w][n * 4 + (k % 8) / 2][k / 8], k % 2); };
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int r = lane / 4 + 8 * (e / 2), n = (lane % 4) * 2 + (e % 2);
    float acc = c[e];
    for (int k = 0; k < 16; ++k) acc += A(r, k) * B(k, n);
    out[e] = acc;
  }
  __syncthreads();
  memcpy(d, out, 16);
}
// ldmatrix.x4: lane l gives the address of row l % 8 of matrix l / 8; register i of a
// lane receives row lane / 4, halves 2 * (lane % 4) and + 1, of matrix i.
static const unsigned short* fa_stage_p[32][32];
static void fa_ldsm_x4(unsigned r[4], const unsigned short* p) {
  const unsigned t = threadIdx.x, w = t / 32, lane = t % 32;
  fa_stage_p[w][lane] = p;
  __syncthreads();
  for (int i = 0; i < 4; ++i) memcpy(&r[i], fa_stage_p[w][i * 8 + lane / 4] + 2 * (lane % 4), 4);
  __syncthreads();
}
// ldmatrix.x4.trans: register i of a lane receives column lane / 4, rows 2 * (lane % 4)
// and + 1, of matrix i (its 8x8 block transposed).
static void fa_ldsm_x4_trans(unsigned r[4], const unsigned short* p, int pitch) {
  const unsigned t = threadIdx.x, w = t / 32, lane = t % 32;
  fa_stage_p[w][lane] = p;
  __syncthreads();
  for (int i = 0; i < 4; ++i) {
    const unsigned short lo = fa_stage_p[w][i * 8 + 2 * (lane % 4)][lane / 4];
    const unsigned short hi = fa_stage_p[w][i * 8 + 2 * (lane % 4) + 1][lane / 4];
    r[i] = (unsigned)lo | ((unsigned)hi << 16);
  }
  __syncthreads();
  (void)pitch;
}
// cp.async: the copy happens at once (zero-filled when src_bytes is 0); groups are no-ops.
static void fa_cp_async16(void* dst, const void* src, int src_bytes) {
  if (src_bytes) memcpy(dst, src, 16); else memset(dst, 0, 16);
}
static void fa_cp_async_commit() {}
static void fa_cp_async_wait_one() {}
static void fa_cp_async_wait_all() {}
// Dynamic shared memory: one static array of the size the launch would give.
#define FA_DYNAMIC_SHARED(name, halves) static unsigned short name[halves] __attribute__((aligned(16)))
#define FA_MMA_F16(d, a, b, c) fa_mma<false>(d, a, b, c)
#define FA_MMA_BF16(d, a, b, c) fa_mma<true>(d, a, b, c)
#else
static __device__ __forceinline__ void fa_ldsm_x4(unsigned r[4], const unsigned short* p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
static __device__ __forceinline__ void fa_ldsm_x4_trans(unsigned r[4], const unsigned short* p, int) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
// 16 bytes global -> shared without registers (LDGSTS); src_bytes 0 zero-fills.
static __device__ __forceinline__ void fa_cp_async16(void* dst, const void* src, int src_bytes) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(a), "l"(src), "r"(src_bytes));
}
static __device__ __forceinline__ void fa_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Every group but the newest has landed (the tile being computed, not the one in flight).
static __device__ __forceinline__ void fa_cp_async_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::); }
static __device__ __forceinline__ void fa_cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }
// The block's dynamic shared memory (the launch's sharedMemBytes, opted in past 48 KiB).
#define FA_DYNAMIC_SHARED(name, halves) extern __shared__ __align__(16) unsigned short name[]
#define FA_MMA_F16(d, a, b, c) asm volatile( \
  "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n" \
  : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]) \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), \
    "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]))
#define FA_MMA_BF16(d, a, b, c) asm volatile( \
  "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n" \
  : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]) \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), \
    "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]))
#endif
// -- wgmma (sm_90a) ------------------------------------------------------------------
// The element (row, dim) of a tile of ``ck`` 16-byte chunks a row, as 8x8 core matrices
// ordered [row / 8][dim / 8], each 8 rows of 16 bytes (64 halves).
static __device__ __forceinline__ unsigned fa_core_offset(unsigned row, unsigned dim, unsigned ck) {
  return ((row / 8) * ck + dim / 8) * 64 + (row % 8) * 8 + dim % 8;
}
#ifdef PARTITA_HOST_EMULATION
// The emulation's shared addresses are byte offsets in the block's shared array.
static const unsigned short* fa_wg_base;
static unsigned fa_shared_address(const unsigned short* p, const unsigned short* base) {
  fa_wg_base = base;
  return (unsigned)((p - base) * 2);
}
static void fa_wg_fence() {}
static void fa_wg_commit() {}
static void fa_wg_wait0() {}
static void fa_fence_proxy_async() {}
static void fa_wg_fence_acc(float&) {}
static void fa_wg_fence_a(unsigned&) {}
// One warpgroup's wgmma.mma_async m64nNk16, f32 accumulation: the threads publish their A
// registers (the RS form) between two block barriers, then each computes the D elements it
// holds (row 16 * warp + lane / 4, + 8 for v / 2 odd; column 8 * (v / 4) + 2 * (lane % 4) +
// v % 2), reading A from the registers of the row's warp (the m16k16 fragment layout) or
// from shared memory (K-major), and B from shared memory (K-major, or MN-major transposed)
// by the canonical layouts of their descriptors.
static unsigned fa_wg_field(unsigned long long desc, int at) { return (unsigned)((desc >> at) & 0x3FFFu) << 4; }
// The byte (from the shared array) of a K-major operand's (row of M or N, k) and of an
// MN-major one's (k, column of N): the canonical no-swizzle layouts a descriptor names.
static unsigned fa_wg_k_major(unsigned long long desc, int row, int k) {
  return fa_wg_field(desc, 0) + (row % 8) * 16 + (row / 8) * fa_wg_field(desc, 32) + (k / 8) * fa_wg_field(desc, 16) +
         (k % 8) * 2;
}
static unsigned fa_wg_mn_major(unsigned long long desc, int k, int col) {
  return fa_wg_field(desc, 0) + (k % 8) * 16 + (k / 8) * fa_wg_field(desc, 16) + (col / 8) * fa_wg_field(desc, 32) +
         (col % 8) * 2;
}
// The accumulator element v of warpgroup thread t: (row, column) of the m64nN tile.
static void fa_wg_c_coord(int t, int v, int& row, int& col) {
  row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((v / 2) % 2);
  col = 8 * (v / 4) + 2 * (t % 4) + v % 2;
}
// Which thread of the warpgroup holds A's (row, k) in its registers, and as which half
// (register v / 2, half v % 2): the m16k16 fragment of the row's warp.
static void fa_wg_a_owner(int row, int k, int& t, int& v) {
  t = (row / 16) * 32 + (row % 8) * 4 + (k % 8) / 2;
  v = 2 * ((row % 16) / 8 + 2 * (k / 8)) + k % 2;
}
static unsigned fa_wg_stage[1024][4];
template <bool BF16>
static void fa_wgmma(float* d, int n, const unsigned* a, unsigned long long desc_a, unsigned long long desc_b,
                     bool trans_b, bool accumulate) {
  const unsigned group = threadIdx.x / 128 * 128, t = threadIdx.x % 128;
  if (a) memcpy(fa_wg_stage[group + t], a, 16);
  __syncthreads();
  auto elem = [](unsigned byte) {
    unsigned short bits;
    memcpy(&bits, (const char*)fa_wg_base + byte, 2);
    return BF16 ? fa_bf16(bits) : fa_f16(bits);
  };
  auto A = [&](int row, int k) -> float {
    if (!a) return elem(fa_wg_k_major(desc_a, row, k));
    int owner, v;
    fa_wg_a_owner(row, k, owner, v);
    const unsigned reg = fa_wg_stage[group + owner][v / 2];
    const unsigned short bits = (unsigned short)(v % 2 ? reg >> 16 : reg & 0xffffu);
    return BF16 ? fa_bf16(bits) : fa_f16(bits);
  };
  auto B = [&](int k, int col) {
    return elem(trans_b ? fa_wg_mn_major(desc_b, k, col) : fa_wg_k_major(desc_b, col, k));
  };
  float out[128];
  for (int v = 0; v < n / 2; ++v) {
    int row, col;
    fa_wg_c_coord((int)t, v, row, col);
    float acc = accumulate ? d[v] : 0.0f;
    for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    out[v] = acc;
  }
  __syncthreads();
  memcpy(d, out, sizeof(float) * (n / 2));
}
#else
static __device__ __forceinline__ unsigned fa_shared_address(const unsigned short* p, const unsigned short*) {
  return (unsigned)__cvta_generic_to_shared(p);
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Registers a wgmma reads or writes are settled before it (fence), its group is closed
// (commit), and the thread waits for every group before reading its accumulators.
static __device__ __forceinline__ void fa_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void fa_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void fa_wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
#else
static __device__ __forceinline__ void fa_wg_fence() { __trap(); }
static __device__ __forceinline__ void fa_wg_commit() { __trap(); }
static __device__ __forceinline__ void fa_wg_wait0() { __trap(); }
#endif
// The cp.async copies (generic proxy) made visible to the tensor cores' reads (async proxy).
static __device__ __forceinline__ void fa_fence_proxy_async() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// An accumulator the compiler must not read or write across the wgmma's asynchronous update.
static __device__ __forceinline__ void fa_wg_fence_acc(float& r) { asm volatile("" : "+f"(r) :: "memory"); }
// An A register a wgmma reads until it completes: live past the wait, so not reused before.
static __device__ __forceinline__ void fa_wg_fence_a(unsigned& r) { asm volatile("" : "+r"(r) :: "memory"); }
#endif
// A shared-memory matrix descriptor with no swizzle: the matrix is 8x8 core matrices, each
// 8 rows of 16 bytes (128 contiguous bytes); the start address, the leading byte offset
// (between core matrices adjacent along K for a K-major operand, along K's groups of 8 for
// an MN-major one) and the stride byte offset (along M / N), each in 16-byte units.
static __device__ __forceinline__ unsigned long long fa_gmma_desc(const unsigned short* p, const unsigned short* base,
                                                                  unsigned lbo, unsigned sbo) {
  const unsigned start = fa_shared_address(p, base);
  return (unsigned long long)((start & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32);
}
// What a kernel without wgmma names in its (never taken) wgmma branch.
static __device__ __forceinline__ void fa_wgmma_none(float*, const unsigned*, unsigned long long, unsigned long long,
                                                     int) {}
#endif
"""

_KERNEL = r"""
#ifndef $entry_DEFINED
#define $entry_DEFINED
// FlashAttention-2 forward: $entry (D = $D, BLOCK_M = $BM, BLOCK_N = $BN), the BLOCK_M-row
// query tile ``qtile`` of (batch, head) ``bh``; every thread of the block calls it alike.
static __device__ __forceinline__ void $entry_tile(
    const $T* __restrict__ q, const $T* __restrict__ k, const $T* __restrict__ v,
    const unsigned char* __restrict__ key_mask, $T* __restrict__ o,
    int heads, int kv_heads, int q_len, int kv_len, float scale, int qtile, int bh,
    long long mask_batch_stride, int mask_key_stride, long long q_row, long long k_row, long long v_row) {
  // D: the stored head dim; DP: the one the MMAs run at (D rounded up to 32, zero-padded).
  // MT: the m16 tiles of query rows a warp holds (16 * MT rows): each K and V fragment a
  // warp loads from shared memory feeds MT MMAs. QS: Q is staged in shared memory and its
  // A fragments loaded per k-step (ldmatrix), instead of held in registers throughout.
  constexpr int D = $D, DP = $DP, BM = $BM, BN = $BN, MT = $MT, KS = DP / 16, NT = BN / 8, DT = DP / 8;
  constexpr bool QS = $QSMEM;
  // WG: wgmma (sm_90a). The block's four warps are one warpgroup computing the block's
  // MT m64 tiles of rows (one); warp w holds rows 16 w .. 16 w + 15 of each (lane / 4 and + 8).
  constexpr bool WG = $WG;
  constexpr int DTU = (D + 15) / 16 * 2;  // output d-tiles holding real dims (pairs of n8 tiles)
  // Rows padded by 8 halves (16 bytes): the 8 rows a fragment load touches fall in 8
  // different bank groups, and every row start stays 16-byte aligned for uint4 stores.
  // With wgmma no padding: tiles are 8x8 core matrices (8 rows of 16 bytes, 128 contiguous
  // bytes, conflict-free for the tensor cores) ordered [row / 8][dim / 8], which K's and
  // Q's K-major descriptors and V's MN-major one all read.
  constexpr int KP = WG ? DP : DP + 8, CK = DP / 8;
  auto at = [](unsigned row, unsigned dim) -> unsigned { return WG ? fa_core_offset(row, dim, CK) : row * KP + dim; };
  // A thread's c-th 16-byte copy of a tile of D real dims a row: (row, dim). With wgmma in
  // the core matrices' order (consecutive threads, consecutive 16 bytes of shared memory).
  auto chunk = [](unsigned c, unsigned& row, unsigned& dim) {
    if (WG) {
      constexpr unsigned CD = D / 8;
      row = c / (8 * CD) * 8 + c % 8;
      dim = c / 8 % CD * 8;
    } else {
      row = c * 8 / D;
      dim = c * 8 % D;
    }
  };
  // Two stages of K and V tiles, both [key][dim]: tile t + 1 streams in (cp.async) while
  // tile t is computed; V's B fragments come from ldmatrix.trans.
$SHARED  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int b = bh / heads, h = bh % heads;
  const int hk = h / (heads / kv_heads);
  // Row strides and (batch, head) bases of Q, K, V and O in the layout. BSHD rows are
  // q_row / k_row / v_row apart (heads * D contiguous, wider for head views of a packed
  // QKV projection), so neither the head-split transposes nor the QKV split run; O is
  // contiguous. BHSD rows are D apart.
  const long long q_stride = $BSHD ? q_row : D, o_stride = $BSHD ? (long long)heads * D : D;
  const long long k_stride = $BSHD ? k_row : D, v_stride = $BSHD ? v_row : D;
  const long long q_base = $BSHD ? (long long)b * q_len * q_row + (long long)h * D : ((long long)bh * q_len) * D;
  const long long o_base = $BSHD ? ((long long)b * q_len * heads + h) * D : ((long long)bh * q_len) * D;
  const long long k_base = $BSHD ? (long long)b * kv_len * k_row + (long long)hk * D
                                 : ((long long)b * kv_heads + hk) * (long long)kv_len * D;
  const long long v_base = $BSHD ? (long long)b * kv_len * v_row + (long long)hk * D : k_base;
  if (D < DP) {  // the padding dims are zeros (K's: 0 * garbage could be NaN), never loaded
    constexpr int PAD = D < DP ? DP - D : 1;  // (1 where this is dead code: no division by zero)
    for (int c = threadIdx.x; c < 2 * BN * PAD; c += $THREADS) {
      const int stage = c / (BN * PAD), e = c % (BN * PAD);
      ks[stage][at(e / PAD, D + e % PAD)] = 0;
      vs[stage][at(e / PAD, D + e % PAD)] = 0;
    }
  }
  const int row0 = qtile * BM + warp * 16 * MT;  // this warp's first query row
  // The two rows this lane holds in m-tile i: r_lo[i] and r_hi[i] = r_lo[i] + 8.
  int r_lo[MT], r_hi[MT];
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    r_lo[i] = WG ? qtile * BM + 64 * i + 16 * warp + lane / 4 : row0 + 16 * i + lane / 4;
    r_hi[i] = r_lo[i] + 8;
  }
  const unsigned short* qb = (const unsigned short*)q + q_base;
  // Q tile in registers (A fragments); rows past q_len read as 0. (With QS: in shared
  // memory, copied with tile 0's group below.)
  unsigned qa[QS ? 1 : MT][QS ? 1 : KS][4];
  if constexpr (!QS) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
      for (int s = 0; s < KS; ++s)
        for (int r = 0; r < 4; ++r) {
          const int row = (r % 2) ? r_hi[i] : r_lo[i], col = s * 16 + (r / 2) * 8 + (lane % 4) * 2;
          unsigned word = 0;
          if (row < q_len && col < D) memcpy(&word, qb + (long long)row * q_stride + col, 4);
          qa[i][s][r] = word;
        }
  }
  float acc[MT][DT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
    for (int t = 0; t < DT; ++t) for (int e = 0; e < 4; ++e) acc[i][t][e] = 0.0f;
  // Per row: the running max m (log2 domain) and sum l.
  float m_lo[MT], m_hi[MT], l_lo[MT], l_hi[MT];
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    m_lo[i] = m_hi[i] = __int_as_float(0xff800000);
    l_lo[i] = l_hi[i] = 0.0f;
  }
  const int shift = kv_len - q_len;  // causal frontier: key j <= row + shift
  const int tiles_all = (kv_len + BN - 1) / BN;
  int tiles = tiles_all;
  if ($CAUSAL) {
    const int last = min(qtile * BM + BM - 1, q_len - 1) + shift;  // the block's last key
    tiles = max(0, min(tiles, (last + BN) / BN));
  }
  const unsigned short* kb = (const unsigned short*)k + k_base;
  const unsigned short* vb = (const unsigned short*)v + v_base;
  // Tile t's keys, 16 bytes a copy, into stage t % 2; keys past kv_len zero-filled. A
  // thread's copies are the same (row, dim) pairs every tile (a fixed, unrolled count, in
  // unsigned arithmetic: shifts and masks for a power-of-two D); only the tile's first
  // key moves.
  constexpr int CHUNKS = BN * D / 8, COPIES = (CHUNKS + $THREADS - 1) / $THREADS;
  auto load_tile = [&](int t) {
    const unsigned short* kg = kb + (long long)t * BN * k_stride;
    const unsigned short* vg = vb + (long long)t * BN * v_stride;
    unsigned short* kd = ks[t % 2];
    unsigned short* vd = vs[t % 2];
    const int keys = kv_len - t * BN;  // real keys in this tile (at most BN)
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      const unsigned c = threadIdx.x + i * $THREADS;
      if (CHUNKS % $THREADS != 0 && c >= (unsigned)CHUNKS) break;
      unsigned row, dim;
      chunk(c, row, dim);
      const bool real = (int)row < keys;
      const int bytes = real ? 16 : 0;
      fa_cp_async16(kd + at(row, dim), kg + (real ? row * k_stride + dim : 0), bytes);
      fa_cp_async16(vd + at(row, dim), vg + (real ? row * v_stride + dim : 0), bytes);
    }
    fa_cp_async_commit();  // one group a tile (empty past the last: the wait stays uniform)
  };
  // QS: the block's BM query rows into shared memory, 16 bytes a copy, rows past q_len
  // zero-filled; uncommitted, so they join the first group (tile 0's), and the first
  // step's wait covers them.
  if constexpr (QS) {
    constexpr int QCHUNKS = BM * D / 8, QCOPIES = (QCHUNKS + $THREADS - 1) / $THREADS;
#pragma unroll
    for (int i = 0; i < QCOPIES; ++i) {
      const unsigned c = threadIdx.x + i * $THREADS;
      if (QCHUNKS % $THREADS != 0 && c >= (unsigned)QCHUNKS) break;
      unsigned row, dim;
      chunk(c, row, dim);
      const int qrow = qtile * BM + (int)row;
      const bool real = qrow < q_len;
      fa_cp_async16(qs + at(row, dim), qb + (real ? (long long)qrow * q_stride + dim : 0), real ? 16 : 0);
    }
    if (D < DP) {
      constexpr int PAD = D < DP ? DP - D : 1;
      for (int c = threadIdx.x; c < BM * PAD; c += $THREADS) qs[at(c / PAD, D + c % PAD)] = 0;
    }
  }
  // Scores live in the log2 domain (s * scale * log2 e): p = 2^(s - m) is one subtraction
  // and one MUFU.EX2 a score. A masked score is the fill in that domain, saturated to
  // -FLT_MAX (finfo.min * log2 e would overflow to -inf, and a row the mask hides wholly
  // must still average every value).
  const float scale2 = scale * 1.4426950408889634f;
  // wgmma: the descriptors of the warpgroup's Q rows and of each stage's K and V tiles, made
  // once (a k-step's or 16 keys' adds its byte offset / 16 to the start address). Q and K
  // are K-major: core matrices along K 128 bytes apart (LBO), along the rows CK * 128
  // (SBO); V is MN-major (N = its dims): along the keys CK * 128 (LBO), the dims 128 (SBO).
  // (Scalars, selected by the stage's parity: an array indexed at run time would live in
  // local memory.)
  unsigned long long q_desc = 0, k_desc0 = 0, k_desc1 = 0, v_desc0 = 0, v_desc1 = 0;
  if constexpr (WG) {
    q_desc = fa_gmma_desc(qs, smem, 128, CK * 128);
    k_desc0 = fa_gmma_desc(ks[0], smem, 128, CK * 128);
    k_desc1 = fa_gmma_desc(ks[1], smem, 128, CK * 128);
    v_desc0 = fa_gmma_desc(vs[0], smem, CK * 128, 128);
    v_desc1 = fa_gmma_desc(vs[1], smem, CK * 128, 128);
  }
  const float fill2 = $FILL == __int_as_float(0xff800000) ? $FILL : fmaxf($FILL * 1.4426950408889634f, -3.402823466e38f);
  // One key tile: wait for its copy, start the next one, S = Q K^T, the online softmax and
  // O += P V. MASKED (a compile-time tag) applies kv_len, the causal frontier and the key
  // mask to the scores; the tiles every row of the block sees whole run without that code.
  auto step = [&](int tile, auto masked) {
    constexpr bool MASKED = decltype(masked)::value;
    const int key0 = tile * BN;
    const unsigned short* kt = ks[tile % 2];
    const unsigned short* vtile = vs[tile % 2];
    __syncthreads();  // every warp is done with tile - 1, whose stage the next copy reuses
    if (tile + 1 < tiles) load_tile(tile + 1); else fa_cp_async_commit();
    fa_cp_async_wait_one();  // this thread's copies of tile have landed
    if (WG) fa_fence_proxy_async();  // visible to the tensor cores' reads
    __syncthreads();         // and every thread's
    // S = Q K^T for this tile (f32 accumulators, NT n8 tiles an m-tile), scaled into the
    // log2 domain. Each ldmatrix.x4 of K (two k-steps of one key n8 tile) feeds the MMAs of
    // every m-tile. With two m-tiles or Q in shared memory the pairs of k-steps are the
    // outer loop (KO), so a Q fragment from shared memory is loaded once a tile (and ptxas
    // schedules the two-tile register form better too); else the key tiles.
    constexpr bool KO = MT > 1 || QS;
    float s[MT][NT][4];
    if constexpr (WG) {
      // One wgmma a k-step (256 bytes of each row) and m64 tile (N = BN keys), the first
      // overwriting S: A = the warpgroup's Q rows, B = K, both K-major in shared memory.
      fa_wg_fence();
      const unsigned long long kd = tile % 2 ? k_desc1 : k_desc0;
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int st = 0; st < KS; ++st)
          $WGQK(&s[i][0][0], nullptr, q_desc + (i * 8 * CK * 128 + st * 256) / 16, kd + st * 256 / 16, st);
      fa_wg_commit();
      fa_wg_wait0();
#pragma unroll
      for (int i = 0; i < MT; ++i)
        for (int n = 0; n < NT; ++n) for (int e = 0; e < 4; ++e) fa_wg_fence_acc(s[i][n][e]);
    } else {
#pragma unroll
      for (int i = 0; i < MT; ++i)
        for (int n = 0; n < NT; ++n) s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.0f;
#pragma unroll
      for (int x = 0; x < (KO ? KS / 2 : NT); ++x) {
        unsigned a[MT][2][4];  // the A fragments of k-steps st and st + 1
        if constexpr (QS) {    // matrix lane / 8 of an A fragment: rows + 8 * (bit 0), dims + 8 * (bit 1)
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            const unsigned short* qf = qs + (warp * 16 * MT + 16 * i + lane % 16) * KP + x * 32 + (lane / 16) * 8;
            fa_ldsm_x4(a[i][0], qf);
            fa_ldsm_x4(a[i][1], qf + 16);
          }
        }
#pragma unroll
        for (int y = 0; y < (KO ? NT : KS / 2); ++y) {
          const int st = 2 * (KO ? x : y), n = KO ? y : x;
          if constexpr (!QS) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
              for (int r = 0; r < 4; ++r) { a[i][0][r] = qa[i][st][r]; a[i][1][r] = qa[i][st + 1][r]; }
          }
          unsigned r[4];
          fa_ldsm_x4(r, kt + (n * 8 + lane % 8) * KP + st * 16 + (lane / 8) * 8);
          const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            $MMA(s[i][n], a[i][0], b0, s[i][n]);
            $MMA(s[i][n], a[i][1], b1, s[i][n]);
          }
        }
      }
    }
    // RAW: a whole tile with a positive scale keeps its scores unscaled (see below).
    constexpr bool RAW = !MASKED && $POSITIVE;
#pragma unroll
    for (int n = 0; n < (RAW ? 0 : NT); ++n) {
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[i][n][e] *= scale2;
          if (MASKED) {
            const int row = (e < 2) ? r_lo[i] : r_hi[i], key = key0 + n * 8 + (lane % 4) * 2 + (e % 2);
            bool keep = key < kv_len;
            if ($CAUSAL) keep = keep && key <= row + shift;
            if (key_mask != 0 && key < kv_len)  // strides 0: a mask broadcast over batch / keys
              keep = keep && key_mask[(long long)b * mask_batch_stride + (long long)key * mask_key_stride] != 0;
            if (!keep) s[i][n][e] = key < kv_len ? fill2 : __int_as_float(0xff800000);
          }
        }
    }
    // Online softmax, per m-tile: the tile's row max, then rescale what came before.
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      float t_lo = __int_as_float(0xff800000), t_hi = t_lo;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        t_lo = fmaxf(t_lo, fmaxf(s[i][n][0], s[i][n][1]));
        t_hi = fmaxf(t_hi, fmaxf(s[i][n][2], s[i][n][3]));
      }
#pragma unroll
      for (int off = 1; off < 4; off *= 2) {
        t_lo = fmaxf(t_lo, __shfl_xor_sync(0xffffffffu, t_lo, off));
        t_hi = fmaxf(t_hi, __shfl_xor_sync(0xffffffffu, t_hi, off));
      }
      if (RAW) { t_lo *= scale2; t_hi *= scale2; }  // the max of the scaled scores
      const float n_lo = fmaxf(m_lo[i], t_lo), n_hi = fmaxf(m_hi[i], t_hi);
      // A row with no key yet has max -inf: it subtracts 0 instead (-inf - -inf is NaN), so
      // its -inf scores still give 0, with no test per score; its state (zeros) is kept.
      const float z_lo = n_lo == __int_as_float(0xff800000) ? 0.0f : n_lo;
      const float z_hi = n_hi == __int_as_float(0xff800000) ? 0.0f : n_hi;
      const float f_lo = fa_exp2(m_lo[i] - z_lo), f_hi = fa_exp2(m_hi[i] - z_hi);
      m_lo[i] = n_lo; m_hi[i] = n_hi;
      float p_lo = 0.0f, p_hi = 0.0f;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        if constexpr (RAW) {  // 2^(s scale2 - z): one FFMA
          s[i][n][0] = fa_exp2(fmaf(s[i][n][0], scale2, -z_lo)); s[i][n][1] = fa_exp2(fmaf(s[i][n][1], scale2, -z_lo));
          s[i][n][2] = fa_exp2(fmaf(s[i][n][2], scale2, -z_hi)); s[i][n][3] = fa_exp2(fmaf(s[i][n][3], scale2, -z_hi));
        } else {
          s[i][n][0] = fa_exp2(s[i][n][0] - z_lo); s[i][n][1] = fa_exp2(s[i][n][1] - z_lo);
          s[i][n][2] = fa_exp2(s[i][n][2] - z_hi); s[i][n][3] = fa_exp2(s[i][n][3] - z_hi);
        }
        p_lo += s[i][n][0] + s[i][n][1];
        p_hi += s[i][n][2] + s[i][n][3];
      }
#pragma unroll
      for (int off = 1; off < 4; off *= 2) {
        p_lo += __shfl_xor_sync(0xffffffffu, p_lo, off);
        p_hi += __shfl_xor_sync(0xffffffffu, p_hi, off);
      }
      l_lo[i] = l_lo[i] * f_lo + p_lo;
      l_hi[i] = l_hi[i] * f_hi + p_hi;
#pragma unroll
      for (int t = 0; t < DTU; ++t) {
        acc[i][t][0] *= f_lo; acc[i][t][1] *= f_lo; acc[i][t][2] *= f_hi; acc[i][t][3] *= f_hi;
      }
    }
    // O += P V: two n8 tiles of P are one k16 A fragment, in registers; each ldmatrix.x4
    // of V feeds the MMAs of every m-tile. With wgmma: one wgmma a k16 step of keys (two
    // groups of 8: 2 * CK * 128 bytes) and m64 tile (N = DP), A = P's fragments, all packed
    // first (a wgmma reads its A registers until it completes); B = V, MN-major.
    if constexpr (WG) {
      unsigned pa[MT][NT / 2][4];
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT / 2; ++j) {
          pa[i][j][0] = $PACK(s[i][2 * j][0], s[i][2 * j][1]);
          pa[i][j][1] = $PACK(s[i][2 * j][2], s[i][2 * j][3]);
          pa[i][j][2] = $PACK(s[i][2 * j + 1][0], s[i][2 * j + 1][1]);
          pa[i][j][3] = $PACK(s[i][2 * j + 1][2], s[i][2 * j + 1][3]);
        }
#pragma unroll
      for (int i = 0; i < MT; ++i)
        for (int t = 0; t < DT; ++t) for (int e = 0; e < 4; ++e) fa_wg_fence_acc(acc[i][t][e]);
      fa_wg_fence();
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT / 2; ++j)
          $WGPV(&acc[i][0][0], pa[i][j], 0, (tile % 2 ? v_desc1 : v_desc0) + j * 2 * CK * 128 / 16, 1);
      fa_wg_commit();
      fa_wg_wait0();
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        for (int t = 0; t < DT; ++t) for (int e = 0; e < 4; ++e) fa_wg_fence_acc(acc[i][t][e]);
        for (int j = 0; j < NT / 2; ++j) for (int r = 0; r < 4; ++r) fa_wg_fence_a(pa[i][j][r]);
      }
      return;
    }
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      unsigned pa[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        pa[i][0] = $PACK(s[i][2 * j][0], s[i][2 * j][1]);
        pa[i][1] = $PACK(s[i][2 * j][2], s[i][2 * j][3]);
        pa[i][2] = $PACK(s[i][2 * j + 1][0], s[i][2 * j + 1][1]);
        pa[i][3] = $PACK(s[i][2 * j + 1][2], s[i][2 * j + 1][3]);
      }
#pragma unroll
      for (int t = 0; t < DTU; t += 2) {  // one ldmatrix.x4: B fragments of two d-tiles
        unsigned r[4];
        // matrix lane / 8: keys + 8 * (its bit 0), d-tile t + (its bit 1); rows are keys
        fa_ldsm_x4_trans(r, vtile + (j * 16 + ((lane / 8) % 2) * 8 + lane % 8) * KP + (t + lane / 16) * 8, KP);
        const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          $MMA(acc[i][t], pa[i], b0, acc[i][t]);
          $MMA(acc[i][t + 1], pa[i], b1, acc[i][t + 1]);
        }
      }
    }
  };
  // The tiles before the block's first row's causal frontier, inside kv_len, with no key
  // mask, are whole for every row of the block (FlashAttention-2's unmasked steps); the
  // rest (a partial last tile, the tiles the causal diagonal crosses, any with a key mask)
  // are masked. For a sequence of 1024 and more nearly every tile is whole.
  int whole = key_mask != 0 ? 0 : min(tiles, kv_len / BN);
  if ($CAUSAL) whole = min(whole, max(0, qtile * BM + shift + 1) / BN);
  if (tiles > 0) load_tile(0);
  int tile = 0;
  for (; tile < whole; ++tile) step(tile, fa_bool<false>());
  for (;; ++tile) {
    if (tile == tiles) {
      // The tiles past the block's causal frontier hide every key: they score the fill. At
      // -inf they add nothing and are skipped. A finite fill adds 2^(fill - m) V per key,
      // which is exactly 0 (f32 underflow) once a row's max m is far above the fill, the
      // usual case (finfo.min); the block visits them only when some row's is not (a row
      // the padding mask hides wholly, a row before every key, a fill near the scores).
      if (!$CAUSAL || tiles == tiles_all || $FILL == __int_as_float(0xff800000)) break;
      bool open = false;
      for (int i = 0; i < MT; ++i)
        open = open || (r_lo[i] < q_len && fa_exp2(fill2 - m_lo[i]) != 0.0f) ||
               (r_hi[i] < q_len && fa_exp2(fill2 - m_hi[i]) != 0.0f);
      if (!__syncthreads_or(open)) break;  // uniform: the stage of tile - 2 is free
      tiles = tiles_all;
      load_tile(tile);
    }
    step(tile, fa_bool<true>());
  }
  if constexpr (QS) fa_cp_async_wait_all();  // Q's copies, when no tile waited for them
  // Epilogue: O / l, or the undefined-row value. A NaN or +inf score makes some
  // exp(s - m) NaN (fmaxf skips NaN; inf - inf is NaN), so l (quad-reduced) is NaN.
  const float undefined_value = $ZERO ? 0.0f : __int_as_float(0x7fc00000);
  unsigned short* ob = (unsigned short*)o + o_base;
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    const bool dead_lo = l_lo[i] != l_lo[i] || m_lo[i] == __int_as_float(0xff800000);
    const bool dead_hi = l_hi[i] != l_hi[i] || m_hi[i] == __int_as_float(0xff800000);
    const float inv_lo = 1.0f / l_lo[i], inv_hi = 1.0f / l_hi[i];  // one division per row
    for (int t = 0; t < DT; ++t) {
      const int col = t * 8 + (lane % 4) * 2;
      if (col >= D) break;  // the padding dims
      if (r_lo[i] < q_len) {
        const unsigned w = dead_lo ? $PACK(undefined_value, undefined_value)
                                   : $PACK(acc[i][t][0] * inv_lo, acc[i][t][1] * inv_lo);
        memcpy(ob + (long long)r_lo[i] * o_stride + col, &w, 4);
      }
      if (r_hi[i] < q_len) {
        const unsigned w = dead_hi ? $PACK(undefined_value, undefined_value)
                                   : $PACK(acc[i][t][2] * inv_hi, acc[i][t][3] * inv_hi);
        memcpy(ob + (long long)r_hi[i] * o_stride + col, &w, 4);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__($THREADS, $MINBLOCKS)
$entry(const $T* __restrict__ q, const $T* __restrict__ k, const $T* __restrict__ v,
       const unsigned char* __restrict__ key_mask, $T* __restrict__ o,
       int heads, int kv_heads, int q_len, int kv_len, float scale, long long q_row, long long k_row,
       long long v_row) {
  $entry_tile(q, k, v, key_mask, o, heads, kv_heads, q_len, kv_len, scale, (int)blockIdx.x, (int)blockIdx.y,
              kv_len, 1, q_row, k_row, v_row);
}
#endif
"""


@dataclass(frozen=True)
class DecodeConfig:
    """One instantiation of the split-KV decode pass 1 (``nn.attention_partial``): element
    type, head dim (``D == Dv``), layout and mask kind."""

    dtype: str  # "f16", "bf16" or "f32"
    head_dim: int
    layout: str = "BHSD"
    mask: str = "none"  # "boolean" (nonzero attends), "additive" (the query's type) or "last_key" (int64 per batch row)

    def __post_init__(self):
        if self.dtype not in ("f16", "bf16", "f32"):
            raise ValueError(f"flash decode takes f16, bf16 or f32, not {self.dtype}")
        if not head_dim_supported(self.head_dim):
            raise ValueError(f"flash decode head dim must be a multiple of 8 from 8 to 256, got {self.head_dim}")
        if self.layout not in ("BHSD", "BSHD"):
            raise ValueError(f"flash decode layout must be BHSD or BSHD, got {self.layout}")
        if self.mask not in ("none", "boolean", "additive", "last_key"):
            raise ValueError(f"flash decode mask must be none, boolean, additive or last_key, got {self.mask}")

    @property
    def vec(self) -> int:
        """Elements in one 16-byte load: 8 halves or 4 floats."""
        return 4 if self.dtype == "f32" else 8

    @property
    def group(self) -> int:
        """Lanes sharing one key: the row's 16-byte vectors rounded up to a power of two
        (aligned groups, so xor shuffles reduce a key's dot product), at most the warp."""
        chunks = self.head_dim // self.vec
        return min(32, 1 << (chunks - 1).bit_length())

    @property
    def vectors(self) -> int:
        """16-byte vectors of a row each lane holds (2 for f32 past D = 128, else 1)."""
        return -(-(self.head_dim // self.vec) // self.group)

    @property
    def warps(self) -> int:
        """Warps per block: up to 4, and no more threads than floats in one split's partial
        row (``D + 2``), so the window launch (``ceil(numel / block)`` blocks) gives every
        (split, batch x head) pair a block of its own."""
        return max(1, min(4, (self.head_dim + 2) // 32))

    @property
    def unroll(self) -> int:
        """Keys a lane group loads before using any (K and V: 8 x 16 bytes in flight)."""
        return 4

    @property
    def entry(self) -> str:
        layout = "_bshd" if self.layout == "BSHD" else ""
        mask = {"none": "", "boolean": "_mb", "additive": "_ma", "last_key": "_ml"}[self.mask]
        return f"flash_decode_{self.dtype}_d{self.head_dim}{layout}{mask}_split"

    @property
    def block(self) -> tuple[int, int, int]:
        return (32 * self.warps, 1, 1)


_DECODE_PRELUDE = r"""
#ifndef PARTITA_DECODE_PRELUDE
#define PARTITA_DECODE_PRELUDE
// 16 bytes of a row as floats: 8 halves (f16 / bf16) or 4 floats.
static __device__ __forceinline__ void fd_unpack_f16(const uint4& u, float* x) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = fa_f16((unsigned short)(w[i] & 0xffffu)); x[2 * i + 1] = fa_f16((unsigned short)(w[i] >> 16));
  }
}
static __device__ __forceinline__ void fd_unpack_bf16(const uint4& u, float* x) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = fa_bf16((unsigned short)(w[i] & 0xffffu)); x[2 * i + 1] = fa_bf16((unsigned short)(w[i] >> 16));
  }
}
static __device__ __forceinline__ void fd_unpack_f32(const uint4& u, float* x) { memcpy(x, &u, 16); }
static __device__ __forceinline__ float fd_load_f16(const __half* p) { return __half2float(*p); }
static __device__ __forceinline__ float fd_load_bf16(const __nv_bfloat16* p) { return __bfloat162float(*p); }
static __device__ __forceinline__ float fd_load_f32(const float* p) { return *p; }
#endif
"""

_DECODE = r"""
#ifndef $entry_DEFINED
#define $entry_DEFINED
// Split-KV decode, pass 1 ($entry): split ``split`` of (batch, head) ``bh`` streams its
// keys [split * chunk, min(kv_len, (split + 1) * chunk)) once and writes its partial row
// [o[D], m, l] (nn.attention_partial); every thread of the block calls it alike.
// Bandwidth-bound, so K and V move in 16-byte loads (LDG.E.128): a group of G lanes
// holds one key row, a lane VEC consecutive elements of it (NV vectors), and each group
// loads U keys' K and V before using any, so 2 * U * NV loads a lane are in flight. A
// group's lanes reduce the dot product with xor shuffles and share the key's online
// softmax (m, l); the groups of a warp, then the warps (shared memory) merge theirs.
static __device__ __forceinline__ void $entry(
    const $T* __restrict__ q, const $T* __restrict__ k, const $T* __restrict__ v,
    const $M* __restrict__ mask, float* __restrict__ part,
    int heads, int kv_heads, int kv_len, float scale, int splits, int split, int bh,
    long long mask_batch_stride, int mask_key_stride, long long q_batch_stride, float mask_fill) {
  constexpr int D = $D, VEC = $VEC, CH = D / VEC, G = $G, NV = $NV, KPW = 32 / G, W = $W, U = $U;
  constexpr int STEP = W * KPW * U, ROW = D + 2;
  __shared__ float wo[W][D];
  __shared__ float wm[W], wl[W];
  const float neg_inf = __int_as_float(0xff800000), pos_inf = __int_as_float(0x7f800000);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / G, gl = lane % G;
  const int b = bh / heads, h = bh % heads, hk = h / (heads / kv_heads);
  const int chunk = (kv_len + splits - 1) / splits;
  const int start = min(kv_len, split * chunk), end = min(kv_len, start + chunk);
$STOP  // Key rows are D apart (BHSD) or kv_heads * D (BSHD: the head transposes folded in).
  // The one query row of (b, h) is at b * q_batch_stride + h * D in both layouts:
  // heads * D for a query of its own, the packed row's width for a head split of a
  // QKV projection read in place.
  const long long kv_stride = $BSHD ? (long long)kv_heads * D : D;
  const long long kv_base = $BSHD ? (long long)b * kv_len * kv_heads * D + (long long)hk * D
                                  : ((long long)b * kv_heads + hk) * (long long)kv_len * D;
  const $T* kb = k + kv_base;
  const $T* vb = v + kv_base;
  float qr[NV][VEC], acc[NV][VEC];
#pragma unroll
  for (int n = 0; n < NV; ++n) {
    const int c = gl + n * G;  // this lane's vectors of the row: gl, gl + G, ...
    if (c < CH) {
      const uint4 u = *(const uint4*)(q + (long long)b * q_batch_stride + (long long)h * D + c * VEC);
      $UNPACK(u, qr[n]);
    } else {
      for (int e = 0; e < VEC; ++e) qr[n][e] = 0.0f;
    }
    for (int e = 0; e < VEC; ++e) acc[n][e] = 0.0f;
  }
  float m = neg_inf, l = 0.0f;
  bool bad = false;  // a NaN or +inf score: the split's (and the row's) softmax is undefined
  for (int j0 = start; j0 < stop; j0 += STEP) {  // the same trip count in every warp
    int key[U];
    uint4 kr[U][NV], vr[U][NV];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      key[u] = j0 + (u * W + warp) * KPW + g;  // consecutive groups: consecutive keys
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        const int c = gl + n * G;
        if (key[u] < stop && c < CH) {
          kr[u][n] = *(const uint4*)(kb + key[u] * kv_stride + c * VEC);
          vr[u][n] = *(const uint4*)(vb + key[u] * kv_stride + c * VEC);
        } else {
          kr[u][n] = vr[u][n] = uint4{0u, 0u, 0u, 0u};
        }
      }
    }
    float s[U];
    float top = neg_inf;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float x[VEC], dot = 0.0f;
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        $UNPACK(kr[u][n], x);
        for (int e = 0; e < VEC; ++e) dot += qr[n][e] * x[e];
      }
      for (int off = G / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      float x_u = dot * scale;
      if (key[u] >= stop) {
        x_u = neg_inf;
      } else {
$MASK_LINES        bad = bad || x_u != x_u || x_u == pos_inf;
      }
      s[u] = x_u;
      top = fmaxf(top, x_u);
    }
    // Online softmax: rescale what came before when the maximum grows (exp(-inf - -inf)
    // is NaN: a group with nothing yet keeps its zero state).
    const float grown = fmaxf(m, top);
    const float r = grown == neg_inf ? 1.0f : __expf(m - grown);
    m = grown;
    l *= r;
#pragma unroll
    for (int n = 0; n < NV; ++n)
      for (int e = 0; e < VEC; ++e) acc[n][e] *= r;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (key[u] >= stop) continue;
      // A masked key (p = 0) still multiplies its value: 0 * NaN is NaN, as p @ v.
      const float p = s[u] == neg_inf ? 0.0f : __expf(s[u] - m);
      l += p;
      float x[VEC];
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        $UNPACK(vr[u][n], x);
        for (int e = 0; e < VEC; ++e) acc[n][e] += p * x[e];
      }
    }
  }
  // The warp's groups merge (xor across groups: lane gl of each holds the same dims).
  for (int off = G; off < 32; off *= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off), l2 = __shfl_xor_sync(0xffffffffu, l, off);
    const int bad2 = __shfl_xor_sync(0xffffffffu, (int)bad, off);
    const float top = fmaxf(m, m2);
    const float w1 = m == neg_inf ? 0.0f : __expf(m - top), w2 = m2 == neg_inf ? 0.0f : __expf(m2 - top);
    l = l * w1 + l2 * w2;
#pragma unroll
    for (int n = 0; n < NV; ++n)
      for (int e = 0; e < VEC; ++e) {
        const float a2 = __shfl_xor_sync(0xffffffffu, acc[n][e], off);
        acc[n][e] = acc[n][e] * w1 + a2 * w2;
      }
    m = top;
    bad = bad || bad2;
  }
  if (lane < G)
    for (int n = 0; n < NV; ++n)
      if (gl + n * G < CH)
        for (int e = 0; e < VEC; ++e) wo[warp][(gl + n * G) * VEC + e] = acc[n][e];
  if (lane == 0) { wm[warp] = bad ? __int_as_float(0x7fc00000) : m; wl[warp] = l; }
  __syncthreads();
  // Then the warps: the split's row, every value NaN when any warp saw an undefined score.
  float top = neg_inf;
  bool undefined = false;
  for (int w = 0; w < W; ++w) { undefined = undefined || wm[w] != wm[w]; top = fmaxf(top, wm[w]); }
  float* row = part + ((long long)bh * splits + split) * ROW;
  for (int d = threadIdx.x; d < ROW; d += 32 * W) {
    float y = top;
    if (d != D) {
      y = 0.0f;
      for (int w = 0; w < W; ++w) {
        const float f = wm[w] == neg_inf ? 0.0f : __expf(wm[w] - top);
        y += f * (d < D ? wo[w][d] : wl[w]);
      }
    }
    row[d] = undefined ? __int_as_float(0x7fc00000) : y;
  }
  __syncthreads();  // the next (split, bh) of this block reuses wo, wm and wl
}
#endif
"""


def flash_decode_source(configs: list[DecodeConfig] | DecodeConfig) -> str:
    """The CUDA C of the split-KV decode pass 1 for the given instantiations: one device
    function each, ``<entry>(q, k, v, mask, part, heads, kv_heads, kv_len, scale, splits,
    split, bh, mask_batch_stride, mask_key_stride, q_batch_stride, mask_fill)`` called by
    every thread of a block of ``config.block`` threads for one (split, batch x head) pair;
    ``part`` is ``[B, H, splits, D + 2]`` floats, ``mask`` is null without one (strides 0
    where it broadcasts), ``mask_fill`` the score of a key a boolean mask hides. Pass 2
    (``nn.attention_combine``) is a plain window kernel."""
    if isinstance(configs, DecodeConfig):
        configs = [configs]
    parts = [_PRELUDE, _DECODE_PRELUDE]
    ctypes = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}
    for c in configs:
        mask_type = {"none": "unsigned char", "boolean": "unsigned char", "additive": ctypes[c.dtype],
                     "last_key": "long long"}[c.mask]
        at = "(long long)b * mask_batch_stride + (long long)key[u] * mask_key_stride"
        mask_lines = {"none": "",
                      "boolean": f"        if (mask[{at}] == 0) x_u = mask_fill;\n",
                      "additive": f"        x_u += fd_load_{c.dtype}(mask + {at});\n",
                      "last_key": "        if (key[u] > last) x_u = mask_fill;\n"}[c.mask]
        # A last key cuts the split after it: the cache's keys past the position are never
        # read (a negative one cuts nothing: every key scores mask_fill, as a mask hides).
        stop = ("  const long long last = mask[(long long)b * mask_batch_stride];\n"
                "  const int stop = last >= 0 && last + 1 < end ? (int)(last + 1) : end;\n"
                if c.mask == "last_key" else "  const int stop = end;\n")
        text = _DECODE
        substitutions = {"$entry": c.entry, "$D": str(c.head_dim), "$VEC": str(c.vec), "$G": str(c.group),
                         "$NV": str(c.vectors), "$W": str(c.warps), "$U": str(c.unroll),
                         "$BSHD": "true" if c.layout == "BSHD" else "false", "$T": ctypes[c.dtype],
                         "$M": mask_type, "$MASK_LINES": mask_lines, "$UNPACK": f"fd_unpack_{c.dtype}",
                         "$STOP": stop}
        for key in sorted(substitutions, key=len, reverse=True):  # $UNPACK before $U
            text = text.replace(key, substitutions[key])
        parts.append(text)
    return "\n".join(parts)


def _wgmma_function(name: str, dtype: str, n: int, a_in_smem: bool, trans_b: bool) -> str:
    """``name(d, a, desc_a, desc_b, accumulate)``: one ``wgmma.mma_async`` m64 x ``n`` x k16
    in f32 of the warpgroup, A from registers (``a``, four of the m16k16 fragment) or from
    shared memory (``desc_a``, K-major), B through ``desc_b`` (K-major, or MN-major with
    ``trans_b``); ``accumulate`` 0 overwrites ``d``."""
    t = "bf16" if dtype == "bf16" else "f16"
    acc = n // 2
    d = ", ".join(f"%{i}" for i in range(acc))
    if a_in_smem:
        a_ops, a_in, rest = f"%{acc}", '"l"(desc_a), ', f"%{acc + 1}, p, 1, 1, 0, {int(trans_b)}"
        scale = acc + 2
    else:
        a_ops = "{" + ", ".join(f"%{acc + i}" for i in range(4)) + "}"
        a_in, rest = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), ', f"%{acc + 4}, p, 1, 1, {int(trans_b)}"
        scale = acc + 5
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(acc))
    emulated = "nullptr" if a_in_smem else "a"
    return f"""#ifndef {name}_DEFINED
#define {name}_DEFINED
static __device__ __forceinline__ void {name}(float* d, const unsigned* a, unsigned long long desc_a,
                                              unsigned long long desc_b, int accumulate) {{
#if defined(PARTITA_HOST_EMULATION)
  (void)desc_a;
  fa_wgmma<{'true' if t == 'bf16' else 'false'}>(d, {n}, {emulated}, desc_a, desc_b, {'true' if trans_b else 'false'}, accumulate != 0);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  (void)a; (void)desc_a;
  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale}, 0;\\n"
               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{d}}}, {a_ops}, {rest};\\n}}\\n"
               : {outs}
               : {a_in}"l"(desc_b), "r"(accumulate));
#else
  __trap();
#endif
}}
#endif
"""


def _wgmma_functions(c: FlashConfig) -> str:
    """The two wgmma shapes of a key tile: S = Q K^T (N = ``block_n`` keys, A = Q and B = K
    from shared memory, K-major) and O += P V (N = the padded head dim, A = P from
    registers, B = V, MN-major)."""
    if not c.wgmma:
        return ""
    qk = _wgmma_function(_wgmma_qk(c), c.dtype, c.block_n, True, False)
    return qk + _wgmma_function(_wgmma_pv(c), c.dtype, c.padded_dim, False, True)


def _wgmma_qk(c: FlashConfig) -> str:
    return f"fa_wgmma_qk_{c.dtype}_n{c.block_n}" if c.wgmma else "fa_wgmma_none"


def _wgmma_pv(c: FlashConfig) -> str:
    return f"fa_wgmma_pv_{c.dtype}_n{c.padded_dim}" if c.wgmma else "fa_wgmma_none"


def _shared_declarations(c: FlashConfig) -> str:
    """The tile function's shared arrays: ``ks`` and ``vs`` ``[2][BN * KP]`` (static), or,
    with Q in shared memory, ``qs`` ``[BM * KP]`` and both in the dynamic shared memory."""
    if c.wgmma:  # one dynamic array: the descriptors' start addresses are offsets in it
        return (f"  FA_DYNAMIC_SHARED({c.entry}_smem, {c.dynamic_smem // 2});\n"
                f"  unsigned short* const smem = {c.entry}_smem;  // [BM][DP] of Q with QS, then K's and V's stages\n"
                f"  unsigned short* const qs = {'smem' if c.q_in_smem else 'nullptr'};\n"
                "  unsigned short (*const ks)[BN * KP] = reinterpret_cast<unsigned short (*)[BN * KP]>"
                "(smem + (QS ? BM * KP : 0));\n"
                "  unsigned short (*const vs)[BN * KP] = ks + 2;\n")
    if not c.q_in_smem:
        return ("  __shared__ __align__(16) unsigned short ks[2][BN * KP];\n"
                "  __shared__ __align__(16) unsigned short vs[2][BN * KP];\n"
                "  unsigned short* const qs = nullptr;  // Q in registers\n"
                "  unsigned short* const smem = nullptr;\n")
    return (f"  FA_DYNAMIC_SHARED({c.entry}_smem, {c.dynamic_smem // 2});\n"
            f"  unsigned short* const smem = {c.entry}_smem;\n"
            f"  unsigned short* const qs = {c.entry}_smem;  // [BM][KP], then K's and V's stages\n"
            "  unsigned short (*const ks)[BN * KP] = reinterpret_cast<unsigned short (*)[BN * KP]>(qs + BM * KP);\n"
            "  unsigned short (*const vs)[BN * KP] = ks + 2;\n")


def flash_attention_source(configs: list[FlashConfig] | FlashConfig) -> str:
    """The CUDA C of the given instantiations (one ``extern "C"`` entry each)."""
    if isinstance(configs, FlashConfig):
        configs = [configs]
    parts = [_PRELUDE]
    for c in configs:
        parts.append(_wgmma_functions(c))
        text = _KERNEL
        for key, value in (("$entry", c.entry), ("$THREADS", str(32 * c.warps)), ("$DP", str(c.padded_dim)),
                           ("$D", str(c.head_dim)), ("$BSHD", "true" if c.layout == "BSHD" else "false"),
                           ("$BM", str(c.block_m)), ("$BN", str(c.block_n)), ("$MT", str(c.m_tiles)),
                           ("$MINBLOCKS", str(c.min_blocks)), ("$QSMEM", "true" if c.q_in_smem else "false"),
                           ("$SHARED", _shared_declarations(c)),
                           ("$T", "__half" if c.dtype == "f16" else "__nv_bfloat16"),
                           ("$MMA", "FA_MMA_F16" if c.dtype == "f16" else "FA_MMA_BF16"),
                           ("$PACK", f"fa_pack_{c.dtype}"),
                           ("$CAUSAL", "true" if c.causal else "false"), ("$FILL", _c_float(c.mask_fill)),
                           ("$ZERO", "true" if c.zero_undefined_rows else "false"),
                           ("$WGQK", _wgmma_qk(c)), ("$WGPV", _wgmma_pv(c)), ("$WG", "true" if c.wgmma else "false"),
                           ("$POSITIVE", "true" if c.positive_scale else "false")):
            text = text.replace(key, value)
        parts.append(text)
    return "\n".join(parts)
