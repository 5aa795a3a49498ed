"""``nn.matmul_integer`` on CUTLASS's int8 tensor-core GEMM (issue 20), and NHWC
``nn.conv_integer`` on its int8 implicit-GEMM convolution: the Sm80 IMMA kernels (mma
16x8x32, i32 accumulation, 16-element accesses) in s8 x s8 and u8 x s8, compiled by NVRTC
for sm_80 and sm_90 with IMMA in their SASS; the pattern table's and the codegen's limits
(other zero points, alignments and layouts stay on the native kernel); and compiled models
whose simulated-device results equal the reference exactly.

One NVRTC program per arch holds every entry (module-scoped fixture, cached)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import partita
from partita.backends.builtin import check_matmul_integer
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError
from partita.lowering.cutlass import KernelSpec, UnsupportedKernel, choose_config, emit_module
from partita.runtime.reference import run

FORMS = [
    ("gemm_s8", KernelSpec.dense(None, 256, 512, "int8")),
    ("gemm_u8_s8_bias", KernelSpec.dense(None, 96, 64, "uint8", "bias", dtype_b="int8")),
    ("gemm_s8_big", KernelSpec.dense(4096, 1024, 1024, "int8", "bias")),
]
CONV_FORMS = [
    # a run-time batch; 3x3 over 32 channels (K = 288), padded, and a strided 1x1 (K = 64)
    ("conv_s8", KernelSpec.conv2d((None, 16, 16, 32), (64, 3, 3, 32), (1, 1), (1, 1, 1, 1), (1, 1), "int8")),
    ("conv_u8_s8_bias", KernelSpec.conv2d((None, 16, 16, 64), (32, 1, 1, 64), (2, 2), (0, 0, 0, 0), (1, 1),
                                          "uint8", "bias", dtype_b="int8")),
]


@pytest.fixture(scope="module", params=["sm_80", "sm_90"])
def int8_sass(request):
    """Per entry, the SASS of the entry and its runner, from one NVRTC program for the arch."""
    from support.sass import compiled_sass

    sm = int(request.param.removeprefix("sm_"))
    forms = FORMS + CONV_FORMS
    source = emit_module([(name, spec, choose_config(spec, sm)) for name, spec in forms])
    _, functions = compiled_sass(source.code, arch=request.param)
    return request.param, source, {
        name: functions.get(e.name, "") + functions.get(e.kernel_type + "_run", "")
        for name, e in ((name, source.entries[name]) for name, _ in forms)
    }


def test_every_int8_form_multiplies_on_imma(int8_sass) -> None:
    arch, source, bodies = int8_sass
    for name, _spec in FORMS:
        cfg = source.entries[name].config
        imma = re.findall(r"\bIMMA\.16832\S*", bodies[name])
        # 64x64 (or 64x32) warp tiles: 4 x 8 (4 x 4) m16n8k32 per K step of 32, two per K tile
        assert len(imma) >= 32, f"{arch} {name} ({cfg.name}): {len(imma)} IMMA"
        assert not re.search(r"\b(HMMA|FFMA)\b", bodies[name]), name
        assert "LDGSTS" in bodies[name], name  # cp.async multistage main loop
        assert not re.search(r"\b(STL|LDL)\b", bodies[name]), f"{name} spills"
    # u8 x s8 is its own IMMA form
    assert re.search(r"IMMA\.16832\.U8\.S8", bodies["gemm_u8_s8_bias"]), bodies["gemm_u8_s8_bias"][:2000]
    assert re.search(r"IMMA\.16832\.S8\.S8", bodies["gemm_s8"])


def test_int8_convolutions_multiply_on_imma(int8_sass) -> None:
    """The implicit-GEMM convolutions: IMMA (u8 x s8 its own form), a cp.async main loop,
    no float math, and no spills: the Params the runner builds on the device live in a
    528-byte stack frame (ptxas -v: 0 bytes of spill stores and loads), written
    once (the STL) and read where the optimized filter iterator indexes its increments (the
    LDL, as the f16 convolution's; a launch-parameter Params would be read from constant
    memory)."""
    arch, source, bodies = int8_sass
    for name, _spec in CONV_FORMS:
        cfg, body = source.entries[name].config, bodies[name]
        assert cfg.iterator_algorithm == "optimized" and (cfg.alignment_a, cfg.alignment_b) == (16, 16)
        imma = re.findall(r"\bIMMA\.16832\S*", body)
        assert len(imma) >= 32, f"{arch} {name} ({cfg.name}): {len(imma)} IMMA"
        assert not re.search(r"\b(HMMA|FFMA)\b", body), name
        assert "LDGSTS" in body, name
        assert len(re.findall(r"\bLDL\b", body)) <= 4, f"{name} reads local memory beyond its Params"
    assert re.search(r"IMMA\.16832\.U8\.S8", bodies["conv_u8_s8_bias"])
    assert re.search(r"IMMA\.16832\.S8\.S8", bodies["conv_s8"])


def test_int8_convolution_configuration_and_names() -> None:
    spec = CONV_FORMS[1][1]
    cfg = choose_config(spec, 80)
    assert cfg.name == "cutlass_tensorop_i16832fprop_optimized_u8_s8_128x64_64x3_nhwc_align16_bias"
    assert (cfg.instruction_shape, cfg.math, cfg.stages, cfg.alignment_c) == ((16, 8, 32), "imma", 3, 4)
    assert spec.role_dtype("x") == "uint8" and spec.role_dtype("w") == "int8" and spec.role_dtype("bias") == "int32"
    assert spec.input_names == ("x", "w", "za", "zb", "bias")
    code = emit_module([("e", spec, cfg)]).code
    assert "DefaultConv2dFprop<\n    uint8_t, cutlass::layout::TensorNHWC, int8_t" in code
    assert "cutlass::arch::OpMultiplyAddSaturate, cutlass::conv::IteratorAlgorithm::kOptimized" in code
    assert "LinearCombination<int32_t, 4, int32_t, int32_t>" in code and "Params(1, 1)" in code


def test_int8_configuration_and_names() -> None:
    spec = KernelSpec.dense(None, 96, 64, "uint8", "bias", dtype_b="int8")
    cfg = choose_config(spec, 80)
    assert cfg.instruction_shape == (16, 8, 32) and cfg.math == "imma" and cfg.stages == 3
    assert (cfg.alignment_a, cfg.alignment_b, cfg.alignment_c) == (16, 16, 4)
    assert cfg.name == "cutlass_tensorop_i16832gemm_u8_s8_128x64_64x3_tn_align16_bias"
    assert choose_config(FORMS[2][1], 90).threadblock == (128, 128, 64)
    assert spec.role_dtype("x") == "uint8" and spec.role_dtype("w") == "int8" and spec.role_dtype("bias") == "int32"
    code = emit_module([("e", spec, cfg)]).code
    assert "cutlass::arch::OpMultiplyAddSaturate" in code
    assert "LinearCombination<int32_t, 4, int32_t, int32_t>" in code


@pytest.mark.parametrize("build, message", [
    (lambda: KernelSpec.dense(None, 64, 40, "int8"), "K = 40 is not a multiple of 16"),
    (lambda: KernelSpec.dense(None, 66, 64, "int8"), "N = 66 is not a multiple of 4"),
    (lambda: KernelSpec.dense(None, 64, 64, "int8", "bias_relu"), "no bias_relu epilogue"),
    (lambda: KernelSpec.dense(None, 64, 64, "float16", dtype_b="int8"), "only int8 GEMMs mix"),
    (lambda: choose_config(KernelSpec.dense(None, 64, 64, "int8"), 75), "need sm >= 80"),
    (lambda: KernelSpec.conv2d((1, 8, 8, 24), (32, 3, 3, 24), dtype="int8"), "C = 24 is not a multiple of 16"),
    (lambda: KernelSpec.conv2d((1, 8, 8, 32), (30, 3, 3, 32), dtype="int8"), "N = 30 is not a multiple of 4"),
    (lambda: KernelSpec.conv2d((1, 8, 8, 32), (32, 3, 3, 32), dtype="int8", epilogue="bias_relu"),
     "no bias_relu epilogue"),
])
def test_int8_limits(build, message) -> None:
    with pytest.raises(UnsupportedKernel, match=message):
        build()


# -- through the partitioners ---------------------------------------------------------------


def _matmul_integer_model(k: int, n: int, a_type=np.uint8, za: int = 3, zb: int = 0) -> onnx.ModelProto:
    """MatMulInteger of a [batch, 5, k] input and a constant [k, n] s8 weight."""
    rng = np.random.default_rng(1)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    graph = helper.make_graph(
        [node], "mi", [helper.make_tensor_value_info("a", TensorProto.UINT8 if a_type == np.uint8 else TensorProto.INT8,
                                                     ["batch", 5, k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(za, a_type), "za"),
         numpy_helper.from_array(np.array(zb, np.int8), "zb")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])


@pytest.mark.parametrize("a_type, za", [(np.uint8, 128), (np.int8, 0)], ids=["u8_s8_zero_point_128", "s8_s8"])
def test_simulated_device_equals_the_reference(tmp_path, a_type, za) -> None:
    """A run-time batch (M = batch * 5) through the eager partitioner: the product is the
    CUTLASS int8 GEMM, and its i32 result on the simulated device equals the reference
    (integers: exactly), for two batch sizes."""
    m = _matmul_integer_model(64, 48, a_type, za)
    module = import_onnx(m)
    exe = partita.compile(m, ["cuda -arch=sm_80", "cutlass -sm=80", "llvm"], partitioner="eager",
                          cache_dir=tmp_path / "cache")
    rows = [row for row in exe.partitions if "nn.matmul_integer" in row.ops]
    assert [row.target for row in rows] == ["cutlass"]
    assert rows[0].composite == ("cutlass.matmul_integer_bias" if za else "cutlass.matmul_integer")
    _equals_the_reference(exe, module, a_type, 64)


def _equals_the_reference(exe, module, a_type, k: int) -> None:
    """``exe`` on [batch, 5, k] inputs of ``a_type`` equals the reference exactly, at two
    batch sizes."""
    info = np.iinfo(a_type)
    for batch in (1, 7):
        a = np.random.default_rng(batch).integers(info.min, info.max + 1, (batch, 5, k), dtype=a_type)
        (got,) = exe.run(a)
        (want,) = run(module, a)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)


def _conv_integer_model(channels: int, zw: int = 0) -> onnx.ModelProto:
    """ConvInteger of a [batch, channels, 9, 9] s8 input (no zero point) and a constant
    [16, channels, 3, 3] s8 weight, padded, stride 2."""
    w = np.random.default_rng(2).integers(-128, 128, (16, channels, 3, 3), dtype=np.int8)
    node = helper.make_node("ConvInteger", ["x", "w", "zx", "zw"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])
    graph = helper.make_graph(
        [node], "ci", [helper.make_tensor_value_info("x", TensorProto.INT8, ["batch", channels, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0, np.int8), "zx"),
         numpy_helper.from_array(np.array(zw, np.int8), "zw")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])


@pytest.mark.parametrize("channels, zw, target", [(32, 0, "cutlass"), (24, 0, "cuda"), (32, 3, "cuda")],
                         ids=["cutlass", "channels_not_16x", "weight_zero_point"])
def test_simulated_convolution_equals_the_reference(channels, zw, target) -> None:
    """An s8 ConvInteger with a run-time batch, converted to NHWC: with 32 channels and
    zero points of 0 it is the CUTLASS int8 convolution, whose i32 result on the simulated
    device equals the reference exactly (full-range operands, two batch sizes); 24
    channels (not 16-aligned) or a weight zero point stay on the native kernel."""
    m = _conv_integer_model(channels, zw)
    module = import_onnx(m)
    exe = partita.compile(m, ["cuda -arch=sm_80", "cutlass -sm=80", "llvm"], partitioner="eager")
    rows = [row for row in exe.partitions if "nn.conv_integer" in row.ops]
    assert [row.target for row in rows] == [target]
    if target == "cutlass":
        assert rows[0].composite == "cutlass.conv_integer"
    for batch in (1, 3):
        x = np.random.default_rng(batch).integers(-128, 128, (batch, channels, 9, 9), dtype=np.int8)
        (got,) = exe.run(x)
        (want,) = run(module, x)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("k, n, zb, why", [(40, 48, 0, "K"), (64, 50, 0, "N"), (64, 48, 2, "rhs zero point")])
def test_what_the_int8_gemm_cannot_take_stays_native(tmp_path, k, n, zb, why) -> None:
    m = _matmul_integer_model(k, n, zb=zb)
    exe = partita.compile(m, ["cuda -arch=sm_80", "cutlass -sm=80", "llvm"], partitioner="eager",
                          cache_dir=tmp_path / "cache")
    rows = [row for row in exe.partitions if "nn.matmul_integer" in row.ops]
    assert [row.target for row in rows] == ["cuda"], why


def test_collage_prices_int8_tensor_cores(tmp_path) -> None:
    """A 2048 x 1024 x 1024 u8 x s8 product: the roofline's int8 tensor-core peak makes the
    CUTLASS kernel far cheaper than the native SIMT loop, so Collage places it there."""
    from partita.collage.cost import RooflineEstimator

    estimator = RooflineEstimator(device="h100")
    assert estimator._rate({"tensor_cores": True}, _Node("ui8"), "gemm") == (estimator.dev["tensor_flops"]["i8"], True)
    m = _matmul_integer_model(1024, 1024)
    text = str(import_onnx(m)).replace("?x5x1024", "2048x5x1024").replace("tensor<?x", "tensor<2048x")
    exe = partita.compile(text, ["cuda -arch=sm_90", "cutlass", "llvm"], partitioner="collage",
                          cache_dir=tmp_path / "cache")
    rows = [row for row in exe.partitions if "nn.matmul_integer" in row.ops]
    assert [row.target for row in rows] == ["cutlass"] and rows[0].bound == "compute"


class _Node:
    """What ``RooflineEstimator._rate`` reads of a node."""

    def __init__(self, dtype: str):
        self.in_types = [type("T", (), {"dtype": dtype})()]
        self.out_type = self.in_types[0]


CODEGEN_NONZERO = """
func.func @main(%a: tensor<4x64xi8>, %w: tensor<32x64xi8>) -> tensor<4x32xi32> {
  %za = nn.constant dense<1> : tensor<i8>
  %zb = nn.constant dense<0> : tensor<i8>
  %0 = byoc.partition(%a, %w, %za, %zb) {byoc.compiler = "cutlass", byoc.global_symbol = "gemm_0"} ({
  ^bb0(%x: tensor<4x64xi8>, %y: tensor<32x64xi8>, %p: tensor<i8>, %q: tensor<i8>):
    %1 = nn.matmul_integer %x, %y, %p, %q {transpose_b = true} : (tensor<4x64xi8>, tensor<32x64xi8>, tensor<i8>, tensor<i8>) -> tensor<4x32xi32>
    byoc.yield %1 : tensor<4x32xi32>
  }) : (tensor<4x64xi8>, tensor<32x64xi8>, tensor<i8>, tensor<i8>) -> tensor<4x32xi32>
  func.return %0 : tensor<4x32xi32>
}
"""


CODEGEN_NONZERO_CONV = """
func.func @main(%x: tensor<1x4x4x16xi8>, %w: tensor<8x1x1x16xi8>) -> tensor<1x4x4x8xi32> {
  %zx = nn.constant dense<0> : tensor<i8>
  %zw = nn.constant dense<[0, 0, 0, 0, 0, 0, 0, 1]> : tensor<8xi8>
  %0 = byoc.partition(%x, %w, %zx, %zw) {byoc.compiler = "cutlass", byoc.global_symbol = "conv_0"} ({
  ^bb0(%a: tensor<1x4x4x16xi8>, %b: tensor<8x1x1x16xi8>, %p: tensor<i8>, %q: tensor<8xi8>):
    %1 = nn.conv_integer %a, %b, %p, %q {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilation = array<i64: 1, 1>, data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x4x4x16xi8>, tensor<8x1x1x16xi8>, tensor<i8>, tensor<8xi8>) -> tensor<1x4x4x8xi32>
    byoc.yield %1 : tensor<1x4x4x8xi32>
  }) : (tensor<1x4x4x16xi8>, tensor<8x1x1x16xi8>, tensor<i8>, tensor<8xi8>) -> tensor<1x4x4x8xi32>
  func.return %0 : tensor<1x4x4x8xi32>
}
"""


@pytest.mark.parametrize("text, what", [(CODEGEN_NONZERO, "GEMM"), (CODEGEN_NONZERO_CONV, "convolution")],
                         ids=["gemm", "conv"])
def test_codegen_refuses_zero_points_it_cannot_prove_zero(text, what) -> None:
    """The kernel takes the zero points as arguments it never reads: the codegen checks
    every call passes constant zeros (a hand-written partition with za = 1, or one weight
    zero point of 1, is refused)."""
    from partita.dialects import make_context
    from partita.ir import parse_module
    from partita.lowering.cutlass.codegen import cutlass_functions, partition_kernel
    from partita.lowering.functions import outline_compiler_partitions

    module = parse_module(text, make_context(), "nonzero")
    outline_compiler_partitions(module, "cutlass")
    (function,) = cutlass_functions(module)
    with pytest.raises(PartitaError, match=f"int8 CUTLASS {what} takes zero points that are constant zeros"):
        partition_kernel(function)
    assert check_matmul_integer is not None  # the pattern predicate the partitioners ask


# -- Hopper (sm_90a): CUTLASS 3 TMA + wgmma on 8-bit integers ---------------------------------


def test_hopper_int8_gemms_are_igmma_without_spills() -> None:
    """On sm_90a an int8 dense is a CUTLASS 3 kernel: IGMMA on s8 (or u8 x s8) fed by TMA,
    K tiles of 128 bytes (the f16 table's tiles), i32 accumulation and an i32 epilogue
    adding the bias row exactly (``PartitaAddSourceI32``); nothing spilled."""
    from collections import Counter

    from support.sass import sass_of

    from partita.lowering import nvrtc
    from partita.lowering.cubin import sass_by_function
    from partita.lowering.cutlass.sm90 import choose_sm90_config, emit_sm90_units, read_layout, why_not_sm90

    specs = [("s8_bias", KernelSpec.dense(None, 768, 768, "int8", "bias")),
             ("u8_s8_big", KernelSpec.dense(4096, 1024, 512, "uint8", dtype_b="int8"))]
    assert all(why_not_sm90(spec) is None for _, spec in specs)
    configs = [choose_sm90_config(spec) for _, spec in specs]
    assert [c.tile for c in configs] == [(128, 128, 128), (128, 256, 128)] and configs[1].persistent
    with pytest.raises(UnsupportedKernel, match="int8 Hopper GEMMs take their table's only"):
        choose_sm90_config(specs[0][1], "128x128x64_1x1x1_ws")
    # one unit per kernel type, as cutlass-codegen compiles them (the s8 one is then the
    # model's below, a cache hit)
    units = emit_sm90_units([(name, spec, cfg) for (name, spec), cfg in zip(specs, configs, strict=True)])
    binaries = nvrtc.compile_many(units, jobs=2, arch="sm_90a")  # cold: about half a minute
    for (name, _), cfg, want, source, binary in zip(specs, configs, ("S8.S8", "U8.S8"), units, binaries, strict=True):
        entry = source.entries[name]
        functions = sass_by_function(sass_of(binary.cubin))
        assert entry.config.name.startswith(f"cutlass3x_sm90_tensorop_gemm_{want[:2].lower()}_s8_s32_")
        ops = Counter(re.findall(r"\b(IGMMA\.64x\d+x32\.\w+\.\w+|UTMALDG|STL|LDL|IMMA|HGMMA)\b", functions[entry.name]))
        assert ops[f"IGMMA.64x{cfg.tile[1]}x32.{want}"] >= 4 and ops["UTMALDG"] >= 2, (name, ops)
        assert ops["STL"] == ops["LDL"] == ops["IMMA"] == ops["HGMMA"] == 0, (name, ops)
        assert read_layout(binary.cubin, entry.kernel_type)["tx_bytes_value"] == (cfg.tile[0] + cfg.tile[1]) * 128


@pytest.mark.parametrize("a_type, za", [(np.uint8, 128), (np.int8, 0)], ids=["u8_s8_zero_point_128", "s8_s8"])
def test_hopper_int8_gemm_equals_the_reference(tmp_path, a_type, za) -> None:
    """MatMulInteger compiled for sm_90a: the Hopper int8 kernel (a nonzero activation zero
    point folded into its bias row), launched on a recording H100 with UINT8 descriptors of
    128-byte K tiles, and exactly the reference on the simulated device (its zero points,
    which its Params have no room for, read by the emulation where they lie)."""
    from support.recording_driver import recorded_run

    from partita.dialects import byoc

    m = _matmul_integer_model(256, 48, a_type, za)
    exe = partita.compile(m, ["cuda -arch=sm_90a", "cutlass", "llvm"], partitioner="eager",
                          cache_dir=tmp_path / "cache")
    (binary,) = [op for op in exe.module.ops if isinstance(op, byoc.BinaryOp) and "cutlass" in op.sym_name.data]
    assert "_tma" in binary.sym_name.data
    (record,) = binary.attributes["kernels"].data.values()
    kind = "u8_s8" if a_type == np.uint8 else "s8_s8"
    assert record.data["kernel"].data == \
        f"cutlass3x_sm90_tensorop_gemm_{kind}_s32_128x128x128_1x1x1_tn_warpspecialized{'_bias' if za else ''}"
    module = import_onnx(m)
    info = np.iinfo(a_type)
    a = np.random.default_rng(3).integers(info.min, info.max + 1, (7, 5, 256), dtype=a_type)
    drv, _, (got,) = recorded_run(exe.module, "main", [a])
    maps = {m["dims"]: m for m in drv.tensor_maps}
    assert maps[(256, 35, 1)]["dtype"] == maps[(256, 48, 1)]["dtype"] == 0  # UINT8
    assert maps[(256, 35, 1)]["box"] == (128, 128, 1) and drv.calls["cuLaunchKernelEx"] == 1
    _equals_the_reference(exe, module, a_type, 256)
