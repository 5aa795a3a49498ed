"""CUTLASS 3 Hopper GEMMs for sm_90a (``partita.lowering.cutlass.sm90``): which specs they
take, the tuning table, one instantiation per configuration, the layout probe read back
from the cubin, the SASS (wgmma, TMA, mbarriers, no spills) and the records."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from support.sass import sass_of

from partita.lowering import nvrtc
from partita.lowering.cubin import kernel_max_threads, kernel_params, sass_by_function
from partita.lowering.cutlass.kernels import KernelSpec, UnsupportedKernel
from partita.lowering.cutlass.sm90 import (
    COOPERATIVE,
    LAYOUT_FIELDS,
    PERSISTENT_PROBE,
    Sm90Config,
    choose_sm90_config,
    emit_sm90_module,
    emit_sm90_units,
    hopper_spec,
    read_layout,
    sm90_from_record,
    sm90_record,
    sm90_type_key,
    why_not_sm90,
)
from partita.lowering.cutlass.tuning import SM90_TABLE, sm90_tile

# four partitions, three configurations: two BERT dense layers at a run-time M share one
# kernel type (128x128 tiles); a bf16 attention Q·Kᵀ (64 rows) takes 64-row tiles; the FFN
# dense at M = 512 the persistent cooperative kernel
SPECS = [
    ("gemm_a", KernelSpec.dense(None, 768, 768, "float16", "bias_gelu")),
    ("gemm_b", KernelSpec.batch_matmul(12, 64, 64, 64, "bfloat16", "none")),
    ("gemm_c", KernelSpec.dense(512, 3072, 768, "float16", "bias_gelu")),
    ("gemm_d", KernelSpec.dense(None, 3072, 768, "float16", "bias_gelu")),
]


@pytest.fixture(scope="module")
def compiled():
    source = emit_sm90_module([(name, spec, choose_sm90_config(spec)) for name, spec in SPECS])
    # cold: about 40 s per kernel type with NVRTC alone on the CPU (2 minutes on a busy
    # machine); the cubin cache serves it after
    return source, nvrtc.compile_cuda(source, arch="sm_90a")


def test_what_the_hopper_kernels_take() -> None:
    assert why_not_sm90(KernelSpec.dense(None, 768, 768, "float16")) is None
    assert why_not_sm90(KernelSpec.batch_matmul(None, None, None, 64, "bfloat16", "bias")) is None
    # f32 as TF32 (the target's default math), K-major operands only; 3xTF32 and exact
    # f32 stay on the Sm80 kernels
    assert why_not_sm90(KernelSpec.dense(8, 16, 20, "float32")) is None
    assert "3xtf32 math" in why_not_sm90(KernelSpec.dense(8, 16, 16, "float32"), "3xtf32")
    assert "ffma math" in why_not_sm90(KernelSpec.dense(8, 16, 16, "float32"), "ffma")
    assert "K-major operands only" in why_not_sm90(KernelSpec.batch_matmul(1, 8, 16, 16, "float32", transpose_b=False))
    assert "multiple of 4" in why_not_sm90(KernelSpec.dense(8, 16, 18, "float32"))
    assert why_not_sm90(KernelSpec.dense(8, 16, 16, "int8")) is None  # IGMMA (test_cutlass_int8.py)
    assert "multiple of 8" in why_not_sm90(KernelSpec.dense(8, 16, 20, "float16"))
    assert "run-time" not in (why_not_sm90(KernelSpec.batch_matmul(2, 8, 8, None, "float16")) or "run-time")
    assert why_not_sm90(KernelSpec.batch_matmul(2, 8, 16, 8, "float16", transpose_b=False)) is None  # x @ w[K,N]
    assert "N-major B" in why_not_sm90(KernelSpec.batch_matmul(2, 8, 12, 8, "float16", transpose_b=False))
    assert "M-major A" in why_not_sm90(KernelSpec.batch_matmul(2, None, 16, 8, "float16", transpose_a=True))
    assert "broadcast" in why_not_sm90(KernelSpec.batch_matmul(2, 8, 8, 8, "float16", broadcast_b=True))
    assert "conv2d" in why_not_sm90(KernelSpec.conv2d((1, 8, 8, 16), (16, 3, 3, 16), padding=1))
    # a pointwise convolution is the GEMM of its pixels by its filter (the same bytes);
    # strided, padded or dilated 1x1 ones are not
    pointwise = KernelSpec.conv2d((None, 14, 14, 256), (64, 1, 1, 256), dtype="bfloat16", epilogue="bias_residual")
    assert hopper_spec(pointwise) == KernelSpec.dense(None, 64, 256, "bfloat16", "bias_residual")
    assert hopper_spec(KernelSpec.conv2d((2, 7, 7, 32), (16, 1, 1, 32), dtype="int8")) == \
        KernelSpec.dense(98, 16, 32, "int8")
    assert why_not_sm90(pointwise) is None and choose_sm90_config(pointwise).name.startswith(
        "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_128x128x64_")
    # a ResNet block's last: relu((acc + bias) + shortcut), a kernel type of its own
    block_end = hopper_spec(KernelSpec.conv2d((None, 14, 14, 256), (1024, 1, 1, 256), epilogue="bias_residual_relu"))
    assert block_end == KernelSpec.dense(None, 1024, 256, "float16", "bias_residual_relu") and why_not_sm90(block_end) is None
    residual = KernelSpec.dense(None, 1024, 256, "float16", "bias_residual")
    assert sm90_type_key(block_end, choose_sm90_config(block_end)) != sm90_type_key(residual, choose_sm90_config(residual))
    for other in (dict(strides=(2, 2)), dict(padding=1), dict(dilation=(2, 2))):
        conv = KernelSpec.conv2d((1, 8, 8, 16), (16, 1, 1, 16), **other)
        assert hopper_spec(conv) == conv and why_not_sm90(conv) is not None, other
    # a residual is C (beta 1); beside a bias, the tensor-broadcast epilogue: another type
    residual = KernelSpec.dense(None, 768, 768, "float16", "residual")
    assert why_not_sm90(residual) is None
    assert sm90_type_key(residual, choose_sm90_config(residual)) == \
        sm90_type_key(KernelSpec.dense(None, 768, 768, "float16", "bias"), choose_sm90_config(residual))
    both = KernelSpec.dense(None, 768, 768, "float16", "bias_residual")
    assert why_not_sm90(both) is None
    assert sm90_type_key(both, choose_sm90_config(both)) != sm90_type_key(residual, choose_sm90_config(residual))
    with pytest.raises(UnsupportedKernel, match="K must be static"):
        choose_sm90_config(KernelSpec.batch_matmul(2, 8, 8, None, "float16"))


def test_the_tuning_table_picks_tiles_by_shape() -> None:
    cooperative = ((128, 256, 64), (1, 1, 1), COOPERATIVE)
    one_consumer = ((128, 128, 64), (1, 1, 1), "KernelTmaWarpSpecialized")
    assert sm90_tile(4096, 4096, 4096) == sm90_tile(512, 3072, 768) == cooperative
    # a run-time M counts as large, but not for the persistent kernel (a decode step's rows)
    assert sm90_tile(None, 768, 768) == sm90_tile(200, 4096, 4096) == sm90_tile(4096, 128, 4096) == one_consumer
    assert sm90_tile(64, 4096, 4096)[0] == (64, 128, 64)
    table = ((0, 1024, (128, 256, 64), (2, 1, 1), COOPERATIVE),) + SM90_TABLE  # a table is data: first row wins
    assert sm90_tile(64, 2048, 64, table) == ((128, 256, 64), (2, 1, 1), COOPERATIVE)
    cfg = choose_sm90_config(KernelSpec.dense(512, 3072, 768, "float16", "bias_gelu"))
    assert cfg.persistent and cfg.name == \
        "cutlass3x_sm90_tensorop_gemm_f16_f16_f32_128x256x64_1x1x1_tn_warpspecialized_cooperative_bias_gelu"
    cfg = choose_sm90_config(KernelSpec.dense(None, 768, 768, "float16", "bias_gelu"))
    assert not cfg.persistent and \
        cfg.name == "cutlass3x_sm90_tensorop_gemm_f16_f16_f32_128x128x64_1x1x1_tn_warpspecialized_bias_gelu"
    # a few static rows by a large weight: the 128x128 persistent kernel, its K ranges cut
    # by CUTLASS's stream-K heuristic; not with a short K, many tiles or a run-time M
    row = choose_sm90_config(KernelSpec.dense(1, 4096, 4096, "float16", "bias"))
    assert (row.tile, row.decomposition, row.splits) == ((128, 128, 64), "stream_k", 1)
    assert choose_sm90_config(KernelSpec.dense(64, 8192, 1024, "bfloat16")).decomposition == "stream_k"
    for M, N, K in ((1, 4096, 512), (1, 16384, 4096), (128, 4096, 4096), (None, 4096, 4096)):
        assert choose_sm90_config(KernelSpec.dense(M, N, K, "float16")).decomposition == "", (M, N, K)
    assert choose_sm90_config(KernelSpec.batch_matmul(8, 1, 4096, 4096, "float16", "none")).decomposition == ""
    with pytest.raises(UnsupportedKernel, match="not a wgmma tile"):
        Sm90Config(tile=(96, 128, 64))
    with pytest.raises(UnsupportedKernel, match="cluster"):
        Sm90Config(tile=(128, 128, 64), cluster=(4, 4, 1))
    with pytest.raises(UnsupportedKernel, match="128 or 256 rows"):
        Sm90Config(tile=(64, 128, 64), schedule=COOPERATIVE)


def test_one_instantiation_per_configuration(compiled) -> None:
    source, _ = compiled
    kinds = {e.kernel_type for e in source.entries.values()}
    assert len(kinds) == 3 and source.entries["gemm_a"].kernel_type == source.entries["gemm_d"].kernel_type
    assert source.code.count("cutlass::gemm::KernelTmaWarpSpecialized>") == 2
    assert source.code.count("cutlass::gemm::KernelTmaWarpSpecializedCooperative>") == 1
    assert source.code.count("__grid_constant__") == 3  # one entry (Params by value) per kernel type
    assert source.entries["gemm_a"].name == source.entries["gemm_d"].name != source.entries["gemm_b"].name
    assert source.entries["gemm_c"].name not in (source.entries["gemm_a"].name, source.entries["gemm_b"].name)


def test_one_unit_per_configuration_names_no_partition_and_no_shape() -> None:
    """Per kernel type a unit of its own, whose text is the same for every partition, shape,
    epilogue of one activation (none / bias) and GEMM form (dense / batched) using it."""
    units = emit_sm90_units([(name, spec, choose_sm90_config(spec)) for name, spec in SPECS])
    assert [sorted(u.entries) for u in units] == [["gemm_a", "gemm_d"], ["gemm_b"], ["gemm_c"]]
    alike = [("part_x", KernelSpec.dense(None, 1000, 1096, "float16", "bias_gelu")),
             ("part_y", KernelSpec.dense(None, 2008, 3048, "float16", "bias_gelu")),
             # a bf16 dense with a bias at M = 64: gemm_b's kernel (bias or not, dense or batched)
             ("part_z", KernelSpec.dense(64, 96, 128, "bfloat16", "bias"))]
    other, third = emit_sm90_units([(n, s, choose_sm90_config(s)) for n, s in alike])
    assert other.code == units[0].code and third.code == units[1].code
    for word in ("gemm_a", "gemm_c", "part_x", "768", "3072", "1000", "1096"):
        assert word not in units[0].code, word
    assert len(nvrtc.declared_entries(units[0].code)) == 1 and units[0].code.count("_contract[32]") == 1
    for unit, mine, theirs in ((units[0], "gemm_a", other.entries["part_y"]), (units[1], "gemm_b", third.entries["part_z"])):
        # the cubin's one entry and contract serve every partition of the type
        assert unit.entries[mine].name == theirs.name and unit.entries[mine].contract == theirs.contract


def test_layout_probe(compiled) -> None:
    """The Params layout, read from the cubin's initialized data: what the runtime fills."""
    source, binary = compiled
    for kind in {e.kernel_type for e in source.entries.values()}:
        layout = read_layout(binary.cubin, kind)
        assert set(LAYOUT_FIELDS) <= set(layout)
        assert layout["params_size"] % 64 == 0 and layout["params_align"] == 64
        assert (layout["tma_a"] + layout["tma_desc"]) % 64 == 0 and (layout["tma_b"] + layout["tma_desc"]) % 64 == 0
        assert layout["shape_offsets"] == (0, 4, 8, 12) and layout["stride_offsets"] == (0, 8)
        assert layout["stages"] >= 4
        assert 48 * 1024 < layout["smem"] <= 227 * 1024
        assert layout["swizzle_a"] == layout["swizzle_b"] == 3  # 128-byte swizzle
    # the cooperative kernel: a producer and two consumer warp groups, and its scheduler's
    # fields (hardware info first, then the scheduler's, in order) and their inner layout
    plain = read_layout(binary.cubin, source.entries["gemm_a"].kernel_type)
    assert plain["threads"] == 256 and plain["tx_bytes_value"] == (128 + 128) * 64 * 2 and plain["scheduler"] == ()
    big = read_layout(binary.cubin, source.entries["gemm_c"].kernel_type)
    assert big["threads"] == 384 and big["tx_bytes_value"] == (128 + 256) * 64 * 2  # one stage of A and B
    offsets = big["scheduler"]
    assert len(offsets) == len(PERSISTENT_PROBE.fields) and offsets[14:] == (8, 16, 20, 8, 4)
    assert list(offsets[2:14]) == sorted(offsets[2:14]) and offsets[1] == offsets[0] + 4 < offsets[2]
    assert offsets[13] + 4 <= big["params_size"]
    small = read_layout(binary.cubin, source.entries["gemm_b"].kernel_type)
    assert small["threads"] == 256 and small["scheduler"] == ()
    assert small["tx_bytes_mk_value"] == 64 * 64 * 2
    for label, entry in source.entries.items():
        (param,) = kernel_params(binary.cubin, entry.name)
        layout = read_layout(binary.cubin, entry.kernel_type)
        assert param.size == layout["params_size"]  # one parameter: the Params struct
        assert kernel_max_threads(binary.cubin, entry.name) == layout["threads"], label


