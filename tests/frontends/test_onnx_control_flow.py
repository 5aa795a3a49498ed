"""ONNX If, Loop and Scan, imported by evaluating their control at import
(``partita/frontends/onnx/control_flow.py``): checked against onnxruntime, through the
references and compiled end to end, with the located errors for what stays unsupported."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import partita
from partita.frontends.onnx import import_onnx
from partita.frontends.onnx.control_flow import UNROLL_NODE_LIMIT
from partita.ir import PartitaError
from partita.runtime.reference import run

ONNX_OPS = ("If", "Loop", "Scan")
"""The op types this file converts (``test_onnx_import`` checks every converter has a test)."""

F32 = TensorProto.FLOAT


def _info(name, elem=F32, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _op_names(module) -> list[str]:
    return [op.name for op in module.walk()]


def _branches(then_nodes, then_out, else_nodes, else_out):
    return dict(then_branch=helper.make_graph(then_nodes, "then", [], [then_out]),
                else_branch=helper.make_graph(else_nodes, "else", [], [else_out]))


def test_an_if_whose_condition_folds_imports_only_the_branch_taken():
    """Exporters test shapes: ``Shape(x)[0] == 2`` is known at import, so the branch not
    taken (a Reshape) is never imported."""
    branches = _branches([helper.make_node("Mul", ["x", "x"], ["t"])], _info("t"),
                         [helper.make_node("Reshape", ["x", "bad"], ["e"])], _info("e"))
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["rows"], axis=0),
             helper.make_node("Equal", ["rows", "two"], ["c"]),
             helper.make_node("If", ["c"], ["y"], **branches)]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("two", TensorProto.INT64, [], [2]),
             helper.make_tensor("bad", TensorProto.INT64, [2], [5, -1])]
    model = _model(nodes, [_info("x", F32, [2, 5])], [_info("y")], inits)
    module = import_onnx(model)
    assert "nn.where" not in _op_names(module) and "nn.reshape" not in _op_names(module)
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_array_equal(run(module, x)[0], _onnxruntime(model, {"x": x})[0])


def test_an_if_on_a_run_time_condition_selects_between_both_branches():
    """Both branches read outer values; the compiled plan gives each condition's branch."""
    branches = _branches([helper.make_node("Add", ["x", "w"], ["t"])], _info("t"),
                         [helper.make_node("Mul", ["x", "x"], ["e0"]),
                          helper.make_node("Sub", ["e0", "w"], ["e"])], _info("e"))
    nodes = [helper.make_node("If", ["c"], ["y"], **branches),
             helper.make_node("Relu", ["y"], ["z"])]
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    model = _model(nodes, [_info("c", TensorProto.BOOL, []), _info("x", F32, [3, 4])], [_info("z")],
                   [helper.make_tensor("w", F32, [3, 4], w.reshape(-1))])
    assert "nn.where" in _op_names(import_onnx(model))
    executable = partita.compile(model)
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        (want,) = _onnxruntime(model, feeds)
        np.testing.assert_allclose(executable.run(np.array(c), x)[0], want, rtol=1e-6, atol=1e-6)


def test_branches_of_different_shapes_are_chosen_at_a_stage_boundary():
    """A detector's "no boxes" branch: the result's rows are the condition's. Both branches
    run on the device; the plan reads the condition back and sizes what follows (a Relu
    kernel) from the branch taken."""
    branches = _branches([helper.make_node("Identity", ["x"], ["t"])], _info("t"),
                         [helper.make_node("Slice", ["x", "zero", "one"], ["e"])], _info("e"))
    model = _model([helper.make_node("If", ["c"], ["y"], **branches), helper.make_node("Relu", ["y"], ["z"])],
                   [_info("c", TensorProto.BOOL, []), _info("x", F32, [3, 4])], [_info("z")],
                   [helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
                    helper.make_tensor("one", TensorProto.INT64, [1], [1])])
    assert "nn.choose" in _op_names(import_onnx(model))
    executable = partita.compile(model)
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    for c in (True, False, True):
        (want,) = _onnxruntime(model, {"c": np.array(c), "x": x})
        (got,) = executable.run(np.array(c), x)
        assert got.shape == want.shape == ((3, 4) if c else (1, 4))
        np.testing.assert_array_equal(got, want)


