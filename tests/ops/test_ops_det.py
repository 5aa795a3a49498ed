"""ONNX Det as ``nn.det``: determinants of the trailing square matrices, a host step, against
``onnx.reference`` (a single matrix gives a 0-d result, which the plan keeps 0-d)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import partita

ONNX_OPS = {"Det"}


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_det_matches_onnx_and_runs_as_a_host_step(shape):
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape[:-2]))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    exe = partita.compile(model)
    (got,) = exe.run(x)
    assert got.shape == want.shape == shape[:-2]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert any("nn.det" in step for step in exe.runtime.plan.host_ops)
