"""Kernel choice per shape, as data: which CUTLASS tile and cluster a problem gets.

Like the results of CUTLASS's profiler or TVM's ``tune_cutlass_kernels``, but chosen ahead
of time from the problem's size: each row of a table is ``(min_m, min_n, tile, cluster,
schedule)`` and the first row whose minima the problem meets wins (a run-time M counts as
large, the kernel serving every batch size, but for a persistent schedule: a run-time M
may be a decode step's few rows, which a grid of one CTA per 128x256 tile would leave on a
few SMs). A row is a configuration the Hopper codegen builds and
the SASS tests check; ``collage-partition{cost=measure}`` times whole candidates on a GPU.
"""

from __future__ import annotations

WS, COOPERATIVE = "KernelTmaWarpSpecialized", "KernelTmaWarpSpecializedCooperative"
Row = tuple[int, int, tuple[int, int, int], tuple[int, int, int], str]

#: sm_90a (H100 / H200), CUTLASS 3 TMA + wgmma. Problems of 256 rows (known at compile
#: time) and 256 columns and more take CUTLASS's large-GEMM choice: the persistent
#: cooperative kernel (two consumer warp groups of 64 rows each on a 128x256 tile, 4 stages
#: in 227 KiB, one CTA an SM walking the tiles, so a tile's epilogue overlaps the next
#: one's loads). Below, and at a run-time M, 128x128x64, CUTLASS's default Hopper f16 tile
#: (one consumer warp group, 7 stages), a CTA a tile; a small M wastes half of that, so
#: M < 128 takes 64-row tiles.
SM90_TABLE: tuple[Row, ...] = (
    (256, 256, (128, 256, 64), (1, 1, 1), COOPERATIVE),
    (128, 0, (128, 128, 64), (1, 1, 1), WS),
    (0, 0, (64, 128, 64), (1, 1, 1), WS),
)


#: sm_90a FP8 (E4M3 / E5M2) GEMMs: K tiles of 128 elements (one 128-byte swizzle row). The
#: FP8 main loop holds a second set of f32 accumulators to promote into, so one consumer warp
#: group's 128x128 tile needs 256 registers a thread and spills (50 STL/LDL); 64x128 holds
#: both sets spill-free, and its wgmma is the wide 64x128x32.
SM90_FP8_TABLE: tuple[Row, ...] = (
    (0, 0, (64, 128, 128), (1, 1, 1), WS),
)


def sm90_tile(M: int | None, N: int | None, K: int | None,
              table: tuple[Row, ...] = SM90_TABLE) -> tuple[tuple[int, int, int], tuple[int, int, int], str]:
    """(tile, cluster, schedule) of the first row of ``table`` the problem meets."""
    n = 1 << 30 if N is None else N
    for min_m, min_n, tile, cluster, schedule in table:
        m = M if M is not None else 0 if schedule == COOPERATIVE else 1 << 30
        if m >= min_m and n >= min_n:
            return tile, cluster, schedule
    raise ValueError(f"no row of the sm90 table takes M={M}, N={N}")