def test_sass_is_wgmma_fed_by_tma(compiled) -> None:
    """Every entry issues HGMMA (wgmma) fed by UTMALDG (TMA) with SYNCS mbarrier waits and
    spills nothing to local memory. Its wgmmas are pipelined: a warpgroup wait
    (``WARPGROUP.DEPBAR``) per K tile, not one after every HGMMA, as ptxas makes it when the
    pipeline crosses a function call (C7510: the runner was ``__noinline__``, and an H200
    ran the 4096^3 GEMM at 331 TFLOP/s, below the Sm80 kernel)."""
    source, binary = compiled
    functions = sass_by_function(sass_of(binary.cubin))
    for name, _ in SPECS:
        sass = functions[source.entries[name].name]
        ops = Counter(re.findall(r"\b(HGMMA|UTMALDG|SYNCS|STL|LDL|HMMA|CALL)\b", sass))
        assert ops["HGMMA"] >= 8 and ops["UTMALDG"] >= 2 and ops["SYNCS"] >= 20, (name, ops)
        assert ops["STL"] == 0 and ops["LDL"] == 0, (name, ops)
        assert ops["HMMA"] == 0, (name, ops)  # no Sm80 mma.sync left
        waits = len(re.findall(r"WARPGROUP\.DEPBAR", sass))
        assert ops["CALL"] == 0 and waits <= 2 < ops["HGMMA"], (name, waits, ops)


