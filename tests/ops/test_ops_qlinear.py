"""The quantized integer operators (issues 20 / 24): QLinearMatMul, ConvInteger and
QLinearConv against onnx's reference (exactly) and onnxruntime (within its rounding), the
native kernels of ``nn.conv_integer`` and the transposed ``nn.matmul_integer`` built for
the host against their references, and QLinearMatMul compiled end to end with its integer
product on CUTLASS's int8 tensor-core GEMM (eager and Collage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import check_kernels, fuse, host_ops  # tests/support/kernel_check.py

import partita
from partita.dialects import nn
from partita.frontends.onnx import import_onnx
from partita.ir.diagnostics import PartitaError
from partita.runtime.cuda import cuda_status
from partita.runtime.reference import run

ONNX_OPS = ("QLinearMatMul", "ConvInteger", "QLinearConv")
"""The op types this file converts (``test_onnx_import`` checks every converter has a test)."""

_TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
          np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
          np.dtype(np.int32): TensorProto.INT32}


def _model(op: str, operands: list, opset: int = 13, **attrs) -> tuple[onnx.ModelProto, dict]:
    """A one-node model; ``operands`` are ``(name, array, constant)`` in the node's input
    order (a constant is an initializer, the rest graph inputs). Returns the feed too."""
    inputs = [(n, a) for n, a, const in operands if not const]
    out = TensorProto.INT32 if op == "ConvInteger" else _TYPES[operands[7][1].dtype]
    node = helper.make_node(op, [n for n, _, _ in operands], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "q", [helper.make_tensor_value_info(n, _TYPES[a.dtype], a.shape) for n, a in inputs],
        [helper.make_tensor_value_info("y", out, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a, const in operands if const])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), dict(inputs)


def _check(m: onnx.ModelProto, feed: dict, tmp_path, *, onnxruntime: bool = True) -> np.ndarray:
    """Partita's reference run equals onnx's reference exactly, and onnxruntime within one
    step of rounding (it forms the requantized product in f32, the reference in f64).
    onnxruntime is left out for u8 x s8 products: its x86 kernels sum pairs of them in
    saturating i16 (``vpmaddubsw``) and miss by tens."""
    (want,) = ReferenceEvaluator(m).run(None, feed)
    (got,) = run(import_onnx(m), *feed.values())
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if onnxruntime:
        import onnxruntime as ort

        path = tmp_path / "model.onnx"
        onnx.save(m, path)
        (ours,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)
        assert np.abs(ours.astype(np.int64) - got.astype(np.int64)).max() <= 1
    return got


def _ints(shape, dtype, seed: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape, dtype=dtype)


def _qlinear_matmul(a_shape, b_shape, dtype, *, const_b: bool, scales=(0.02, 0.01, 0.4), zero_points=(3, 0, 5),
                    scale_type=np.float32, opset: int = 13):
    a, b = _ints(a_shape, dtype, 0), _ints(b_shape, np.int8 if const_b else dtype, 1)
    sa, sb, sy = (np.asarray(s, scale_type) for s in scales)
    za, zb, zy = (np.asarray(z, t) for z, t in zip(zero_points, (dtype, b.dtype, dtype)))
    return _model("QLinearMatMul", [("a", a, False), ("sa", sa, True), ("za", za, True), ("b", b, const_b),
                                    ("sb", sb, True), ("zb", zb, True), ("sy", sy, True), ("zy", zy, True)], opset)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("a_shape, b_shape", [((5, 32), (32, 8)), ((2, 5, 32), (32, 8)), ((2, 5, 32), (2, 32, 8))],
                         ids=["2d", "3d_by_matrix", "3d_batched"])
@pytest.mark.parametrize("const_b", [False, True], ids=["runtime_b", "constant_b"])
def test_qlinear_matmul_matches_onnx_and_onnxruntime(tmp_path, dtype, a_shape, b_shape, const_b):
    if const_b and len(b_shape) == 3:
        pytest.skip("a constant weight is a matrix")
    m, feed = _qlinear_matmul(a_shape, b_shape, dtype, const_b=const_b)
    _check(m, feed, tmp_path, onnxruntime=not (dtype == np.uint8 and const_b))


def test_qlinear_matmul_opset_21_float16_scales(tmp_path):
    m, feed = _qlinear_matmul((4, 16), (16, 8), np.uint8, const_b=False, scale_type=np.float16, opset=21)
    _check(m, feed, tmp_path, onnxruntime=False)


def test_qlinear_matmul_folds_a_runtime_lhs_zero_point(tmp_path):
    """u8 activations whose zero point is a graph input, a constant s8 weight: the product
    becomes an int8 GEMM plus za times the weight's column sums."""
    a, b = _ints((6, 32), np.uint8, 0), _ints((32, 8), np.int8, 1)
    m, feed = _model("QLinearMatMul", [
        ("a", a, False), ("sa", np.array(0.05, np.float32), True), ("za", np.array(128, np.uint8), False),
        ("b", b, True), ("sb", np.array(0.01, np.float32), True), ("zb", np.array(0, np.int8), True),
        ("sy", np.array(0.3, np.float32), True), ("zy", np.array(128, np.uint8), True)])
    _check(m, feed, tmp_path, onnxruntime=False)
    names = [op.name for op in import_onnx(m).walk()]
    assert "nn.matmul_integer" in names and "nn.add" in names


