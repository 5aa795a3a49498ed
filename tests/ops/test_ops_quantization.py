"""Quantization forms of onnxruntime's quantizer (issue 24): DynamicQuantizeLinear (dynamic
quantization: the range measured at run time) and Quantize/DequantizeLinear with a
one-element scale beside a scalar zero point (static QDQ exports), checked against onnx's
reference and onnxruntime, through the references and compiled end to end."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import partita
from partita.frontends.onnx import import_onnx
from partita.runtime.reference import run

ONNX_OPS = ("DynamicQuantizeLinear",)
"""The op types this file converts (``test_onnx_import`` checks every converter has a test)."""


def _dynamic_quantize(shape) -> onnx.ModelProto:
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "y_scale", "y_zero_point"])
    graph = helper.make_graph([node], "dql", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, shape),
                               helper.make_tensor_value_info("y_scale", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("y_zero_point", TensorProto.UINT8, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


@pytest.mark.parametrize("shift", [0.0, 3.0, -3.0], ids=["mixed", "all_positive", "all_negative"])
def test_dynamic_quantize_linear_matches_onnx_and_onnxruntime(tmp_path, shift: float) -> None:
    import onnxruntime as ort

    m = _dynamic_quantize([4, 6])
    x = (np.random.default_rng(0).standard_normal((4, 6)) + shift).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": x})
    path = tmp_path / "dql.onnx"
    onnx.save(m, path)
    ort_out = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    exe = partita.compile(str(path), cache_dir=tmp_path / "cache")
    for got in (run(import_onnx(m), x), exe.run(x)):
        for g, w, o in zip(got, want, ort_out, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            if g.dtype == np.uint8:
                np.testing.assert_array_equal(g, w)
                assert np.abs(g.astype(int) - o.astype(int)).max() <= 1  # onnxruntime's rounding
            else:
                np.testing.assert_allclose(g, w, rtol=1e-6)
    assert not exe.runtime.plan.host_ops


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
def test_one_element_scale_beside_a_scalar_zero_point(tmp_path, op: str) -> None:
    """onnxruntime's static QDQ quantization of a BERT writes a [1] scale and a scalar
    zero point for one tensor: both are per-tensor parameters."""
    quantize = op == "QuantizeLinear"
    x = np.linspace(-1, 2, 12, dtype=np.float32).reshape(3, 4) if quantize else \
        np.arange(12, dtype=np.uint8).reshape(3, 4)
    types = (TensorProto.FLOAT, TensorProto.UINT8) if quantize else (TensorProto.UINT8, TensorProto.FLOAT)
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "scale", "zero"], ["y"])], "qdq",
        [helper.make_tensor_value_info("x", types[0], [3, 4])], [helper.make_tensor_value_info("y", types[1], [3, 4])],
        [numpy_helper.from_array(np.array([0.05], np.float32), "scale"),
         numpy_helper.from_array(np.array(7, np.uint8), "zero")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    path = tmp_path / "qdq.onnx"
    onnx.save(m, path)
    for (got,) in (run(import_onnx(m), x), partita.compile(str(path), cache_dir=tmp_path / "cache").run(x)):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)