def test_records_round_trip_and_refuse_bad_layouts(compiled) -> None:
    source, binary = compiled
    entry = source.entries["gemm_a"]
    layout = read_layout(binary.cubin, entry.kernel_type)
    record = sm90_record(entry, ("x", "w", "bias"), layout)
    back, roles, layout_back = sm90_from_record(record)
    assert back == entry and roles == ("x", "w", "bias") and layout_back == layout
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, i64

    def broken(**change) -> DictionaryAttr:
        fields = {**record.data["layout"].data, **{k: IntegerAttr(v, i64) for k, v in change.items()}}
        return DictionaryAttr({**record.data, "layout": DictionaryAttr(fields)})

    with pytest.raises(ValueError, match="64-byte aligned"):
        sm90_from_record(broken(tma_a=72))
    with pytest.raises(ValueError, match="outside"):
        sm90_from_record(broken(ptr_d=layout["params_size"]))
    with pytest.raises(ValueError, match="smem"):
        sm90_from_record(broken(smem=10**7))
    from partita.lowering.records import to_attr

    # the persistent kernel's record: its scheduler layout round-trips, and is checked
    coop = source.entries["gemm_c"]
    coop_layout = read_layout(binary.cubin, coop.kernel_type)
    coop_record = sm90_record(coop, ("x", "w", "bias"), coop_layout)
    assert sm90_from_record(coop_record)[2]["scheduler"] == coop_layout["scheduler"] != ()
    for base, scheduler, why in ((record, (*range(0, 56, 4), 8, 16, 20, 8, 4), "has a persistent tile scheduler"),
                                 (coop_record, (), "lacks a persistent tile scheduler"),
                                 (coop_record, coop_layout["scheduler"][:5], "not a tile scheduler's layout")):
        edited = DictionaryAttr({**base.data["layout"].data, "scheduler": to_attr(scheduler)})
        with pytest.raises(ValueError, match=why):
            sm90_from_record(DictionaryAttr({**base.data, "layout": edited}))


