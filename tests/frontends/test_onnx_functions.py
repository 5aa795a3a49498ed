"""ONNX function ops imported as their schema's function body when no converter takes them
(``partita/frontends/onnx/functions.py``)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import partita
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError


def _model(nodes, inputs, outputs, opset=18, initializers=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_center_crop_pad_runs_as_its_function_body():
    """No converter: CenterCropPad becomes its body's Shape / Slice / Pad arithmetic."""
    model = _model([helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[1, 2])],
                   [("x", TensorProto.FLOAT, [2, 7, 4, 3])], [("y", TensorProto.FLOAT)],
                   initializers=[helper.make_tensor("shape", TensorProto.INT64, [2], [5, 6])])
    module = import_onnx(model)
    names = {op.name for op in module.walk()}
    assert "nn.pad" in names or "nn.dyn" in names
    x = np.random.default_rng(0).standard_normal((2, 7, 4, 3)).astype(np.float32)
    (got,) = partita.compile(model).run(x)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    assert got.shape == (2, 5, 6, 3)
    np.testing.assert_array_equal(got, want)


def test_schema_defaults_fill_unset_attributes():
    """HannWindow's body reads ``periodic`` and ``output_datatype``, which the node leaves
    unset: the schema's defaults (periodic, float) apply."""
    model = _model([helper.make_node("HannWindow", ["n"], ["w"])], [], [("w", TensorProto.FLOAT)], opset=17,
                   initializers=[helper.make_tensor("n", TensorProto.INT64, [], [8])])
    (got,) = partita.compile(model).run()
    np.testing.assert_allclose(got, np.sin(np.pi * np.arange(8) / 8) ** 2, atol=1e-6)
    assert got.dtype == np.float32


def test_a_body_that_cannot_import_reports_the_op_and_its_body():
    model = _model([helper.make_node("Bernoulli", ["x"], ["y"], name="coin")], [("x", TensorProto.FLOAT, [4])],
                   [("y", TensorProto.FLOAT)])
    with pytest.raises(PartitaError, match=r"node 0 'coin' \(Bernoulli\): unsupported op type 'Bernoulli' "
                                           r"\(its ONNX function body: RandomUniformLike: unsupported op type"):
        import_onnx(model)
