"""FP8 GEMMs (issues 20 / 24): a float8 QDQ MatMul or Gemm (TensorRT Model Optimizer's and
onnxruntime's FP8 form) imports as ``nn.matmul_float8`` scaled once, equals onnxruntime's
run of the model as written, and on an Ada or Hopper target runs as cuBLASLt's FP8 matmul
(the scale read through ``A_SCALE_POINTER``; checked with the recording cuBLASLt, which
computes from the descriptors and refuses any form the library refuses) or as CUTLASS's
Sm89 FP8 GEMM (checked by its SASS and on the simulated device). Older targets keep the
native kernel (no FP8 tensor cores before sm_89)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper
from support.fp8_models import E4M3, E5M2, fp8_linear  # tests/support/fp8_models.py

import partita
from partita.frontends.onnx import import_onnx
from partita.lowering.cutlass.emitter import emit_module
from partita.lowering.cutlass.kernels import KernelSpec, choose_config
from partita.runtime.cuda import cuda_status
from partita.runtime.reference import run


def _onnxruntime(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _input(shape, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("form", [
    {}, {"per_channel": True}, {"gemm": True}, {"gemm": True, "per_channel": True}, {"w_type": E5M2},
    {"x_type": E5M2},
], ids=["matmul", "matmul-per-channel", "gemm", "gemm-per-channel", "e5m2-weight", "e5m2-activation"])
def test_a_float8_qdq_product_is_one_fp8_gemm_scaled_once(form):
    m, shape = fp8_linear(**form)
    module = import_onnx(m)
    products = [op for op in module.walk() if op.name in ("nn.matmul_float8", "nn.matmul", "nn.dense")]
    assert [op.name for op in products] == ["nn.matmul_float8"]
    (gemm,) = products
    assert gemm.transpose_b and [str(v.type.element_type) for v in gemm.operands] == \
        [{E4M3: "f8E4M3FN", E5M2: "f8E5M2"}[form.get(t, E4M3)] for t in ("x_type", "w_type")]
    assert not any(op.name == "nn.dequantize" for op in module.walk())  # both bypassed, then erased
    x = _input(shape)
    (got,) = run(module, x)
    want = _onnxruntime(m, x)
    # onnxruntime multiplies the dequantized f32 values; the FP8 product sums exact
    # products and scales once: they differ by f32 rounding only.
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * np.abs(want).max())


def test_an_fnuz_or_nonzero_zero_point_product_stays_the_float_product():
    m, _ = fp8_linear()
    for init in m.graph.initializer:
        if init.name == "zx":
            init.CopyFrom(helper.make_tensor("zx", E4M3, [], [1.0]))
    assert [op.name for op in import_onnx(m).walk() if op.name in ("nn.matmul_float8", "nn.matmul", "nn.dense")] \
        == ["nn.dense"]


SCALED_FP8_GEMM = """
func.func @main(%x: tensor<?x64xf8E4M3FN>, %w: tensor<48x64xT>, %s: tensor<f32>) -> tensor<?x48xf32> {
  %0 = nn.matmul_float8 %x, %w {transpose_b = true} : (tensor<?x64xf8E4M3FN>, tensor<48x64xT>) -> tensor<?x48xf32>
  %1 = nn.multiply %0, %s : (tensor<?x48xf32>, tensor<f32>) -> tensor<?x48xf32>
  func.return %1 : tensor<?x48xf32>
}
"""


@pytest.mark.parametrize("weight", ["f8E4M3FN", "f8E5M2"])
def test_cublaslt_fp8_matmul_descriptors_and_result(weight: str):
    """The scaled FP8 product as one cuBLASLt call: E4M3 / E5M2 layouts, an f32 D, f32
    compute, the TN form, the scale through ``A_SCALE_POINTER``; the recording library
    computes it from those descriptors (eager, then replayed from a captured graph)."""
    from support.recording_libs import CudaDataType

    text = SCALED_FP8_GEMM.replace("xT>", f"x{weight}>")
    rng = np.random.default_rng(0)
    desc, a, b, d = _scaled_fp8_on_recorded_cublaslt(text, [
        rng.standard_normal((7, 64)).astype(ml_dtypes.float8_e4m3fn),
        (rng.standard_normal((48, 64)) * 4).astype(nn_dtype(weight)), np.array(0.03, np.float32)])
    assert (a.type, b.type, d.type) == (CudaDataType[{"f8E4M3FN": "CUDA_R_8F_E4M3", "f8E5M2": "CUDA_R_8F_E5M2"}[weight]],
                                        CudaDataType.CUDA_R_8F_E4M3, CudaDataType.CUDA_R_32F)
    assert (desc.attrs["TRANSA"], desc.attrs["TRANSB"]) == (1, 0) and "A_SCALE_POINTER" in desc.attrs
    assert (a.rows, a.cols, a.ld, b.rows, b.cols, b.ld, d.rows, d.cols, d.ld) == (64, 48, 64, 64, 7, 64, 48, 7, 48)


def _scaled_fp8_on_recorded_cublaslt(text: str, args: list[np.ndarray]) -> tuple:
    """``text`` (a scaled FP8 product) compiled for Hopper with cuBLAS, one cuBLASLt call
    with its scale, run on the recording library three times (eager, captured, replayed),
    each equal to the reference; the descriptors of its heuristic query (matmul, A, B, D)."""
    from support.recording_driver import RecordingDriver
    from support.recording_libs import RecordingCublasLt

    from partita.dialects import make_context
    from partita.ir import parse_module
    from partita.runtime.cuda import CudaDevice
    from partita.runtime.plan import Runtime

    exe = partita.compile(text, ["cuda -arch=sm_90", "cublas", "llvm"], partitioner="eager")
    assert [(row.target, row.ops) for row in exe.report().rows] == [("cublas", ("nn.matmul_float8", "nn.multiply"))]
    drv = RecordingDriver()
    lt = RecordingCublasLt(drv)
    runtime = Runtime(exe.module, CudaDevice(driver=drv), libraries={"cublas": lt})
    try:
        (want,) = run(parse_module(text, make_context()), *args)
        for _ in range(3):  # eager, captured, replayed
            (got,) = runtime.run(*args)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
        assert [launch["name"] for launch in drv.launches if not launch.get("graph")] == ["cublasLtMatmul"]
    finally:
        runtime.close()
    (_, desc, a, b, d, _) = next(c for c in lt.calls if c[0] == "heuristic")
    return desc, a, b, d


def nn_dtype(name: str):
    return {"f8E4M3FN": ml_dtypes.float8_e4m3fn, "f8E5M2": ml_dtypes.float8_e5m2}[name]


@pytest.mark.parametrize("partitioner", ["collage", "eager"])
def test_an_fp8_qdq_model_places_its_product_on_cublaslt_for_hopper(partitioner, tmp_path: Path, kernel_cache: Path):
    # Large enough that Collage's roofline prefers FP8 tensor cores to the native kernel
    # (small products are launch-bound, and the native one fuses the bias add).
    m, _ = fp8_linear(k=1024, n=1024, rows=128)
    path = tmp_path / "fp8.onnx"
    onnx.save(m, path)
    exe = partita.compile(path, ["cuda -arch=sm_90", "cublas", "llvm"], partitioner=partitioner,
                          cache_dir=kernel_cache)
    rows = [row for row in exe.report().rows if "nn.matmul_float8" in row.ops]
    # Eager takes the first row of the table (the scale read by the library); Collage may
    # leave the scale to the native kernel of the bias add (the two cost the same).
    assert [(row.target, row.ops[0]) for row in rows] == [("cublas", "nn.matmul_float8")]
    if partitioner == "eager":
        assert rows[0].ops == ("nn.matmul_float8", "nn.multiply")


FORMS = [("e4m3_dynamic_m", KernelSpec.dense(None, 1024, 1024, "float_e4m3")),
         ("e4m3_e5m2_small", KernelSpec.dense(64, 256, 512, "float_e4m3", dtype_b="float_e5m2")),
         ("e5m2_e4m3_big", KernelSpec.dense(4096, 4096, 1024, "float_e5m2", dtype_b="float_e4m3"))]


@pytest.mark.parametrize("arch", ["sm_89", "sm_90"])
def test_cutlass_fp8_gemms_multiply_on_tensor_cores_without_spills(arch):
    """One NVRTC program of the three tile classes: on sm_89 every m16n8k32 is a QMMA of
    the operands' own formats; sm_90 has no FP8 mma.sync (only wgmma), and ptxas converts
    to f16 for HMMA.16816 instead. A cp.async main loop, and no local memory either way."""
    from support.sass import compiled_sass

    sm = int(arch.removeprefix("sm_"))
    source = emit_module([(name, spec, choose_config(spec, sm)) for name, spec in FORMS])
    _, functions = compiled_sass(source.code, arch=arch)
    for name, spec in FORMS:
        entry = source.entries[name]
        body = functions.get(entry.name, "") + functions.get(entry.kernel_type + "_run", "")
        a, b = (t.removeprefix("float_").upper() for t in (spec.dtype, spec.b_dtype))
        warp = [t // w for t, w in zip(entry.config.threadblock, entry.config.warp_count)]
        steps = (warp[0] // 16) * (warp[1] // 8) * (warp[2] // 32)  # m16n8k32 per K tile
        pattern = rf"\bQMMA\.16832\.F32\.{a}\.{b}\b" if sm == 89 else r"\bHMMA\.16816\.F32\b"
        mma = re.findall(pattern, body)
        assert len(mma) >= steps * (1 if sm == 89 else 2), f"{arch} {name} ({entry.config.name}): {len(mma)}"
        assert "LDGSTS" in body, name
        assert not re.search(r"\b(STL|LDL)\b", body), f"{arch} {name} spills"


def test_an_fp8_qdq_model_runs_its_product_on_cutlass_for_ada(kernel_cache: Path, tmp_path: Path):
    """sm_89 with the default targets' backends: the product is CUTLASS's FP8 GEMM, the
    scale and bias one native kernel after it; on the simulated device (the kernel's
    reference semantics at its packed pointers) it equals onnxruntime within f32 rounding,
    for two batch sizes (M is a run-time argument)."""
    m, shape = fp8_linear(k=64, n=48)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "fp8.onnx"
    onnx.save(m, path)
    exe = partita.compile(path, ["cuda -arch=sm_89", "cutlass", "llvm"], partitioner="eager", cache_dir=kernel_cache)
    rows = [row for row in exe.report().rows if "nn.matmul_float8" in row.ops]
    assert [(row.target, row.ops) for row in rows] == [("cutlass", ("nn.matmul_float8",))]
    for batch in (1, 3):
        x = _input([batch, *shape[1:]], seed=batch)
        (got,) = exe.run(x)
        want = _onnxruntime(m, x)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * np.abs(want).max())


def test_the_fp8_matmul_needs_an_fp8_tensor_core_target(kernel_cache: Path, tmp_path: Path):
    """sm_80 has no FP8 tensor cores: the product stays on the native kernel."""
    m, _ = fp8_linear()
    path = tmp_path / "fp8.onnx"
    onnx.save(m, path)
    for partitioner in ("collage", "eager"):
        exe = partita.compile(path, ["cuda -arch=sm_80", "cublas", "cutlass", "llvm"], partitioner=partitioner,
                              cache_dir=kernel_cache)
        rows = [row for row in exe.report().rows if "nn.matmul_float8" in row.ops]
        assert [row.target for row in rows] == ["cuda"], partitioner


HOPPER_FP8 = KernelSpec.dense(None, 1024, 512, "float_e4m3", dtype_b="float_e5m2")
"""The Hopper FP8 kernel type both tests below use (one NVRTC program, cached between them)."""


def test_the_hopper_fp8_gemm_is_wgmma_on_8_bit_floats():
    """sm_90a: CUTLASS 3's FP8 main loop, QGMMA on the operands' own formats fed by TMA,
    no local memory, 128-element K tiles (one 128-byte row), and a probe that places the
    promotion interval the runtime writes; the record reads back."""
    from support.sass import compiled_sass

    from partita.lowering.cutlass.sm90 import (
        choose_sm90_config,
        emit_sm90_module,
        read_layout,
        sm90_from_record,
        sm90_record,
        why_not_sm90,
    )

    assert why_not_sm90(HOPPER_FP8) is None
    cfg = choose_sm90_config(HOPPER_FP8)
    assert cfg.tile == (64, 128, 128) and cfg.name.startswith("cutlass3x_sm90_tensorop_gemm_e4m3_e5m2_f32_64x128x128")
    source = emit_sm90_module([("fp8", HOPPER_FP8, cfg)])
    binary, functions = compiled_sass(source.code, arch="sm_90a")
    entry = source.entries["fp8"]
    body = "".join(functions.values())
    qgmma = re.findall(r"\bQGMMA\.64x128x32\.F32\.E4M3\.E5M2\b", body)
    assert len(qgmma) >= 128 // 32, len(qgmma)  # one K tile: four k32 steps
    assert "UTMALDG" in body and not re.search(r"\b(HGMMA|HMMA|QMMA)\b", body)
    assert not re.search(r"\b(STL|LDL)\b", body), "spills"
    layout = read_layout(binary.cubin, entry.kernel_type)
    assert layout["promotion"] >= 0 and layout["tx_bytes_value"] == (64 + 128) * 128
    assert sm90_from_record(sm90_record(entry, HOPPER_FP8.input_names, layout))[2] == layout


def test_an_fp8_qdq_model_runs_its_product_on_hopper_wgmma(kernel_cache: Path, tmp_path: Path):
    """sm_90a: the product is the Hopper FP8 kernel, equal to onnxruntime on the simulated
    device; on the recording driver its Params carry the promotion interval where the
    probe placed it."""
    from support.recording_driver import RecordingDriver

    from partita.lowering.cutlass.sm90 import MMA_PROMOTION_INTERVAL
    from partita.runtime.cuda import CudaDevice
    from partita.runtime.extern import kernel_handles
    from partita.runtime.hopper import Sm90KernelHandle
    from partita.runtime.plan import Runtime

    m, shape = fp8_linear(k=512, n=1024, w_type=E5M2)
    path = tmp_path / "fp8.onnx"
    onnx.save(m, path)
    exe = partita.compile(path, ["cuda -arch=sm_90a", "cutlass", "llvm"], partitioner="eager", cache_dir=kernel_cache)
    (handle,) = [h for h in kernel_handles(exe.module).values() if isinstance(h, Sm90KernelHandle)]
    spec = handle.entry.spec
    assert (spec.N, spec.K, spec.dtype, spec.dtype_b) == (1024, 512, "float_e4m3", "float_e5m2")  # M = 10 here
    x = _input(shape)
    (got,) = exe.run(x)
    want = _onnxruntime(m, x)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * np.abs(want).max())
    runtime = Runtime(exe.module, CudaDevice(driver=RecordingDriver(arch=(9, 0))))
    runtime.run(x)
    (bound,) = runtime._bound.values()
    (params,) = [step.params for step in bound.steps if len(getattr(step, "params", b"")) == handle.layout["params_size"]]
    assert struct.unpack_from("<I", params, handle.layout["promotion"])[0] == MMA_PROMOTION_INTERVAL
    runtime.close()


@pytest.mark.gpu
@pytest.mark.skipif(cuda_status() is not None, reason=f"needs a CUDA device ({cuda_status()})")
@pytest.mark.parametrize("targets", [["cuda -arch=native", "cutlass", "llvm"], ["cuda -arch=native", "cublas", "llvm"]],
                         ids=["cutlass", "cublas"])
def test_fp8_gemms_on_the_gpu(targets, tmp_path: Path):
    """On an sm_89 or newer device: the FP8 QDQ product on FP8 tensor cores (CUTLASS's
    kernel for the device, or cuBLASLt) against onnxruntime. Products of 8-bit floats are
    exact, but Hopper's FP8 MMA adds them in an accumulator narrower than f32 before each
    promotion into f32: on an H200 CUTLASS and cuBLASLt gave the same bits, 25 of 262,144
    elements beyond 1e-4 of the largest output, the worst at 1.7e-4 of it."""
    from partita.runtime.cuda import CudaDevice, parse_arch

    device = CudaDevice()
    if parse_arch(device.arch)[0] < 89:
        pytest.skip(f"FP8 tensor cores are sm_89 and later, not {device.arch}")
    m, shape = fp8_linear(k=1024, n=1024, rows=128, w_type=E5M2)
    path = tmp_path / "fp8.onnx"
    onnx.save(m, path)
    exe = partita.compile(path, targets, partitioner="eager")
    rows = [row for row in exe.report().rows if "nn.matmul_float8" in row.ops]
    assert [row.target for row in rows] == [targets[1]]
    x = _input(shape)
    (got,) = exe.run(x)
    want = _onnxruntime(m, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-4 * np.abs(want).max())


def test_onnxruntimes_fp8_qdq_encoder_runs_its_products_on_fp8_tensor_cores(tmp_path: Path, kernel_cache: Path):
    """The bundled encoder quantized by onnxruntime's own ``quantize_static`` to FP8 (E4M3
    activations and weights, QDQ format, its Distribution calibration): every weight product
    is ``nn.matmul_float8`` on CUTLASS's FP8 GEMM (sm_89), the two attention products (both
    operands activations) too, on the native tensor-core tiles (CUTLASS's FP8 kernel takes a
    2-D weight), and the result equals onnxruntime's run as written within f32 rounding."""
    import onnxruntime as ort
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(0)
    shape = (2, 16, 64)

    class Calibration(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    source = Path(__file__).parents[2] / "examples" / "encoder.onnx"
    name = onnx.load(source).graph.input[0].name
    target = tmp_path / "fp8.onnx"
    quantize_static(source, target, Calibration(), quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"],
                    activation_type=QuantType.QFLOAT8E4M3FN, weight_type=QuantType.QFLOAT8E4M3FN,
                    calibrate_method=CalibrationMethod.Distribution)
    model = onnx.load(target)
    products = [op.name for op in import_onnx(model).walk() if op.name in ("nn.matmul_float8", "nn.matmul", "nn.dense")]
    assert sorted(products) == ["nn.matmul_float8"] * 8
    exe = partita.compile(model, ["cuda -arch=sm_89", "cutlass", "llvm"], partitioner="eager", cache_dir=kernel_cache)
    assert sorted(row.target for row in exe.partitions if "nn.matmul_float8" in row.ops) == ["cuda"] * 2 + ["cutlass"] * 6
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    as_written = ort.InferenceSession(str(target), plain, providers=["CPUExecutionProvider"])
    x = rng.standard_normal(shape).astype(np.float32)
    want = as_written.run(None, {name: x})[0]
    np.testing.assert_allclose(exe.run(x)[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _fp8_attention_scores(heads: int = 4, q_len: int = 24, k_len: int = 48, dim: int = 32) -> onnx.ModelProto:
    """``DQ(Q(q)) @ DQ(Q(kᵀ))``: attention's scores in an FP8 QDQ export (both operands
    activations quantized per tensor at run time, E4M3)."""
    nodes = [helper.make_node("QuantizeLinear", ["q", "sq", "z"], ["qq"]),
             helper.make_node("DequantizeLinear", ["qq", "sq", "z"], ["qd"]),
             helper.make_node("QuantizeLinear", ["kt", "sk", "z"], ["kq"]),
             helper.make_node("DequantizeLinear", ["kq", "sk", "z"], ["kd"]),
             helper.make_node("MatMul", ["qd", "kd"], ["s"])]
    inits = [onnx.numpy_helper.from_array(np.float32(0.02), "sq"), onnx.numpy_helper.from_array(np.float32(0.03), "sk"),
             helper.make_tensor("z", E4M3, [], [0])]
    graph = helper.make_graph(
        nodes, "scores", [helper.make_tensor_value_info("q", onnx.TensorProto.FLOAT, [2, heads, q_len, dim]),
                          helper.make_tensor_value_info("kt", onnx.TensorProto.FLOAT, [2, heads, dim, k_len])],
        [helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, [2, heads, q_len, k_len])], inits)
    opsets = [helper.make_opsetid("", 21)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def _scores_inputs(model: onnx.ModelProto) -> list[np.ndarray]:
    rng = np.random.default_rng(4)
    return [rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input]


def test_a_product_of_two_fp8_activations_is_one_fp8_gemm():
    """Both operands run-time FP8 QDQ activations: ``nn.matmul_float8`` of their 8-bit
    floats (the right one transposed to ``[..., N, K]``), scaled once by ``sq * sk``; with
    the default targets it runs on the native tensor-core tiles (f16 holds every E4M3
    value), its scale fused, and equals onnxruntime's run as written within f32 rounding."""
    import onnxruntime as ort

    model = _fp8_attention_scores()
    module = import_onnx(model)
    (product,) = [op for op in module.walk() if op.name in ("nn.matmul_float8", "nn.matmul", "nn.batch_matmul")]
    assert product.name == "nn.matmul_float8" and product.transpose_b
    assert product.rhs.owner.name == "nn.transpose" and not any(op.name == "nn.dequantize" for op in module.walk())
    exe = partita.compile(model)
    (row,) = [row for row in exe.report().rows if "nn.matmul_float8" in row.ops]
    assert (row.target, row.ops, "gemm" in str(row.kernel)) == ("cuda", ("nn.matmul_float8", "nn.multiply"), True)
    q, kt = _scores_inputs(model)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"q": q, "kt": kt})[0]
    np.testing.assert_allclose(exe.run(q, kt)[0], want, rtol=2e-6, atol=2e-6 * np.abs(want).max())


BATCHED_FP8_GEMM = """
func.func @main(%q: tensor<2x4x24x32xf8E4M3FN>, %k: tensor<2x4x48x32xf8E4M3FN>, %s: tensor<f32>) -> tensor<2x4x24x48xf32> {
  %0 = nn.matmul_float8 %q, %k {transpose_b = true} : (tensor<2x4x24x32xf8E4M3FN>, tensor<2x4x48x32xf8E4M3FN>) -> tensor<2x4x24x48xf32>
  %1 = nn.multiply %0, %s : (tensor<2x4x24x48xf32>, tensor<f32>) -> tensor<2x4x24x48xf32>
  func.return %1 : tensor<2x4x24x48xf32>
}
"""


def test_cublaslt_runs_a_product_of_two_fp8_activations_strided_batched():
    """On Hopper with cuBLAS, the scaled product of two FP8 activations (what the import
    makes of the model above) is one strided-batched cuBLASLt FP8 matmul: 8 = 2 x 4 heads,
    the TN form, the scale through ``A_SCALE_POINTER``; the recording library computes it
    from those descriptors (eager, then replayed from a captured graph). A right operand
    broadcast over the batch is not offered to it."""
    rng = np.random.default_rng(0)
    desc, a, b, d = _scaled_fp8_on_recorded_cublaslt(BATCHED_FP8_GEMM, [
        rng.standard_normal((2, 4, 24, 32)).astype(ml_dtypes.float8_e4m3fn),
        (rng.standard_normal((2, 4, 48, 32)) * 4).astype(ml_dtypes.float8_e4m3fn), np.array(0.03, np.float32)])
    assert (desc.attrs["TRANSA"], desc.attrs["TRANSB"]) == (1, 0) and "A_SCALE_POINTER" in desc.attrs
    assert [(x.rows, x.cols, x.attrs["BATCH_COUNT"], x.attrs["STRIDED_BATCH_OFFSET"]) for x in (a, b, d)] == \
        [(32, 48, 8, 48 * 32), (32, 24, 8, 24 * 32), (48, 24, 8, 24 * 48)]
    broadcast = BATCHED_FP8_GEMM.replace("%k: tensor<2x4x48x32xf8E4M3FN>", "%k: tensor<1x4x48x32xf8E4M3FN>").replace(
        "tensor<2x4x48x32xf8E4M3FN>) ->", "tensor<1x4x48x32xf8E4M3FN>) ->")
    exe = partita.compile(broadcast, ["cuda -arch=sm_90", "cublas", "llvm"], partitioner="eager")
    assert [row.target for row in exe.report().rows if "nn.matmul_float8" in row.ops] == ["cuda"]
