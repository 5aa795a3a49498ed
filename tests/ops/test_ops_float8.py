"""float8 element types (f8E4M3FN, f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ): Cast and CastLike with
and without saturation, QuantizeLinear / DequantizeLinear into and out of float8, and float8
constants, against ``onnx.reference``; the casts are native kernels (their conversions are
checked bit for bit in ``tests/lowering/test_float8_kernels.py``)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import partita
from partita.dialects import nn
from partita.ir.constants import dense_values

ONNX_OPS = {"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear"}
FLOAT8 = {TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
          TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2, TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz}
X = np.array([0.0, -0.0, 0.3, -1.7, 300.0, 1e5, -1e6, np.inf, -np.inf, np.nan, 1e-9], np.float32)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("to", sorted(FLOAT8))
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_float8_and_back(to, saturate):
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate),
         helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [X.size])],
        [helper.make_tensor_value_info("y", to, [X.size]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [X.size])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    want = ReferenceEvaluator(model).run(None, {"x": X})
    exe = partita.compile(model)
    got = exe.run(X)
    _same(got[0], want[0])
    _same(got[1], want[1])
    assert not exe.runtime.plan.host_ops  # kernels read and write float8


def test_castlike_takes_the_float8_type_of_its_target():
    graph = helper.make_graph(
        [helper.make_node("CastLike", ["x", "like"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [X.size]),
         helper.make_tensor_value_info("like", TensorProto.FLOAT8E5M2, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT8E5M2, [X.size])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    like = np.zeros(1, ml_dtypes.float8_e5m2)
    (want,) = ReferenceEvaluator(model).run(None, {"x": X, "like": like})
    (got,) = partita.compile(model).run(X, like)
    _same(got, want)


def test_quantize_and_dequantize_through_float8_with_a_constant_zero_point():
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "scale")
    zero = numpy_helper.from_array(np.array(0, ml_dtypes.float8_e4m3fn), "zero")
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [X.size])],
        [helper.make_tensor_value_info("q", TensorProto.FLOAT8E4M3FN, [X.size]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [X.size])], [scale, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    want = ReferenceEvaluator(model).run(None, {"x": X})
    got = partita.compile(model).run(X)
    _same(got[0], want[0])
    _same(got[1], want[1])


def test_a_float8_constant_keeps_its_bytes():
    values = np.array([1.5, -448.0, 0.0], ml_dtypes.float8_e4m3fn)
    const = nn.ConstantOp(values)
    assert str(const.result.type.element_type) == "f8E4M3FN"
    _same(np.asarray(dense_values(const.value)), values)


def test_float8_takes_no_arithmetic():
    from xdsl.dialects.builtin import TensorType
    from xdsl.ir import Block
    from xdsl.utils.exceptions import VerifyException

    (a,) = Block(arg_types=[TensorType(nn.element_type_of(ml_dtypes.float8_e5m2), (2,))]).args
    with pytest.raises(VerifyException, match="element type"):
        nn.AddOp(a, a).verify()
