"""CUTLASS 3 Hopper GEMMs for ``sm_90a``: TMA loads, wgmma (``HGMMA``), warp specialization.

Every kernel here is ``cutlass::gemm::kernel::GemmUniversal`` over a mainloop from CUTLASS's
collective builder with one of two schedules (:data:`SCHEDULES`): ``KernelTmaWarpSpecialized``
(one producer warp group issuing TMA loads, one consumer warp group issuing wgmma, a CTA
per output tile) or, for large problems, ``KernelTmaWarpSpecializedCooperative``
(persistent: about one CTA per SM walks the tiles with CUTLASS's
``PersistentTileSchedulerSm90``, two consumer warp groups share each tile's rows; for a
few tiles with a long K or a partial last wave, the same kernel over CUTLASS's
``StreamKScheduler``: split-K or stream-K, K ranges of tiles cut into work units whose f32
partials meet in a workspace, ``Sm90Config.decomposition``), and
the register epilogue (``DefaultEpilogue`` in the warp-specialized adapter) with
Partita's bias/activation thread op. Such a kernel takes ONE parameter, its ``Params`` by
value (``__grid_constant__``): the TMA descriptors must live in parameter space. Its
runner is inlined into the entry: across a call ptxas serializes every wgmma (C7510).

CUTLASS builds ``Params`` on the host (``to_underlying_arguments``, which encodes the TMA
descriptors); NVRTC compiles no host code, so Partita builds those bytes itself. The
NVRTC program carries a *layout probe* beside each kernel: ``__device__`` constants
holding ``sizeof``/``offsetof`` of every field the runtime fills
(:data:`LAYOUT_FIELDS`, and for a persistent kernel its :data:`SCHEDULER_PROBES`: the tile
scheduler's, which ``partita.runtime.tma.persistent_schedule`` computes as CUTLASS's host
code does), read back from the cubin's initialized data
(:func:`read_layout`); the TMA descriptors are encoded when a launch is bound
(``cuTensorMapEncodeTiled``, ``partita.runtime.tma``), the launch is a cluster launch
(``cuLaunchKernelEx``).

Problem shapes are run-time values in ``Params``: one instantiation per configuration
serves every shape (and every partition) that uses it, through one entry named after the
configuration (:func:`sm90_entry_name`), in a translation unit of its own whose text
depends on the configuration alone (one NVRTC program, cached, for every module using it).

What is taken (everything else stays on the Sm80 kernels of ``kernels.py``): dense and
``batch_matmul`` / ``matmul`` in every layout (``x[M,K]`` times ``w[N,K]`` or ``w[K,N]``,
transposed A too) with no operand broadcast over the batch, f16 or bf16, whose operands'
contiguous extents are static multiples of 8 (TMA needs 16-byte strides), epilogues
none / bias / bias_relu / bias_gelu / bias_gelu_tanh / residual (dense: the residual is C,
laid out as D, ``beta = 1``) / bias_residual (dense, a projection back into a transformer's
residual stream: CUTLASS 3's ``EpilogueTensorBroadcast``, the bias a per-column vector
beside the residual C0, ``D = (acc + bias) + C0``) and none / bias (batched). f32 operands
multiply as TF32 (the ``cutlass`` target's ``use_tf32``, its default: wgmma on TF32, f32
accumulation, an f32 output), whose wgmma reads K-major operands only (``x[M,K]`` times
``w[N,K]``), on K tiles of 32 elements (one 128-byte row). int8 dense TN GEMMs (s8, or u8 x
s8; ``nn.matmul_integer`` with zero points proven zeros) run wgmma on 8-bit integers, i32
accumulation and an i32 epilogue (``D = acc + C``, C the bias row: every sum exact), on K
tiles of 128 bytes. FP8 (E4M3 / E5M2, a mix too) dense
TN GEMMs with no epilogue are built the same way: the collective builder's FP8 main loop
(wgmma on 8-bit floats, its accumulators promoted into f32 every ``mma_promotion_interval``
K-blocks, not the fast-accumulate form), K tiles of 128 elements (one 128-byte row), an f32
output.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from dataclasses import dataclass

from xdsl.dialects.builtin import DictionaryAttr, StringAttr

from partita.lowering.contracts import contract_constant, key_digest
from partita.lowering.cubin import Cubin
from partita.lowering.cutlass.kernels import (
    CTYPES,
    DTYPE_BYTES,
    HALF_DTYPES,
    SUPPORTED_EPILOGUES,
    KernelSpec,
    UnsupportedKernel,
    by_kernel_type,
    entry_contract,
    spec_fields,
)
from partita.lowering.cutlass.tuning import (
    COOPERATIVE,
    SM90_CANDIDATES,
    SM90_FP8_TABLE,
    SM90_INT8_TABLE,
    SM90_SPLIT_TILES,
    SM90_SPLITS,
    SM90_STREAM_K_DEFAULT,
    SM90_TABLE,
    SM90_TF32_TABLE,
    WS,
    parse_sm90_label,
    sm90_label,
    sm90_streams_k,
    sm90_tile,
)
from partita.lowering.records import dataclass_from, fields_attr, from_attr, register_record_kind, to_attr
from partita.target.arch import max_dynamic_smem

_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32", "float_e4m3": "e4m3", "float_e5m2": "e5m2",
          "int8": "s8", "uint8": "u8"}
#: The FP8 main loop's promotion interval (K-blocks of wgmma accumulated before they are
#: added into the f32 accumulators): CUTLASS's default, a multiple of the 4 K-blocks of a
#: 128-element K tile (its ``can_implement`` rule)
MMA_PROMOTION_INTERVAL = 4
_ACTIVATION = {"none": "Identity", "bias": "Identity", "bias_relu": "ReLu", "bias_gelu": "GELU",
               "bias_gelu_tanh": "GELU_taylor", "residual": "Identity", "bias_residual": "Identity",
               "bias_residual_relu": "Identity"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: The probe's fields, in order: what the runtime needs to fill ``Params`` and launch.
LAYOUT_FIELDS = (
    "params_size", "params_align", "problem_shape", "tma_a", "tma_b", "tma_desc", "tma_size",
    "tx_bytes", "tx_bytes_mk", "tx_bytes_nk", "tx_bytes_value", "tx_bytes_mk_value", "tx_bytes_nk_value",
    "alpha", "beta", "ptr_c", "stride_c", "ptr_d", "stride_d",
    "smem", "threads", "stages", "swizzle_a", "swizzle_b", "promotion", "ptr_bias",
)
@dataclass(frozen=True)
class SchedulerProbe:
    """A tile scheduler's probe, the kernel's second one (``<kernel_type><symbol>``): the
    byte offset in ``Params`` of each field of ``params`` (``(name, kind)``: the kind says
    how ``partita.runtime.tma.pack_scheduler`` writes it), then the offsets inside the
    types of ``inner`` (``(name, C type, member)``) and the sizes of the enums of ``sizes``
    (``(name, C type)``). The layout keeps them under ``key``."""

    key: str
    symbol: str
    what: str
    params: tuple[tuple[str, str], ...]
    inner: tuple[tuple[str, str, str], ...]
    sizes: tuple[tuple[str, str], ...]
    reach: int
    """Bytes from a field's offset to the end of ``Params`` at least (its check)."""

    @property
    def fields(self) -> tuple[str, ...]:
        """The probe's values by name, in order."""
        return (*(name for name, _ in self.params), *(name for name, _, _ in self.inner),
                *(name for name, _ in self.sizes))


