"""Narrow storage types (ONNX INT4, UINT4, INT2, UINT2, FLOAT4E2M1 and the MX scale type
FLOAT8E8M0): Cast into and out of them, QuantizeLinear / DequantizeLinear through them,
and constants of them, against ``onnx.reference`` (and, for FLOAT8E8M0's rounding modes,
``onnx.numpy_helper.to_float8e8m0``). They are stored one element per byte, as ``ml_dtypes``
lays them out; files pack them, the importer unpacks."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import partita
from partita.dialects import make_context, nn
from partita.ir import PartitaError
from partita.ir.constants import dense_values
from partita.ir.parsing import parse_module

NARROW = {TensorProto.INT4: ml_dtypes.int4, TensorProto.UINT4: ml_dtypes.uint4, TensorProto.INT2: ml_dtypes.int2,
          TensorProto.UINT2: ml_dtypes.uint2, TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn}
X = np.array([0.0, -0.0, 0.3, -1.7, 2.5, 5.0, -7.9, 9.7, -9.0, 100.0, 0.26, -0.25], np.float32)


def _model(nodes, inputs, outputs, initializers=(), opset: int = 21):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("to", sorted(NARROW), ids=lambda t: TensorProto.DataType.Name(t))
def test_cast_to_a_narrow_type_and_back(to):
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to), helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [X.size])],
                   [helper.make_tensor_value_info("y", to, [X.size]),
                    helper.make_tensor_value_info("z", TensorProto.FLOAT, [X.size])])
    want = ReferenceEvaluator(model).run(None, {"x": X})
    got = partita.compile(model).run(X)
    _same(got[0], want[0])  # integers wrap, FP4 rounds to even and saturates at 6
    _same(got[1], want[1])


E8M0_EDGES = np.array([0.0, 1.0, 1.25, 1.5, 1.75, 3.0, -3.0, 0.75, 2.0**127, 1.5 * 2.0**127, 2.0**-127,
                       1.5 * 2.0**-128, 1.75 * 2.0**-128, 1e-45, np.inf, -np.inf, np.nan], np.float32)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_e8m0_rounds_as_onnx_says(round_mode, saturate):
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, saturate=saturate,
                                     round_mode=round_mode)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [E8M0_EDGES.size])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT8E8M0, [E8M0_EDGES.size])], opset=25)
    (got,) = partita.compile(model).run(E8M0_EDGES)
    want = numpy_helper.to_float8e8m0(E8M0_EDGES, bool(saturate), round_mode)
    assert got.dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_an_unknown_round_mode_is_refused_at_import():
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, round_mode="even")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT8E8M0, [2])], opset=25)
    with pytest.raises(PartitaError, match="round_mode 'even' is not one of up, down, nearest"):
        partita.compile(model)


@pytest.mark.parametrize("to", [TensorProto.INT4, TensorProto.UINT2, TensorProto.FLOAT4E2M1],
                         ids=lambda t: TensorProto.DataType.Name(t))
def test_quantize_and_dequantize_through_a_narrow_type(to):
    zero = numpy_helper.from_array(np.array(1 if to != TensorProto.FLOAT4E2M1 else 0, NARROW[to]), "zero")
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "scale")
    model = _model([helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
                    helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [X.size])],
                   [helper.make_tensor_value_info("q", to, [X.size]),
                    helper.make_tensor_value_info("y", TensorProto.FLOAT, [X.size])], [scale, zero])
    want = ReferenceEvaluator(model).run(None, {"x": X})
    got = partita.compile(model).run(X)
    _same(got[0], want[0])  # saturated to the type's range
    _same(got[1], want[1])


def test_a_blockwise_int4_weight_keeps_its_signs():
    """A weight-only int4 MatMul (DequantizeLinear of a packed int4 initializer, one scale
    per block of 32 rows, as block-quantized LLM exports write it): the importer unpacks the
    file's nibbles and the folded weight keeps the negative values."""
    rng = np.random.default_rng(0)
    w = rng.integers(-8, 8, (64, 15)).astype(ml_dtypes.int4)  # an odd count: the last byte half used
    weight = numpy_helper.from_array(w, "w")
    assert len(weight.raw_data) == (w.size + 1) // 2  # two per byte in the file
    scale = numpy_helper.from_array((rng.random((2, 15)) * 0.1 + 0.01).astype(np.float32), "s")
    model = _model([helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], axis=0, block_size=32),
                    helper.make_node("MatMul", ["x", "wf"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 15])], [weight, scale])
    x = rng.standard_normal((4, 64)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = partita.compile(model).run(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("values", [np.array([-3, 7, -8, 1], ml_dtypes.int4), np.array([0, 15, 3], ml_dtypes.uint4),
                                    np.array([-2, 1, 0], ml_dtypes.int2), np.array([0, 3], ml_dtypes.uint2),
                                    np.array([0.5, -6.0, 3.0], ml_dtypes.float4_e2m1fn),
                                    np.array([1.0, 2.0**-127, 1024.0], ml_dtypes.float8_e8m0fnu)],
                         ids=lambda v: v.dtype.name)
def test_a_narrow_constant_survives_its_text_form(values):
    const = nn.ConstantOp(values)
    _same(np.asarray(dense_values(const.value)), values)
    text = f"func.func @f() -> {const.result.type} {{\n  %0 = nn.constant {const.value}\n  func.return %0 : {const.result.type}\n}}"
    module = parse_module(text, make_context())
    (parsed,) = [op for op in module.walk() if isinstance(op, nn.ConstantOp)]
    _same(np.asarray(dense_values(parsed.value)), values)
