"""The generated CUDA C built for the host with g++, to check the kernels' semantics
without a GPU.

A small shim stands in for the CUDA runtime: ``__half``/``__nv_bfloat16`` conversions
(F16C, round-to-nearest-even), and a block emulation faithful to the barriers: a launch
runs its blocks one after the other, each block as ``blockDim`` POSIX threads;
``__syncthreads`` is a barrier of the block, ``__shared__`` is ``static`` (one copy, shared
by the block's threads) and ``__shfl_xor_sync`` (of any type of up to 8 bytes, like CUDA's
overloads) exchanges values through an array between two barriers (every thread of the
block must take part, which the kernels' reductions do). ``threadIdx`` is thread-local;
``blockIdx``/``blockDim``/``gridDim`` are set per block.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np

from partita.lowering.cuda.cexpr import _C_TYPES  # the storage type of every dtype

SHIM = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <immintrin.h>
#include <functional>
#include <vector>
struct partita_dim3 { unsigned x, y, z; };
static partita_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };
static inline float __half2float(__half h) { return _cvtsh_ss(h.x); }
static inline __half __float2half_rn(float f) { __half h; h.x = _cvtss_sh(f, 0); return h; }
static inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.x << 16; float f; memcpy(&f, &u, 4); return f; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u; memcpy(&u, &f, 4); u += 0x7fffu + ((u >> 16) & 1u); __nv_bfloat16 b; b.x = (uint16_t)(u >> 16); return b;
}
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __int_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }

// Each CUDA thread of a block is a fiber; __syncthreads switches back to the scheduler,
// which runs every fiber of the block up to its next barrier, round after round.
static ucontext_t partita_scheduler;
static std::vector<ucontext_t> partita_fibers;
static std::vector<char> partita_done;
static unsigned partita_current;
static std::function<void()>* partita_body;
static uint64_t partita_lanes[1024];
static inline void __syncthreads() { swapcontext(&partita_fibers[partita_current], &partita_scheduler); }
// Any type of up to 8 bytes (float, double, int, long long, unsigned ...), as CUDA's overloads.
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int mask) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffle moves at most 8 bytes");
  const unsigned t = partita_current;
  memcpy(&partita_lanes[t], &v, sizeof(T));
  __syncthreads();
  T r;
  memcpy(&r, &partita_lanes[t ^ (unsigned)mask], sizeof(T));
  __syncthreads();
  return r;
}
// A block-wide vote: every thread's predicate, then their OR, between two barriers.
static int partita_votes[1024];
static inline int __syncthreads_or(int predicate) {
  partita_votes[partita_current] = predicate != 0;
  __syncthreads();
  int any = 0;
  for (unsigned t = 0; t < blockDim.x * blockDim.y * blockDim.z; ++t) any |= partita_votes[t];
  __syncthreads();
  return any;
}
static void partita_fiber() {
  (*partita_body)();
  partita_done[partita_current] = 1;
}
// geo: grid x, y, z, block x, y, z
static void partita_launch(const unsigned* geo, std::function<void()> body) {
  gridDim = {geo[0], geo[1], geo[2]};
  blockDim = {geo[3], geo[4], geo[5]};
  const unsigned n = geo[3] * geo[4] * geo[5];
  const size_t stack = 1 << 16;
  std::vector<char> stacks(n * stack);
  partita_fibers.assign(n, ucontext_t());
  partita_done.assign(n, 0);
  partita_body = &body;
  for (unsigned z = 0; z < geo[2]; ++z)
    for (unsigned y = 0; y < geo[1]; ++y)
      for (unsigned x = 0; x < geo[0]; ++x) {
        blockIdx = {x, y, z};
        for (unsigned t = 0; t < n; ++t) {
          getcontext(&partita_fibers[t]);
          partita_fibers[t].uc_stack.ss_sp = &stacks[t * stack];
          partita_fibers[t].uc_stack.ss_size = stack;
          partita_fibers[t].uc_link = &partita_scheduler;
          makecontext(&partita_fibers[t], partita_fiber, 0);
          partita_done[t] = 0;
        }
        for (unsigned left = n; left > 0;) {
          left = 0;
          for (unsigned t = 0; t < n; ++t) {
            if (partita_done[t]) continue;
            partita_current = t;
            threadIdx = {t % geo[3], (t / geo[3]) % geo[4], t / (geo[3] * geo[4])};
            swapcontext(&partita_scheduler, &partita_fibers[t]);
            left += !partita_done[t];
          }
        }
      }
}
"""

def _wrapper(record) -> str:
    """``host_<entry>(geo, pointers, dims)``: the kernel launched through the shim."""
    args = [f"(const {_C_TYPES[t]}*)p[{k}]" for k, t in enumerate(record.dtypes)]
    args.append(f"({_C_TYPES[record.output_dtype]}*)p[{len(record.dtypes)}]")
    args += [f"d[{k}]" for k in range(len(record.dims))]
    if getattr(record, "split_k", 0):  # a split-K GEMM: the slices' workspace and the pass
        args += [f"p[{len(record.dtypes) + 1}]", f"d[{len(record.dims)}]"]
    return (f'extern "C" void host_{record.entry}(const unsigned* geo, void** p, const int* d) {{\n'
            f"  partita_launch(geo, [&] {{ {record.entry}({', '.join(args)}); }});\n}}\n")


class HostKernels:
    """The kernels of one program, built as a shared library."""

    def __init__(self, code: str, records, directory: Path):
        code = "\n".join(line for line in code.splitlines() if not line.startswith("#include"))
        source = SHIM + code + "\n" + "".join(_wrapper(r) for r in records)
        (directory / "kernels.cpp").write_text(source)
        subprocess.run(["g++", "-O1", "-mf16c", "-shared", "-fPIC", "-o", str(directory / "kernels.so"),
                        str(directory / "kernels.cpp")], check=True, capture_output=True, text=True)
        self.lib = ctypes.CDLL(str(directory / "kernels.so"))

    def launch(self, record, grid, block, inputs: list[np.ndarray], out: np.ndarray,
               workspace: np.ndarray | None = None, k_slices: int = 1) -> None:
        """One launch of ``record``'s kernel; a split-K GEMM's pass ``k_slices`` with its
        ``workspace`` (none: a null pointer, for the one pass of the whole K range)."""
        geo = (ctypes.c_uint * 6)(*grid, *block)
        ws = workspace.ctypes.data if workspace is not None else None
        pointers = (ctypes.c_void_p * (len(inputs) + 2))(*[a.ctypes.data for a in inputs], out.ctypes.data, ws)
        dims = record.runtime_dims([a.shape for a in inputs]) + ([k_slices] if getattr(record, "split_k", 0) else [])
        getattr(self.lib, f"host_{record.entry}")(geo, pointers, (ctypes.c_int * max(1, len(dims)))(*dims))


def have_gxx() -> bool:
    return shutil.which("g++") is not None