_DIVMOD64 = (("divmod_multiplier", "cutlass::FastDivmodU64", "multiplier"),
             ("divmod_shift_right", "cutlass::FastDivmodU64", "shift_right"),
             ("divmod_round_up", "cutlass::FastDivmodU64", "round_up"),
             ("pow2_shift_right", "cutlass::FastDivmodU64Pow2", "shift_right"))
_RASTER_ORDER = ("raster_order_size", "cutlass::gemm::kernel::detail::RasterOrder")
#: The persistent kernels' probe: the hardware info and CUTLASS's
#: ``PersistentTileSchedulerSm90Params`` fields the runtime fills
#: (``partita.runtime.tma.persistent_schedule``).
PERSISTENT_PROBE = SchedulerProbe(
    "scheduler", "_sched_layout", "tile scheduler",
    (("sm_count", "i32"), ("max_active_clusters", "i32"), ("divmod_cluster_shape_major", "pow2"),
     ("divmod_cluster_shape_minor", "pow2"), ("divmod_batch", "divmod64"), ("divmod_cluster_blk_major", "divmod64"),
     ("blocks_per_problem", "u64"), ("log_swizzle_size", "i32"), ("raster_order", "enum"),
     ("problem_tiles_m", "u32"), ("problem_tiles_n", "u32"), ("problem_tiles_l", "u32"), ("cluster_shape_m", "u32"),
     ("cluster_shape_n", "u32")),
    _DIVMOD64, (_RASTER_ORDER,), 4)
#: A stream-K scheduler's kernel's probe: every field of CUTLASS's
#: ``PersistentTileSchedulerSm90StreamKParams``, the hardware info and the kernel's
#: workspace pointer (``partita.runtime.tma.stream_k_schedule``).
STREAM_K_PROBE = SchedulerProbe(
    "stream_k", "_stream_k_layout", "stream-K tile scheduler",
    (("sm_count", "i32"), ("max_active_clusters", "i32"),
     ("divmod_cluster_shape_major", "pow2"), ("divmod_cluster_shape_minor", "pow2"),
     ("divmod_batch", "divmod64"), ("divmod_cluster_blk_major", "divmod64"), ("divmod_clusters_mnl", "divmod64"),
     ("divmod_sk_groups", "divmod64"), ("divmod_sk_units_per_group", "divmod64"), ("units_per_problem", "u64"),
     ("divmod_tiles_per_output_tile", "divmod"), ("log_swizzle_size", "i32"), ("raster_order", "enum"),
     ("divmod_splits", "divmod"), ("big_units", "u32"), ("big_groups", "u32"), ("reduction_workspace", "ptr"),
     ("sk_tiles", "u32"), ("sk_units", "u32"), ("divmod_k_tiles_per_sk_unit", "divmod"),
     ("divmod_k_tiles_per_sk_big_unit", "divmod"), ("reduction_mode", "enum"), ("divmod_epilogue_subtile", "divmod64"),
     ("separate_reduction_units", "u32"), ("ktile_start_alignment_count", "u32"), ("workspace", "ptr")),
    (*_DIVMOD64, ("divmod32_multiplier", "cutlass::FastDivmod", "multiplier"),
     ("divmod32_shift_right", "cutlass::FastDivmod", "shift_right")),
    (_RASTER_ORDER, ("reduction_mode_size", "cutlass::gemm::kernel::detail::ReductionMode")), 8)
SCHEDULER_PROBES = (PERSISTENT_PROBE, STREAM_K_PROBE)
#: A persistent kernel's work decompositions (:attr:`Sm90Config.decomposition`).
DECOMPOSITIONS = ("", "split_k", "stream_k")
#: The most split-K slices a Hopper kernel is built for (CUTLASS clamps a count to the SMs
#: and to the K tiles; more slices than 16 only add partials to reduce).
MAX_SPLITS = 16
#: Probe fields a record made before they existed may lack, with the value they had then.
LAYOUT_DEFAULTS = {"ptr_bias": -1, "scheduler": (), "stream_k": ()}

PREAMBLE = """\
// Generated by partita.lowering.cutlass.sm90 -- CUTLASS 3 Hopper GEMMs.
#include <cuda/std/type_traits>
// CUTLASS 3 names these in std; NVRTC has no host standard library, CCCL has them.
namespace std { using cuda::std::is_pointer_v; using cuda::std::void_t; using cuda::std::is_const_v; }
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/default_epilogue.hpp>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

// D = Act(alpha * acc + beta * C), in f32, one element at a time (DefaultEpilogue's
// interface); with C a bias row (row stride 0) and beta = 1 this is the Sm80 kernels'
// bias + activation epilogue.
template <class T, template <class> class Act>
class PartitaLinCombAct {
 public:
  using Base = cutlass::epilogue::thread::LinearCombination<T, 1, float, float>;
  using ElementOutput = T; using ElementD = T; using ElementC = T; using ElementSource = T;
  using ElementAccumulator = float; using ElementCompute = float; using ElementScalar = float;
  static int const kCount = 1;
  using Params = typename Base::Params;
  CUTLASS_HOST_DEVICE explicit PartitaLinCombAct(Params const& p) : alpha_(p.alpha), beta_(p.beta) {}
  CUTLASS_HOST_DEVICE bool is_source_needed() const { return beta_ != 0.f; }
  CUTLASS_HOST_DEVICE void set_k_partition(int, int) {}
  CUTLASS_HOST_DEVICE T operator()(float acc, T src) const { return T(Act<float>()(alpha_ * acc + beta_ * float(src))); }
  CUTLASS_HOST_DEVICE T operator()(float acc) const { return T(Act<float>()(alpha_ * acc)); }
 private:
  float alpha_, beta_;
};

// log2 of a shared-memory layout atom's swizzle width in 16-byte units (3: 128B)
template <class Atom> struct partita_swizzle_bits { static constexpr int value = -1; };
template <int B, int M, int S, class O, class L>
struct partita_swizzle_bits<cute::ComposedLayout<cute::Swizzle<B, M, S>, O, L>> { static constexpr int value = B; };

"""


