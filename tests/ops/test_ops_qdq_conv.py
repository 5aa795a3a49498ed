"""onnxruntime's static QDQ form of a convolution, ``Conv(DequantizeLinear(xq),
DequantizeLinear(wq), bias)``, imported as the integer convolution it stands for
(``nn.conv_integer``, i32) scaled once by ``sx * sw``: a CNN quantized by ``quantize_static``
(per tensor and per channel) runs its convolutions as CUTLASS int8 tensor-core kernels
and matches onnxruntime's run of the QDQ graph as written; a depthwise convolution and an
asymmetric weight keep the float convolution of the dequantized values.

Not bit-equal, by design: onnxruntime as written convolves the dequantized f32 values (each
dequantized operand, product and partial sum rounded to f32), partita sums the integers
exactly and rounds once (``acc * (sx * sw)``). Before requantization the two differ by a
few 1e-6 (measured: at most 2.6e-6 on values of order 1, a fifth to two fifths of them
bit-equal); every QDQ convolution's output is then requantized to its activation's
steps, which hides that difference except where a value lies within it of a rounding
boundary: there the two land one step apart (measured over 100 inputs of this CNN: at most
one output step, on 0.02-0.03 % of the elements)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ops.test_ops_qlinear import _qdq  # tests/ops/test_ops_qlinear.py

import partita
from partita.dialects import nn
from partita.frontends.onnx import import_onnx

TARGETS = ["cuda -arch=sm_90", "cutlass", "llvm"]
SHAPE = (2, 16, 12, 12)


def _save_cnn(path, rng, channels: int = 32, *, depthwise: bool = False) -> None:
    """A float CNN: a 3x3 convolution (16 -> ``channels``, padded) with bias and ReLU, a
    strided 3x3 one (depthwise with ``depthwise``) with bias and ReLU, and a 1x1 head (16
    channels), the model a quantizer starts from, saved at ``path``."""
    c2 = 1 if depthwise else channels
    shapes = {"w1": (channels, SHAPE[1], 3, 3), "b1": (channels,), "w2": (channels, c2, 3, 3), "b2": (channels,),
              "w3": (16, channels, 1, 1), "b3": (16,)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["h2"], pads=[1, 1, 1, 1], strides=[2, 2],
                              group=channels if depthwise else 1),
             helper.make_node("Relu", ["h2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["y"])]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array((rng.standard_normal(s) / 8).astype(np.float32), n) for n, s in shapes.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _output_step(model: onnx.ModelProto) -> float:
    """The scale of the graph output's DequantizeLinear: one quantization step of it."""
    (last,) = [n for n in model.graph.node if n.output[0] == model.graph.output[0].name]
    (scale,) = [i for i in model.graph.initializer if i.name == last.input[1]]
    return float(numpy_helper.to_array(scale))


def _check_close(got: np.ndarray, want: np.ndarray, step: float) -> None:
    """Within one output quantization step, and equal but for a few elements (the module
    docstring says why)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=step * (1 + 1e-5))
    assert np.count_nonzero(got != want) <= got.size // 100


@pytest.fixture(scope="module", params=[False, True], ids=["per-tensor", "per-channel"])
def qdq_cnn(request, tmp_path_factory):
    """The CNN quantized in the QDQ format, onnxruntime's session running it as written,
    and partita's eager compilation of it for cuda, cutlass and the host."""
    tmp = tmp_path_factory.mktemp("qdq_cnn")
    rng = np.random.default_rng(5)
    _save_cnn(tmp / "f32.onnx", rng)
    model, as_written = _qdq(tmp / "f32.onnx", tmp / "qdq.onnx", "x", SHAPE, rng, request.param)
    return model, as_written, partita.compile(model, TARGETS, partitioner="eager")


def test_qdq_convolutions_are_integer_convolutions_scaled_once(qdq_cnn):
    """Each ``Conv(DQ(xq), DQ(wq), b)`` is one ``nn.conv_integer`` of the quantized
    integers, a cast, one multiply by ``sx * sw`` and the float bias; no float convolution
    and no dequantize of an activation feeding one is left. The input's zero point (the
    raw input's, not 0) is folded out for the tensor cores: the input padded with it and
    an i32 row per output channel."""
    model, _, _ = qdq_cnn
    module = import_onnx(model)
    ops = [op.name for op in module.walk()]
    assert ops.count("nn.conv_integer") == 3 and "nn.conv2d" not in ops
    assert ops.count("nn.pad") == 1  # the first convolution's: its zero point is not 0
    for conv in (op for op in module.walk() if isinstance(op, nn.ConvIntegerOp)):
        assert isinstance(conv.input.owner, nn.QuantizeOp | nn.PadOp)
        (use,) = conv.result.uses
        cast = use.operation if isinstance(use.operation, nn.CastOp) else next(iter(use.operation.result.uses)).operation
        assert isinstance(cast, nn.CastOp)
        (scale,) = [use.operation for use in cast.result.uses]
        assert isinstance(scale, nn.MultiplyOp)
    assert not any(isinstance(op, nn.DequantizeOp) and any(isinstance(u.operation, nn.ConvIntegerOp | nn.Conv2DOp)
                                                           for u in op.result.uses) for op in module.walk())