def test_n_major_weights_compile_to_wgmma_too() -> None:
    """An exported ``MatMul(x, W[K,N]) + bias`` (B N-major, CUTLASS ``tt``) is a Hopper kernel
    too: TMA loads N-major tiles, wgmma reads them transposed."""
    spec = KernelSpec.batch_matmul(1, None, 768, 3072, "float16", "bias", transpose_b=False)
    source = emit_sm90_module([("gemm_tt", spec, choose_sm90_config(spec))])
    assert "cutlass::layout::RowMajor, 8, TB, cutlass::layout::RowMajor, 8" in source.code
    binary = nvrtc.compile_cuda(source, arch="sm_90a")  # cold: about a minute of NVRTC
    entry = source.entries["gemm_tt"].name
    ops = Counter(re.findall(r"\b(HGMMA|UTMALDG|STL|LDL)\b", sass_by_function(sass_of(binary.cubin))[entry]))
    assert ops["HGMMA"] >= 8 and ops["UTMALDG"] >= 2 and ops["STL"] == ops["LDL"] == 0, ops
    assert read_layout(binary.cubin, source.entries["gemm_tt"].kernel_type)["swizzle_b"] == 3


def test_f32_products_are_tf32_wgmma() -> None:
    """An f32 dense is a Hopper kernel on TF32 (the target's default math): the f16 table's
    tiles with K tiles of 32 floats (a 128-byte swizzle row), HGMMA on TF32 fed by TMA,
    nothing spilled; its one configuration per shape is the table's (nothing to tune)."""
    specs = [("tf32_a", KernelSpec.dense(None, 768, 768, "float32", "bias_gelu")),
             ("tf32_c", KernelSpec.dense(4096, 1024, 512, "float32", "bias_residual"))]
    configs = [choose_sm90_config(spec) for _, spec in specs]
    assert [(c.tile, c.schedule) for c in configs] == [((128, 128, 32), "KernelTmaWarpSpecialized"),
                                                        ((128, 256, 32), COOPERATIVE)]
    with pytest.raises(UnsupportedKernel, match="TF32 Hopper GEMMs take their table's only"):
        choose_sm90_config(specs[0][1], "128x128x64_1x1x1_ws")
    # one unit per kernel type, as cutlass-codegen compiles them (so a model's compile of
    # the same type is a cache hit: test_tma_launch's TF32 model)
    units = emit_sm90_units([(name, spec, cfg) for (name, spec), cfg in zip(specs, configs, strict=True)])
    assert all("using T = float;" in u.code and "static_assert(32 * sizeof(T) == 128" in u.code for u in units)
    binaries = nvrtc.compile_many(units, jobs=2, arch="sm_90a")  # cold: about a minute
    for (name, _), cfg, source, binary in zip(specs, configs, units, binaries, strict=True):
        entry = source.entries[name]
        functions = sass_by_function(sass_of(binary.cubin))
        ops = Counter(re.findall(r"\b(HGMMA\.64x\d+x8\.F32\.TF32|HGMMA|UTMALDG|STL|LDL|HMMA)\b", functions[entry.name]))
        wgmma = f"HGMMA.64x{cfg.tile[1]}x8.F32.TF32"  # one k8 step per instruction: 4 a K tile per m64
        assert ops[wgmma] >= 4 and ops["UTMALDG"] >= 2 and ops["STL"] == ops["LDL"] == ops["HMMA"] == 0, (name, ops)
        layout = read_layout(binary.cubin, entry.kernel_type)
        assert layout["tx_bytes_value"] == (cfg.tile[0] + cfg.tile[1]) * 32 * 4 and layout["swizzle_a"] == 3
        back, _, _ = sm90_from_record(sm90_record(entry, entry.spec.input_names, layout))
        assert back == entry