#: An int8 kernel's epilogue thread op (in its unit only, so the others read as before):
#: ``D = acc + C`` in i32, so every sum stays exact (no f32 scaling); ``alpha`` / ``beta``
#: are where the runtime writes them for every kernel, ``beta`` != 0 saying C is read.
INT8_EPILOGUE = """\
#ifndef PARTITA_ADD_SOURCE_I32  // once per unit, whatever its int8 kernels
#define PARTITA_ADD_SOURCE_I32
class PartitaAddSourceI32 {
 public:
  using ElementOutput = int32_t; using ElementD = int32_t; using ElementC = int32_t; using ElementSource = int32_t;
  using ElementAccumulator = int32_t; using ElementCompute = int32_t; using ElementScalar = int32_t;
  static int const kCount = 1;
  struct Params { float alpha = 1.f, beta = 0.f; };
  CUTLASS_HOST_DEVICE explicit PartitaAddSourceI32(Params const& p) : beta_(p.beta) {}
  CUTLASS_HOST_DEVICE bool is_source_needed() const { return beta_ != 0.f; }
  CUTLASS_HOST_DEVICE void set_k_partition(int, int) {}
  CUTLASS_HOST_DEVICE int32_t operator()(int32_t acc, int32_t src) const { return acc + src; }
  CUTLASS_HOST_DEVICE int32_t operator()(int32_t acc) const { return acc; }
 private:
  float beta_;
};
#endif
"""

#: The kernel schedules built: ``KernelTmaWarpSpecialized`` (a CTA per output tile, one
#: producer and one consumer warp group) and ``KernelTmaWarpSpecializedCooperative``
#: (persistent, two consumer warp groups sharing each tile's rows, the next tile's loads
#: issued while the last one's epilogue runs).
SCHEDULES = (WS, COOPERATIVE)


@dataclass(frozen=True)
class Sm90Config:
    """How a Hopper kernel computes its spec: CTA tile, thread-block cluster and schedule."""

    tile: tuple[int, int, int]
    cluster: tuple[int, int, int] = (1, 1, 1)
    schedule: str = "KernelTmaWarpSpecialized"
    name: str = ""
    splits: int = 1
    """Split-K slices of the ``split_k`` decomposition (a run-time value of ``Params``:
    every count shares one kernel)."""
    decomposition: str = ""
    """How a persistent kernel cuts its work (:data:`DECOMPOSITIONS`): ``""`` a CTA's work
    unit is an output tile (CUTLASS's ``PersistentTileSchedulerSm90``); else CUTLASS's
    ``StreamKScheduler``, its Params holding that scheduler's state and the kernel taking a
    workspace for f32 partials: ``"split_k"`` each tile's K range cut into ``splits`` units,
    the last one running the epilogue (a few-row product's tiles then fill the SMs), or
    ``"stream_k"`` CUTLASS's heuristic choice per problem: data-parallel, split-K, or
    stream-K (the tiles of the last two waves cut into equal K ranges across a wave of SMs,
    so a partial last wave does not idle them)."""

    def __post_init__(self) -> None:
        bm, bn, bk = self.tile
        if bm not in (64, 128, 256) or bn % 16 or not 16 <= bn <= 256 or bk not in (32, 64, 128):
            raise UnsupportedKernel(f"sm90 tile {self.tile} is not a wgmma tile (M 64/128/256, N 16..256, "
                                    "K 32/64/128)")
        if self.cluster[2] != 1 or self.cluster[0] * self.cluster[1] not in (1, 2, 4):
            raise UnsupportedKernel(f"sm90 cluster {self.cluster} is not 1, 2 or 4 CTAs in M x N")
        if self.schedule not in SCHEDULES:
            raise UnsupportedKernel(f"sm90 schedule {self.schedule!r} is not built ({', '.join(SCHEDULES)} are)")
        if self.persistent and bm not in (128, 256):
            raise UnsupportedKernel(f"a cooperative tile splits its {bm} rows between two consumer warp groups: "
                                    "128 or 256 rows")
        if self.decomposition not in DECOMPOSITIONS or (self.stream_k_scheduler and not self.persistent):
            raise UnsupportedKernel(f"sm90 decomposition {self.decomposition!r}: one of {DECOMPOSITIONS}, and "
                                    "split-K / stream-K only on the persistent cooperative schedule")
        if not (2 <= self.splits <= MAX_SPLITS if self.decomposition == "split_k" else self.splits == 1):
            raise UnsupportedKernel(f"sm90 split-K of {self.splits} slices: 2 to {MAX_SPLITS} in the split_k "
                                    "decomposition, 1 otherwise")

    @property
    def persistent(self) -> bool:
        """A persistent kernel: a grid of about one CTA per SM walks the output tiles with
        CUTLASS's tile scheduler, whose state its ``Params`` holds."""
        return self.schedule == COOPERATIVE

    @property
    def stream_k_scheduler(self) -> bool:
        """Built with CUTLASS's ``StreamKScheduler``: its ``Params`` hold that scheduler's
        state (:data:`STREAM_K_PROBE`) and it takes a workspace."""
        return self.decomposition != ""


