"""Configuration choice and C++ emission for CUTLASS partitions (no NVRTC)."""

import re

import pytest

from partita.lowering.cutlass import (
    KernelSpec,
    UnsupportedKernel,
    choose_config,
    emit_module,
)


def test_alignment_rules_dense_f16():
    assert choose_config(KernelSpec.dense(256, 512, 768), 80).alignment_a == 8
    cfg = choose_config(KernelSpec.dense(256, 510, 772), 80)  # K % 4 == 0, N % 2 == 0
    assert (cfg.alignment_a, cfg.alignment_b, cfg.alignment_c) == (4, 4, 2)
    assert cfg.opcode_class == "tensorop"
    assert cfg.threadblock[:2] == (64, 64)  # low alignment -> small tile
    cfg = choose_config(KernelSpec.dense(256, 512, 770), 80)  # K % 2 == 0 only
    assert cfg.alignment_a == 2 and cfg.opcode_class == "tensorop"
    # odd K: no cp.async for one f16 element -> tensor cores fed by the 2-stage
    # register-staged pipeline, alignment 1
    cfg = choose_config(KernelSpec.dense(256, 512, 771), 80)
    assert (cfg.opcode_class, cfg.alignment_a, cfg.stages, cfg.math) == ("tensorop", 1, 2, "f16")
    # before sm_80 it is still the SIMT kernel
    cfg = choose_config(KernelSpec.dense(256, 512, 771), 75)
    assert cfg.opcode_class == "simt" and cfg.alignment_a == 1 and cfg.arch_tag == 50


def test_alignment_rules_f32_and_conv():
    cfg = choose_config(KernelSpec.dense(256, 512, 768, "float32"), 80)
    assert cfg.opcode_class == "simt" and cfg.instruction_shape == (1, 1, 1)
    assert cfg.alignment_a == 1 and cfg.stages >= 3
    conv = KernelSpec.conv2d((1, 32, 32, 12), (20, 3, 3, 12), padding=(1, 1))
    cfg = choose_config(conv, 80)
    assert (cfg.alignment_a, cfg.alignment_b, cfg.alignment_c) == (4, 4, 4)
    conv = KernelSpec.conv2d((1, 32, 32, 64), (64, 3, 3, 64), padding=(1, 1))
    assert choose_config(conv, 80).alignment_a == 8


def test_names_follow_cutlass_convention():
    big = choose_config(KernelSpec.dense(4096, 4096, 4096), 80)
    assert big.name == "cutlass_tensorop_f16_s16816gemm_f16_128x128_32x3_tn_align8"
    small = choose_config(KernelSpec.dense(64, 64, 64, epilogue="bias_relu"), 80)
    assert small.name == "cutlass_tensorop_f16_s16816gemm_f16_64x64_32x3_tn_align8_bias_relu"
    s = choose_config(KernelSpec.dense(1024, 1024, 1024, "float32"), 80)
    assert re.fullmatch(r"cutlass_simt_sgemm_128x128_8x\d_tn_align1", s.name)
    c = choose_config(KernelSpec.conv2d((1, 56, 56, 64), (64, 3, 3, 64), padding=1,
                                        epilogue="bias_relu"), 80)
    assert c.name.startswith("cutlass_tensorop_f16_s16816fprop_optimized_f16_")
    assert c.name.endswith("_nhwc_align8_bias_relu")
    b = choose_config(KernelSpec.batch_matmul(8, 128, 128, 64), 80)
    assert "gemm_batched" in b.name