def test_qdq_convolutions_run_on_cutlass_int8_tensor_cores(qdq_cnn):
    """Converted to NHWC (one transpose in, one out), every convolution is a CUTLASS IMMA
    implicit-GEMM convolution (the first with its zero-point row as the bias epilogue); the
    simulated device's result matches onnxruntime as written."""
    model, as_written, exe = qdq_cnn
    convs = [row for row in exe.partitions if "nn.conv_integer" in row.ops]
    assert [(row.target, row.composite) for row in convs] == [
        ("cutlass", "cutlass.conv_integer_bias"), ("cutlass", "cutlass.conv_integer"), ("cutlass", "cutlass.conv_integer")]
    kernels = [op for op in exe.module.walk() if op.name == "byoc.binary"
               and op.attributes["target"].kind.data == "cutlass"]
    names = [str(r.data["kernel"].data) for b in kernels for r in b.attributes["kernels"].data.values()]
    assert len(names) == 3 and all("i16832fprop_optimized_u8_s8" in n for n in names), names
    assert sum(op.name == "nn.transpose" for op in exe.module.walk()) == 2
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    (got,) = exe.run(x)
    _check_close(got, as_written.run(None, {"x": x})[0], _output_step(model))


@pytest.mark.parametrize("variant", ["depthwise", "asymmetric"])
def test_depthwise_and_asymmetric_qdq_convolutions_stay_float(tmp_path, variant):
    """A depthwise convolution (grouped: no int8 CUTLASS form, ``groups`` not 1) and
    asymmetric weights (zero points that do not factor out of the product) keep the float
    convolution of the dequantized values, and still match onnxruntime as written."""
    rng = np.random.default_rng(6)
    _save_cnn(tmp_path / "f32.onnx", rng, depthwise=variant == "depthwise")
    options = {"extra_options": {"WeightSymmetric": False}} if variant == "asymmetric" else {}
    model, as_written = _qdq(tmp_path / "f32.onnx", tmp_path / "qdq.onnx", "x", SHAPE, rng, False, **options)
    ops = [op.name for op in import_onnx(model).walk()]
    expected = {"depthwise": (2, 1), "asymmetric": (0, 3)}[variant]  # (conv_integer, conv2d)
    assert (ops.count("nn.conv_integer"), ops.count("nn.conv2d")) == expected
    exe = partita.compile(model, TARGETS, partitioner="eager")
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    (got,) = exe.run(x)
    _check_close(got, as_written.run(None, {"x": x})[0], _output_step(model))


def test_qoperator_convolutions_run_on_int8_tensor_cores_too(tmp_path):
    """onnxruntime's QOperator format: QLinearConv of u8 activations (a non-zero zero point,
    the raw input's) by s8 weights of zero point 0. The same integer convolution, its input
    zero point folded out (the input padded with it, an i32 row per output channel), runs
    on CUTLASS, and the result equals ONNX's reference bit for bit. (Not onnxruntime's:
    without VNNI its u8 x s8 kernels add products in saturating 16-bit pairs, which is why
    its quantizer offers ``reduce_range``: here it is off by 36 output steps, and exact
    with ``reduce_range``.)"""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(7)
    _save_cnn(tmp_path / "f32.onnx", rng)
    model, _ = _qdq(tmp_path / "f32.onnx", tmp_path / "qop.onnx", "x", SHAPE, rng, True, "QOperator")
    assert [n.op_type for n in model.graph.node].count("QLinearConv") == 3
    exe = partita.compile(model, TARGETS, partitioner="eager")
    convs = [row for row in exe.partitions if "nn.conv_integer" in row.ops]
    assert [row.target for row in convs] == ["cutlass"] * 3, [(row.target, row.ops) for row in convs]
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    (got,) = exe.run(x)
    spec = onnx.ModelProto()
    spec.CopyFrom(model)
    spec.opset_import[0].version = 21  # onnx.reference implements DequantizeLinear from opset 19 (same semantics)
    np.testing.assert_array_equal(got, ReferenceEvaluator(spec).run(None, {"x": x})[0])


def test_qdq_convolutions_of_any_image_size_run_on_int8_tensor_cores(tmp_path):
    """The quantized CNN with its input's height and width made run-time dims: its
    convolutions are still CUTLASS IMMA implicit GEMMs (N, H and W are the kernel's run-time
    arguments), and one compile runs two image sizes as onnxruntime does."""
    rng = np.random.default_rng(5)
    _save_cnn(tmp_path / "f32.onnx", rng)
    model, _ = _qdq(tmp_path / "f32.onnx", tmp_path / "qdq.onnx", "x", SHAPE, rng, False)
    for axis, label in ((2, "H"), (3, "W")):
        model.graph.input[0].type.tensor_type.shape.dim[axis].dim_param = label
    del model.graph.value_info[:]
    exe = partita.compile(model, TARGETS, partitioner="eager")
    assert [row.target for row in exe.partitions if "nn.conv_integer" in row.ops] == ["cutlass"] * 3
    import onnxruntime as ort

    plain = ort.SessionOptions()  # as written, as the other tests compare
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), plain, providers=["CPUExecutionProvider"])
    for h, w in ((12, 12), (9, 14)):
        x = rng.standard_normal((2, 16, h, w)).astype(np.float32)
        (got,) = exe.run(x)
        _check_close(got, session.run(None, {"x": x})[0], _output_step(model))