def hopper_spec(spec: KernelSpec) -> KernelSpec:
    """The spec a Hopper kernel computes for ``spec``: a pointwise convolution (a 1x1
    filter, unit strides and dilation, no padding: NHWC ``x`` by OHWI ``w``) is the dense
    GEMM of its pixels by its filter, ``[N*H*W, C] x [K, C]^T``, which reads and writes the
    same bytes (IREE's 1x1-filter conv to matmul, at the kernel: the partition, its
    patterns and its epilogue stay the convolution's); any other spec is itself."""
    if spec.op != "conv2d" or spec.epilogue not in SUPPORTED_EPILOGUES["dense"]:
        return spec
    k, r, s, c = spec.filter_shape  # type: ignore[misc]
    if (r, s) != (1, 1) or spec.strides != (1, 1) or spec.dilation != (1, 1) or any(spec.padding):
        return spec
    n, h, w, _ = spec.input_shape  # type: ignore[misc]
    pixels = None if None in (n, h, w) else n * h * w  # type: ignore[operator]
    try:
        return KernelSpec.dense(pixels, k, c, spec.dtype, spec.epilogue, spec.dtype_b)
    except UnsupportedKernel:  # a dense's own limits (none known past the convolution's): as it is
        return spec


def why_not_sm90(spec: KernelSpec, f32_math: str = "tf32") -> str | None:
    """Why ``spec`` has no Hopper kernel (``None`` when it has one); ``f32_math`` is how
    the target multiplies f32 (``CutlassOptions.f32_math``): Hopper's f32 kernels are TF32.
    A pointwise convolution is asked as its GEMM (:func:`hopper_spec`)."""
    spec = hopper_spec(spec)
    if spec.op == "conv2d":
        return ("a conv2d other than a pointwise one (1x1, unit strides and dilation, no padding: a GEMM) has no "
                "CUTLASS 3 kernel here")
    if spec.op not in ("dense", "batch_matmul"):
        return f"{spec.op} has no CUTLASS 3 kernel here"
    if spec.is_fp8 or spec.is_int8:
        # KernelSpec admits FP8 only as a dense TN GEMM with no epilogue and K a multiple of
        # 16: TMA's 16-byte rows; int8 as a dense TN GEMM of K a multiple of 16 with an i32
        # bias row at most (its zero points proven zeros)
        return None
    if spec.dtype == "float32":
        if f32_math != "tf32":
            return f"f32 GEMMs in {f32_math} math are built on Sm80 kernels (Hopper's f32 kernels are TF32)"
        if spec.transpose_a or not spec.transpose_b:
            return "TF32 wgmma reads K-major operands only (x[M,K] times w[N,K]): this layout is built on Sm80 kernels"
    elif spec.dtype not in HALF_DTYPES:
        return f"{spec.dtype} GEMMs are built on Sm80 kernels"
    if spec.broadcast:
        return "an operand broadcast over the batch (batch stride 0) is not encoded for TMA here"
    # TMA needs 16-byte strides: the contiguous extent of each operand a multiple of 8
    # halves (4 floats)
    per_16 = 16 // DTYPE_BYTES[spec.dtype]
    if spec.K is None or spec.K % per_16:
        return f"TMA needs 16-byte row strides: K must be static and a multiple of {per_16}"
    if spec.transpose_a and (spec.M is None or spec.M % per_16):
        return f"TMA needs 16-byte row strides: an M-major A needs a static M, a multiple of {per_16}"
    if not spec.transpose_b and (spec.N is None or spec.N % per_16):
        return f"TMA needs 16-byte row strides: an N-major B needs a static N, a multiple of {per_16}"
    return None


def sm90_tunable(spec: KernelSpec) -> bool:
    """Whether ``spec``'s Hopper kernel is one of ``SM90_CANDIDATES`` (f16 / bf16), which
    a tuning may pin; FP8, int8 and TF32 products take their table's configuration only."""
    return hopper_spec(spec).dtype in HALF_DTYPES


def choose_sm90_config(spec: KernelSpec, kernel: str = "", f32_math: str = "tf32") -> Sm90Config:
    """The Hopper configuration of ``spec`` from the sm_90 tuning table (a few rows by a large
    weight: the stream-K kernel, ``sm90_streams_k``), or the label ``kernel`` of
    ``SM90_CANDIDATES`` (what ``tune-cutlass-kernels`` measured fastest); an
    :class:`UnsupportedKernel` saying why when it has none."""
    why = why_not_sm90(spec, f32_math)
    if why is not None:
        raise UnsupportedKernel(why)
    spec = hopper_spec(spec)
    if kernel:
        if not sm90_tunable(spec):
            kind = "FP8" if spec.is_fp8 else "int8" if spec.is_int8 else "TF32"
            raise UnsupportedKernel(f"kernel '{kernel}' is pinned, but {kind} Hopper GEMMs take their table's only")
        try:
            tile, cluster, schedule, decomposition, splits = parse_sm90_label(kernel)
        except ValueError as err:
            raise UnsupportedKernel(str(err)) from None
        if (tile, cluster, schedule) not in SM90_CANDIDATES:
            known = ", ".join(sm90_label(*c) for c in SM90_CANDIDATES)
            raise UnsupportedKernel(f"kernel '{kernel}' is not a Hopper configuration built here ({known})")
        if decomposition:
            why = why_not_decomposed(spec, tile, cluster, schedule, decomposition, splits)
            if why:
                raise UnsupportedKernel(f"kernel '{kernel}' is pinned, but {why}")
    else:
        table = SM90_FP8_TABLE if spec.is_fp8 else SM90_INT8_TABLE if spec.is_int8 else \
            SM90_TF32_TABLE if spec.dtype == "float32" else SM90_TABLE
        tile, cluster, schedule = sm90_tile(spec.M, spec.N, spec.K, table)
        decomposition, splits = "", 1
        if spec.dtype in HALF_DTYPES and sm90_streams_k(spec.M, spec.N, spec.K) and \
                why_not_decomposed(spec, *SM90_STREAM_K_DEFAULT, "stream_k") is None:  # a few rows, a large weight
            (tile, cluster, schedule), decomposition = SM90_STREAM_K_DEFAULT, "stream_k"
    cfg = Sm90Config(tile=tile, cluster=cluster, schedule=schedule, splits=splits, decomposition=decomposition)
    return dataclasses.replace(cfg, name=sm90_name(spec, cfg))