def test_split_k_decision():
    # K-heavy, few output tiles -> serial split-k
    cfg = choose_config(KernelSpec.dense(64, 64, 8192), 80)
    assert cfg.split_k > 1 and cfg.name.endswith("_splitk")
    # big output -> none; dynamic M -> none; batch_matmul -> none
    assert choose_config(KernelSpec.dense(2048, 2048, 8192), 80).split_k == 1
    assert choose_config(KernelSpec.dense(None, 64, 8192), 80).split_k == 1
    assert choose_config(KernelSpec.dense(64, 64, 128), 80).split_k == 1
    assert choose_config(KernelSpec.batch_matmul(4, 64, 64, 8192), 80).split_k == 1
    spec = KernelSpec.dense(64, 64, 8192)
    src = emit_module([("f", spec, choose_config(spec, 80))])
    e = src.entries["f"]
    assert [p.name for p in e.params] == ["x", "w", "out", "workspace", "M", "N", "K"]
    assert e.grid() == (1, 1, cfg.split_k)
    assert e.workspace_bytes() == 4
    assert ", true, cutlass::arch::OpMultiplyAdd" in src.code


def test_every_dim_is_an_entry_argument():
    spec = KernelSpec.dense(None, 768, 3072, epilogue="bias_gelu")
    src = emit_module([("tvmgen_default_cutlass_main_0", spec, choose_config(spec, 80))])
    e = src.entries["tvmgen_default_cutlass_main_0"]
    assert [(p.name, p.kind, p.size) for p in e.params] == [
        ("x", "ptr", 8), ("w", "ptr", 8), ("bias", "ptr", 8), ("out", "ptr", 8),
        ("M", "int", 4), ("N", "int", 4), ("K", "int", 4)]
    # the entry takes every dim and hands them to its runner: no shape in the code
    assert "int M, int N, int K)" in src.code and "problem(M, N, K)" in src.code
    assert "_run(x, w, bias, out, M, N, K);" in src.code and "768" not in src.code
    assert e.dynamic_dims == ("M",)
    with pytest.raises(ValueError, match="missing run-time dims"):
        e.grid()
    with pytest.raises(ValueError, match="missing run-time dims"):
        e.args({"x": 1, "w": 2, "bias": 3, "out": 4})
    assert e.output_shape({"M": 5}) == (5, 768)
    # static: the record's sizes are the arguments
    s2 = KernelSpec.dense(128, 768, 3072)
    src2 = emit_module([("k", s2, choose_config(s2, 80))])
    e2 = src2.entries["k"]
    assert e2.dynamic_dims == () and [p.kind for p in e2.params] == ["ptr"] * 4 + ["int"] * 3
    assert e2.args({"x": 1, "w": 2, "out": 3, "workspace": 4})[2:] == [
        ("ptr", 3), ("ptr", 4), ("int", 128), ("int", 768), ("int", 3072)]  # split-k
    assert "_run(x, w, out, workspace, M, N, K);" in src2.code
    bmm = KernelSpec.batch_matmul(None, None, 64, 64)
    conv = KernelSpec.conv2d((None, 8, 8, 16), (16, 3, 3, 16), padding=1)
    src3 = emit_module([("b", bmm, choose_config(bmm, 80)), ("c", conv, choose_config(conv, 80))])
    assert [p.name for p in src3.entries["b"].params if p.kind == "int"] == ["batch", "M", "N", "K"]
    assert src3.entries["b"].dynamic_dims == ("batch", "M")
    assert [p.name for p in src3.entries["c"].params if p.kind == "int"] == [
        "N", "H", "W", "C", "K", "R", "S", "P", "Q", "pad_h", "pad_w", "stride_h", "stride_w",
        "dilation_h", "dilation_w"]
    assert [v for _, v in src3.entries["c"].args({"x": 1, "w": 2, "out": 3}, {"N": 4})[3:]] == [
        4, 8, 8, 16, 16, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1]