def test_an_if_on_a_run_time_condition_needs_branches_of_one_rank():
    branches = _branches([helper.make_node("Identity", ["x"], ["t"])], _info("t"),
                         [helper.make_node("ReduceSum", ["x"], ["e"], keepdims=0)], _info("e"))
    model = _model([helper.make_node("If", ["c"], ["y"], name="choose", **branches)],
                   [_info("c", TensorProto.BOOL, [1]), _info("x", F32, [3])], [_info("y")])
    with pytest.raises(PartitaError, match=r"node 0 'choose' \(If\): output 0: the branches give "
                                           r"tensor<3xf32> and tensor<f32>"):
        import_onnx(model)


def _counting_body():
    """A Loop body: ``acc += x * i`` (x from the enclosing graph), a scan output of each
    iteration's ``acc``, an inner If on the iteration number that reads ``x`` too, and a
    condition ``i < 3`` that ends the loop after 4 iterations whatever the trip count."""
    inner = _branches([helper.make_node("Neg", ["x"], ["p"])], _info("p"),
                      [helper.make_node("Identity", ["x"], ["q"])], _info("q"))
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F32),
             helper.make_node("Mul", ["x", "fi"], ["xi"]),
             helper.make_node("Add", ["acc_in", "xi"], ["acc_out"]),
             helper.make_node("Equal", ["i", "one"], ["is_one"]),
             helper.make_node("If", ["is_one"], ["signed"], **inner),
             helper.make_node("Add", ["acc_out", "signed"], ["scan"]),
             helper.make_node("Less", ["i", "three"], ["go"])]
    return helper.make_graph(
        nodes, "body", [_info("i", TensorProto.INT64, []), _info("go_in", TensorProto.BOOL, []), _info("acc_in")],
        [_info("go", TensorProto.BOOL, []), _info("acc_out"), _info("scan")],
        [helper.make_tensor("one", TensorProto.INT64, [], [1]), helper.make_tensor("three", TensorProto.INT64, [], [3])])


@pytest.mark.parametrize("trip_count", [2, 10])
def test_a_loop_unrolls_when_its_trip_count_and_condition_are_known(trip_count):
    model = _model([helper.make_node("Loop", ["m", "c", "acc0"], ["acc", "scans"], body=_counting_body())],
                   [_info("x", F32, [2, 3]), _info("acc0", F32, [2, 3])], [_info("acc"), _info("scans")],
                   [helper.make_tensor("m", TensorProto.INT64, [], [trip_count]),
                    helper.make_tensor("c", TensorProto.BOOL, [], [True])])
    rng = np.random.default_rng(2)
    x, acc0 = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    want = _onnxruntime(model, {"x": x, "acc0": acc0})
    assert want[1].shape == (min(trip_count, 4), 2, 3)
    got = run(import_onnx(model), x, acc0)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_a_compiled_loop_is_its_iterations_kernels():
    model = _model([helper.make_node("Loop", ["m", "", "acc0"], ["acc", "scans"], body=_counting_body())],
                   [_info("x", F32, [2, 3]), _info("acc0", F32, [2, 3])], [_info("acc"), _info("scans")],
                   [helper.make_tensor("m", TensorProto.INT64, [], [3])])
    rng = np.random.default_rng(3)
    x, acc0 = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    got = partita.compile(model).run(x, acc0)
    for g, w in zip(got, _onnxruntime(model, {"x": x, "acc0": acc0})):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_a_loop_with_a_run_time_trip_count_is_a_located_error():
    model = _model([helper.make_node("Loop", ["m", "", "acc0"], ["acc", "scans"], name="steps",
                                     body=_counting_body())],
                   [_info("m", TensorProto.INT64, []), _info("x", F32, [2, 3]), _info("acc0", F32, [2, 3])],
                   [_info("acc"), _info("scans")])
    with pytest.raises(PartitaError, match=r"node 0 'steps' \(Loop\): a trip count computed at run time"):
        import_onnx(model)


def test_an_unroll_past_the_limit_is_refused_before_it_starts():
    model = _model([helper.make_node("Loop", ["m", "", "acc0"], ["acc", "scans"], body=_counting_body())],
                   [_info("x", F32, [2, 3]), _info("acc0", F32, [2, 3])], [_info("acc"), _info("scans")],
                   [helper.make_tensor("m", TensorProto.INT64, [], [UNROLL_NODE_LIMIT])])
    with pytest.raises(PartitaError, match=f"more than {UNROLL_NODE_LIMIT} nodes"):
        import_onnx(model)


