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


def _k_tiles_of(table: tuple[Row, ...], k: int) -> tuple[Row, ...]:
    """``table``'s rows with K tiles of ``k`` elements."""
    return tuple((m, n, (bm, bn, k), cluster, schedule) for m, n, (bm, bn, _), cluster, schedule in table)


SM90_TF32_TABLE = _k_tiles_of(SM90_TABLE, 32)
"""sm_90a f32 GEMMs on TF32 wgmma: the f16 table's rows with K tiles of 32 floats (one
128-byte swizzle row, the 64-half K tile's bytes), so each stage holds as many bytes
(CUTLASS's Hopper TF32 default is 128x128x32)."""
SM90_INT8_TABLE = _k_tiles_of(SM90_TABLE, 128)
"""sm_90a int8 GEMMs (s8 / u8 in, s32 accumulation and out) on wgmma: the f16 table's rows
with K tiles of 128 bytes; an s32 accumulator takes a register as an f32 one does."""


def sm90_tile(M: int | None, N: int | None, K: int | None,
              table: tuple[Row, ...] = SM90_TABLE) -> tuple[tuple[int, int, int], tuple[int, int, int], str]:
    """(tile, cluster, schedule) of the first row of ``table`` the problem meets."""
    n = 1 << 30 if N is None else N
    for min_m, min_n, tile, cluster, schedule in table:
        m = M if M is not None else 0 if schedule == COOPERATIVE else 1 << 30
        if m >= min_m and n >= min_n:
            return tile, cluster, schedule
    raise ValueError(f"no row of the sm90 table takes M={M}, N={N}")


# -- measured choice ------------------------------------------------------------------
#
# What ``tune-cutlass-kernels`` times on a GPU, per problem, as CUTLASS's profiler and TVM's
# ``tune_cutlass_kernels`` do: the table's choice and the alternatives below, each a
# configuration the codegen builds. The fastest is pinned on the partition function
# (``KERNEL_ATTR``, a kernel label) and kept in the tuning cache for the next compile.

KERNEL_ATTR = "cutlass.kernel"
"""Function attribute pinning a partition's kernel configuration (a label below)."""

#: sm_90a f16 / bf16 alternatives, (tile, cluster, schedule): the table's rows, their
#: 2-CTA clusters (TMA multicast: each CTA loads half of the operand tile the pair shares),
#: and the 256-row and 128-row persistent tiles.
SM90_CANDIDATES: tuple[tuple[tuple[int, int, int], tuple[int, int, int], str], ...] = (
    ((128, 256, 64), (1, 1, 1), COOPERATIVE),
    ((128, 256, 64), (2, 1, 1), COOPERATIVE),
    ((256, 128, 64), (1, 2, 1), COOPERATIVE),
    ((128, 128, 64), (1, 1, 1), COOPERATIVE),
    ((128, 128, 64), (1, 1, 1), WS),
    ((128, 128, 64), (2, 1, 1), WS),
    ((128, 128, 64), (1, 2, 1), WS),
    ((64, 128, 64), (1, 1, 1), WS),
    ((64, 256, 64), (1, 1, 1), WS),
)

#: Sm80 (and Hopper without ``sm_90a``) f16 / bf16 multistage tensor-op alternatives,
#: (threadblock, warps, stages): the table's three tiles, wide 8-warp tiles, and deeper
#: K tiles or pipelines; each warp tile a multiple of the 16x8x16 mma.
SM80_CANDIDATES: tuple[tuple[tuple[int, int, int], tuple[int, int, int], int], ...] = (
    ((128, 128, 32), (2, 2, 1), 3),
    ((128, 64, 32), (2, 2, 1), 3),
    ((64, 64, 32), (2, 2, 1), 3),
    ((128, 256, 32), (2, 4, 1), 3),
    ((256, 128, 32), (4, 2, 1), 3),
    ((128, 128, 64), (2, 2, 1), 4),
    ((128, 128, 32), (2, 2, 1), 5),
    ((64, 128, 32), (2, 2, 1), 4),
    ((128, 64, 64), (2, 2, 1), 3),
)

SM90_SPLITS = (2, 4, 8)
"""Split-K slices of the Hopper persistent kernels (CUTLASS's stream-K scheduler in its
split-K decomposition) timed for the same few-tile products, on the cooperative tiles of
:data:`SM90_SPLIT_TILES`."""
SM90_SPLIT_TILES = ((128, 128, 64), (128, 256, 64))
"""The cooperative tiles (one CTA, no cluster) split-K and stream-K are timed on; stream-K
(CUTLASS's heuristic decomposition) for every static dense product whose last wave of
tiles is partial."""