def test_launch_geometry():
    spec = KernelSpec.dense(None, 1000, 256)
    cfg = choose_config(spec, 80)
    e = emit_module([("g", spec, cfg)]).entries["g"]
    tm, tn = cfg.threadblock[:2]
    M = 300
    tiles_m, tiles_n = -(-M // tm), -(-1000 // tn)
    tile = 8 if tiles_n >= 6 else 4 if tiles_n >= 3 else 2 if tiles_n >= 2 else 1
    assert e.grid({"M": M}) == (tiles_m * tile, -(-tiles_n // tile), 1)
    assert e.block == (cfg.threads, 1, 1) == (128, 1, 1)
    b = KernelSpec.batch_matmul(70000, 64, 64, 64)
    eb = emit_module([("b", b, choose_config(b, 80))]).entries["b"]
    assert eb.grid() == (1, 1, 65535)  # the kernel loops over the rest
    c = KernelSpec.conv2d((2, 16, 16, 32), (64, 3, 3, 32), strides=2, padding=(1, 1, 0, 0))
    ec = emit_module([("c", c, choose_config(c, 80))]).entries["c"]
    assert c.output_hw == (8, 8)
    assert ec.output_shape() == (2, 8, 8, 64)
    assert ec.tiled_shape()[:2] == (-(-2 * 8 * 8 // ec.config.threadblock[0]),
                                    -(-64 // ec.config.threadblock[1]))


def test_a_convolution_of_run_time_height_and_width():
    """An image of any size (a detector exported with a dynamic height and width): N, H and
    W are run-time dims, P and Q follow them, and the launch's grid and arguments are
    computed from them when a shape is bound; the kernel type is the static one's."""
    conv = KernelSpec.conv2d((None, None, None, 32), (64, 3, 3, 32), strides=2, padding=(1, 1, 0, 0))
    static = KernelSpec.conv2d((2, 17, 12, 32), (64, 3, 3, 32), strides=2, padding=(1, 1, 0, 0))
    assert conv.dynamic_dims == ("N", "H", "W", "P", "Q") and conv.output_hw == (None, None)
    cfg = choose_config(conv, 80)
    e = emit_module([("c", conv, cfg)]).entries["c"]
    es = emit_module([("s", static, cfg)]).entries["s"]
    assert e.name == es.name  # the entry of a configuration serves every size
    dims = {"N": 2, "H": 17, "W": 12, "P": 8, "Q": 6}
    assert static.output_hw == (8, 6) == conv.conv_output(dims)
    assert e.args({"x": 1, "w": 2, "out": 3}, dims) == es.args({"x": 1, "w": 2, "out": 3})
    assert e.grid(dims) == es.grid() and e.output_shape(dims) == es.output_shape() == (2, 8, 6, 64)
    with pytest.raises(ValueError, match=r"missing run-time dims \['H', 'W', 'P', 'Q'\]"):
        e.grid({"N": 2})
    with pytest.raises(UnsupportedKernel, match="static input channels"):
        KernelSpec.conv2d((None, None, None, None), (64, 3, 3, 32))


def test_dedup_identical_kernels():
    a = KernelSpec.dense(None, 768, 768, epilogue="bias")
    b = KernelSpec.dense(None, 768, 3072, epilogue="bias")   # same kernel type, other sizes
    c = KernelSpec.dense(None, 768, 768, epilogue="bias_gelu")
    ks = [(f"tvmgen_default_cutlass_main_{i}", s, choose_config(s, 80))
          for i, s in enumerate([a, b, a, c])]
    src = emit_module(ks)
    assert len(re.findall(r"^using \w+ = ", src.code, re.MULTILINE)) == 2
    types = [src.entries[n].kernel_type for n, _, _ in ks]
    assert types[0] == types[1] == types[2] != types[3]
    names = [src.entries[n].name for n, _, _ in ks]
    assert names[0] == names[1] == names[2] != names[3]
    assert src.code.count('extern "C" __global__') == 2  # one entry per kernel type
    assert not any(n in src.code for n, _, _ in ks)  # partition names stay out of the code
    # line ranges: each partition's lines hold its entry's definition, and a line names
    # every partition of that entry
    lines = src.code.splitlines()
    for label, *_ in ks:
        lo, hi = src.entries[label].lines
        assert any(src.entries[label].name + "(" in ln for ln in lines[lo - 1:hi])
        assert label in src.entries_at_line(lo)
    lo, _ = src.entries["tvmgen_default_cutlass_main_0"].lines
    assert src.entries_at_line(lo) == [n for n, _, _ in ks[:3]]


def test_rejects_bad_specs():
    with pytest.raises(UnsupportedKernel):
        KernelSpec.dense(1, 2, 3, dtype="int8")
    with pytest.raises(UnsupportedKernel):
        KernelSpec.conv2d((1, 8, 8, 4), (4, 3, 3, 4), epilogue="bias_gelu")
    with pytest.raises(UnsupportedKernel):
        KernelSpec.conv2d((1, 8, 8, 4), (4, 3, 3, 8))
    with pytest.raises(ValueError, match="duplicate"):
        spec = KernelSpec.dense(1, 8, 8)
        emit_module([("k", spec, choose_config(spec, 80)), ("k", spec, choose_config(spec, 80))])


def test_residual_epilogue_reads_the_residual_as_source_c():
    """``out = x @ w^T + r``: the residual is C with the output's row stride (not a bias
    row's 0) and beta 1; its kernel type differs from the plain dense's."""
    spec = KernelSpec.dense(None, 256, 128, epilogue="residual")
    assert (spec.input_names, spec.source, spec.has_bias) == (("x", "w", "residual"), "residual", False)
    cfg = choose_config(spec, 80)
    assert cfg.name.endswith("_residual")
    code = emit_module([("k", spec, cfg)]).code
    assert "cutlass::half_t* C = const_cast<cutlass::half_t*>(residual);" in code
    assert "epi(1.0f, 1.0f)" in code and "{C, N}, {out, N}" in code
    plain = emit_module([("k", KernelSpec.dense(None, 256, 128), choose_config(KernelSpec.dense(None, 256, 128), 80))]).code
    assert "epi(1.0f, 0.0f)" in plain and "{C, N}" in plain and "(out);" in plain
    with pytest.raises(UnsupportedKernel, match="residual"):
        KernelSpec.batch_matmul(2, 64, 64, 64, epilogue="residual")


def test_bias_residual_epilogue_reads_the_bias_as_its_vector_and_the_residual_as_c():
    """``out = (x @ w^T + bias) + r``: CUTLASS's broadcast epilogue (GemmWithFusedEpilogue
    over the same main loop as the other dense kernels), C the residual with the output's
    row stride, the bias its broadcast vector (``ldr`` 0), no serial split-k (its later K
    slices would add the bias again); on sm_90a it is a Hopper kernel (the tensor-broadcast
    epilogue, ``tests/lowering/test_cutlass_sm90.py``)."""
    from partita.lowering.cutlass.sm90 import why_not_sm90

    spec = KernelSpec.dense(None, 768, 768, epilogue="bias_residual")
    assert (spec.input_names, spec.source, spec.has_bias, spec.bias_is_source) == \
        (("x", "w", "bias", "residual"), "residual", True, False)
    cfg = choose_config(spec, 80)
    assert cfg.name.endswith("_bias_residual") and cfg.split_k == 1
    assert choose_config(KernelSpec.dense(64, 64, 8192, epilogue="bias_residual"), 80, split_k_slices=4).split_k == 1
    assert choose_config(KernelSpec.dense(64, 64, 8192, epilogue="bias"), 80).split_k > 1
    code = emit_module([("k", spec, cfg)]).code
    assert "LinearCombinationResidualBlock<cutlass::half_t, float, float, cutlass::half_t, 8, " \
           "cutlass::epilogue::thread::Identity, cutlass::plus, cutlass::epilogue::thread::Identity>" in code
    assert "cutlass::gemm::kernel::GemmWithFusedEpilogue<" in code and "DefaultEpilogueWithBroadcastTensorOp<" in code
    assert "cutlass::half_t* C = const_cast<cutlass::half_t*>(residual);" in code
    # (mode, problem, batch count, epilogue, A, B, C, D, vector, tensor, 6 batch strides,
    # lda, ldb, ldc, ldd, ldr, ldt)
    assert ("A, B, C, out, const_cast<cutlass::half_t*>(bias), nullptr, 0, 0, 0, 0, 0, 0, K, K, N, N, 0, 0);"
            in code)
    assert "#include <cutlass/epilogue/thread/linear_combination_residual_block.h>" in code
    plain = emit_module([("k", KernelSpec.dense(None, 768, 768, epilogue="bias"),
                          choose_config(KernelSpec.dense(None, 768, 768, epilogue="bias"), 80))]).code
    assert "residual_block" not in plain and "{C, 0}" in plain  # only these units parse the broadcast headers
    simt = choose_config(KernelSpec.dense(None, 768, 768, "float32", "bias_residual"), 80, f32_math="ffma")
    assert simt.opcode_class == "simt"
    assert "DefaultEpilogueWithBroadcastSimt<" in emit_module(
        [("k", KernelSpec.dense(None, 768, 768, "float32", "bias_residual"), simt)]).code
    assert why_not_sm90(spec) is None
    with pytest.raises(UnsupportedKernel, match="bias_residual"):
        KernelSpec.batch_matmul(2, 64, 64, 64, epilogue="bias_residual")


def test_conv_bias_residual_relu_is_the_broadcast_convolution():
    """``relu((conv(x, w) + bias) + r)`` (a ResNet block's second convolution): CUTLASS's
    ``DefaultConv2dFpropWithBroadcast``, C the shortcut in the output's NHWC layout, the
    bias the epilogue's vector (``ldr`` 0), ReLU after the sum."""
    spec = KernelSpec.conv2d((None, 8, 8, 16), (16, 3, 3, 16), padding=1, epilogue="bias_residual_relu")
    assert spec.input_names == ("x", "w", "bias", "residual") and spec.broadcast_epilogue
    cfg = choose_config(spec, 80)
    assert cfg.name.endswith("_bias_residual_relu")
    code = emit_module([("k", spec, cfg)]).code
    assert "cutlass::conv::kernel::DefaultConv2dFpropWithBroadcast<" in code
    assert "cutlass::plus, cutlass::epilogue::thread::ReLu>" in code
    assert ("{const_cast<cutlass::half_t*>(residual), cutlass::layout::TensorNHWC::packed({N, P, Q, K})}" in code)
    assert "cutlass::conv::SplitKMode::kSerial, const_cast<cutlass::half_t*>(bias), nullptr, 0, 0);" in code
    plain = KernelSpec.conv2d((None, 8, 8, 16), (16, 3, 3, 16), padding=1, epilogue="bias_residual")
    assert "cutlass::plus, cutlass::epilogue::thread::Identity>" in emit_module([("k", plain, choose_config(plain, 80))]).code
    # a pointwise convolution's GEMM view (sm_90a's hopper_spec) is a dense of this
    # epilogue, which the Sm80 dense kernels build alike
    dense = KernelSpec.dense(None, 64, 64, epilogue="bias_residual_relu")
    assert "cutlass::plus, cutlass::epilogue::thread::ReLu>" in emit_module([("d", dense, choose_config(dense, 80))]).code
    # at bind, the shortcut must be the output's very shape
    import numpy as np

    from partita.ir import PartitaError
    from partita.runtime.extern import runtime_dims

    x = np.zeros((3, 8, 8, 16), np.float16)
    assert runtime_dims(spec, {"x": x, "residual": np.zeros((3, 8, 8, 16), np.float16)}) == {"N": 3}
    for shape in ((1, 8, 8, 16), (3, 8, 8, 1), (3, 16, 8, 8)):  # broadcast batch, channels, NCHW
        with pytest.raises(PartitaError, match="residual"):
            runtime_dims(spec, {"x": x, "residual": np.zeros(shape, np.float16)})


def test_a_residual_of_another_shape_is_refused_at_bind():
    from partita.lowering.cutlass.kernels import problem_dims

    spec = KernelSpec.dense(None, 32, 64, epilogue="residual")
    assert problem_dims(spec, {"x": (2, 5, 64), "residual": (2, 5, 32)})["M"] == 10
    for r in ((1, 32), (10, 1), (2, 5, 16)):  # broadcast rows, broadcast columns, too few
        with pytest.raises(UnsupportedKernel, match="residual"):
            problem_dims(spec, {"x": (2, 5, 64), "residual": r})
