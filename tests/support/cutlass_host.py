"""CUTLASS's own host code for a Hopper kernel, built with the machine's C++ compiler: what
``to_underlying_arguments`` and ``get_grid_shape`` produce for a problem, with
``cuTensorMapEncodeTiled`` replaced by a stub that prints its arguments. Partita cannot run
this code in NVRTC (no host code), so it rebuilds the same descriptors and grid itself;
this is the reference its encoding is checked against. Device builtins the headers name in
code never called on the host get inert stand-ins; ``__CUDACC_VER_MAJOR__`` is defined after
``wmma.h`` (which would pull in device-only headers) so that cute builds real descriptors."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from partita.lowering import nvrtc
from partita.lowering.cutlass.kernels import KernelSpec
from partita.lowering.cutlass.sm90 import PREAMBLE, STREAM_K_PROBE, Sm90Config, _kernel_decl

_STUBS = r'''#include <cstdio>
#include <cstring>
#include <cstdint>
#include <cuda.h>
#include <vector_types.h>
static uint3 threadIdx{}, blockIdx{};
static dim3 blockDim, gridDim;
inline void __syncthreads() {}
inline void __syncwarp(unsigned = 0xffffffffu) {}
extern "C" CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType dt, cuuint32_t rank, void* addr,
    const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box, const cuuint32_t* estr,
    CUtensorMapInterleave il, CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  std::printf("ENCODE %d %u %llu |", (int)dt, rank, (unsigned long long)addr);
  for (unsigned i = 0; i < rank; ++i) std::printf(" %llu", (unsigned long long)dims[i]);
  std::printf(" |");
  for (unsigned i = 0; i + 1 < rank; ++i) std::printf(" %llu", (unsigned long long)strides[i]);
  std::printf(" |");
  for (unsigned i = 0; i < rank; ++i) std::printf(" %u", box[i]);
  std::printf(" |");
  for (unsigned i = 0; i < rank; ++i) std::printf(" %u", estr[i]);
  std::printf(" | %d %d %d %d\n", (int)il, (int)sw, (int)l2, (int)oob);
  std::memset(map, 0, sizeof(CUtensorMap));
  return CUDA_SUCCESS;
}
#include <cutlass/cutlass.h>
#include <cutlass/arch/wmma.h>
#define __CUDACC_VER_MAJOR__ 13
#define __CUDACC_VER_MINOR__ 0
'''

_RUN = r'''
static void run_KERNEL(int M, int N, int K, int L, int splits) {
  using namespace KERNEL_ns;
  auto* A = reinterpret_cast<T*>(0x10000); auto* B = reinterpret_cast<TB*>(0x20000);
  auto* C = reinterpret_cast<TD*>(0x30000); auto* D = reinterpret_cast<TD*>(0x40000);
  typename Mainloop::StrideA dA{STRIDE_A};
  typename Mainloop::StrideB dB{STRIDE_B};
  StrideC dC{int64_t(0), cute::Int<1>{}, int64_t(0)};
  StrideC dD{int64_t(N), cute::Int<1>{}, int64_t(M) * N};
  cutlass::KernelHardwareInfo hw;
  hw.sm_count = SMS;  // what a persistent kernel's scheduler and grid are sized by
  typename Kernel::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm, {M, N, K, L},
      {A, dA, B, dB}, {{1.0f, 1.0f}, C, dC, D, dD}, hw};
SPLITS  Params p = Kernel::to_underlying_arguments(args, WORKSPACE);
  auto grid = Kernel::get_grid_shape(p);
  std::printf("GRID %u %u %u\n", grid.x, grid.y, grid.z);
  std::printf("TX %u %u %u\n", p.mainloop.tma_transaction_bytes, p.mainloop.tma_transaction_bytes_mk,
              p.mainloop.tma_transaction_bytes_nk);
PROMOTION SCHEDULER}
'''

#: The persistent scheduler's fields, as partita.runtime.tma.PersistentSchedule names them
_SCHEDULER = r'''  { const auto& s = p.scheduler;
    std::printf("SCHED %llu %u %llu %u %llu %llu %u %u %llu %llu %u %u %llu %d %d %u %u %u %u %u %d %d\n",
      (unsigned long long)s.divmod_cluster_shape_major_.divisor, s.divmod_cluster_shape_major_.shift_right,
      (unsigned long long)s.divmod_cluster_shape_minor_.divisor, s.divmod_cluster_shape_minor_.shift_right,
      (unsigned long long)s.divmod_batch_.divisor, (unsigned long long)s.divmod_batch_.multiplier,
      s.divmod_batch_.shift_right, s.divmod_batch_.round_up,
      (unsigned long long)s.divmod_cluster_blk_major_.divisor, (unsigned long long)s.divmod_cluster_blk_major_.multiplier,
      s.divmod_cluster_blk_major_.shift_right, s.divmod_cluster_blk_major_.round_up,
      (unsigned long long)s.blocks_per_problem_, s.log_swizzle_size_, (int)s.raster_order_,
      s.problem_tiles_m_, s.problem_tiles_n_, s.problem_tiles_l_, s.cluster_shape_m_, s.cluster_shape_n_,
      p.hw_info.sm_count, p.hw_info.max_active_clusters);
    std::printf("SCHEDOFF");  // the scheduler probe's offsets, as the host compiler lays Params out
    for (long long v : {(long long)offsetof(Params, hw_info.sm_count), (long long)offsetof(Params, hw_info.max_active_clusters),
        (long long)offsetof(Params, scheduler.divmod_cluster_shape_major_), (long long)offsetof(Params, scheduler.divmod_cluster_shape_minor_),
        (long long)offsetof(Params, scheduler.divmod_batch_), (long long)offsetof(Params, scheduler.divmod_cluster_blk_major_),
        (long long)offsetof(Params, scheduler.blocks_per_problem_), (long long)offsetof(Params, scheduler.log_swizzle_size_),
        (long long)offsetof(Params, scheduler.raster_order_), (long long)offsetof(Params, scheduler.problem_tiles_m_),
        (long long)offsetof(Params, scheduler.problem_tiles_n_), (long long)offsetof(Params, scheduler.problem_tiles_l_),
        (long long)offsetof(Params, scheduler.cluster_shape_m_), (long long)offsetof(Params, scheduler.cluster_shape_n_),
        (long long)offsetof(cutlass::FastDivmodU64, multiplier), (long long)offsetof(cutlass::FastDivmodU64, shift_right),
        (long long)offsetof(cutlass::FastDivmodU64, round_up), (long long)offsetof(cutlass::FastDivmodU64Pow2, shift_right),
        (long long)sizeof(cutlass::gemm::kernel::detail::RasterOrder)})
      std::printf(" %lld", v);
    std::printf("\nPARAMS %zu", sizeof(Params));
    const unsigned char* raw = reinterpret_cast<const unsigned char*>(&p);
    for (size_t i = 0; i < sizeof(Params); ++i) std::printf(" %u", raw[i]);
    std::printf("\n"); }
'''

#: A stream-K scheduler's kernel: its split-K decomposition of ``splits`` slices (else its heuristic),
#: its workspace at 0x50000, and what it is given: the workspace size and the scheduler's fields
_SPLIT_K_ARGS = r'''  args.scheduler.splits = splits;  // 1: the heuristic decomposition (stream-K)
  if (splits > 1) args.scheduler.decomposition_mode = cutlass::gemm::kernel::detail::DecompositionMode::SplitK;
  std::printf("WORKSPACE %zu\n", Kernel::get_workspace_size(args));
'''

_STREAM_K = r'''  { std::printf("SKOFF");  // the stream-K probe's offsets, as the host compiler lays Params out
    for (long long v : {OFFSETS})
      std::printf(" %lld", v);
    std::printf("\nPARAMS %zu", sizeof(Params));
    const unsigned char* raw = reinterpret_cast<const unsigned char*>(&p);
    for (size_t i = 0; i < sizeof(Params); ++i) std::printf(" %u", raw[i]);
    std::printf("\n"); }
'''

_MAIN = r'''
// the runtime calls the workspace helpers name (never reached for these kernels)
extern "C" cudaError_t cudaGetLastError() { return cudaSuccess; }
extern "C" cudaError_t cudaMemsetAsync(void*, int, size_t, cudaStream_t) { return cudaSuccess; }
// the SM-count query a persistent kernel makes when it is not given one (it is, here)
extern "C" cudaError_t cudaGetDevice(int*) { return cudaErrorNoDevice; }
extern "C" cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int) { return cudaErrorNoDevice; }

int main(int argc, char** argv) {
  int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), L = atoi(argv[4]), which = atoi(argv[5]);
  int splits = argc > 6 ? atoi(argv[6]) : 1;
  switch (which) {
CASES  }
}
'''


SMS = 132
"""The SM count the host code is given (an H100 / H200 SXM's)."""


def host_compiler() -> str | None:
    return shutil.which("g++")


def build(kernels: list[tuple[KernelSpec, Sm90Config]], where: Path) -> Path:
    """One executable printing CUTLASS's encodes, grid and transaction bytes for kernel
    ``i`` of ``kernels`` and the problem ``M N K L i`` on its command line."""
    include = PREAMBLE.replace("#include <cuda/std/type_traits>\n", _STUBS)
    include = re.sub(r"namespace std \{[^\n]*\n", "", include)  # the host has its standard library
    include = include.replace("#include <cutlass/gemm/kernel/gemm_universal.hpp>\n", """\
#include <cutlass/gemm/kernel/gemm_universal_decl.h>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
namespace cutlass::gemm::kernel {  // from gemm_universal.hpp, which also pulls in every Sm100 kernel
template <class P, class = void> struct IsCutlass3ArrayKernel : cute::false_type {};
template <class P> struct IsCutlass3ArrayKernel<P, cute::void_t<typename P::UnderlyingProblemShape>> : cute::true_type {};
}
#include <cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized.hpp>
#include <cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp>
#include <cutlass/gemm/kernel/sm90_tile_scheduler_stream_k.hpp>
""")
    parts, cases = [], []
    for i, (spec, cfg) in enumerate(kernels):
        decl = _kernel_decl(f"k{i}", spec, cfg)
        # packed operands: K-major A [M,K] / B [N,K], or M- / N-major A [K,M] / B [K,N]
        stride_a = "cute::Int<1>{}, int64_t(M), int64_t(M) * K" if spec.transpose_a else \
            "int64_t(K), cute::Int<1>{}, int64_t(M) * K"
        stride_b = "int64_t(K), cute::Int<1>{}, int64_t(N) * K" if spec.transpose_b else \
            "cute::Int<1>{}, int64_t(N), int64_t(N) * K"
        parts.append(decl[: decl.index("// Inlined into its entry")])  # the types, not the device code
        # the FP8 main loop's promotion interval (what its Arguments default to)
        promotion = '  std::printf("PROMOTION %u\\n", p.mainloop.mma_promotion_interval);\n' if spec.is_fp8 else ""
        scheduler = _stream_k(f"k{i}") if cfg.stream_k_scheduler else _SCHEDULER if cfg.persistent else ""
        parts.append(_RUN.replace("KERNEL", f"k{i}").replace("STRIDE_A", stride_a).replace("STRIDE_B", stride_b)
                     .replace("PROMOTION", promotion).replace("SCHEDULER", scheduler)
                     .replace("WORKSPACE", "reinterpret_cast<void*>(0x50000)" if cfg.stream_k_scheduler else "nullptr")
                     .replace("SPLITS", _SPLIT_K_ARGS if cfg.stream_k_scheduler else "")
                     .replace("SMS", str(SMS)))
        cases.append(f"    case {i}: run_k{i}(M, N, K, L, splits); break;\n")
    source = where / "host.cpp"
    source.write_text(include + "".join(parts) + _MAIN.replace("CASES", "".join(cases)))
    binary = where / "host"
    flags = ["-std=c++17", "-O0", "-w", "-fpermissive", "-DCUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL",
             "-DCUTLASS_SM90_COLLECTIVE_BUILDER_SUPPORTED"]
    subprocess.run([host_compiler() or "g++", *flags, *(f"-I{p}" for p in nvrtc.cuda_include_paths()),
                    str(source), "-o", str(binary)], check=True, capture_output=True, timeout=900)
    return binary


def _stream_k(alias: str) -> str:
    """The stream-K scheduler's kernel's probe values as the host compiler lays ``Params``
    out (``STREAM_K_PROBE``: its fields' offsets, then inside its types, then their sizes)."""
    member = {"sm_count": "hw_info.sm_count", "max_active_clusters": "hw_info.max_active_clusters",
              "workspace": "workspace"}
    probe = STREAM_K_PROBE
    values = [f"(long long)offsetof(Params, {member.get(f, f'scheduler.{f}_')})" for f, _ in probe.params]
    values += [f"(long long)offsetof({t}, {m})" for _, t, m in probe.inner]
    values += [f"(long long)sizeof({t})" for _, t in probe.sizes]
    return _STREAM_K.replace("OFFSETS", ", ".join(values))


def run(binary: Path, which: int, M: int, N: int, K: int, L: int, splits: int = 1) -> dict:
    """``{"encodes": [request dicts], "grid": (x, y, z), "tx": (all, mk, nk), "promotion": n}`` of
    kernel ``which`` (``promotion``: an FP8 main loop's interval, else None); a stream-K
    scheduler's kernel (cut in ``splits``, or by its heuristic at 1) also gives ``workspace``
    (bytes) and ``stream_k_offsets``."""
    out = subprocess.run([str(binary), str(M), str(N), str(K), str(L), str(which), str(splits)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    encodes = []
    for line in out.splitlines():
        if line.startswith("ENCODE "):
            head, dims, strides, box, estr, tail = line[len("ENCODE "):].split("|")
            dtype, rank, address = (int(v) for v in head.split())
            il, sw, l2, oob = (int(v) for v in tail.split())
            encodes.append({"dtype": dtype, "rank": rank, "address": address,
                            "dims": tuple(int(v) for v in dims.split()), "strides": tuple(int(v) for v in strides.split()),
                            "box": tuple(int(v) for v in box.split()), "element_strides": tuple(int(v) for v in estr.split()),
                            "interleave": il, "swizzle": sw, "l2_promotion": l2, "oob_fill": oob})

    def numbers(tag: str) -> tuple[int, ...] | None:
        """The integers of the line ``tag`` starts (None when the kernel prints no such line)."""
        return next((tuple(int(v) for v in line.split()[1:]) for line in out.splitlines()
                     if line.split()[:1] == [tag]), None)

    grid, tx, promotion, raw = numbers("GRID"), numbers("TX"), numbers("PROMOTION"), numbers("PARAMS")
    if grid is None or tx is None:  # every kernel prints both
        raise ValueError(f"CUTLASS's host code printed no GRID or TX line:\n{out}")
    return {"encodes": encodes, "grid": grid, "tx": tx, "promotion": promotion[0] if promotion else None,
            "scheduler": numbers("SCHED"), "scheduler_offsets": numbers("SCHEDOFF"),
            "stream_k_offsets": numbers("SKOFF"), "workspace": (numbers("WORKSPACE") or (None,))[0],
            "params": bytes(raw[1:]) if raw else None}