def why_not_decomposed(spec: KernelSpec, tile: tuple[int, int, int], cluster: tuple[int, int, int], schedule: str,
                       decomposition: str, splits: int = 1) -> str | None:
    """Why ``spec`` takes no Hopper split-K (``splits`` slices) or stream-K kernel of this
    tile, cluster and schedule (``None`` when it does): a dense product of a static K (of at
    least ``splits`` K tiles) on one of :data:`SM90_SPLIT_TILES`, split by one of
    :data:`SM90_SPLITS`."""
    built = [(t, (1, 1, 1), COOPERATIVE) for t in SM90_SPLIT_TILES]
    if (tile, cluster, schedule) not in built or (decomposition == "split_k" and splits not in SM90_SPLITS):
        labels = [sm90_label(*c, "split_k", s) for c in built for s in SM90_SPLITS]
        labels += [sm90_label(*c, "stream_k") for c in built]
        return f"Hopper split-K and stream-K are built for {', '.join(labels)}"
    if spec.op != "dense" or spec.broadcast_epilogue:
        return f"a {spec.op} with a {spec.epilogue} epilogue is not split on Hopper (a dense product's is)"
    if spec.K is None or spec.K // tile[2] < splits:
        return f"K = {spec.K} has fewer than {splits} K tiles of {tile[2]}"
    return None


def sm90_name(spec: KernelSpec, cfg: Sm90Config) -> str:
    """CUTLASS 3 style name, e.g. ``cutlass3x_sm90_tensorop_gemm_f16_f16_f32_128x128x64_1x1x1_tn_warpspecialized``."""
    a, b = _SHORT[spec.dtype], _SHORT[spec.b_dtype]
    kind = "gemm_batched" if spec.op == "batch_matmul" else "gemm"
    accumulator = "s32" if spec.is_int8 else "f32"
    name = (f"cutlass3x_sm90_tensorop_{kind}_{a}_{b}_{accumulator}_{'x'.join(map(str, cfg.tile))}_"
            f"{'x'.join(map(str, cfg.cluster))}_{spec.layout}_warpspecialized"
            f"{'_cooperative' if cfg.persistent else ''}"
            f"{ {'': '', 'split_k': f'_splitk{cfg.splits}', 'stream_k': '_streamk'}[cfg.decomposition]}")
    return name + ("_" + spec.epilogue if spec.epilogue != "none" else "")


def sm90_type_key(spec: KernelSpec, cfg: Sm90Config) -> tuple:
    """What makes two entries' kernels differ (their shapes do not)."""
    # the bias or the residual is a run-time C operand: "none", "bias" and "residual"
    # differ only in beta and dC; a bias beside the residual is another epilogue
    act = _ACTIVATION[spec.epilogue]
    key = (spec.dtype, act, cfg.tile, cfg.cluster, cfg.schedule, spec.layout)
    key = key + (spec.dtype_b,) if spec.dtype_b else key  # (f16 / bf16 keys read as before)
    # one kernel for both decompositions and every split count (run-time values of Params)
    key = key + ("stream_k",) if cfg.stream_k_scheduler else key
    if spec.epilogue == "bias_residual_relu":
        return key + ("tensor_broadcast", "relu")
    return key + ("tensor_broadcast",) if spec.broadcast_epilogue else key


def sm90_entry_name(spec: KernelSpec, cfg: Sm90Config) -> str:
    """The C name of the entry of (spec, cfg)'s kernel type: what its key holds and 8 hex
    digits of the key, the same for every partition (and shape) of the type."""
    t = _SHORT[spec.dtype] + (f"_{_SHORT[spec.dtype_b]}" if spec.dtype_b else "")
    act = spec.epilogue if spec.broadcast_epilogue else _ACTIVATION[spec.epilogue].lower()
    return (f"cutlass3x_sm90_tensorop_gemm_{t}_{'x'.join(map(str, cfg.tile))}_{'x'.join(map(str, cfg.cluster))}_"
            f"{spec.layout}_{act}{'_streamk' if cfg.stream_k_scheduler else ''}_{key_digest(sm90_type_key(spec, cfg))}")


#: The ABI of every Hopper entry: one parameter, the kernel's ``Params`` by value.
SM90_ABI = ("params:Params:grid_constant",)


@dataclass(frozen=True)
class Sm90Entry:
    """One partition's launch of its kernel type's Hopper entry:
    ``extern "C" __global__ name(const __grid_constant__ Params)``."""

    name: str
    spec: KernelSpec
    config: Sm90Config
    kernel_type: str
    layout_symbol: str

    @property
    def contract(self) -> bytes:
        """The digest the entry's cubin holds: its name, kernel type and ABI (no shape,
        no partition: every partition of the type launches the same entry)."""
        return entry_contract(self.name, sm90_type_key(self.spec, self.config), SM90_ABI)


@dataclass(frozen=True)
class Sm90Source:
    code: str
    entries: dict[str, Sm90Entry]

    def entries_at_line(self, line: int) -> list[str]:  # NvrtcError's entry attribution
        return []