def _scan_model(length):
    """Scan with two states and two scanned inputs: one along axis 1 read backwards, one
    along axis 0; outputs stacked on axis 1 (forwards) and axis 0 (backwards)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "u"], ["s_out"]),
         helper.make_node("Mul", ["p_in", "v"], ["p_out"]),
         helper.make_node("Sub", ["s_out", "p_out"], ["y0"]),
         helper.make_node("Tanh", ["s_out"], ["y1"])],
        "body", [_info("s_in", F32, [4]), _info("p_in", F32, [4]), _info("u", F32, [4]), _info("v", F32, [4])],
        [_info("s_out", F32, [4]), _info("p_out", F32, [4]), _info("y0", F32, [4]), _info("y1", F32, [4])])
    node = helper.make_node("Scan", ["s0", "p0", "us", "vs"], ["s", "p", "ys0", "ys1"], name="scan", body=body,
                            num_scan_inputs=2, scan_input_axes=[1, 0], scan_input_directions=[1, 0],
                            scan_output_axes=[1, 0], scan_output_directions=[0, 1])
    return _model([node], [_info("s0", F32, [4]), _info("p0", F32, [4]), _info("us", F32, [4, length]),
                           _info("vs", F32, [length, 4])],
                  [_info("s"), _info("p"), _info("ys0"), _info("ys1")])


def test_a_scan_unrolls_over_its_sequence_reading_elements_in_place():
    model = _scan_model(5)
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((4,), (4,), (4, 5), (5, 4))]
    want = _onnxruntime(model, dict(zip(("s0", "p0", "us", "vs"), args)))
    module = import_onnx(model)
    assert _op_names(module).count("nn.strided_slice") == 10  # one view per element
    for g, w in zip(run(module, *args), want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    for g, w in zip(partita.compile(model).run(*args), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _scan8_model(lengths: list[int] | None = None):
    """Scan-8: a batch axis first on the state and the scanned inputs (the sequence is axis
    1), the second scanned input read backwards, ``sequence_lens`` as an initializer."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "u"], ["s_out"]), helper.make_node("Mul", ["s_out", "v"], ["y"])],
        "body", [_info("s_in", F32, [3]), _info("u", F32, [3]), _info("v", F32, [3])],
        [_info("s_out", F32, [3]), _info("y", F32, [3])])
    node = helper.make_node("Scan", ["lens" if lengths else "", "s0", "us", "vs"], ["s", "ys"], name="scan",
                            body=body, num_scan_inputs=2, directions=[0, 1])
    initializers = [helper.make_tensor("lens", TensorProto.INT64, [2], lengths)] if lengths else []
    return _model([node], [_info("s0", F32, [2, 3]), _info("us", F32, [2, 4, 3]), _info("vs", F32, [2, 4, 3])],
                  [_info("s"), _info("ys")], initializers, opset=8)


@pytest.mark.parametrize("lengths", [None, [4, 4]], ids=["no-lengths", "full-lengths"])
def test_a_scan8_runs_each_batch_entry_as_a_scan(lengths):
    model = _scan8_model(lengths)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (2, 4, 3), (2, 4, 3))]
    want = _onnxruntime(model, dict(zip(("s0", "us", "vs"), args)))
    for g, w in zip(partita.compile(model).run(*args), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_padded_scan8_is_a_located_error():
    with pytest.raises(PartitaError, match=r"\(Scan\): Scan-8 sequence_lens must be constants equal to the "
                                           r"sequence length 4"):
        import_onnx(_scan8_model([4, 2]))


def test_a_scan_over_a_dynamic_axis_is_a_located_error():
    with pytest.raises(PartitaError, match=r"node 0 'scan' \(Scan\): a scanned axis of dynamic length"):
        import_onnx(_scan_model("n"))


def test_an_error_in_a_body_names_the_body_and_its_node():
    body = helper.make_graph([helper.make_node("TfIdfVectorizer", ["s_in"], ["s_out"], name="tfidf"),
                              helper.make_node("Identity", ["u"], ["y"])], "body",
                             [_info("s_in", F32, [2]), _info("u", F32, [2])],
                             [_info("s_out", F32, [2]), _info("y", F32, [2])])
    model = _model([helper.make_node("Scan", ["s0", "us"], ["s", "ys"], name="scan", body=body, num_scan_inputs=1)],
                   [_info("s0", F32, [2]), _info("us", F32, [3, 2])], [_info("s"), _info("ys")])
    with pytest.raises(PartitaError, match=r"node 0 'scan' \(Scan\): its body \(iteration 0\): node 0 'tfidf' "
                                           r"\(TfIdfVectorizer\)"):
        import_onnx(model)