def test_qlinear_matmul_per_row_and_per_column_scales(tmp_path):
    a, b = _ints((4, 16), np.uint8, 0), _ints((16, 8), np.int8, 1)
    sa = np.linspace(0.01, 0.04, 4, dtype=np.float32).reshape(4, 1)  # the spec's per-row form
    sb = np.linspace(0.005, 0.02, 8, dtype=np.float32)
    m, feed = _model("QLinearMatMul", [
        ("a", a, False), ("sa", sa, True), ("za", np.array(7, np.uint8), True), ("b", b, True), ("sb", sb, True),
        ("zb", np.zeros(8, np.int8), True), ("sy", np.array(0.25, np.float32), True),
        ("zy", np.array(100, np.uint8), True)])
    _check(m, feed, tmp_path, onnxruntime=False)


def test_qlinear_matmul_refuses_per_column_zero_points():
    a, b = _ints((4, 16), np.uint8, 0), _ints((16, 8), np.uint8, 1)
    m, _ = _model("QLinearMatMul", [
        ("a", a, False), ("sa", np.array(0.1, np.float32), True), ("za", np.array(1, np.uint8), True),
        ("b", b, False), ("sb", np.full(8, 0.1, np.float32), True), ("zb", np.arange(8, dtype=np.uint8), True),
        ("sy", np.array(0.1, np.float32), True), ("zy", np.array(1, np.uint8), True)])
    with pytest.raises(PartitaError, match=r"\(QLinearMatMul\): per-row or per-column rhs zero points"):
        import_onnx(m)


@pytest.mark.parametrize("w_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1]}, {"pads": [1, 0, 2, 1], "strides": [2, 2]},
                                   {"auto_pad": "SAME_UPPER", "strides": [2, 1], "dilations": [1, 2]},
                                   {"group": 2, "pads": [1, 1, 1, 1]}],
                         ids=["valid", "padded", "strided", "same_upper", "grouped"])