def _kernel_decl(alias: str, spec: KernelSpec, cfg: Sm90Config) -> str:
    T, TB, TD = (CTYPES[t] for t in (spec.dtype, spec.b_dtype, spec.out_dtype))
    align = 16 // DTYPE_BYTES[spec.dtype]  # elements per 16-byte access
    # the FP8 main loop's promotion interval, where its Params holds one (-1: none)
    promotion = f"(long long)offsetof({alias}_ns::Params, mainloop.mma_promotion_interval)" if spec.is_fp8 \
        else "-1LL"
    bm, bn, bk = cfg.tile
    cm, cn, ck = cfg.cluster
    accumulator = "int32_t" if spec.is_int8 else "float"
    act = f"cutlass::epilogue::thread::{_ACTIVATION[spec.epilogue]}"
    if spec.broadcast_epilogue:
        # D = (alpha * acc + bias[n]) + beta * C0: the bias a per-column vector (stride
        # (0, 1, 0)), the residual C0 laid out as D, no C1; f32 math, TD stored; with
        # bias_residual_relu (a ResNet block's last, pointwise, convolution) the ReLU of all
        # that, as the op after the add (UnaryOp)
        unary = (", cutlass::epilogue::thread::detail::NoOp, cutlass::epilogue::thread::ReLu"
                 if spec.epilogue == "bias_residual_relu" else "")
        epilogue = ("cutlass::epilogue::collective::EpilogueTensorBroadcast<StrideC, StrideC,\n"
                    "        cutlass::epilogue::thread::LinearCombinationTensorBroadcast<TD, float, float, TD,\n"
                    f"            {act}, cutlass::plus{unary}>,\n"
                    "        cutlass::gemm::EpilogueDefault, /*PerColumnBias=*/true>")
        ptr_c, ptr_bias = "ptr_C0", f"(long long)offsetof({alias}_ns::Params, epilogue.ptr_Bias)"
    elif spec.is_int8:  # D = acc + C in i32: every sum exact (C the bias row, or none)
        epilogue = ("cutlass::epilogue::collective::DefaultEpilogue<TD, StrideC, StrideC, PartitaAddSourceI32,\n"
                    "                                                   cutlass::gemm::EpilogueDefault>")
        ptr_c, ptr_bias = "ptr_C", "-1LL"
    else:
        epilogue = (f"cutlass::epilogue::collective::DefaultEpilogue<TD, StrideC, StrideC, PartitaLinCombAct<TD, {act}>,\n"
                    "                                                   cutlass::gemm::EpilogueDefault>")
        ptr_c, ptr_bias = "ptr_C", "-1LL"
    # A [M,K] row-major is K-major; B [N,K] (CUTLASS column-major) is K-major too
    layout_a = "ColumnMajor" if spec.transpose_a else "RowMajor"
    layout_b = "ColumnMajor" if spec.transpose_b else "RowMajor"
    # split-K or stream-K: CUTLASS's stream-K tile scheduler
    scheduler = ", cutlass::gemm::StreamKScheduler" if cfg.stream_k_scheduler else ""
    # the broadcast epilogue's headers only where it is used: the other units read as before
    includes = ("#include <cutlass/epilogue/collective/epilogue_tensor_broadcast.hpp>\n"
                "#include <cutlass/epilogue/thread/linear_combination_tensor_broadcast.hpp>\n"
                if spec.broadcast_epilogue else INT8_EPILOGUE if spec.is_int8 else "")
    return f"""\
{includes}namespace {alias}_ns {{
using namespace cute;
using T = {T};    // A's element type
using TB = {TB};  // B's
using TD = {TD};  // C's and D's (the output)
using TileShape = Shape<_{bm}, _{bn}, _{bk}>;
using ClusterShape = Shape<_{cm}, _{cn}, _{ck}>;
using StrideC = cutlass::detail::TagToStrideC_t<cutlass::layout::RowMajor>;
using Epilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
    {epilogue}>;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    T, cutlass::layout::{layout_a}, {align}, TB, cutlass::layout::{layout_b}, {align}, {accumulator},
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::{cfg.schedule}>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue{scheduler}>;
using Params = typename Kernel::Params;
using TmaA = typename Mainloop::Params::TMA_A;
// Partita encodes one TMA box per K tile: the tile's K extent must be one swizzle row.
static_assert(partita_swizzle_bits<typename Mainloop::SmemLayoutAtomA>::value == 3, "A: 128B swizzle expected");
static_assert(partita_swizzle_bits<typename Mainloop::SmemLayoutAtomB>::value == 3, "B: 128B swizzle expected");
static_assert({bk} * sizeof(T) == 128, "one K tile is one 128-byte swizzle row");
}}  // namespace {alias}_ns

// Inlined into its entry: a wgmma pipeline may not cross a call (ptxas would serialize
// every wgmma with a warpgroup wait of its own, C7510).
__device__ __forceinline__ void {alias}_run(const {alias}_ns::Params& params) {{
  extern __shared__ char partita_smem[];
  {alias}_ns::Kernel op;
  op(params, partita_smem);
}}

extern "C" __device__ const long long {alias}_layout[] = {{
  (long long)sizeof({alias}_ns::Params), (long long)alignof({alias}_ns::Params),
  (long long)offsetof({alias}_ns::Params, problem_shape),
  (long long)offsetof({alias}_ns::Params, mainloop.tma_load_a),
  (long long)offsetof({alias}_ns::Params, mainloop.tma_load_b),
  (long long)offsetof({alias}_ns::TmaA, tma_desc_),
  (long long)sizeof({alias}_ns::TmaA),
  (long long)offsetof({alias}_ns::Params, mainloop.tma_transaction_bytes),
  (long long)offsetof({alias}_ns::Params, mainloop.tma_transaction_bytes_mk),
  (long long)offsetof({alias}_ns::Params, mainloop.tma_transaction_bytes_nk),
  (long long){alias}_ns::Mainloop::TmaTransactionBytes,
  (long long){alias}_ns::Mainloop::TmaTransactionBytesMK,
  (long long){alias}_ns::Mainloop::TmaTransactionBytesNK,
  (long long)offsetof({alias}_ns::Params, epilogue.thread.alpha),
  (long long)offsetof({alias}_ns::Params, epilogue.thread.beta),
  (long long)offsetof({alias}_ns::Params, epilogue.{ptr_c}),
  (long long)offsetof({alias}_ns::Params, epilogue.dC),
  (long long)offsetof({alias}_ns::Params, epilogue.ptr_D),
  (long long)offsetof({alias}_ns::Params, epilogue.dD),
  (long long){alias}_ns::Kernel::SharedStorageSize,
  (long long){alias}_ns::Kernel::MaxThreadsPerBlock,
  (long long){alias}_ns::Mainloop::DispatchPolicy::Stages,
  (long long)partita_swizzle_bits<typename {alias}_ns::Mainloop::SmemLayoutAtomA>::value,
  (long long)partita_swizzle_bits<typename {alias}_ns::Mainloop::SmemLayoutAtomB>::value,
  {promotion},
  {ptr_bias},
}};
// Sentinels: how a (M, N, K, L) shape and a (row, 1, batch) stride are laid out in bytes.
extern "C" __device__ const decltype({alias}_ns::Params::problem_shape) {alias}_probe_shape{{0x11, 0x22, 0x33, 0x44}};
extern "C" __device__ const {alias}_ns::StrideC {alias}_probe_stride{{int64_t(0x55), cute::Int<1>{{}}, int64_t(0x66)}};
{_scheduler_probe(alias, STREAM_K_PROBE if cfg.stream_k_scheduler else PERSISTENT_PROBE) if cfg.persistent else ""}
"""


