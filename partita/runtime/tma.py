"""TMA descriptors and the ``Params`` bytes of the CUTLASS 3 Hopper kernels.

A Hopper kernel (``partita.lowering.cutlass.sm90``) takes its CUTLASS ``Params`` by value;
Partita fills those bytes from the layout the kernel's probe reported (offsets read from
the cubin), with TMA descriptors that the device encodes when a launch is bound
(``cuTensorMapEncodeTiled`` on a GPU; a readable stand-in on the simulated device). The
descriptors follow what CUTLASS's ``make_tma_copy`` builds for a K-major operand: a rank-3
tensor (K, rows, batch), a box of one K tile by the CTA tile's rows, 128-byte swizzle,
128-byte L2 promotion, zero fill out of bounds.

:meth:`TensorMapRequest.why_invalid` states the driver's rules for an encode, so the
simulated device refuses what a GPU would.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from partita.lowering.cutlass.sm90 import PERSISTENT_PROBE, STREAM_K_PROBE, SchedulerProbe

#: CUtensorMapDataType values (what CUTLASS's TmaInternalType maps 16- and 8-bit types to,
#: and the TF32 main loop's f32 operands: TFLOAT32, which the copy rounds to TF32)
DATA_TYPES = {"uint8": 0, "uint16": 1, "uint32": 2, "float16": 6, "bfloat16": 9, "tfloat32": 11}
DATA_TYPE_BYTES = {"uint8": 1, "uint16": 2, "uint32": 4, "float16": 2, "bfloat16": 2, "tfloat32": 4}
#: CUtensorMapSwizzle values by swizzle width in bytes
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTION_128B = 2  # what cute::make_tma_copy asks for
TENSOR_MAP_BYTES = 128


@dataclass(frozen=True)
class TensorMapRequest:
    """The arguments of one ``cuTensorMapEncodeTiled`` (dims innermost first; ``strides``
    are the byte strides of dims 1.. as the driver takes them)."""

    dtype: str
    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int = 128
    element_strides: tuple[int, ...] = ()

    @property
    def rank(self) -> int:
        return len(self.dims)

    def at(self, address: int) -> TensorMapRequest:
        return replace(self, address=int(address))

    def why_invalid(self) -> str | None:
        """What ``cuTensorMapEncodeTiled`` would refuse in this request (``None``: nothing)."""
        if self.dtype not in DATA_TYPES:
            return f"data type {self.dtype!r} is not a tensor-map type"
        size = DATA_TYPE_BYTES[self.dtype]
        if not 1 <= self.rank <= 5:
            return f"rank {self.rank} is not 1..5"
        if len(self.strides) != self.rank - 1 or len(self.box) != self.rank:
            return f"{len(self.strides)} strides and {len(self.box)} box dims for rank {self.rank}"
        if self.element_strides and len(self.element_strides) != self.rank:
            return f"{len(self.element_strides)} element strides for rank {self.rank}"
        if self.address % 16:
            return f"global address {self.address:#x} is not 16-byte aligned"
        if any(not 1 <= d <= 1 << 32 for d in self.dims):
            return f"global dims {self.dims} must be 1..2^32"
        if any(s % 16 or not 0 <= s < 1 << 40 for s in self.strides):
            return f"global strides {self.strides} must be multiples of 16 bytes below 2^40"
        if any(not 1 <= b <= 256 for b in self.box):
            return f"box dims {self.box} must be 1..256"
        if self.box[0] * size % 16:
            return f"the inner box dim is {self.box[0] * size} bytes, not a multiple of 16"
        if self.swizzle not in SWIZZLES:
            return f"swizzle {self.swizzle} is not 0, 32, 64 or 128 bytes"
        if self.swizzle and self.box[0] * size > self.swizzle:
            return f"the inner box dim ({self.box[0] * size} bytes) exceeds the {self.swizzle}-byte swizzle"
        if any(not 1 <= e <= 8 for e in self.element_strides):
            return f"element strides {self.element_strides} must be 1..8"
        return None


@dataclass(frozen=True)
class TensorMap:
    """An encoded descriptor (128 bytes) and the request it was encoded from (a launch
    re-encodes it when an operand's address changes)."""

    request: TensorMapRequest
    raw: bytes


def simulated_tensor_map(request: TensorMapRequest) -> TensorMap:
    """The simulated device's descriptor: the address first (where the simulated launch
    reads an operand's pointer), then rank, dims and strides; refused as the driver
    would refuse it."""
    why = request.why_invalid()
    if why is not None:
        raise ValueError(f"cuTensorMapEncodeTiled: {why}")
    raw = struct.pack("<QI", request.address, request.rank)
    raw += struct.pack(f"<{request.rank}Q", *request.dims) + struct.pack(f"<{request.rank - 1}Q", *request.strides)
    return TensorMap(request, raw.ljust(TENSOR_MAP_BYTES, b"\0"))


def operand_map(address: int, rows: int, k: int, batch: int, box_rows: int, box_k: int, dtype: str,
                element_bytes: int, k_major: bool = True) -> TensorMapRequest:
    """The descriptor of an operand ``[batch, rows, K]`` (K-major) or ``[batch, K, rows]``
    (rows-major), contiguous, as CUTLASS's ``make_tma_copy`` encodes it: the contiguous dim
    first; the box is one K tile by the tile's rows, except that a rows-major box spans one
    128-byte swizzle row of rows (the kernel issues one copy per such slice). CUTLASS moves
    16- and 8-bit floats as unsigned integers (no arithmetic in a plain load), and the f32
    operands of its TF32 main loop as TFLOAT32."""
    tma_type = "tfloat32" if dtype == "float32" else {1: "uint8", 2: "uint16", 4: "uint32"}[element_bytes]
    if k_major:
        dims, box = (k, rows, batch), (box_k, box_rows, 1)
    else:
        dims, box = (rows, k, batch), (min(box_rows, 128 // element_bytes), box_k, 1)
    return TensorMapRequest(tma_type, int(address), dims,
                            (dims[0] * element_bytes, rows * k * element_bytes), box, 128, (1, 1, 1))


@dataclass(frozen=True)
class Sm90Arguments:
    """A Hopper launch's argument pieces (for ``prepare_launch``): bytes, the two tensor
    maps and the C / D pointers at the offsets the probe gave; ``index`` says which piece
    holds each operand (``a``, ``b``, ``bias``, ``out``)."""

    args: tuple[tuple[str, object], ...]
    index: dict[str, int]
    size: int


def sm90_arguments(layout: dict, tile: tuple[int, int, int], cluster: tuple[int, int, int], element_bytes: int,
                   problem: tuple[int, int, int, int], pointers: dict[str, int], source: str, encode,
                   gemm_layout: str = "tn", promotion_interval: int = 0,
                   schedule: PersistentSchedule | None = None, sm_count: int = 0,
                   stream_k: dict[str, object] | None = None, dtype: str = "") -> Sm90Arguments:
    """The ``Params`` of a Hopper GEMM ``out[L,M,N] = act(op(a) @ op(b) + C)`` as launch
    argument pieces, C (``beta = 1``) being the ``source`` operand: ``"bias"`` (a row
    broadcast over rows and batches), ``"residual"`` (a tensor of the output's shape) or
    ``""`` (none, ``beta = 0``); a layout with a bias pointer (``ptr_bias``: the broadcast
    epilogue, a bias beside the residual) takes ``pointers["bias"]`` there, a vector over
    N. ``gemm_layout`` is CUTLASS's letters (``t``: A row-major,
    i.e. K-major; ``n``: B column-major, i.e. K-major). ``encode(request) -> TensorMap`` is
    the device's encoder. An FP8 main loop (its layout places ``promotion``) takes its
    ``promotion_interval``; a persistent kernel (its layout has a ``scheduler``) the tile
    scheduler's ``schedule`` on a device of ``sm_count`` SMs; a stream-K scheduler's kernel
    (its layout has a ``stream_k`` probe) its :meth:`StreamKSchedule.fields` as ``stream_k``;
    ``dtype`` is the operands' element type (``float32``: TF32 descriptors)."""
    if source not in ("", "bias", "residual"):
        raise ValueError(f"a Hopper GEMM's source C is a bias or a residual, not {source!r}")
    M, N, K, L = problem
    bm, bn, bk = tile
    size = layout["params_size"]
    blob = bytearray(size)
    base = layout["problem_shape"]
    for at, value in zip(layout["shape_offsets"], (M, N, K, L)):
        struct.pack_into("<i", blob, base + at, value)
    for field in ("tx_bytes", "tx_bytes_mk", "tx_bytes_nk"):
        struct.pack_into("<I", blob, layout[field], layout[field + "_value"])
    if layout["promotion"] >= 0:
        if promotion_interval <= 0:
            raise ValueError("an FP8 main loop needs its mma promotion interval")
        struct.pack_into("<I", blob, layout["promotion"], promotion_interval)
    if layout.get("scheduler"):
        if schedule is None or sm_count <= 0:
            raise ValueError("a persistent kernel needs its tile schedule and the device's SM count")
        pack_schedule(blob, layout["scheduler"], schedule, sm_count)
    if layout.get("stream_k"):
        if stream_k is None:
            raise ValueError("a stream-K scheduler's kernel needs that scheduler's fields")
        pack_stream_k(blob, layout["stream_k"], stream_k)
    struct.pack_into("<f", blob, layout["alpha"], 1.0)
    struct.pack_into("<f", blob, layout["beta"], 1.0 if source else 0.0)
    # C: the bias row broadcast over rows and batches (both strides 0), the residual laid
    # out as D, or unused (beta 0)
    row_c, batch_c = (0, 0) if source == "bias" else (N, M * N)
    for at, value in zip(layout["stride_offsets"], (row_c, batch_c)):
        struct.pack_into("<q", blob, layout["stride_c"] + at, value)
    for at, value in zip(layout["stride_offsets"], (N, M * N)):
        struct.pack_into("<q", blob, layout["stride_d"] + at, value)
    # multicast splits a box across the cluster: A is shared along N, B along M
    a_k_major, b_k_major = gemm_layout[0] == "t", gemm_layout[1] == "n"
    if (not a_k_major or not b_k_major) and cluster != (1, 1, 1):
        raise ValueError("multicast boxes of rows-major operands are not encoded: use clusters of 1")
    maps = {
        "a": encode(operand_map(pointers["a"], M, K, L, bm // cluster[1], bk, dtype, element_bytes, a_k_major)),
        "b": encode(operand_map(pointers["b"], N, K, L, bn // cluster[0], bk, dtype, element_bytes, b_k_major)),
    }
    values = {"a": maps["a"], "b": maps["b"], "c": pointers[source] if source else pointers["out"],
              "out": pointers["out"]}
    if layout.get("ptr_bias", -1) >= 0:
        if source != "residual" or "bias" not in pointers:
            raise ValueError("a broadcast epilogue takes a bias beside a residual source")
        values["bias"] = pointers["bias"]
    args: list[tuple[str, object]] = []
    index: dict[str, int] = {}
    for kind, role, start, end in sm90_pieces(layout):
        if role is None:
            args.append((kind, bytes(blob[start:end])))
        else:
            index[role] = len(args)
            args.append((kind, values[role]))
    c = index.pop("c")
    if source:
        index[source] = c
    return Sm90Arguments(tuple(args), index, size)


def sm90_pieces(layout: dict) -> list[tuple[str, str | None, int, int]]:
    """The pieces a Hopper kernel's ``Params`` is passed in, from the layout its probe
    recorded and known without a launch: ``(kind, operand, start, end)`` in order, the
    operand ``None`` for the ``bytes<n>`` between the tensor maps and C / D pointers."""
    desc = layout["tma_desc"]
    fields = sorted([
        (layout["tma_a"] + desc, "a", "tensormap", 128),
        (layout["tma_b"] + desc, "b", "tensormap", 128),
        (layout["ptr_c"], "c", "ptr", 8),
        (layout["ptr_d"], "out", "ptr", 8),
        *([(layout["ptr_bias"], "bias", "ptr", 8)] if layout.get("ptr_bias", -1) >= 0 else []),
    ], key=lambda f: f[0])
    pieces: list[tuple[str, str | None, int, int]] = []
    at, size = 0, layout["params_size"]
    for offset, role, kind, width in fields:
        if offset < at or offset % (64 if kind == "tensormap" else 8):
            raise ValueError(f"Params field '{role}' at {offset} overlaps or is misaligned")
        if offset > at:
            pieces.append((f"bytes{offset - at}", None, at, offset))
        pieces.append((kind, role, offset, offset + width))
        at = offset + width
    if at > size:
        raise ValueError(f"Params fields end at {at}, past its {size} bytes")
    if at < size:
        pieces.append((f"bytes{size - at}", None, at, size))
    return pieces


def sm90_grid(problem: tuple[int, int, int, int], tile: tuple[int, int, int], cluster: tuple[int, int, int]
              ) -> tuple[int, int, int]:
    """CTAs of a non-persistent Hopper GEMM: tiles of M and N (rounded up to whole
    clusters) by batches, as ``get_tiled_cta_shape_mnl``."""
    M, N, _, L = problem
    tm, tn = -(-M // tile[0]), -(-N // tile[1])
    return (-(-tm // cluster[0]) * cluster[0], -(-tn // cluster[1]) * cluster[1], L)


_U64 = (1 << 64) - 1


def fast_divmod_u64(divisor: int) -> tuple[int, int, int, int]:
    """CUTLASS's ``FastDivmodU64(divisor)``: ``(divisor, multiplier, shift_right,
    round_up)``, the multiplier a 128-by-64-bit quotient kept to its low 64 bits."""
    if divisor == 0:
        return 0, 1, 0, 0
    shift = divisor.bit_length() - 1
    if divisor & (divisor - 1) == 0:
        return divisor, 0, shift, 0
    power = 1 << shift
    low = ((power << 64) // divisor) & _U64
    multiplier = (((power << 64) + power) // divisor) & _U64
    return divisor, multiplier, shift, int(low == multiplier)


ALONG_M, ALONG_N = 0, 1
"""CUTLASS's ``RasterOrder``: the persistent scheduler walks tiles down M or along N."""


@dataclass(frozen=True)
class PersistentSchedule:
    """What CUTLASS's ``PersistentTileSchedulerSm90`` computes on the host for a problem
    (``to_underlying_arguments`` with the default arguments: no swizzle, the heuristic
    raster order; ``get_grid_shape`` with no occupancy query): its ``Params`` fields and
    the grid to launch."""

    problem_blocks: tuple[int, int, int]
    cluster: tuple[int, int]
    raster: int
    grid: tuple[int, int, int]

    @property
    def fields(self) -> dict[str, object]:
        (pm, pn, pl), (cm, cn) = self.problem_blocks, self.cluster
        major, minor, blocks_major = (cn, cm, pn // cn) if self.raster == ALONG_N else (cm, cn, pm // cm)
        return {
            "divmod_cluster_shape_major": (major, major.bit_length() - 1),
            "divmod_cluster_shape_minor": (minor, minor.bit_length() - 1),
            "divmod_batch": fast_divmod_u64(pm * pn),
            "divmod_cluster_blk_major": fast_divmod_u64(blocks_major),
            "blocks_per_problem": pm * pn * pl, "log_swizzle_size": 0, "raster_order": self.raster,
            "problem_tiles_m": pm // cm, "problem_tiles_n": pn // cn, "problem_tiles_l": pl,
            "cluster_shape_m": cm, "cluster_shape_n": cn,
        }


def persistent_schedule(problem: tuple[int, int, int, int], tile: tuple[int, int, int],
                        cluster: tuple[int, int, int], sm_count: int, truncate: bool = True) -> PersistentSchedule:
    """The persistent scheduler of a Hopper GEMM on a device of ``sm_count`` SMs; with
    ``truncate`` (the data-parallel scheduler's choice) a grid of no more CTAs than tiles,
    without (the stream-K scheduler's, whose work units outnumber the tiles) a full one."""
    M, N, _, L = problem
    cm, cn = cluster[0], cluster[1]

    def whole_clusters(tiles: int, size: int) -> int:  # CTA tiles, rounded up to whole clusters
        return -(-tiles // size) * size

    pm = whole_clusters(-(-M // tile[0]), cm)
    pn = whole_clusters(-(-N // tile[1]), cn)
    raster = ALONG_M if pn > pm else ALONG_N
    total = pm * pn * L
    grid = [cm, 1, 1] if raster == ALONG_N else [1, cn, 1]
    def fit(ctas: int, tiles: int) -> int:
        return min(ctas, tiles) if truncate else ctas

    if cm * cn == 1:
        grid[1 if raster == ALONG_N else 0] = fit(sm_count, total)
    else:  # GH100's 18 SMs a GPC: whole clusters in each
        size, per_gpc = cm * cn, 18
        gpcs = 1 if sm_count < per_gpc else sm_count // per_gpc
        residual = 0 if sm_count < per_gpc else sm_count % per_gpc
        ctas = min(sm_count, gpcs * (per_gpc - per_gpc % size) + residual - residual % size)
        if raster == ALONG_N:
            grid[1] = fit(ctas // cm, total // cm)
        else:
            grid[0] = fit(ctas // cn, total // cn)
    return PersistentSchedule((pm, pn, L), (cm, cn), raster, (grid[0], grid[1], grid[2]))


def pack_schedule(blob: bytearray, offsets: tuple[int, ...], schedule: PersistentSchedule, sm_count: int) -> None:
    """Writes ``schedule``'s fields and the hardware info into a ``Params`` blob at the
    offsets of the kernel's scheduler probe (``partita.lowering.cutlass.sm90.PERSISTENT_PROBE``)."""
    # no cluster count queried: the grid is CUTLASS's heuristic
    pack_scheduler(blob, PERSISTENT_PROBE, offsets, {**schedule.fields, "sm_count": sm_count, "max_active_clusters": 0})


def fast_divmod(divisor: int) -> tuple[int, int, int]:
    """CUTLASS's 32-bit ``FastDivmod(divisor)``: ``(divisor, multiplier, shift_right)``."""
    if divisor == 1:
        return 1, 0, 0
    p = 31 + (divisor - 1).bit_length()  # log2 rounded up (``find_log2``)
    return divisor, ((1 << p) + divisor - 1) // divisor & 0xFFFFFFFF, p - 32


def _round_up(value: int, to: int) -> int:
    return -(-value // to) * to


#: CUTLASS's ``ReductionMode::Deterministic``: each split adds its partials in K order.
DETERMINISTIC = 0
#: Consumer warp groups of the cooperative kernel, one reduction barrier each per tile.
COOPERATIVE_MMA_WARP_GROUPS = 2
#: CUTLASS's ``min_iters_per_sk_unit_`` and ``max_sk_groups_``: the fewest K tiles a
#: stream-K unit computes, the most groups of units.
MIN_ITERS_PER_SK_UNIT, MAX_SK_GROUPS = 8, 8


@dataclass(frozen=True)
class StreamKSchedule:
    """What CUTLASS's ``PersistentTileSchedulerSm90StreamK`` computes on the host for a
    problem (deterministic reduction, no swizzle, the heuristic raster order, one epilogue
    subtile, no separate reduction): its decomposition (``mode``), the counts its
    ``Params`` hold, its grid (a full persistent one) and its workspace.

    * ``"split_k"``: each output tile's ``k_tiles`` K tiles cut into ``splits`` units (the
      first ``k_tiles % splits`` one K tile longer);
    * ``"stream_k"``: the ``sk_tiles`` tiles of the last two waves cut into ``sk_units``
      units of about equal K ranges, in ``groups`` groups, the other ``dp_units`` tiles a
      unit each;
    * ``"data_parallel"``: a unit a tile.

    The workspace is the f32 partials of ``reduction_tiles`` tiles, then one 32-bit barrier
    per tile of ``barrier_tiles`` and consumer warp group, which must read zero when the
    kernel starts: the kernel counts K tiles into them and leaves them so."""

    tiles: PersistentSchedule
    tile: tuple[int, int, int]
    k_tiles: int
    mode: str
    splits: int = 1
    sk_tiles: int = 0
    sk_units: int = 0
    groups: int = 1
    big_groups: int = 0
    k_tiles_per_group: int = 0
    k_tiles_per_sk_unit: int = 0
    reduction_tiles: int = 0
    barrier_tiles: int = 0

    @property
    def grid(self) -> tuple[int, int, int]:
        return self.tiles.grid

    @property
    def output_tiles(self) -> int:
        pm, pn, pl = self.tiles.problem_blocks
        return pm * pn * pl

    @property
    def reduction_bytes(self) -> int:
        """The f32 partial tiles, 128-byte aligned (``get_reduction_workspace_size``)."""
        return _round_up(4 * self.tile[0] * self.tile[1] * self.reduction_tiles, 128)

    @property
    def barrier_bytes(self) -> int:
        """The reduction barriers after the partials (``get_barrier_workspace_size``)."""
        return _round_up(4 * COOPERATIVE_MMA_WARP_GROUPS * self.barrier_tiles, 128)

    @property
    def workspace_bytes(self) -> int:
        """The kernel's whole workspace (its scheduler's, 16-byte aligned; the epilogue
        takes none)."""
        return _round_up(self.reduction_bytes + self.barrier_bytes, 16)

    def fields(self, workspace: int, sm_count: int) -> dict[str, object]:
        """The scheduler's ``Params`` fields (and the hardware info and workspace pointer)
        with the workspace at ``workspace``, by the names of ``STREAM_K_PROBE.params``."""
        (pm, pn, pl), (cm, cn) = self.tiles.problem_blocks, self.tiles.cluster
        base = self.tiles.fields
        cluster_size, units = cm * cn, pm * pn * pl
        fields: dict[str, object] = {
            "sm_count": sm_count, "max_active_clusters": 0,
            "divmod_cluster_shape_major": base["divmod_cluster_shape_major"],
            "divmod_cluster_shape_minor": base["divmod_cluster_shape_minor"],
            "divmod_batch": fast_divmod_u64(pm * pn), "divmod_cluster_blk_major": base["divmod_cluster_blk_major"],
            "divmod_tiles_per_output_tile": fast_divmod(self.k_tiles), "log_swizzle_size": 0,
            "raster_order": base["raster_order"], "big_groups": 0, "reduction_workspace": workspace,
            "reduction_mode": DETERMINISTIC, "separate_reduction_units": 0, "ktile_start_alignment_count": 1,
            "workspace": workspace,
        }
        if self.mode == "stream_k":  # set_params_stream_k
            per_unit = self.k_tiles_per_sk_unit
            return {**fields, "divmod_clusters_mnl": fast_divmod_u64(self.sk_units // cluster_size),
                    "divmod_sk_groups": fast_divmod_u64(self.groups),
                    "divmod_sk_units_per_group": fast_divmod_u64(self.sk_units // self.groups),
                    "units_per_problem": units - self.sk_tiles + self.sk_units, "divmod_splits": fast_divmod(1),
                    "big_units": self.k_tiles_per_group % self.sk_units // cluster_size,
                    "big_groups": self.big_groups, "sk_tiles": self.sk_tiles, "sk_units": self.sk_units,
                    "divmod_k_tiles_per_sk_unit": fast_divmod(per_unit),
                    "divmod_k_tiles_per_sk_big_unit": fast_divmod(per_unit + 1),
                    "divmod_epilogue_subtile": fast_divmod_u64(1)}
        # set_params_basic: split-K, or data-parallel as one split
        return {**fields, "divmod_clusters_mnl": fast_divmod_u64(units // cluster_size),
                "divmod_sk_groups": fast_divmod_u64(1), "divmod_sk_units_per_group": fast_divmod_u64(1),
                "units_per_problem": units, "divmod_splits": fast_divmod(self.splits),
                "big_units": self.k_tiles % self.splits, "sk_tiles": 0, "sk_units": 0,
                "divmod_k_tiles_per_sk_unit": fast_divmod(self.k_tiles // self.splits),
                "divmod_k_tiles_per_sk_big_unit": fast_divmod(self.k_tiles // self.splits + 1),
                "divmod_epilogue_subtile": (0, 0, 0, 0)}  # FastDivmodU64{}, left unset


def stream_k_schedule(problem: tuple[int, int, int, int], tile: tuple[int, int, int], cluster: tuple[int, int, int],
                      sm_count: int, splits: int = 1) -> StreamKSchedule:
    """The stream-K scheduler's schedule of a Hopper GEMM on ``sm_count`` SMs: with
    ``splits`` above 1 its split-K decomposition (``DecompositionMode::SplitK``, the count
    clamped as CUTLASS clamps it: to the SMs and the K tiles; a ValueError when fewer than
    two remain, where CUTLASS would fall back to another decomposition), else its
    heuristic one (``DecompositionMode::Heuristic``)."""
    tiles = persistent_schedule(problem, tile, cluster, sm_count, truncate=False)
    k_tiles = -(-problem[2] // tile[2])
    (pm, pn, pl), (cm, cn) = tiles.problem_blocks, tiles.cluster
    output_tiles, cluster_size = pm * pn * pl, cm * cn
    if splits > 1:
        adjusted = min(splits, sm_count, k_tiles)
        if adjusted < 2:
            raise ValueError(f"split-K of {splits} slices needs at least 2 K tiles of {tile[2]} and 2 SMs: K = "
                             f"{problem[2]} has {k_tiles}")
        return StreamKSchedule(tiles, tile, k_tiles, "split_k", adjusted, reduction_tiles=output_tiles,
                               barrier_tiles=output_tiles)
    # select_decomposition_mode, its heuristic branch
    wave = tiles.grid[0] * tiles.grid[1]
    wave_in_clusters = wave // cluster_size * cluster_size
    sk_tiles = _stream_k_tiles(output_tiles, wave, cluster_size, k_tiles)
    # enough units that each computes MIN_ITERS_PER_SK_UNIT K tiles, up to a wave, whole clusters
    sk_units = min(wave_in_clusters, k_tiles * sk_tiles // MIN_ITERS_PER_SK_UNIT // cluster_size * cluster_size)
    # the workspace is sized for the stream-K tiles whatever is chosen, but for split-K
    sizes = {"reduction_tiles": sk_tiles, "barrier_tiles": sk_tiles}
    if sk_tiles == 0 or sk_units == 0:
        return StreamKSchedule(tiles, tile, k_tiles, "data_parallel", **sizes)
    if sk_tiles < sk_units and sk_units % sk_tiles == 0:  # the stream-K tiles split evenly: split-K
        return StreamKSchedule(tiles, tile, k_tiles, "split_k", sk_units // sk_tiles, reduction_tiles=output_tiles,
                               barrier_tiles=output_tiles)
    sk_cluster_tiles = sk_tiles // cluster_size
    blocks_major = pm // cm if tiles.raster == ALONG_M else pn // cn
    groups = _stream_k_groups(min(blocks_major, MAX_SK_GROUPS), sk_units, sk_cluster_tiles, cluster_size, k_tiles)
    k_tiles_per_group = k_tiles * (sk_cluster_tiles // groups * cluster_size)
    return StreamKSchedule(tiles, tile, k_tiles, "stream_k", 1, sk_tiles, sk_units, groups, sk_cluster_tiles % groups,
                           k_tiles_per_group, k_tiles_per_group // (sk_units // groups), **sizes)


def _stream_k_tiles(output_tiles: int, wave: int, cluster_size: int, k_tiles: int) -> int:
    """``get_num_sk_tiles`` (heuristic): the tiles of the last two waves when the last is
    less than half full (and tiles have more than ``MIN_ITERS_PER_SK_UNIT`` K tiles), in
    whole clusters; none otherwise."""
    full_waves, total_waves = output_tiles // wave, -(-output_tiles // wave)
    if full_waves == total_waves or k_tiles <= MIN_ITERS_PER_SK_UNIT:
        return 0
    if 2 * (output_tiles - full_waves * wave) >= wave:
        return 0
    dp_tiles = (full_waves - 1 if full_waves > 1 else 0) * wave
    return (output_tiles - dp_tiles) // cluster_size * cluster_size


def _stream_k_groups(groups: int, sk_units: int, sk_cluster_tiles: int, cluster_size: int, k_tiles: int) -> int:
    """``calculate_groups``: the most groups (from ``groups`` down) that divide the stream-K
    units and tiles evenly and leave every unit ``MIN_ITERS_PER_SK_UNIT`` K tiles; else the
    most that divide the units; else one."""
    cluster_units = sk_units // cluster_size

    def too_small(g: int) -> bool:
        units = sk_units // g
        return units == 0 or sk_cluster_tiles // g * cluster_size * k_tiles // units < MIN_ITERS_PER_SK_UNIT

    fallback = 0
    while groups > 1 and not (cluster_units % groups == 0 and sk_cluster_tiles % groups == 0 and not too_small(groups)):
        if fallback == 0 and cluster_units % groups == 0 and not too_small(groups):
            fallback = groups
        groups -= 1
    return fallback if groups == 1 and fallback > 0 else groups


_INTS = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}


def pack_stream_k(blob: bytearray, offsets: tuple[int, ...], fields: dict[str, object]) -> None:
    """Writes a stream-K schedule's :meth:`StreamKSchedule.fields` into a ``Params`` blob at
    the offsets of the kernel's stream-K probe (``partita.lowering.cutlass.sm90.STREAM_K_PROBE``)."""
    pack_scheduler(blob, STREAM_K_PROBE, offsets, fields)


def pack_scheduler(blob: bytearray, probe: SchedulerProbe, offsets: tuple[int, ...], fields: dict[str, object]) -> None:
    """Writes a tile scheduler's ``fields`` (by the names of ``probe.params``) into a
    ``Params`` blob at the ``offsets`` its probe read, each as its kind says: a
    ``FastDivmodU64Pow2`` (``pow2``: divisor, shift), ``FastDivmodU64`` (``divmod64``:
    divisor, multiplier, shift, round-up), ``FastDivmod`` (``divmod``: divisor, multiplier,
    shift), an enum of its probed size, or an integer or pointer."""
    count, tail = len(probe.params), len(probe.params) + len(probe.inner)
    inner = dict(zip((name for name, _, _ in probe.inner), offsets[count:tail], strict=True))
    sizes = dict(zip((name for name, _ in probe.sizes), offsets[tail:], strict=True))
    for (name, kind), at in zip(probe.params, offsets[:count], strict=True):
        value = fields[name]
        if kind == "pow2":
            divisor, shift = value  # type: ignore[misc]
            struct.pack_into("<Q", blob, at, divisor)
            struct.pack_into("<I", blob, at + inner["pow2_shift_right"], shift)
        elif kind == "divmod64":
            divisor, mult, shift, up = value  # type: ignore[misc]
            struct.pack_into("<Q", blob, at, divisor)
            struct.pack_into("<Q", blob, at + inner["divmod_multiplier"], mult)
            struct.pack_into("<I", blob, at + inner["divmod_shift_right"], shift)
            struct.pack_into("<I", blob, at + inner["divmod_round_up"], up)
        elif kind == "divmod":
            divisor, mult, shift = value  # type: ignore[misc]
            struct.pack_into("<i", blob, at, divisor)
            struct.pack_into("<I", blob, at + inner["divmod32_multiplier"], mult)
            struct.pack_into("<I", blob, at + inner["divmod32_shift_right"], shift)
        elif kind == "enum":
            struct.pack_into(_INTS[sizes[f"{name}_size"]], blob, at, value)
        else:
            struct.pack_into({"i32": "<i", "u32": "<I", "u64": "<Q", "ptr": "<Q"}[kind], blob, at, value)
