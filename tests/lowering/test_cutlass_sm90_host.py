"""Partita's TMA descriptors and grids for the Hopper kernels against CUTLASS's own host
code (``to_underlying_arguments`` / ``get_grid_shape``, built with g++ and a stub
``cuTensorMapEncodeTiled``; ``support/cutlass_host.py``): the same encode arguments, the
same grid, the same transaction bytes as the layout probe, for each tuning-table tile (and an
FP8 main loop's promotion interval, the value the runtime writes)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from support import cutlass_host
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr

from partita.lowering.cutlass.kernels import DTYPE_BYTES, KernelSpec
from partita.lowering.cutlass.sm90 import (
    COOPERATIVE,
    MMA_PROMOTION_INTERVAL,
    STREAM_K_PROBE,
    Sm90Config,
    choose_sm90_config,
)
from partita.runtime.tma import (
    DATA_TYPES,
    L2_PROMOTION_128B,
    SWIZZLES,
    operand_map,
    pack_schedule,
    pack_stream_k,
    persistent_schedule,
    sm90_grid,
    stream_k_schedule,
)

pytestmark = pytest.mark.skipif(cutlass_host.host_compiler() is None, reason="needs g++ for CUTLASS's host code")

CASES = [
    # (spec, (M, N, K, L) to run; the kernel takes any): a persistent 128x256 tile (a few
    # tiles, more tiles than SMs, one row, batches), a 128-row tile at a run-time M, and
    # batched 64-row tiles
    (KernelSpec.dense(4096, 768, 768, "float16", "bias_gelu"), [(300, 768, 768, 1), (1, 768, 768, 1),
                                                                (4096, 4096, 768, 1), (2000, 768, 768, 3)]),
    (KernelSpec.dense(None, 768, 768, "float16", "bias"), [(300, 768, 768, 1), (1, 768, 768, 1)]),
    (KernelSpec.batch_matmul(12, 64, 200, 64, "bfloat16", "none"), [(64, 200, 64, 12)]),
    # B N-major (x @ w[K,N]): its box is one 128-byte row of N by a K tile
    (KernelSpec.batch_matmul(1, None, 768, 256, "float16", "bias", transpose_b=False), [(300, 768, 256, 2)]),
    # A M-major (a transposed), B K-major
    (KernelSpec.batch_matmul(4, 192, 64, 128, "bfloat16", "none", transpose_a=True), [(192, 64, 128, 4)]),
    # FP8 (E4M3 x E5M2): one-byte elements, 128-element K tiles, the FP8 main loop
    (KernelSpec.dense(None, 1024, 512, "float_e4m3", dtype_b="float_e5m2"), [(300, 1024, 512, 1)]),
    # the cooperative kernel's 256-wide B tile N-major, and its A M-major
    (KernelSpec.batch_matmul(1, 512, 768, 256, "float16", "bias", transpose_b=False), [(512, 768, 256, 2)]),
    (KernelSpec.batch_matmul(4, 256, 256, 128, "bfloat16", "none", transpose_a=True), [(256, 256, 128, 4)]),
    # f32 as TF32: TFLOAT32 descriptors of 32-float K tiles, a 128-row and a persistent tile
    (KernelSpec.dense(None, 768, 768, "float32", "bias"), [(300, 768, 768, 1), (1, 768, 768, 1)]),
    (KernelSpec.dense(4096, 1024, 512, "float32", "none"), [(4096, 1024, 512, 1), (2000, 1024, 512, 2)]),
    # int8 (s8, and u8 x s8): UINT8 descriptors of 128-byte K tiles, an i32 epilogue
    (KernelSpec.dense(None, 768, 768, "int8", "bias"), [(300, 768, 768, 1), (1, 768, 256, 1)]),
    (KernelSpec.dense(4096, 1024, 512, "uint8", dtype_b="int8"), [(4096, 1024, 512, 1)]),
]
#: clusters the table does not pick yet (not timed on an H100): multicast boxes split the
#: shared operand across the cluster, and the grid rounds up to whole clusters
CLUSTERS = [(KernelSpec.dense(None, 768, 768, "float16", "bias"), Sm90Config(tile=(128, 128, 64), cluster=c))
            for c in ((2, 1, 1), (1, 2, 1))]
#: a persistent grid of clusters: CUTLASS's per-GPC occupancy heuristic sizes it
PERSISTENT_CLUSTERS = [(KernelSpec.dense(4096, 768, 768, "float16", "bias"),
                        Sm90Config(tile=(128, 256, 64), cluster=c, schedule=COOPERATIVE)) for c in ((2, 1, 1), (1, 2, 1))]

#: kernels over CUTLASS's stream-K scheduler (split-K, or its heuristic decomposition: one
#: kernel): a decode step's few rows by a large weight and wave-quantized products, on
#: 128x128 and 128x256 tiles and a 2-CTA cluster
SPLIT_K = [(KernelSpec.dense(None, 4096, 4096, "float16", "bias"),
            Sm90Config(tile=(128, 128, 64), schedule=COOPERATIVE, splits=4, decomposition="split_k")),
           (KernelSpec.dense(None, 4096, 4096, "bfloat16", "none"),
            Sm90Config(tile=(128, 256, 64), cluster=(2, 1, 1), schedule=COOPERATIVE, decomposition="stream_k"))]
#: (problem, splits: 1 for the heuristic) and the decomposition CUTLASS's host code takes
STREAM_K_PROBLEMS = [
    (((1, 4096, 4096, 1), 4), "split_k"), (((16, 4096, 4096, 1), 3), "split_k"), (((300, 4096, 4096, 1), 8), "split_k"),
    (((8, 4096, 320, 2), 7), "split_k"), (((1, 4096, 128, 1), 16), "split_k"),
    # the heuristic: a row's 32 tiles cut across the 132 SMs (stream-K); 8 tiles whose 32
    # units split them evenly (split-K); 294 tiles, two waves and a short third (stream-K
    # for the last two, in groups); a full last wave or too few K tiles (data-parallel)
    (((1, 4096, 4096, 1), 1), "stream_k"), (((1, 1024, 2048, 1), 1), "split_k"),
    (((896, 5376, 4096, 1), 1), "stream_k"), (((2048, 4096, 4096, 1), 1), "data_parallel"),
    (((1, 4096, 512, 1), 1), "data_parallel"), (((300, 4096, 4096, 2), 1), None),
]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    # one g++ build for every case (about a minute on a busy machine)
    return cutlass_host.build([(spec, choose_sm90_config(spec)) for spec, _ in CASES] + CLUSTERS + PERSISTENT_CLUSTERS
                              + SPLIT_K, tmp_path_factory.mktemp("host"))


@pytest.mark.parametrize("case", range(len(CASES)), ids=["f16-128x256-cooperative", "f16-128x128", "bf16-64x128-batched",
                                                       "f16-tt", "bf16-nn", "fp8-64x128x128",
                                                       "f16-tt-cooperative", "bf16-nn-cooperative", "tf32-128x128",
                                                       "tf32-128x256-cooperative", "s8-128x128", "u8s8-cooperative"])
def test_descriptors_and_grid_are_cutlass_s(host, case: int) -> None:
    spec, problems = CASES[case]
    cfg = choose_sm90_config(spec)
    bm, bn, bk = cfg.tile
    size = DTYPE_BYTES[spec.dtype]
    for M, N, K, L in problems:
        reference = cutlass_host.run(host, case, M, N, K, L)
        ours = [operand_map(0x10000, M, K, L, bm // cfg.cluster[1], bk, spec.dtype, size, not spec.transpose_a),
                operand_map(0x20000, N, K, L, bn // cfg.cluster[0], bk, spec.dtype, size, spec.transpose_b)]
        assert len(reference["encodes"]) == 2
        for theirs, mine in zip(reference["encodes"], ours, strict=True):
            assert theirs == {"dtype": DATA_TYPES[mine.dtype], "rank": mine.rank, "address": mine.address,
                              "dims": mine.dims, "strides": mine.strides, "box": mine.box,
                              "element_strides": mine.element_strides, "interleave": 0,
                              "swizzle": SWIZZLES[mine.swizzle], "l2_promotion": L2_PROMOTION_128B, "oob_fill": 0}
        if cfg.persistent:
            schedule = persistent_schedule((M, N, K, L), cfg.tile, cfg.cluster, cutlass_host.SMS)
            assert reference["grid"] == schedule.grid
            _check_schedule(reference, schedule)
        else:
            assert reference["grid"] == sm90_grid((M, N, K, L), cfg.tile, cfg.cluster)
            assert reference["scheduler"] is None
        assert reference["tx"] == ((bm + bn) * bk * size, bm * bk * size, bn * bk * size)
        assert reference["promotion"] == (MMA_PROMOTION_INTERVAL if spec.is_fp8 else None)


def _check_schedule(reference: dict, schedule) -> None:
    """The scheduler's fields are CUTLASS's, and ``pack_schedule`` writes them where the
    host compiler lays out ``Params``: the bytes of every field equal CUTLASS's own (the
    padding between them is not compared)."""
    flat = []
    for value in schedule.fields.values():
        flat.extend(value if isinstance(value, tuple) else (value,))
    assert reference["scheduler"] == (*flat, cutlass_host.SMS, 0)
    offsets, params = reference["scheduler_offsets"], reference["params"]
    blob = bytearray(len(params))
    pack_schedule(blob, offsets, schedule, cutlass_host.SMS)
    multiplier, shift, round_up, pow2_shift, raster_size = offsets[14:]
    spans = [(offsets[0], 4), (offsets[1], 4), (offsets[2], 8), (offsets[2] + pow2_shift, 4), (offsets[3], 8),
             (offsets[3] + pow2_shift, 4)]
    for at in offsets[4:6]:  # the two 64-bit divmods
        spans += [(at, 8), (at + multiplier, 8), (at + shift, 4), (at + round_up, 4)]
    spans += [(offsets[6], 8), (offsets[7], 4), (offsets[8], raster_size)] + [(at, 4) for at in offsets[9:14]]
    for at, width in spans:
        assert blob[at:at + width] == params[at:at + width], (at, width)


@pytest.mark.parametrize("case", range(len(CLUSTERS)), ids=["cluster-2x1", "cluster-1x2"])
def test_multicast_boxes_are_cutlass_s(host, case: int) -> None:
    spec, cfg = CLUSTERS[case]
    M, N, K, L = 300, 768, 768, 1
    reference = cutlass_host.run(host, len(CASES) + case, M, N, K, L)
    boxes = [e["box"] for e in reference["encodes"]]
    mine = [operand_map(0x10000, M, K, L, 128 // cfg.cluster[1], 64, spec.dtype, 2).box,
            operand_map(0x20000, N, K, L, 128 // cfg.cluster[0], 64, spec.dtype, 2).box]
    assert boxes == mine
    assert reference["grid"] == sm90_grid((M, N, K, L), cfg.tile, cfg.cluster)


@pytest.mark.parametrize("case", range(len(PERSISTENT_CLUSTERS)), ids=["cluster-2x1", "cluster-1x2"])
def test_persistent_grids_of_clusters_are_cutlass_s(host, case: int) -> None:
    spec, cfg = PERSISTENT_CLUSTERS[case]
    for problem in ((4096, 4096, 768, 1), (300, 768, 768, 1), (20000, 768, 768, 2)):
        reference = cutlass_host.run(host, len(CASES) + len(CLUSTERS) + case, *problem)
        schedule = persistent_schedule(problem, cfg.tile, cfg.cluster, cutlass_host.SMS)
        assert reference["grid"] == schedule.grid, problem
        _check_schedule(reference, schedule)


@pytest.mark.parametrize("case", range(len(SPLIT_K)), ids=["f16-128x128", "bf16-128x256-2x1"])
def test_stream_k_schedules_are_cutlass_s(host, case: int) -> None:
    """A stream-K scheduler's kernel, split-K or by its heuristic (data-parallel, split-K or
    stream-K per problem): the same grid (a full persistent one), the same workspace size,
    and every field of its ``Params`` (the divmods, units, groups, K tiles a unit, big
    units and groups, the workspace pointer) byte for byte CUTLASS's, written at the
    offsets CUTLASS's host code lays them out at; split counts past the K tiles clamped as
    CUTLASS clamps them."""
    spec, cfg = SPLIT_K[case]
    which = len(CASES) + len(CLUSTERS) + len(PERSISTENT_CLUSTERS) + case
    modes = set()
    for (problem, splits), mode in STREAM_K_PROBLEMS:
        reference = cutlass_host.run(host, which, *problem, splits=splits)
        schedule = stream_k_schedule(problem, cfg.tile, cfg.cluster, cutlass_host.SMS, splits)
        assert mode is None or cfg.tile[1] == 256 or schedule.mode == mode, (problem, schedule)
        modes.add(schedule.mode)
        if splits > 1:
            assert schedule.splits == min(splits, -(-problem[2] // cfg.tile[2]))
        assert reference["grid"] == schedule.grid, problem
        assert reference["workspace"] == schedule.workspace_bytes, problem
        offsets, params = reference["stream_k_offsets"], reference["params"]
        blob = bytearray(len(params))
        pack_stream_k(blob, offsets, schedule.fields(0x50000, cutlass_host.SMS))
        count = len(STREAM_K_PROBE.params)
        mult64, shift64, round64, shift_pow2, mult32, shift32, raster_size, reduction_size = offsets[count:]
        widths = {"i32": [(0, 4)], "u32": [(0, 4)], "u64": [(0, 8)], "ptr": [(0, 8)],
                  "pow2": [(0, 8), (shift_pow2, 4)], "divmod64": [(0, 8), (mult64, 8), (shift64, 4), (round64, 4)],
                  "divmod": [(0, 4), (mult32, 4), (shift32, 4)]}
        for (name, kind), at in zip(STREAM_K_PROBE.params, offsets[:count], strict=True):
            spans = widths.get(kind) or [(0, raster_size if name == "raster_order" else reduction_size)]
            for inner, width in spans:
                assert blob[at + inner:at + inner + width] == params[at + inner:at + inner + width], (problem, name)
    assert modes == {"split_k", "stream_k", "data_parallel"}


def test_the_split_k_kernel_builds_to_wgmma_and_probes_params_as_the_host_lays_them_out(host) -> None:
    """NVRTC's build of the split-K kernel: HGMMA fed by TMA, nothing spilled; its probe
    (what the runtime packs by) places every scheduler field where CUTLASS's host code does;
    its record round-trips, and a record whose layout contradicts its configuration is
    refused."""
    from collections import Counter

    from support.sass import sass_of

    from partita.lowering import nvrtc
    from partita.lowering.cubin import sass_by_function
    from partita.lowering.cutlass.sm90 import emit_sm90_module, read_layout, sm90_from_record, sm90_name, sm90_record

    spec, cfg = SPLIT_K[0]
    cfg = dataclasses.replace(cfg, name=sm90_name(spec, cfg))  # 4 split-K slices
    source = emit_sm90_module([("split", spec, cfg)])
    binary = nvrtc.compile_cuda(source, arch="sm_90a")  # cold: about 15 s of NVRTC
    entry = source.entries["split"]
    ops = Counter(re.findall(r"\b(HGMMA|UTMALDG|STL|LDL|HMMA)\b",
                             sass_by_function(sass_of(binary.cubin))[entry.name]))
    assert ops["HGMMA"] >= 8 and ops["UTMALDG"] >= 2 and ops["STL"] == ops["LDL"] == ops["HMMA"] == 0, ops
    layout = read_layout(binary.cubin, entry.kernel_type)
    reference = cutlass_host.run(host, len(CASES) + len(CLUSTERS) + len(PERSISTENT_CLUSTERS), 1, 4096, 4096, 1,
                                 splits=4)
    # the host's Params is larger before the scheduler (its TMA objects hold more), so the
    # fields sit at one shift: the same order, spacing and inner layout
    mine, theirs, count = layout["stream_k"], reference["stream_k_offsets"], len(STREAM_K_PROBE.params)
    assert [at - mine[0] for at in mine[:count]] == [at - theirs[0] for at in theirs[:count]]
    assert mine[count:] == theirs[count:] and layout["scheduler"] == () and layout["threads"] == 384
    assert mine[count - 1] + 8 <= layout["params_size"]
    record = sm90_record(entry, ("x", "w", "bias"), layout)
    assert sm90_from_record(record)[0].config == cfg
    broken = DictionaryAttr({**record.data, "layout": DictionaryAttr({**record.data["layout"].data,
                                                                      "stream_k": ArrayAttr([])})})
    with pytest.raises(ValueError, match="lacks a stream-K tile scheduler, but the kernel's decomposition is split_k"):
        sm90_from_record(broken)