def _scheduler_probe(alias: str, probe: SchedulerProbe) -> str:
    """The kernel's scheduler probe (:class:`SchedulerProbe`)."""
    member = {"sm_count": "hw_info.sm_count", "max_active_clusters": "hw_info.max_active_clusters",
              "workspace": "workspace"}
    offsets = [f"  (long long)offsetof({alias}_ns::Params, {member.get(f, f'scheduler.{f}_')}),"
               for f, _ in probe.params]
    return (f'extern "C" __device__ const long long {alias}{probe.symbol}[] = {{\n' + "\n".join(offsets) + "\n"
            + "".join(f"  (long long)offsetof({t}, {m}),\n" for _, t, m in probe.inner)
            + "".join(f"  (long long)sizeof({t}),\n" for _, t in probe.sizes) + "};\n")


def _entry(entry: Sm90Entry) -> str:
    alias = entry.kernel_type
    return (f'extern "C" __global__ void __launch_bounds__({alias}_ns::Kernel::MaxThreadsPerBlock, 1)\n'
            f"{entry.name}(const __grid_constant__ {alias}_ns::Params params) {{\n"
            f"  {alias}_run(params);\n}}\n")


def emit_sm90_module(kernels: list[tuple[str, KernelSpec, Sm90Config]]) -> Sm90Source:
    """One NVRTC translation unit: per distinct kernel type, its kernel (with its layout
    probe), ONE entry and its launch contract. ``entries`` maps each label (a partition's
    name) to its :class:`Sm90Entry`; labels never enter the code, so a unit of one type
    reads the same for every module and shape (:func:`emit_sm90_units`)."""
    types: dict[tuple, Sm90Entry] = {}
    decls: list[str] = []
    entries: dict[str, Sm90Entry] = {}
    for label, spec, cfg in kernels:
        if label in entries:
            raise ValueError(f"duplicate partition label {label!r}")
        key = sm90_type_key(spec, cfg)
        first = types.get(key)
        if first is None:
            alias = f"partita_sm90_k{len(types)}"
            first = types[key] = Sm90Entry(sm90_entry_name(spec, cfg), spec, cfg, alias, f"{alias}_layout")
            decls.append(_kernel_decl(alias, spec, cfg))
        entries[label] = Sm90Entry(first.name, spec, cfg, first.kernel_type, first.layout_symbol)
    code = PREAMBLE + "".join(decls) + "".join(_entry(e) for e in types.values())
    code += "\n// Launch contracts (partita.lowering.contracts), checked at load\n" + "".join(
        contract_constant(e.name, e.contract) + "\n" for e in types.values())
    return Sm90Source(code, entries)


def emit_sm90_units(kernels: list[tuple[str, KernelSpec, Sm90Config]]) -> list[Sm90Source]:
    """One translation unit per Hopper kernel type (in order of first use): about a minute
    of NVRTC each, so each is its own program, compiled in parallel and cached apart."""
    return [emit_sm90_module(group) for group in by_kernel_type(kernels, sm90_type_key)]


def read_layout(cubin: bytes | Cubin, kernel_type: str) -> dict[str, int]:
    """The probe of ``kernel_type`` read from ``cubin``: every :data:`LAYOUT_FIELDS` value,
    plus the byte offsets of the shape's four ints and of the stride's two int64s
    (``shape_offsets``, ``stride_offsets`` as tuples, checked against the sentinels)."""
    cubin = Cubin.of(cubin)  # three probes of one file
    raw = cubin.read_global(f"{kernel_type}_layout")
    values = struct.unpack(f"<{len(raw) // 8}q", raw)
    if len(values) != len(LAYOUT_FIELDS):
        raise ValueError(f"{kernel_type}: layout probe has {len(values)} values, expected {len(LAYOUT_FIELDS)}")
    layout: dict = dict(zip(LAYOUT_FIELDS, values))
    shape = cubin.read_global(f"{kernel_type}_probe_shape")
    stride = cubin.read_global(f"{kernel_type}_probe_stride")
    layout["shape_offsets"] = tuple(_find(shape, struct.pack("<i", v), 4) for v in (0x11, 0x22, 0x33, 0x44))
    layout["stride_offsets"] = tuple(_find(stride, struct.pack("<q", v), 8) for v in (0x55, 0x66))
    layout["shape_size"], layout["stride_size"] = len(shape), len(stride)
    for probe in SCHEDULER_PROBES:  # a persistent kernel's scheduler
        layout[probe.key] = ()
        if f"{kernel_type}{probe.symbol}" in cubin.data_objects:
            raw = cubin.read_global(f"{kernel_type}{probe.symbol}")
            layout[probe.key] = struct.unpack(f"<{len(raw) // 8}q", raw)
            if len(layout[probe.key]) != len(probe.fields):
                raise ValueError(f"{kernel_type}: {probe.what} probe has {len(layout[probe.key])} values, expected "
                                 f"{len(probe.fields)}")
    return layout


def _find(data: bytes, needle: bytes, align: int) -> int:
    at = data.find(needle)
    if at < 0 or at % align or data.find(needle, at + 1) >= 0:
        raise ValueError(f"layout probe: sentinel {needle.hex()} not found once, aligned, in {data.hex()}")
    return at


# -- records -------------------------------------------------------------------------

RECORD_KIND = "cutlass_sm90"
#: Param-space limit of a kernel on sm_90 with CUDA >= 12.1 (bytes)
MAX_PARAMS_BYTES = 32764


def sm90_record(entry: Sm90Entry, inputs: tuple[str, ...], layout: dict) -> DictionaryAttr:
    """The ``byoc.binary`` record of one Hopper entry: spec, configuration and the probe's
    ``Params`` layout, so the runtime builds the parameter bytes without the compiler."""
    return DictionaryAttr({
        "kind": StringAttr(RECORD_KIND),
        "entry": StringAttr(entry.name),
        "kernel": StringAttr(entry.config.name),
        "kernel_type": StringAttr(entry.kernel_type),
        "inputs": to_attr(tuple(inputs)),
        "spec": fields_attr(entry.spec, spec_fields(entry.spec)),
        "config": fields_attr(entry.config),
        "layout": DictionaryAttr({k: to_attr(v) for k, v in layout.items()}),
        # what every kernel record states (reports read them): threads and dynamic smem
        "block": to_attr((layout["threads"], 1, 1)),
        "smem": to_attr(layout["smem"]),
    })


