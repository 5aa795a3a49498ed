"""Weight-only 4-bit GEMMs (issue 24): a block-quantized INT4 / UINT4 weight dequantized into
a MatMul (``x @ DequantizeLinear(wq)``, what block-quantized LLM exports write) imports as
``nn.matmul_nbits``, its weight packed two codes a byte (a quarter of f16's bytes) on the
device; so does onnxruntime's MatMulNBits contrib op (what its weight-only quantizer
writes). Against ``onnx.reference`` and onnxruntime, the native kernels built for the host
against their reference on every byte value, and compiled end to end on the simulated
device."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import build_for_host, fuse, fused_functions, host_ops, launch_beside_reference
from xdsl.dialects.builtin import ModuleOp, StringAttr

import partita
from partita.dialects import nn
from partita.frontends.onnx import import_onnx
from partita.ir.diagnostics import PartitaError
from partita.lowering.cuda.rules import WINDOW
from partita.lowering.cuda.schedules import GEMV_ROWS
from partita.runtime.cuda import cuda_status
from partita.runtime.reference import run

_FLOAT = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def nbits_model(k: int, n: int, block: int, *, signed: bool = True, zero_points: bool = True,
                dtype=np.float32, rows: tuple[int, ...] = (2, 5), seed: int = 0):
    """``y = x @ DequantizeLinear(wq, s, z)``: ``wq`` a ``[K, N]`` INT4 (or UINT4) initializer
    quantized in blocks of ``block`` along K, the scales (and zero points) one per block and
    column."""
    rng = np.random.default_rng(seed)
    lo, hi, t = (-8, 8, ml_dtypes.int4) if signed else (0, 16, ml_dtypes.uint4)
    wq = rng.integers(lo, hi, (k, n)).astype(t)
    scale = (rng.random((k // block, n)) * 0.1 + 0.01).astype(dtype)
    inits = [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(scale, "s")]
    inputs = ["wq", "s"]
    if zero_points:
        inits.append(numpy_helper.from_array(rng.integers(lo, hi, (k // block, n)).astype(t), "z"))
        inputs.append("z")
    nodes = [helper.make_node("DequantizeLinear", inputs, ["w"], axis=0, block_size=block),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "nbits", [helper.make_tensor_value_info("x", _FLOAT[dtype], [*rows, k])],
                              [helper.make_tensor_value_info("y", _FLOAT[dtype], [*rows, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return model, rng.standard_normal((*(r if isinstance(r, int) else 1 for r in rows), k)).astype(dtype)


def matmul_nbits_model(n: int, k: int, dtype, rows: int | str, rng: np.random.Generator,
                       block: int = 32) -> onnx.ModelProto:
    """onnxruntime's MatMulNBits ``[rows, K] @ dequantize(B)ᵀ`` with a random packed weight
    ``B [N, K / block, block / 2]`` and scales of ``dtype`` (no zero points: the middle code)."""
    b = rng.integers(0, 256, (n, k // block, block // 2)).astype(np.uint8)
    s = (rng.random(n * k // block) * 0.1 + 0.01).astype(dtype)
    node = helper.make_node("MatMulNBits", ["x", "b", "s"], ["y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=block)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", _FLOAT[dtype], [rows, k])],
                              [helper.make_tensor_value_info("y", _FLOAT[dtype], [rows, n])],
                              [numpy_helper.from_array(b, "b"), numpy_helper.from_array(s, "s")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("signed, zero_points, block", [(True, True, 32), (False, True, 16), (True, False, 128),
                                                        (False, False, 64)],
                         ids=["int4-zp-32", "uint4-zp-16", "int4-128", "uint4-64"])
def test_a_block_quantized_4_bit_matmul_imports_packed(signed, zero_points, block):
    model, x = nbits_model(256, 48, block, signed=signed, zero_points=zero_points)
    module = import_onnx(model)
    (gemm,) = [op for op in module.walk() if isinstance(op, nn.MatmulNBitsOp | nn.DenseOp | nn.MatmulOp)]
    assert isinstance(gemm, nn.MatmulNBitsOp) and gemm.block_size == block
    assert gemm.weight.type.get_shape() == (48, 128) and str(gemm.weight.type.element_type) == "ui8"
    # no float weight left anywhere: the largest constant is the packed one
    sizes = [op.to_numpy().nbytes for op in module.walk() if isinstance(op, nn.ConstantOp)]
    assert max(sizes) == 48 * 128
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = partita.compile(model).run(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_half_precision_scales_keep_the_half_input():
    model, x = nbits_model(128, 32, 32, dtype=np.float16)
    (gemm,) = [op for op in import_onnx(model).walk() if isinstance(op, nn.MatmulNBitsOp)]
    assert str(gemm.scales.type.element_type) == "f16" and str(gemm.result.type.element_type) == "f16"
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = partita.compile(model).run(x)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_blocks_that_do_not_divide_k_stay_the_folded_float_weight():
    """K = 80 with blocks of 32 (a partial last block): no packed form, the float product of
    the folded weight, still equal to the reference."""
    rng = np.random.default_rng(1)
    wq = rng.integers(-8, 8, (80, 16)).astype(ml_dtypes.int4)
    scale = (rng.random((3, 16)) * 0.1 + 0.01).astype(np.float32)
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s"], ["w"], axis=0, block_size=32),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 80])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
                              [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(scale, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    assert not [op for op in import_onnx(model).walk() if isinstance(op, nn.MatmulNBitsOp)]
    x = rng.standard_normal((4, 80)).astype(np.float32)
    np.testing.assert_allclose(partita.compile(model).run(x)[0], ReferenceEvaluator(model).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)


NBITS = """
func.func @nb_T(%x: tensor<?x3x2048xT>, %w: tensor<24x1024xui8>, %s: tensor<24x64xT>, %z: tensor<24x64xui8>) -> tensor<?x3x24xT> {
  %0 = nn.matmul_nbits %x, %w, %s, %z {block_size = 32 : i64} : (tensor<?x3x2048xT>, tensor<24x1024xui8>, tensor<24x64xT>, tensor<24x64xui8>) -> tensor<?x3x24xT>
  func.return %0 : tensor<?x3x24xT>
}
func.func @nbnarrow_T(%x: tensor<4x528xT>, %w: tensor<16x264xui8>, %s: tensor<16x33xT>, %z: tensor<16x33xui8>) -> tensor<4x16xT> {
  %0 = nn.matmul_nbits %x, %w, %s, %z {block_size = 16 : i64} : (tensor<4x528xT>, tensor<16x264xui8>, tensor<16x33xT>, tensor<16x33xui8>) -> tensor<4x16xT>
  func.return %0 : tensor<4x16xT>
}
func.func @nbrelu_T(%x: tensor<?x3x2048xT>, %w: tensor<24x1024xui8>, %s: tensor<24x64xT>, %z: tensor<24x64xui8>) -> tensor<?x3x24xT> {
  %0 = nn.matmul_nbits %x, %w, %s, %z {block_size = 32 : i64} : (tensor<?x3x2048xT>, tensor<24x1024xui8>, tensor<24x64xT>, tensor<24x64xui8>) -> tensor<?x3x24xT>
  %1 = nn.relu %0 : (tensor<?x3x24xT>) -> tensor<?x3x24xT>
  func.return %1 : tensor<?x3x24xT>
}
"""
_NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _every_byte_arguments(function, t, rng: np.random.Generator, rows: int) -> list[np.ndarray]:
    """Arguments of a fused ``nn.matmul_nbits`` function: its ``?`` dim ``rows``, the packed
    weight taking every byte value 0..255 (both nibbles of each), the zero points every code."""
    x, w, s, _, *rest = (tuple(v.type.get_shape()) for v in function.args)
    packed = (np.arange(np.prod(w)) % 256).astype(np.uint8).reshape(w)
    zeros = (np.arange(np.prod(s)) % 16).astype(np.uint8).reshape(s)
    return [rng.standard_normal(tuple(rows if d < 0 else d for d in x)).astype(t), packed,
            (rng.random(s) * 0.1 + 0.01).astype(t), zeros, *(rng.standard_normal(r).astype(t) for r in rest)]


def _assert_close(out, expected, t, name):
    tol = 1e-5 if t is np.float32 else 2e-2
    np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64), rtol=tol,
                               atol=tol * np.abs(expected.astype(np.float64)).max(), err_msg=name)


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
@pytest.mark.parametrize("schedule", ["warp", "per-element"])
def test_the_native_kernels_unpack_every_byte(tmp_path: Path, schedule: str, monkeypatch):
    """The native kernels built for the host against the reference, for f32, f16 and bf16
    and at most ``GEMV_ROWS`` rows: the warp-per-output GEMV schedule (128-bit loads of 32
    codes, or 32-bit ones of 8 where K is not a multiple of 32; with a ReLU epilogue too)
    and the per-element loop."""
    if schedule == "per-element":  # the loop a rule without a warp schedule (or a weight view) gets
        monkeypatch.setitem(WINDOW, nn.MatmulNBitsOp, dataclasses.replace(WINDOW[nn.MatmulNBitsOp], warp=None,
                                                                          tiles=None))
    module = fuse("".join(NBITS.replace("T", t) for t in _NP))
    assert host_ops(module) == []
    _, records, host = build_for_host(module, tmp_path)
    # the kernels hold tiles too (for more rows: the next test)
    assert {getattr(r, "threads_per_output", None) or r.gemv_rows for r in records.values()} == (
        {GEMV_ROWS} if schedule == "warp" else {1})
    rng = np.random.default_rng(0)
    for name, function in fused_functions(module).items():
        t = _NP[name.split("_")[1]]
        args = _every_byte_arguments(function, t, rng, rows=1)
        out, expected = launch_beside_reference(function, name, records[name], host, args)
        _assert_close(out, expected, t, name)


NBITS_TILES = """
func.func @nbt_T(%x: tensor<?x3x256xT>, %w: tensor<72x128xui8>, %s: tensor<72x8xT>, %z: tensor<72x8xui8>, %b: tensor<72xT>) -> tensor<?x3x72xT> {
  %0 = nn.matmul_nbits %x, %w, %s, %z {block_size = 32 : i64} : (tensor<?x3x256xT>, tensor<72x128xui8>, tensor<72x8xT>, tensor<72x8xui8>) -> tensor<?x3x72xT>
  %1 = nn.add %0, %b : (tensor<?x3x72xT>, tensor<72xT>) -> tensor<?x3x72xT>
  %2 = nn.relu %1 : (tensor<?x3x72xT>) -> tensor<?x3x72xT>
  func.return %2 : tensor<?x3x72xT>
}
func.func @nbt16_T(%x: tensor<?x80xT>, %w: tensor<24x40xui8>, %s: tensor<24x5xT>, %z: tensor<24x5xui8>) -> tensor<?x24xT> {
  %0 = nn.matmul_nbits %x, %w, %s, %z {block_size = 16 : i64} : (tensor<?x80xT>, tensor<24x40xui8>, tensor<24x5xT>, tensor<24x5xui8>) -> tensor<?x24xT>
  func.return %0 : tensor<?x24xT>
}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_prefill_rows_run_on_tiles(tmp_path: Path):
    """A 4-bit GEMM is one ``gemm`` kernel with two schedules, chosen at launch by its rows:
    the warp-per-output GEMV up to ``GEMV_ROWS`` rows, else tiles whose weight tile is
    dequantized as it is staged: 128x128 tensor-core tiles for f16 / bf16 (``mma.sync``
    m16n8k16, emulated by fragment exchange on the host), 16x16 SIMT ones for f32. Built
    for the host, each row count launched with its record's geometry (row tiles capped at
    one block, so it strides over the rest) equals the reference: several column tiles
    with a partial one, a bias and ReLU epilogue, blocks of 16 and 32, every byte value."""
    module = fuse("".join(NBITS_TILES.replace("T", t) for t in ("f16", "bf16", "f32")))
    program, records, host = build_for_host(module, tmp_path)
    rng = np.random.default_rng(1)
    for name, function in fused_functions(module).items():
        record, dtype = records[name], name.split("_")[1]
        t, mma = _NP[dtype], dtype != "f32"
        assert record.gemv_rows == GEMV_ROWS and (f"partita_mma_{dtype}(" in program.kernels[name].code) == mma
        tile, threads = (128, 256) if mma else (16, 256)
        rows_per = 3 if name.startswith("nbt_") else 1
        for rows in (1, 2, 45):  # 3 or 6 rows (GEMV, or tiles past 4), 135 or 45 (135: two row tiles)
            args = _every_byte_arguments(function, t, rng, rows)
            clone = function.clone()
            clone.sym_visibility = StringAttr("public")
            (expected,) = run(ModuleOp([clone]), *args, entry=name)
            out = np.zeros(expected.shape, expected.dtype)
            grid, block = record.geometry(out.shape)
            gemv = rows * rows_per <= GEMV_ROWS
            assert block == ((threads, 1, 1) if gemv or mma else (16, 16, 1))
            assert grid[1] == (1 if gemv else -(-rows * rows_per // tile))
            assert grid[0] == (-(-rows * rows_per * out.shape[-1] * 32 // threads) if gemv else -(-out.shape[-1] // tile))
            host.launch(record, (min(grid[0], 4) if gemv else grid[0], 1, 1), block, args, out)
            _assert_close(out, expected, t, f"{name} at {rows * rows_per} rows")


def test_one_kernel_holds_the_gemv_and_the_tensor_core_tiles():
    """sm_90 SASS of an f16 4-bit GEMM's kernel: the GEMV schedule's 128-bit weight and
    input loads and five-step shuffle tree; the tiles' 4x4 HMMA per k16 (two k16 a K step
    of 32), their input tile staged 16 bytes a vector and their weight tile a 32-bit word of
    8 codes a vector (byte loads only for the blocks' zero points); no local memory."""
    from support.sass import compiled_sass

    from partita.lowering.cuda.codegen import program_of

    program = program_of(fuse(NBITS_TILES.replace("T", "f16").split("func.func @nbt16")[0]))  # @nbt alone
    (entry,) = [k.entry for k in program.kernels.values()]
    _, sass = compiled_sass(program.code, use_cache=False)
    text = sass[entry]
    # 128-bit loads: the GEMV's weight (32 codes) and input (4 x 8 halves); the tiles' input
    # vectors go global -> shared by cp.async (a thread's two, in the first step and in
    # the loop)
    assert len(re.findall(r"\bLDG\.E\.128\b", text)) == 1 + 4 and len(re.findall(r"\bSHFL\.BFLY\b", text)) == 5
    assert len(re.findall(r"\bLDGSTS\.E\.BYPASS\.128\b", text)) == 4
    assert len(re.findall(r"\bHMMA\.16816\.F32\b", text)) == 32
    words = len(re.findall(r"\bLDG\.E(?:\.CONSTANT)? ", text))  # the tiles' weight: 32-bit words of 8 codes
    assert words >= 4 and len(re.findall(r"\bLDG\.E\.U8\b", text)) <= 1 + words  # and the words' zero points
    assert not re.search(r"\b(STL|LDL)\b", text)


def test_a_half_precision_prefill_and_decode_step_launch_their_schedules():
    """An f16 4-bit GEMM whose rows are known at run time only (a prefill and a decode step
    of one model): equal to the reference at 2 and 100 rows on the simulated device, and on
    the recording driver the same kernel launches with a warp per output for 2 rows and
    with 128x128 tiles for 100."""
    from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

    from partita.runtime.cuda import CudaDevice
    from partita.runtime.plan import Runtime

    model, _ = nbits_model(128, 96, 32, dtype=np.float16, rows=("rows",))
    exe = partita.compile(model)
    rng = np.random.default_rng(2)
    for rows in (2, 100):
        x = rng.standard_normal((rows, 128)).astype(np.float16)
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
        np.testing.assert_allclose(exe.run(x)[0].astype(np.float32), want.astype(np.float32), rtol=2e-3,
                                   atol=2e-3 * np.abs(want).max())
    drv = RecordingDriver()
    runtime = Runtime(exe.module, CudaDevice(driver=drv))
    grids = []
    for rows in (2, 100):
        drv.reset()
        runtime.run(np.zeros((rows, 128), np.float16))
        (launch,) = [launch for launch in drv.launches]
        grids.append((launch["grid"], launch["block"]))
    runtime.close()
    assert grids == [((2 * 96 * 32 // 256, 1, 1), (256, 1, 1)), ((1, 1, 1), (256, 1, 1))]
    # an f32 model asked to run in f16 gets the same two-schedule kernel
    f32_model, _ = nbits_model(128, 96, 32, rows=("rows",))
    (row,) = [row for row in partita.compile(f32_model, precision="fp16").report().rows if "nn.matmul_nbits" in row.ops]
    assert "(gemm, 256 threads/block)" in str(row.kernel)


def test_a_half_precision_matmul_nbits_at_decode_and_prefill_rows_equals_onnxruntime():
    """onnxruntime's MatMulNBits with f16 activations and scales (what its quantizer writes
    for an f16 LLM), rows known at run time: one two-schedule kernel, equal to onnxruntime's
    CPU run at 3 rows (GEMV) and 100 rows (tiles)."""
    import onnxruntime as ort

    rng = np.random.default_rng(5)
    k = 256
    model = matmul_nbits_model(64, k, np.float16, "rows", rng)
    exe = partita.compile(model)
    assert [str(row.kernel).split(" ", 1)[1] for row in exe.report().rows] == ["(gemm, 256 threads/block)"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for rows in (3, 100):
        x = rng.standard_normal((rows, k)).astype(np.float16)
        (want,) = session.run(None, {"x": x})
        np.testing.assert_allclose(exe.run(x)[0].astype(np.float32), want.astype(np.float32), rtol=2e-3,
                                   atol=2e-3 * np.abs(want.astype(np.float32)).max())


@pytest.mark.gpu
@pytest.mark.skipif(cuda_status() is not None, reason=f"needs a CUDA device ({cuda_status()})")
def test_4_bit_gemms_on_the_gpu():
    """On a CUDA device: an f16 4-bit projection (1024 x 1024, blocks of 32) at decode and prefill
    row counts (the warp-per-output GEMV, then the tensor-core tiles with several row tiles)
    against the reference, each weight rounded to the activation type by the tiles only."""
    k, n, block = 1024, 1024, 32
    model, _ = nbits_model(k, n, block, dtype=np.float16, rows=("rows",))
    exe = partita.compile(model, ["cuda -arch=native", "llvm"])
    rng = np.random.default_rng(4)
    for rows in (1, 4, 5, 300):
        x = rng.standard_normal((rows, k)).astype(np.float16)
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
        (got,) = exe.run(x)
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2,
                                   atol=2e-2 * np.abs(want.astype(np.float32)).max(), err_msg=f"{rows} rows")


def _float_mlp(k: int, hidden: int, out: int) -> onnx.ModelProto:
    """``relu(x @ w1) @ w2`` with random weights: what a weight-only quantizer starts from."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    weights = [numpy_helper.from_array((np.random.default_rng(s).standard_normal(shape) / 16).astype(np.float32), name)
               for s, (name, shape) in enumerate((("w1", (k, hidden)), ("w2", (hidden, out))))]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "zero-points"])
@pytest.mark.parametrize("quant_format", ["QOperator", "QDQ"])
def test_onnxruntimes_4_bit_quantizer_output_runs_packed(symmetric, quant_format):
    """onnxruntime's own ``MatMulNBitsQuantizer`` (RTN, blocks of 32; it needs ``onnx-ir``):
    its MatMulNBits contrib ops (QOperator) and its block DequantizeLinear + MatMul (QDQ)
    both import as ``nn.matmul_nbits`` and equal onnxruntime's run as written within f32
    rounding (its optimized QDQ run fuses the pair into a kernel of lower precision, off by
    about 1e-2)."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=symmetric,
                                          quant_format=getattr(QuantFormat, quant_format))
    quantizer = MatMulNBitsQuantizer(_float_mlp(256, 512, 128), block_size=32, is_symmetric=symmetric,
                                     algo_config=config)
    quantizer.process()
    model = quantizer.model.model
    assert ("MatMulNBits" in {n.op_type for n in model.graph.node}) == (quant_format == "QOperator")
    exe = partita.compile(model, ["cuda -arch=sm_90", "cutlass", "llvm"], partitioner="eager")
    assert [row.ops[0] for row in exe.report().rows if "nn.matmul_nbits" in row.ops] == ["nn.matmul_nbits"] * 2
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    x = np.random.default_rng(3).standard_normal((2, 7, 256)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), plain, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(exe.run(x)[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_matmul_nbits_variants_it_cannot_take_are_located_errors():
    """A 3-bit MatMulNBits, one with g_idx (act-order) and one without its B are refused
    where they stand."""
    rng = np.random.default_rng(0)
    for attrs, extra, message in (({"bits": 3}, [], "3-bit weights is not supported"),
                                  ({}, ["", "g"], r"g_idx \(act-order\) is not supported"),
                                  ({"inputs": ["x", "", "s"]}, [], "needs its inputs A, B and scales")):
        inits = [numpy_helper.from_array(rng.integers(0, 255, (16, 2, 16)).astype(np.uint8), "b"),
                 numpy_helper.from_array(np.ones(32, np.float32), "s"),
                 numpy_helper.from_array(np.arange(64, dtype=np.int32) // 32, "g")]
        inputs = attrs.pop("inputs", ["x", "b", "s", *extra])
        node = helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft",
                                K=64, N=16, block_size=32, **{"bits": 4, **attrs})
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
        with pytest.raises(PartitaError, match=message):
            import_onnx(model)


def test_a_dequantize_kept_past_the_folding_budget_is_erased(monkeypatch):
    """Past the import's folding budget a DequantizeLinear of a constant stays an op of the
    graph; the packed product does not read it, so it is erased (no float or unpacked
    weight is left in the module)."""
    from partita.frontends.onnx import importer

    monkeypatch.setattr(importer, "FOLD_TOTAL_BYTES", 0)
    model, x = nbits_model(256, 48, 32)
    module = import_onnx(model)
    assert not [op for op in module.walk() if isinstance(op, nn.DequantizeOp)]
    assert max(op.to_numpy().nbytes for op in module.walk() if isinstance(op, nn.ConstantOp)) == 48 * 128
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(partita.compile(model).run(x)[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_a_4_bit_decoder_step_runs_its_projections_packed():
    """The bundled KV-cache decoder step quantized by onnxruntime's MatMulNBitsQuantizer
    (its seven weight MatMuls become MatMulNBits): every projection is ``nn.matmul_nbits``,
    no float weight product is left, Q, K and V are combined into one (five products), and
    the step (hidden state and both presents) equals onnxruntime's run as written."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    source = onnx.load(Path(__file__).parents[2] / "examples" / "decoder_step.onnx")
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, quant_format=QuantFormat.QOperator)
    quantizer = MatMulNBitsQuantizer(source, block_size=32, is_symmetric=True, algo_config=config)
    quantizer.process()
    model = quantizer.model.model
    assert sum(n.op_type == "MatMulNBits" for n in model.graph.node) == 7
    products = [op.name for op in import_onnx(model).walk() if op.name in ("nn.matmul_nbits", "nn.dense")]
    assert products == ["nn.matmul_nbits"] * 7
    rng = np.random.default_rng(0)
    feeds = {"input_embeds": rng.standard_normal((1, 1, 64)).astype(np.float32),
             "past_key": rng.standard_normal((1, 4, 5, 16)).astype(np.float32),
             "past_value": rng.standard_normal((1, 4, 5, 16)).astype(np.float32)}
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), plain, providers=["CPUExecutionProvider"]).run(None, feeds)
    exe = partita.compile(model)
    # Q, K and V read one input: one product of the three packed weights (its bias fused)
    assert sum(row.ops.count("nn.matmul_nbits") for row in exe.report().rows) == 5
    got = exe.run(*feeds.values())
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * np.abs(w).max())


def test_an_external_data_4_bit_weight_stays_in_its_file(tmp_path: Path):
    """A MatMulNBits whose B is external data (how large models are saved): its bytes are
    already the packed layout, so the weight is a parameter of that file region (never
    read into the IR), and the model equals onnxruntime."""
    import onnxruntime as ort

    from partita.ir.parameters import ParameterAttr

    rng = np.random.default_rng(0)
    n, k = 64, 256
    model = matmul_nbits_model(n, k, np.float32, 2, rng)
    path = tmp_path / "nbits.onnx"
    onnx.save(model, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    (gemm,) = [op for op in import_onnx(path).walk() if isinstance(op, nn.MatmulNBitsOp)]
    weight = gemm.weight.owner.value
    assert isinstance(weight, ParameterAttr) and weight.type.get_shape() == (n, k // 2)
    x = rng.standard_normal((2, k)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(partita.compile(path).run(x)[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_parallel_external_data_4_bit_weights_combine_into_a_parameter_file(tmp_path: Path):
    """Two MatMulNBits of one input whose weights are external data combine into one
    product whose weight is written once, row block by row block, to the compile's
    parameter directory (never concatenated in memory); equal to onnxruntime."""
    import onnxruntime as ort

    rng = np.random.default_rng(1)
    k, block, sizes = 128, 32, (48, 16)
    nodes, inits = [], []
    for i, n in enumerate(sizes):
        inits += [numpy_helper.from_array(rng.integers(0, 256, (n, k // block, block // 2)).astype(np.uint8), f"b{i}"),
                  numpy_helper.from_array((rng.random(n * k // block) * 0.1 + 0.01).astype(np.float32), f"s{i}")]
        nodes.append(helper.make_node("MatMulNBits", ["x", f"b{i}", f"s{i}"], [f"y{i}"], domain="com.microsoft", K=k,
                                      N=n, bits=4, block_size=block))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, k])],
                              [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [3, n]) for i, n in enumerate(sizes)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    path = tmp_path / "qkv.onnx"
    onnx.save(model, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    exe = partita.compile(path, cache_dir=tmp_path / "cache")
    assert [row.ops.count("nn.matmul_nbits") for row in exe.report().rows if "nn.matmul_nbits" in row.ops] == [1]
    assert len(list((tmp_path / "cache" / "parameters").glob("*.bin"))) == 1
    x = rng.standard_normal((3, k)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for got, w in zip(exe.run(x), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