# a pre-norm transformer's projection back into the residual stream, D = (x wᵀ + b) + r
BIAS_RESIDUAL = KernelSpec.dense(None, 768, 768, "float16", "bias_residual")


def test_a_bias_beside_the_residual_is_the_tensor_broadcast_epilogue() -> None:
    """``bias_residual`` is CUTLASS 3's ``EpilogueTensorBroadcast`` behind the same TMA /
    wgmma main loop: the residual its source C0, the bias a per-column vector whose pointer
    the probe places (the other kernels have none); its record states it, and one that does
    not (or a bias pointer on another epilogue) is refused."""
    source = emit_sm90_module([("proj", BIAS_RESIDUAL, choose_sm90_config(BIAS_RESIDUAL))])
    entry = source.entries["proj"]
    assert "EpilogueTensorBroadcast" in source.code and "/*PerColumnBias=*/true" in source.code
    assert entry.name.split("_")[-3:-1] == ["bias", "residual"]
    binary = nvrtc.compile_cuda(source.code, arch="sm_90a")  # cold: about a minute of NVRTC
    layout = read_layout(binary.cubin, entry.kernel_type)
    pointers = sorted(layout[f] for f in ("ptr_c", "ptr_d", "ptr_bias"))
    assert pointers[0] >= 0 and all(b - a >= 8 for a, b in zip(pointers, pointers[1:]))
    assert pointers[-1] + 8 <= layout["params_size"]
    ops = Counter(re.findall(r"\b(HGMMA|UTMALDG|STL|LDL|HMMA)\b", sass_by_function(sass_of(binary.cubin))[entry.name]))
    assert ops["HGMMA"] >= 8 and ops["UTMALDG"] >= 2 and ops["STL"] == ops["LDL"] == ops["HMMA"] == 0, ops

    record = sm90_record(entry, ("x", "w", "bias", "residual"), layout)
    assert sm90_from_record(record)[2] == layout
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, i64

    fields = {k: v for k, v in record.data["layout"].data.items() if k != "ptr_bias"}
    older = DictionaryAttr({**record.data, "layout": DictionaryAttr(fields)})
    with pytest.raises(ValueError, match="lacks a bias pointer"):
        sm90_from_record(older)  # a record from before the field: its epilogue had no Hopper kernel
    plain = KernelSpec.dense(None, 768, 768, "float16", "residual")
    plain_entry = emit_sm90_module([("p", plain, choose_sm90_config(plain))]).entries["p"]
    plain_record = sm90_record(plain_entry, ("x", "w", "residual"), {**layout, "ptr_bias": -1})
    assert sm90_from_record(plain_record)[2]["ptr_bias"] == -1
    no_field = DictionaryAttr({**plain_record.data, "layout": DictionaryAttr(
        {k: v for k, v in plain_record.data["layout"].data.items() if k != "ptr_bias"})})
    assert sm90_from_record(no_field)[2]["ptr_bias"] == -1  # an older record reads as it was written
    wrong = DictionaryAttr({**plain_record.data, "layout": DictionaryAttr(
        {**plain_record.data["layout"].data, "ptr_bias": IntegerAttr(layout["ptr_bias"], i64)})})
    with pytest.raises(ValueError, match="has a bias pointer"):
        sm90_from_record(wrong)