def test_conv_integer_matches_onnx_and_onnxruntime(tmp_path, w_dtype, attrs):
    x = _ints((2, 4, 7, 8), np.uint8, 0)
    w = _ints((6, 4 // attrs.get("group", 1), 3, 3), w_dtype, 1)
    zw = np.asarray(5, w_dtype) if w_dtype == np.uint8 else np.arange(-3, 3, dtype=np.int8)
    m, feed = _model("ConvInteger", [("x", x, False), ("w", w, True), ("zx", np.array(131, np.uint8), True),
                                     ("zw", zw, True)], 10, **attrs)
    # onnxruntime: s8 weights with u8 data saturate (above); no dilation with auto_pad
    _check(m, feed, tmp_path, onnxruntime=w_dtype == np.uint8 and "dilations" not in attrs)


def test_conv_integer_without_zero_points_1d(tmp_path):
    x, w = _ints((1, 3, 12), np.int8, 0), _ints((2, 3, 4), np.int8, 1)
    m, feed = _model("ConvInteger", [("x", x, False), ("w", w, False)], 10, strides=[3])
    _check(m, feed, tmp_path, onnxruntime=False)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_qlinear_conv_matches_onnx_and_onnxruntime(tmp_path, per_channel, bias):
    x, w = _ints((1, 3, 9, 9), np.uint8, 0), _ints((4, 3, 3, 3), np.int8, 1)
    sw = np.linspace(0.002, 0.01, 4, dtype=np.float32) if per_channel else np.array(0.004, np.float32)
    zw = np.zeros(4, np.int8) if per_channel else np.array(0, np.int8)
    operands = [("x", x, False), ("sx", np.array(0.02, np.float32), True), ("zx", np.array(120, np.uint8), True),
                ("w", w, True), ("sw", sw, True), ("zw", zw, True), ("sy", np.array(0.05, np.float32), True),
                ("zy", np.array(110, np.uint8), True)]
    if bias:
        operands.append(("b", np.array([-900, 0, 450, 3000], np.int32), True))
    m, feed = _model("QLinearConv", operands, 10, pads=[1, 1, 1, 1], strides=[2, 2])
    _check(m, feed, tmp_path, onnxruntime=False)  # u8 x s8 (above)
    # u8 x u8 weights with a zero point, the form onnxruntime sums exactly
    operands[3:6] = [("w", _ints((4, 3, 3, 3), np.uint8, 1), True), ("sw", sw, True),
                     ("zw", np.full(4, 9, np.uint8) if per_channel else np.array(9, np.uint8), True)]
    m, feed = _model("QLinearConv", operands, 10, pads=[1, 1, 1, 1], strides=[2, 2])
    _check(m, feed, tmp_path)


def test_qlinear_conv_refuses_a_per_channel_input_scale():
    x, w = _ints((1, 3, 5, 5), np.uint8, 0), _ints((4, 3, 3, 3), np.int8, 1)
    m, _ = _model("QLinearConv", [
        ("x", x, False), ("sx", np.full(3, 0.1, np.float32), True), ("zx", np.array(1, np.uint8), True),
        ("w", w, True), ("sw", np.array(0.1, np.float32), True), ("zw", np.array(0, np.int8), True),
        ("sy", np.array(0.1, np.float32), True), ("zy", np.array(1, np.uint8), True)], 10)
    with pytest.raises(PartitaError, match=r"\(QLinearConv\): x_scale must be per tensor"):
        import_onnx(m)


# -- native kernels ------------------------------------------------------------------------------

INTEGER_KERNELS = """
func.func @conv(%x: tensor<?x4x7x8xui8>, %w: tensor<6x2x3x3xi8>, %zx: tensor<ui8>, %zw: tensor<6xi8>) -> tensor<?x6x4x8xi32> {
  %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 2, 1>, padding = array<i64: 1, 1, 1, 1>, dilation = array<i64: 1, 1>, groups = 2 : i64} : (tensor<?x4x7x8xui8>, tensor<6x2x3x3xi8>, tensor<ui8>, tensor<6xi8>) -> tensor<?x6x4x8xi32>
  func.return %0 : tensor<?x6x4x8xi32>
}
func.func @conv1d(%x: tensor<2x3x12xi8>, %w: tensor<2x3x4xi8>, %zx: tensor<i8>, %zw: tensor<i8>) -> tensor<2x2x4xi32> {
  %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 2>, padding = array<i64: 0, 1>, dilation = array<i64: 2>} : (tensor<2x3x12xi8>, tensor<2x3x4xi8>, tensor<i8>, tensor<i8>) -> tensor<2x2x4xi32>
  func.return %0 : tensor<2x2x4xi32>
}
func.func @conv_nhwc(%x: tensor<?x7x8x4xui8>, %w: tensor<6x3x3x2xi8>, %zx: tensor<ui8>, %zw: tensor<6xi8>) -> tensor<?x4x8x6xi32> {
  %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 2, 1>, padding = array<i64: 1, 1, 1, 1>, dilation = array<i64: 1, 1>, groups = 2 : i64, data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<?x7x8x4xui8>, tensor<6x3x3x2xi8>, tensor<ui8>, tensor<6xi8>) -> tensor<?x4x8x6xi32>
  func.return %0 : tensor<?x4x8x6xi32>
}
func.func @mi_tn(%a: tensor<?x3x32xui8>, %w: tensor<8x32xi8>, %za: tensor<ui8>, %zb: tensor<i8>) -> tensor<?x3x8xi32> {
  %0 = nn.matmul_integer %a, %w, %za, %zb {transpose_b = true} : (tensor<?x3x32xui8>, tensor<8x32xi8>, tensor<ui8>, tensor<i8>) -> tensor<?x3x8xi32>
  func.return %0 : tensor<?x3x8xi32>
}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_integer_kernels_compute_the_reference_semantics(tmp_path):
    module = fuse(INTEGER_KERNELS)
    assert host_ops(module) == []
    assert check_kernels(module, tmp_path) == ["nn.conv_integer", "nn.conv_integer", "nn.conv_integer",
                                                "nn.matmul_integer"]


# -- end to end ---------------------------------------------------------------------------------


@pytest.mark.parametrize("partitioner", ["eager", "collage"])
def test_qlinear_matmul_product_runs_on_cutlass_int8_tensor_cores(tmp_path, partitioner):
    """u8 activations (zero point 128) times a constant s8 weight: the i32 product and its
    folded zero-point row are one CUTLASS IMMA GEMM with a bias epilogue; the requantization
    is one fused native kernel. The simulated device's result equals onnx's reference."""
    a = _ints((2, 8, 64), np.uint8, 0)
    b = _ints((64, 32), np.int8, 1)
    m, feed = _model("QLinearMatMul", [
        ("a", a, False), ("sa", np.array(0.02, np.float32), True), ("za", np.array(128, np.uint8), True),
        ("b", b, True), ("sb", np.array(0.01, np.float32), True), ("zb", np.array(0, np.int8), True),
        ("sy", np.array(0.5, np.float32), True), ("zy", np.array(120, np.uint8), True)])
    (want,) = ReferenceEvaluator(m).run(None, feed)
    exe = partita.compile(m, ["cuda -arch=sm_90", "cutlass", "llvm"], partitioner=partitioner,
                          cache_dir=tmp_path / "cache")
    gemm = [row for row in exe.partitions if "nn.matmul_integer" in row.ops]
    assert len(gemm) == 1 and gemm[0].target == "cutlass"
    # eager takes the largest match; Collage may as well leave the bias row to the fused
    # native kernel after it (both are launch bound at this size)
    assert gemm[0].ops == ("nn.matmul_integer", "nn.add") if partitioner == "eager" else \
        gemm[0].ops[0] == "nn.matmul_integer"
    assert gemm[0].composite.startswith("cutlass.matmul_integer")
    (got,) = exe.run(a)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, want)


def _save_mlp(path, rng, x_shape: list[int], hidden: int, out: int, scale: float) -> None:
    """A float MLP ``relu(x @ w1 + b1) @ w2 + b2`` (random weights times ``scale``), the
    model a quantizer starts from, saved at ``path``."""
    k = x_shape[-1]
    shapes = {"w1": (k, hidden), "b1": (hidden,), "w2": (hidden, out), "b2": (out,)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["y"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array((rng.standard_normal(s) * scale).astype(np.float32), n) for n, s in shapes.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_an_onnxruntime_dynamically_quantized_mlp_runs_its_products_on_int8_tensor_cores(tmp_path):
    """onnxruntime's ``quantize_dynamic`` of a float MLP (DynamicQuantizeLinear of the
    activations, MatMulInteger by s8 weights): both products are CUTLASS IMMA GEMMs with the
    run-time activation zero point folded into their bias rows, and the result equals onnx's
    reference exactly (onnxruntime's x86 u8 x s8 kernel differs from both: its 16-bit pair
    sums saturate)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(7)
    _save_mlp(tmp_path / "f32.onnx", rng, [128, 256], 512, 128, 1 / 16)
    quantize_dynamic(tmp_path / "f32.onnx", tmp_path / "int8.onnx", weight_type=QuantType.QInt8)
    model = onnx.load(tmp_path / "int8.onnx")
    assert {n.op_type for n in model.graph.node} >= {"DynamicQuantizeLinear", "MatMulInteger"}
    x = rng.standard_normal((128, 256)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    exe = partita.compile(model, ["cuda -arch=sm_90", "cutlass", "llvm"], partitioner="eager",
                          cache_dir=tmp_path / "cache")
    gemms = [row for row in exe.partitions if "nn.matmul_integer" in row.ops]
    assert [row.target for row in gemms] == ["cutlass", "cutlass"]
    np.testing.assert_array_equal(exe.run(x)[0], want)


def _qdq(source, target, name: str, shape: tuple[int, ...], rng, per_channel: bool, quant_format: str = "QDQ",
         **options) -> tuple[onnx.ModelProto, Any]:
    """``source`` quantized by onnxruntime's ``quantize_static`` in the QDQ format (or
    ``quant_format="QOperator"``: QLinearConv, QLinearMatMul ...; u8 activations, s8
    weights; ``options``: more of its keyword arguments), calibrated on four random batches
    of input ``name``; the model and a session running it as written (no graph
    optimizations)."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Calibration(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(source, target, Calibration(), quant_format=getattr(QuantFormat, quant_format), per_channel=per_channel,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, **options)
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnx.load(target), ort.InferenceSession(str(target), plain, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_an_onnxruntime_statically_quantized_qdq_mlp_runs_its_products_on_int8_tensor_cores(tmp_path, per_channel):
    """onnxruntime's ``quantize_static`` in the QDQ format (QuantizeLinear / DequantizeLinear
    around float MatMuls, s8 weights per tensor or per output column, u8 activations): each
    ``DQ(xq) @ DQ(wq)`` is imported as the integer product it stands for, a CUTLASS IMMA
    GEMM scaled once, the activation's dequantize gone. The result equals onnxruntime's
    unoptimized run exactly (its QDQ nodes run as written; its optimized run, with fused
    QDQ kernels, differs from that by a few quantization steps per channel)."""
    rng = np.random.default_rng(3)
    _save_mlp(tmp_path / "f32.onnx", rng, [2, 16, 64], 128, 32, 1 / 8)
    model, as_written = _qdq(tmp_path / "f32.onnx", tmp_path / "qdq.onnx", "x", (2, 16, 64), rng, per_channel)
    assert {"QuantizeLinear", "DequantizeLinear", "MatMul"} <= {n.op_type for n in model.graph.node}
    exe = partita.compile(model, ["cuda -arch=sm_90", "cutlass", "llvm"], partitioner="eager")
    gemms = [row for row in exe.partitions if any(op in row.ops for op in ("nn.matmul_integer", "nn.matmul", "nn.dense"))]
    assert [(row.target, "nn.matmul_integer" in row.ops) for row in gemms] == [("cutlass", True)] * 2
    dequantized = [op for op in exe.module.walk() if isinstance(op, nn.DequantizeOp)]
    assert all(not isinstance(use.operation, nn.MatmulOp | nn.DenseOp) for op in dequantized for use in op.result.uses)
    x = rng.standard_normal((2, 16, 64)).astype(np.float32)
    (got,) = exe.run(x)
    np.testing.assert_array_equal(got, as_written.run(None, {"x": x})[0])


QDQ_EXAMPLES = {
    # example, its input shape, the integer products and float products its import holds
    "encoder": ((2, 16, 64), {"nn.matmul_integer": 6, "nn.matmul": 2}),
    "cnn": ((2, 3, 16, 16), {"nn.matmul_integer": 1, "nn.conv_integer": 2}),
}


@pytest.mark.parametrize("example", QDQ_EXAMPLES)
def test_an_onnxruntime_qdq_example_equals_onnxruntime_as_written(tmp_path, example):
    """The bundled encoder layer and CNN (examples/) quantized by ``quantize_static`` (QDQ,
    per-channel s8 weights): projections, the classifier head and the convolutions become
    integer products; attention products (both operands activations) stay float products
    of the dequantized values. The CNN's convolutions read 3 and 8 channels, too few for
    the int8 CUTLASS convolution's 16-channel accesses: they run as the native integer
    kernel (tests/ops/test_ops_qdq_conv.py has one with CUTLASS's). The whole equals
    onnxruntime's run of the QDQ graph as written (these products happen to requantize to
    the same steps: in general one step may differ, see there)."""
    rng = np.random.default_rng(0)
    shape, expected = QDQ_EXAMPLES[example]
    path = Path(__file__).resolve().parents[2] / "examples" / f"{example}.onnx"
    model, as_written = _qdq(path, tmp_path / "qdq.onnx", "input", shape, rng, per_channel=True)
    products = [op.name for op in import_onnx(model).walk() if op.name in ("nn.matmul_integer", "nn.matmul",
                                                                          "nn.dense", "nn.conv2d", "nn.conv_integer")]
    assert {name: products.count(name) for name in set(products)} == expected, products
    x = rng.standard_normal(shape).astype(np.float32)
    (want,) = as_written.run(None, {"input": x})
    exe = partita.compile(model)
    convs = [row.target for row in exe.partitions if "nn.conv_integer" in row.ops]
    assert convs == ["cuda"] * expected.get("nn.conv_integer", 0)
    (got,) = exe.run(x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
@pytest.mark.skipif(cuda_status() is not None, reason=f"needs a CUDA device ({cuda_status()})")
@pytest.mark.parametrize("example", QDQ_EXAMPLES)
def test_an_onnxruntime_qdq_example_on_the_gpu(tmp_path, example):  # pragma: no cover
    """The same quantized examples compiled for the GPU present (its int8 tensor cores:
    CUTLASS IMMA GEMMs, the native integer convolutions) against onnxruntime as written:
    within one quantization step of the output (the float parts between the products,
    softmax and normalizations, round on the device as they do not on the host)."""
    rng = np.random.default_rng(0)
    shape, expected = QDQ_EXAMPLES[example]
    path = Path(__file__).resolve().parents[2] / "examples" / f"{example}.onnx"
    model, as_written = _qdq(path, tmp_path / "qdq.onnx", "input", shape, rng, per_channel=True)
    x = rng.standard_normal(shape).astype(np.float32)
    (want,) = as_written.run(None, {"input": x})
    exe = partita.compile(model, ["cuda -arch=native", "cutlass", "llvm"])
    gemms = [row.target for row in exe.partitions if "nn.matmul_integer" in row.ops]
    # the encoder's larger projections on CUTLASS (as on sm_90 here: two of its four kernels)
    assert len(gemms) == (4 if example == "encoder" else 1) and gemms.count("cutlass") == (2 if example == "encoder"
                                                                                            else 0), gemms
    (got,) = exe.run(x)
    producer = {n.output[0]: n for n in model.graph.node}
    last = producer[model.graph.output[0].name]
    while last.op_type == "Identity":
        last = producer[last.input[0]]
    (scale,) = [i for i in model.graph.initializer if i.name == last.input[1]]
    assert last.op_type == "DequantizeLinear"
    np.testing.assert_allclose(got, want, rtol=0, atol=float(numpy_helper.to_array(scale)) * (1 + 1e-5))


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_a_qdq_gemm_with_a_transposed_weight_is_an_integer_gemm(tmp_path, per_channel):
    """A classifier head as torchvision exports it, ``Gemm(x, W[N, K], b, transB=1)``,
    quantized by ``quantize_static`` (QDQ): the integer GEMM reads the stored weight
    transposed, its per-channel scales along the weight's first axis."""
    rng = np.random.default_rng(4)
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    graph = helper.make_graph(
        [node], "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 96])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array((rng.standard_normal((40, 96)) / 8).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(40).astype(np.float32), "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "f32.onnx")

    model, as_written = _qdq(tmp_path / "f32.onnx", tmp_path / "qdq.onnx", "x", (8, 96), rng, per_channel)
    assert "Gemm" in {n.op_type for n in model.graph.node}
    products = [op.name for op in import_onnx(model).walk() if op.name in ("nn.matmul_integer", "nn.dense")]
    assert products == ["nn.matmul_integer"]
    x = rng.standard_normal((8, 96)).astype(np.float32)
    (want,) = as_written.run(None, {"x": x})
    (got,) = partita.compile(model).run(x)
    np.testing.assert_array_equal(got, want)