SM80_SPLITS = (2, 4, 8)
"""Serial split-K slices timed for a static dense product whose tiles fill less than a wave
(a decode step's GEMV-like rows: its few tiles would leave most SMs idle, and the weight
bandwidth with them), with the table's tile and the smallest."""
STREAM_K_MIN_K_TILES = 8
"""CUTLASS's ``min_iters_per_sk_unit_``: a tile of no more K tiles is never cut by its
stream-K heuristic (the kernel would run data-parallel: nothing to time)."""
SPLIT_K_WAVE = 132
"""Output tiles below which split-K candidates are timed: an H100's SMs."""
SM90_STREAM_K_MAX_ROWS = 64
"""sm_90a default for a static dense product of at most this many rows (a decode step's, a
small batch's) by a weight of few 128x128 tiles (at most half a wave) and more than
:data:`STREAM_K_MIN_K_TILES` K tiles: the persistent 128x128 kernel in CUTLASS's stream-K
heuristic, which cuts the tiles' K ranges across a wave of SMs (stream-K, or split-K where
its units divide the tiles evenly). The table's 64x128 tiles would put such a product (a
weight streamed once, bound by HBM bandwidth) on a quarter of the SMs: 32 CTAs for a
4096-wide weight. Not yet timed on an H100 (the doctor's tuning rows time it against the
table's tile)."""


SM90_STREAM_K_DEFAULT = ((128, 128, 64), (1, 1, 1), COOPERATIVE)
"""(tile, cluster, schedule) of :data:`SM90_STREAM_K_MAX_ROWS`' stream-K kernel."""


def sm90_streams_k(M: int | None, N: int | None, K: int | None) -> bool:
    """Whether a static dense product takes :data:`SM90_STREAM_K_MAX_ROWS`' stream-K kernel
    by default."""
    if M is None or N is None or K is None or M > SM90_STREAM_K_MAX_ROWS:
        return False
    (bm, bn, bk), _, _ = SM90_STREAM_K_DEFAULT
    return 2 * -(-M // bm) * -(-N // bn) <= SPLIT_K_WAVE and K > STREAM_K_MIN_K_TILES * bk


def _dims(text: str) -> tuple[int, int, int]:
    parts = text.split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"'{text}' is not three sizes MxNxK")
    return int(parts[0]), int(parts[1]), int(parts[2])


def _shape(dims: tuple[int, ...]) -> str:
    return "x".join(map(str, dims))


def sm90_label(tile: tuple[int, int, int], cluster: tuple[int, int, int], schedule: str, decomposition: str = "",
               splits: int = 1) -> str:
    """``128x256x64_2x1x1_cooperative``: tile, cluster and schedule of a Hopper kernel, then
    ``_k4`` for the split-K decomposition in 4 slices or ``_streamk`` for CUTLASS's
    stream-K heuristic."""
    label = f"{_shape(tile)}_{_shape(cluster)}_{'cooperative' if schedule == COOPERATIVE else 'ws'}"
    return label + {"": "", "split_k": f"_k{splits}", "stream_k": "_streamk"}[decomposition]


def parse_sm90_label(label: str) -> tuple[tuple[int, int, int], tuple[int, int, int], str, str, int]:
    """``(tile, cluster, schedule, decomposition, splits)`` of a :func:`sm90_label`;
    ValueError if it is none."""
    parts = label.split("_")
    last = parts.pop() if len(parts) == 4 else ""
    decomposition = "stream_k" if last == "streamk" else "split_k" if last else ""
    if len(parts) != 3 or parts[2] not in ("ws", "cooperative") or \
            (decomposition == "split_k" and not (last.startswith("k") and last[1:].isdigit())):
        raise ValueError(f"'{label}' is not a Hopper kernel label (tile_cluster_ws|cooperative[_kSPLIT|_streamk])")
    splits = int(last[1:]) if decomposition == "split_k" else 1
    return _dims(parts[0]), _dims(parts[1]), COOPERATIVE if parts[2] == "cooperative" else WS, decomposition, splits


def sm80_label(threadblock: tuple[int, int, int], warps: tuple[int, int, int], stages: int, split: int = 1) -> str:
    """``128x128x32_2x2x1_3``: threadblock tile, warps and stages of an Sm80 kernel, and
    ``_k4`` for 4 serial split-K slices."""
    return f"{_shape(threadblock)}_{_shape(warps)}_{stages}" + (f"_k{split}" if split > 1 else "")


def parse_sm80_label(label: str) -> tuple[tuple[int, int, int], tuple[int, int, int], int, int]:
    """``(threadblock, warps, stages, split)`` of an :func:`sm80_label`; ValueError if it
    is none."""
    parts = label.split("_")
    split = parts.pop() if len(parts) == 4 else "k1"
    if len(parts) != 3 or not parts[2].isdigit() or not split.startswith("k") or not split[1:].isdigit():
        raise ValueError(f"'{label}' is not an Sm80 kernel label (threadblock_warps_stages[_kSPLIT])")
    return _dims(parts[0]), _dims(parts[1]), int(parts[2]), int(split[1:])


def is_sm90_label(label: str) -> bool:
    """A Hopper kernel's label (its schedule last, or before its split), not an Sm80 one."""
    return label.endswith(("_ws", "_cooperative", "_cooperative_streamk")) or "_cooperative_k" in label
