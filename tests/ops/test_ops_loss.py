"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss decomposed into nn ops match
``onnx.reference`` for every reduction, with and without class weights and ignore_index;
both run on the simulated device after a full compile too."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError
from partita.runtime.reference import run

ONNX_OPS = {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"}
N, C, D = 3, 5, 2


def _loss_model(op_type, reduction, weighted, ignore_index, log_prob=False):
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    inputs = ["x", "t"] + (["w"] if weighted else [])
    outputs = ["y"] + (["lp"] if log_prob else [])
    out_shape = [N, D] if reduction == "none" else []
    graph = helper.make_graph(
        [helper.make_node(op_type, inputs, outputs, **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, C, D]),
         helper.make_tensor_value_info("t", TensorProto.INT64, [N, D])]
        + ([helper.make_tensor_value_info("w", TensorProto.FLOAT, [C])] if weighted else []),
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)]
        + ([helper.make_tensor_value_info("lp", TensorProto.FLOAT, [N, C, D])] if log_prob else []))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _feeds(weighted, ignore_index):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, C, D)).astype(np.float32)
    t = rng.integers(0, C, (N, D)).astype(np.int64)
    if ignore_index is not None:
        t[0, 0] = t[2, 1] = ignore_index  # possibly outside [0, C): never gathered
    feeds = {"x": x, "t": t}
    if weighted:
        feeds["w"] = rng.random(C).astype(np.float32)
    return feeds


@pytest.mark.parametrize("op_type", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize(("weighted", "ignore_index"), [(False, None), (True, None), (False, -7), (True, 2)])
def test_loss_matches_onnx_reference(op_type, reduction, weighted, ignore_index):
    log_prob = op_type == "SoftmaxCrossEntropyLoss"
    model = _loss_model(op_type, reduction, weighted, ignore_index, log_prob)
    feeds = _feeds(weighted, ignore_index)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = run(import_onnx(model), *feeds.values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_loss_decomposes_into_nn_ops():
    module = import_onnx(_loss_model("NegativeLogLikelihoodLoss", "mean", True, 2))
    names = {op.name for op in module.walk()}
    assert {"nn.gather_elements", "nn.take", "nn.where", "nn.reduce_sum", "nn.divide"} <= names


def test_unknown_reduction_is_refused():
    model = _loss_model("NegativeLogLikelihoodLoss", "max", False, None)
    with pytest.raises(PartitaError, match=r"\(NegativeLogLikelihoodLoss\): reduction 'max' is not one of"):
        import_onnx(model)


def test_loss_compiles_and_runs_on_the_simulated_device():
    import partita

    model = _loss_model("SoftmaxCrossEntropyLoss", "mean", True, 2, log_prob=True)
    feeds = _feeds(True, 2)
    want = ReferenceEvaluator(model).run(None, feeds)
    exe = partita.compile(model)
    got = exe.run(*feeds.values())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