def sm90_from_record(record: DictionaryAttr) -> tuple[Sm90Entry, tuple[str, ...], dict]:
    """The entry, argument roles and ``Params`` layout of a record; a ValueError saying
    what is wrong in a malformed one (records are read from untrusted files)."""
    data = record.data
    spec_record = data["spec"]
    if isinstance(spec_record, DictionaryAttr) and "dtype_b" not in spec_record.data:
        spec_record = DictionaryAttr({**spec_record.data, "dtype_b": StringAttr("")})  # one operand type
    spec = dataclass_from(KernelSpec, spec_record)
    config_record = data["config"]
    if isinstance(config_record, DictionaryAttr) and "decomposition" not in config_record.data:  # before split-K
        config_record = DictionaryAttr({**config_record.data, "splits": to_attr(1), "decomposition": to_attr("")})
    config = dataclass_from(Sm90Config, config_record)
    why = why_not_sm90(spec)
    if why is not None:
        raise ValueError(f"spec has no Hopper kernel: {why}")
    kernel_type = from_attr(data["kernel_type"])
    name = from_attr(data["entry"])
    if not isinstance(kernel_type, str) or not _IDENT.match(kernel_type):
        raise ValueError(f"'kernel_type' {kernel_type!r} is not a C identifier")
    if name != sm90_entry_name(spec, config):  # one partition's entry (older records), or edited
        raise ValueError(f"'entry' = {name!r} is not {sm90_entry_name(spec, config)!r}, the entry of its kernel "
                         "type; compile the model again")
    layout = {**LAYOUT_DEFAULTS, **{k: from_attr(v) for k, v in data["layout"].data.items()}}
    _check_layout(layout)
    if bool(layout["scheduler"]) != (config.persistent and not config.stream_k_scheduler):
        raise ValueError(f"the layout {'has' if layout['scheduler'] else 'lacks'} a persistent tile scheduler, but "
                         f"the schedule is {config.schedule} {config.decomposition}".rstrip())
    if bool(layout["stream_k"]) != config.stream_k_scheduler:
        raise ValueError(f"the layout {'has' if layout['stream_k'] else 'lacks'} a stream-K tile scheduler, but the "
                         f"kernel's decomposition is {config.decomposition or 'none'}")
    if (layout["ptr_bias"] >= 0) != spec.broadcast_epilogue:
        raise ValueError(f"the layout {'lacks' if spec.broadcast_epilogue else 'has'} a bias pointer, but the "
                         f"epilogue is {spec.epilogue!r}")
    for key, value in (("block", (layout["threads"], 1, 1)), ("smem", layout["smem"])):
        if key in data and from_attr(data[key]) != value:
            raise ValueError(f"'{key}' = {from_attr(data[key])} is not the {value} its layout states")
    roles = from_attr(data["inputs"])
    if not isinstance(roles, tuple) or sorted(roles) != sorted(spec.input_names):
        raise ValueError(f"'inputs' = {roles} are not the kernel's inputs {spec.input_names}")
    return Sm90Entry(name, spec, config, kernel_type, f"{kernel_type}_layout"), roles, layout


def _check_layout(layout: dict) -> None:
    wanted = set(LAYOUT_FIELDS) | {"shape_offsets", "stride_offsets", "shape_size", "stride_size", "scheduler",
                                   "stream_k"}
    if set(layout) != wanted:
        raise ValueError(f"'layout' lacks {sorted(wanted - set(layout))} / has unknown {sorted(set(layout) - wanted)}")
    size = layout["params_size"]
    if not isinstance(size, int) or not 0 < size <= MAX_PARAMS_BYTES:
        raise ValueError(f"Params size {size} is not 1..{MAX_PARAMS_BYTES}")
    widths = {"problem_shape": layout["shape_size"], "tma_a": layout["tma_size"], "tma_b": layout["tma_size"],
              "tx_bytes": 4, "tx_bytes_mk": 4, "tx_bytes_nk": 4, "alpha": 4, "beta": 4, "ptr_c": 8,
              "stride_c": layout["stride_size"], "ptr_d": 8, "stride_d": layout["stride_size"], "promotion": 4,
              "ptr_bias": 8}
    for field, width in widths.items():
        at = layout[field]
        if field in ("promotion", "ptr_bias") and at == -1:
            continue  # no FP8 main loop: no promotion interval; no bias beside the residual
        if not isinstance(at, int) or not isinstance(width, int) or at < 0 or at + width > size:
            raise ValueError(f"Params field '{field}' at {at} (+{width}) is outside its {size} bytes")
    if (layout["tma_a"] + layout["tma_desc"]) % 64 or (layout["tma_b"] + layout["tma_desc"]) % 64:
        raise ValueError("TMA descriptors must be 64-byte aligned in Params")
    for name, count, width, total in (("shape_offsets", 4, 4, layout["shape_size"]),
                                      ("stride_offsets", 2, 8, layout["stride_size"])):
        offsets = layout[name]
        if not isinstance(offsets, tuple) or len(offsets) != count or \
                any(not isinstance(o, int) or o < 0 or o % width or o + width > total for o in offsets):
            raise ValueError(f"'{name}' = {offsets} do not fit {count} fields of {width} bytes in {total}")
    for probe in SCHEDULER_PROBES:  # offsets in Params, then inside its types and their sizes
        offsets, params = layout[probe.key], len(probe.params)
        if offsets and (not isinstance(offsets, tuple) or len(offsets) != len(probe.fields)
                        or any(not isinstance(at, int) or not 0 <= at <= size - probe.reach for at in offsets[:params])
                        or any(not isinstance(at, int) or not 0 < at <= 20 for at in offsets[params:])):
            raise ValueError(f"'{probe.key}' = {offsets} is not a {probe.what}'s layout in {size} bytes")
    if not 0 < layout["smem"] <= max_dynamic_smem("sm_90a") or layout["threads"] not in (128, 256, 384):
        raise ValueError(f"smem {layout['smem']} / threads {layout['threads']} are not a Hopper kernel's")


register_record_kind(RECORD_KIND, sm90_from_record)