def test_every_tuning_candidate_builds_to_wgmma_without_spills() -> None:
    """What ``tune-cutlass-kernels`` times on an H100 beyond the table's rows (2-CTA
    clusters, the 256x128 and 128x128 persistent tiles, 64x256): one NVRTC program of the
    candidates' entries, each HGMMA fed by TMA, nothing spilled, a pinned label giving its
    tile and cluster."""
    from partita.lowering.cutlass.tuning import SM90_CANDIDATES, sm90_label

    spec = KernelSpec.dense(None, 4096, 4096, "float16", "bias")
    table = {(tile, cluster, schedule) for _, _, tile, cluster, schedule in SM90_TABLE}
    labels = [sm90_label(*c) for c in SM90_CANDIDATES if c not in table]
    configs = [choose_sm90_config(spec, label) for label in labels]
    assert [(c.tile, c.cluster, c.schedule) for c in configs] == [c for c in SM90_CANDIDATES if c not in table]
    source = emit_sm90_module([(f"tuned_{i}", spec, cfg) for i, cfg in enumerate(configs)])
    binary = nvrtc.compile_cuda(source, arch="sm_90a")  # cold: about 15 s a configuration
    functions = sass_by_function(sass_of(binary.cubin))
    for i, label in enumerate(labels):
        ops = Counter(re.findall(r"\b(HGMMA|UTMALDG|STL|LDL)\b", functions[source.entries[f"tuned_{i}"].name]))
        assert ops["HGMMA"] >= 8 and ops["UTMALDG"] >= 2 and ops["STL"] == ops["LDL"] == 0, (label, ops)
    with pytest.raises(UnsupportedKernel, match="not a Hopper configuration built here"):
        choose_sm90_config(spec, "128x128x64_4x1x1_ws")


