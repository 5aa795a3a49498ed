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


def test_a_body_that_cannot_import_reports_the_op_and_its_body(monkeypatch):
    """Bernoulli without its converter, and its body's RandomUniformLike without one too:
    the error names the op and what of its body failed."""
    from partita.frontends.onnx.registry import CONVERTERS

    for op in ("Bernoulli", "RandomUniformLike"):
        monkeypatch.delitem(CONVERTERS, op)
    model = _model([helper.make_node("Bernoulli", ["x"], ["y"], name="coin")], [("x", TensorProto.FLOAT, [4])],
                   [("y", TensorProto.FLOAT)])
    with pytest.raises(PartitaError, match=r"node 0 'coin' \(Bernoulli\): unsupported op type 'Bernoulli' "
                                           r"\(its ONNX function body: RandomUniformLike: unsupported op type"):
        import_onnx(model)


@pytest.mark.parametrize("rule", ["linear", "gated_delta"])
def test_a_body_with_a_scan_reading_the_functions_values(rule):
    """LinearAttention (opset 27) has no converter; its context-dependent body runs the
    recurrence as a Scan whose body reads values of the function: those reads are renamed
    with the body's own, and the Scan unrolls. Both outputs match onnx's reference."""
    from onnx.reference import ReferenceEvaluator

    b, t, h, d = 1, 3, 2, 4
    inputs = ["q", "k", "v", "", *(["decay", "beta"] if rule == "gated_delta" else [])]
    node = helper.make_node("LinearAttention", inputs, ["o", "state"], q_num_heads=h, kv_num_heads=h,
                            update_rule=rule)
    shapes = {"q": [b, t, h * d], "k": [b, t, h * d], "v": [b, t, h * d], "decay": [b, t, h], "beta": [b, t, h]}
    model = _model([node], [(n, TensorProto.FLOAT, shapes[n]) for n in inputs if n],
                   [("o", TensorProto.FLOAT), ("state", TensorProto.FLOAT)], opset=27)
    rng = np.random.default_rng(1)
    feeds = {n: (rng.standard_normal(shapes[n]) * 0.5).astype(np.float32) for n in inputs if n}
    if "beta" in feeds:
        feeds["beta"] = 1 / (1 + np.exp(-feeds["beta"]))  # an update rate in (0, 1)
        feeds["decay"] = -np.abs(feeds["decay"])  # a log-space decay
    want = ReferenceEvaluator(model).run(None, feeds)
    got = partita.compile(model).run(feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_captured_names_in_a_functions_subgraph_are_renamed():
    from partita.frontends.onnx.functions import _with_captures_renamed

    inner = helper.make_graph(
        [helper.make_node("Add", ["x", "outer"], ["y"]),
         helper.make_node("If", ["cond"], ["z"], then_branch=helper.make_graph(
             [helper.make_node("Mul", ["y", "deep"], ["w"])], "then", [], [helper.make_tensor_value_info("w", 1, None)]),
             else_branch=helper.make_graph([], "else", [], [helper.make_tensor_value_info("y", 1, None)]))],
        "body", [helper.make_tensor_value_info("x", 1, None)], [helper.make_tensor_value_info("z", 1, None)])
    attribute = helper.make_attribute("body", inner)
    renamed = _with_captures_renamed(attribute, lambda name: "f/" + name, set())
    add, branch = renamed.g.node
    assert list(add.input) == ["x", "f/outer"] and list(branch.input) == ["f/cond"]
    then = next(a.g for a in branch.attribute if a.name == "then_branch")
    assert list(then.node[0].input) == ["y", "f/deep"]  # y: the enclosing subgraph's own
    assert list(attribute.g.node[0].input) == ["x", "outer"]  # the schema's body is not modified