def test_split_k_and_stream_k_labels_pin_the_stream_k_scheduler_where_it_applies() -> None:
    """``_kN`` (split-K in N) and ``_streamk`` (CUTLASS's heuristic) on a persistent tile's
    label: one kernel type for both and every N (run-time values of Params), built only for
    a dense product whose static K has N K tiles, on the 128-row cooperative tiles, N one of
    2, 4, 8."""
    row = KernelSpec.dense(1, 4096, 4096, "float16", "bias")
    configs = [choose_sm90_config(row, f"128x128x64_1x1x1_cooperative_k{n}") for n in (2, 4, 8)]
    configs.append(choose_sm90_config(row, "128x128x64_1x1x1_cooperative_streamk"))
    assert [(c.decomposition, c.splits) for c in configs] == [("split_k", 2), ("split_k", 4), ("split_k", 8),
                                                             ("stream_k", 1)]
    assert all(c.stream_k_scheduler and c.persistent for c in configs)
    assert len({sm90_type_key(row, c) for c in configs}) == 1
    assert sm90_type_key(row, configs[0]) != sm90_type_key(row, choose_sm90_config(row, "128x128x64_1x1x1_cooperative"))
    assert configs[1].name.endswith("_cooperative_splitk4_bias") and configs[3].name.endswith("_cooperative_streamk_bias")
    for spec, label, why in (
            (row, "128x128x64_1x1x1_ws_k2", "Hopper split-K and stream-K are built for"),
            (row, "128x128x64_2x1x1_ws_streamk", "Hopper split-K and stream-K are built for"),
            (row, "128x128x64_1x1x1_cooperative_k3", "Hopper split-K and stream-K are built for"),
            (row, "128x128x64_1x1x1_cooperative_kk", "is not a Hopper kernel label"),
            (KernelSpec.dense(1, 4096, 128, "float16"), "128x128x64_1x1x1_cooperative_k4", "fewer than 4 K tiles"),
            (KernelSpec.batch_matmul(8, 1, 4096, 4096, "float16", "none"), "128x128x64_1x1x1_cooperative_streamk",
             "batch_matmul .* is not split on Hopper")):
        with pytest.raises(UnsupportedKernel, match=why):
            choose_sm90_config(spec, label)
    with pytest.raises(UnsupportedKernel, match="only on the persistent cooperative schedule"):
        Sm90Config(tile=(128, 128, 64), splits=2, decomposition="split_k")
    with pytest.raises(UnsupportedKernel, match="2 to 16 in the split_k decomposition, 1 otherwise"):
        Sm90Config(tile=(128, 128, 64), schedule=COOPERATIVE, splits=4, decomposition="stream_k")
