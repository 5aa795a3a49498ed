"""ONNX If, Loop and Scan, imported by evaluating their control at import, or, for a Loop
whose control is known only at run time, as an ``nn.loop`` the host runs
(``partita/frontends/onnx/control_flow.py``): checked against onnxruntime, through the
references and compiled end to end, with the located errors for what stays unsupported."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import partita
from partita.dialects import nn
from partita.dialects.byoc import HOST_BODY
from partita.frontends.onnx import import_onnx
from partita.frontends.onnx.control_flow import UNROLL_NODE_LIMIT
from partita.ir import PartitaError
from partita.runtime.reference import run
from partita.tools import run as run_tool

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
    with pytest.raises(PartitaError, match=r"node 0 'choose' \(If\): output 0: the choices are "
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
    module = import_onnx(model)
    assert "nn.loop" not in _op_names(module)  # unrolled: the device runs the iterations' ops
    got = run(module, x, acc0)
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


def _loop(module) -> tuple[nn.LoopOp, object]:
    """The one ``nn.loop`` of ``module`` (or function) and its body function."""
    (loop,) = [op for op in module.walk() if isinstance(op, nn.LoopOp)]
    return loop, loop.body_function()


def _compare(got, want):
    for g, w in zip(got, want, strict=True):
        if w.size == 0:  # onnxruntime gives an empty scan output of a body it cannot shape rank 1
            assert g.size == 0
        else:
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_a_loop_with_a_run_time_trip_count_runs_on_the_host():
    """The trip count is an input: the body is imported once into a private function that
    ``nn.loop`` calls per iteration (its condition still ends it after 4); ``x``, read from
    the enclosing graph, is captured; a Relu kernel after it is sized by the iterations run."""
    model = _model([helper.make_node("Loop", ["m", "", "acc0"], ["acc", "scans"], name="steps",
                                     body=_counting_body()),
                    helper.make_node("Relu", ["scans"], ["r"])],
                   [_info("m", TensorProto.INT64, []), _info("x", F32, [2, 3]), _info("acc0", F32, [2, 3])],
                   [_info("acc"), _info("r")])
    module = import_onnx(model)
    loop, body = _loop(module)
    assert [v.name_hint for v in loop.captured] == ["x"] and HOST_BODY in body.attributes
    assert loop.trip_count.name_hint == "m" and loop.condition.owner.to_numpy().item() is True  # no condition: true
    assert body.sym_name.data == "main_loop_body_0" and len(body.args) == 4
    assert "nn.constant" in _op_names(body)  # the body's initializers are constants in it
    executable = partita.compile(model)
    rng = np.random.default_rng(6)
    x, acc0 = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    for m in (0, 1, 2, 7, 3):
        feeds = {"m": np.array(m, np.int64), "x": x, "acc0": acc0}
        want = _onnxruntime(model, feeds)
        got = executable.run(*feeds.values())
        assert got[1].shape == (min(m, 4), 2, 3)
        _compare(run(module, *feeds.values()), want)
        _compare(got, want)
    assert executable.runtime.plan.host_ops == ["nn.loop"]  # the Relu is a kernel
    assert "read back before nn.loop" in executable.runtime.describe()


def test_a_loop_ended_by_a_condition_computed_at_run_time():
    """No trip count; the body doubles ``v`` while its sum stays below an input's value."""
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "v_in"], ["v_out"]),
         helper.make_node("ReduceSum", ["v_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["go"]),
         helper.make_node("Identity", ["total"], ["totals"])],
        "body", [_info("i", TensorProto.INT64, []), _info("go_in", TensorProto.BOOL, []), _info("v_in", F32, [3])],
        [_info("go", TensorProto.BOOL, []), _info("v_out", F32, [3]), _info("totals", F32, [])])
    model = _model([helper.make_node("Loop", ["", "", "v0"], ["v", "totals"], body=body)],
                   [_info("limit", F32, []), _info("v0", F32, [3])], [_info("v"), _info("totals")])
    module = import_onnx(model)
    assert _loop(module)[0].trip_count.owner.to_numpy().item() == nn.NO_TRIP_COUNT
    executable = partita.compile(model)
    v0 = np.array([0.5, 1.0, 0.25], np.float32)
    for limit in (1.0, 20.0, 1000.0):
        feeds = {"limit": np.array(limit, np.float32), "v0": v0}
        want = _onnxruntime(model, feeds)
        _compare(executable.run(*feeds.values()), want)
        _compare(run(module, *feeds.values()), want)


def test_an_unroll_whose_condition_turns_out_run_time_is_rewound():
    """The trip count is known, but the first iteration's condition reads an input: what
    the unroll imported is dropped, and the Loop is an ``nn.loop``."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["v_in", "w"], ["v_out"]),
         helper.make_node("Less", ["i", "n"], ["go"])],
        "body", [_info("i", TensorProto.INT64, []), _info("go_in", TensorProto.BOOL, []), _info("v_in", F32, [2])],
        [_info("go", TensorProto.BOOL, []), _info("v_out", F32, [2])])
    model = _model([helper.make_node("Loop", ["m", "", "v0"], ["v"], body=body)],
                   [_info("n", TensorProto.INT64, []), _info("v0", F32, [2])], [_info("v")],
                   [helper.make_tensor("m", TensorProto.INT64, [], [6]),
                    helper.make_tensor("w", F32, [2], [2.0, -1.0])])
    module = import_onnx(model)
    main = module.ops.first
    assert [op.name for op in main.walk()][1:] == ["nn.constant", "nn.constant", "nn.loop", "func.return"]
    executable = partita.compile(model)
    v0 = np.array([1.5, 3.0], np.float32)
    for n in (0, 2, 10):
        feeds = {"n": np.array(n, np.int64), "v0": v0}
        _compare(executable.run(*feeds.values()), _onnxruntime(model, feeds))


def test_a_loop_in_a_host_loop_body_is_a_host_loop_of_its_own():
    """The inner Loop runs ``i`` times (the outer iteration number): the outer body calls an
    ``nn.loop`` of its own body; ``x``, read two scopes in, is captured at both levels."""
    inner = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x"], ["s_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "inner", [_info("j", TensorProto.INT64, []), _info("c_in", TensorProto.BOOL, []), _info("s_in", F32, [2])],
        [_info("c_out", TensorProto.BOOL, []), _info("s_out", F32, [2])])
    outer = helper.make_graph(
        [helper.make_node("Loop", ["i", "", "a_in"], ["a_out"], body=inner),
         helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Identity", ["a_out"], ["scan"])],
        "outer", [_info("i", TensorProto.INT64, []), _info("c_in", TensorProto.BOOL, []), _info("a_in", F32, [2])],
        [_info("c_out", TensorProto.BOOL, []), _info("a_out", F32, [2]), _info("scan", F32, [2])])
    model = _model([helper.make_node("Loop", ["m", "", "a0"], ["a", "scans"], body=outer)],
                   [_info("m", TensorProto.INT64, []), _info("x", F32, [2]), _info("a0", F32, [2])],
                   [_info("a"), _info("scans")])
    module = import_onnx(model)
    loop, body = _loop(module.ops.first)
    (inner_loop,) = [op for op in body.walk() if isinstance(op, nn.LoopOp)]
    assert inner_loop.captured[0] is body.args[3] and loop.captured[0].name_hint == "x"
    executable = partita.compile(model)
    for m in (0, 1, 3):
        feeds = {"m": np.array(m, np.int64), "x": np.array([1, 2], np.float32), "a0": np.zeros(2, np.float32)}
        want = _onnxruntime(model, feeds)
        _compare(run(module, *feeds.values()), want)
        _compare(executable.run(*feeds.values()), want)


@pytest.mark.parametrize("options", [dict(partitioner="eager"), dict(partitioner="none"), dict(precision="fp16")],
                         ids=["eager", "none", "fp16"])
def test_every_pipeline_keeps_the_body_and_the_file_does_too(options, tmp_path):
    """No pass partitions, lowers, retypes or deletes the body (the collage pipeline is the
    tests' above); a saved compiled model runs it after loading."""
    model = _model([helper.make_node("Loop", ["m", "", "acc0"], ["acc", "scans"], body=_counting_body())],
                   [_info("m", TensorProto.INT64, []), _info("x", F32, [2, 3]), _info("acc0", F32, [2, 3])],
                   [_info("acc"), _info("scans")])
    imported = _loop(import_onnx(model))[1]
    executable = partita.compile(model, **options)
    compiled = _loop(executable.module)[1]
    assert str(compiled) == str(imported)  # attributes included: no target bound
    executable.save(tmp_path / "loop.partita")
    loaded = partita.load(tmp_path / "loop.partita")
    rng = np.random.default_rng(8)
    x, acc0 = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    for m in (0, 5):
        feeds = {"m": np.array(m, np.int64), "x": x, "acc0": acc0}
        want = _onnxruntime(model, feeds)
        _compare(executable.run(*feeds.values()), want)
        _compare(loaded.run(*feeds.values()), want)


def test_a_carried_value_that_grows_is_dynamic_in_the_body():
    """``acc = Concat(acc, x)`` grows by a row per iteration: the body takes it as ``?x3``."""
    body = helper.make_graph(
        [helper.make_node("Concat", ["acc_in", "x"], ["acc_out"], axis=0),
         helper.make_node("Identity", ["go_in"], ["go"])],
        "body", [_info("i", TensorProto.INT64, []), _info("go_in", TensorProto.BOOL, []), _info("acc_in", F32, None)],
        [_info("go", TensorProto.BOOL, []), _info("acc_out", F32, None)])
    model = _model([helper.make_node("Loop", ["m", "", "acc0"], ["acc"], body=body)],
                   [_info("m", TensorProto.INT64, []), _info("x", F32, [1, 3]), _info("acc0", F32, [2, 3])],
                   [_info("acc")])
    loop, fn = _loop(import_onnx(model))
    assert str(fn.args[2].type) == "tensor<?x3xf32>" and str(loop.outputs[0].type) == "tensor<?x3xf32>"
    executable = partita.compile(model)
    x = np.array([[1, 2, 3]], np.float32)
    acc0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    for m in (0, 1, 4):
        feeds = {"m": np.array(m, np.int64), "x": x, "acc0": acc0}
        (got,) = executable.run(*feeds.values())
        assert got.shape == (2 + m, 3)
        _compare([got], _onnxruntime(model, feeds))


def test_a_carried_value_whose_rank_changes_is_a_located_error():
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["acc_in", "zero"], ["acc_out"]),
         helper.make_node("Identity", ["go_in"], ["go"])],
        "body", [_info("i", TensorProto.INT64, []), _info("go_in", TensorProto.BOOL, []), _info("acc_in", F32, None)],
        [_info("go", TensorProto.BOOL, []), _info("acc_out", F32, None)],
        [helper.make_tensor("zero", TensorProto.INT64, [1], [0])])
    model = _model([helper.make_node("Loop", ["m", "", "acc0"], ["acc"], name="nest", body=body)],
                   [_info("m", TensorProto.INT64, []), _info("acc0", F32, [2])], [_info("acc")])
    with pytest.raises(PartitaError, match=r"node 0 'nest' \(Loop\): loop-carried value 0 enters the body as "
                                           r"tensor<2xf32> and leaves it as tensor<1x2xf32>: its rank changes"):
        import_onnx(model)


def _slices_model():
    """A Loop whose scan elements are ``?``-sized (a slice of ``x`` up to the iteration)."""
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["i", "zero"], ["end"]),
         helper.make_node("Slice", ["x", "zero", "end"], ["part"]),
         helper.make_node("Identity", ["go_in"], ["go"])],
        "body", [_info("i", TensorProto.INT64, []), _info("go_in", TensorProto.BOOL, [])],
        [_info("go", TensorProto.BOOL, []), _info("part", F32, None)],
        [helper.make_tensor("zero", TensorProto.INT64, [1], [0])])
    return _model([helper.make_node("Loop", ["m", ""], ["parts"], name="slices", body=body)],
                  [_info("m", TensorProto.INT64, []), _info("x", F32, [4])], [_info("parts")])


def test_a_loop_of_no_iteration_whose_scan_elements_have_no_static_shape_is_a_located_error():
    """With no iteration run, the empty scan output's shape is unknown."""
    executable = partita.compile(_slices_model())
    x = np.arange(4, dtype=np.float32)
    assert executable.run(np.array(1, np.int64), x)[0].shape == (1, 0)
    with pytest.raises(PartitaError, match=r"'nn.loop' op ran no iteration, and the elements of scan output #0 "
                                           r"have no static shape \(tensor<\?xf32>\)"):
        executable.run(np.array(0, np.int64), x)


def test_partita_run_reports_that_error_and_exits_1(tmp_path, capsys):
    path, inputs = tmp_path / "slices.onnx", tmp_path / "in.npz"
    onnx.save(_slices_model(), path)
    np.savez(inputs, m=np.array(0, np.int64), x=np.arange(4, dtype=np.float32))
    assert run_tool.main([str(path), "--inputs", str(inputs), "-q", "--cache-dir", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err
    assert "'nn.loop' op ran no iteration" in err and "slices" in err and "Traceback" not in err


def test_an_unroll_past_the_limit_runs_on_the_host_instead():
    """A trip count the unroll cannot afford (its condition ends it after 4 iterations)."""
    model = _model([helper.make_node("Loop", ["m", "", "acc0"], ["acc", "scans"], body=_counting_body())],
                   [_info("x", F32, [2, 3]), _info("acc0", F32, [2, 3])], [_info("acc"), _info("scans")],
                   [helper.make_tensor("m", TensorProto.INT64, [], [UNROLL_NODE_LIMIT])])
    module = import_onnx(model)
    assert _loop(module)[0].trip_count.owner.to_numpy().item() == UNROLL_NODE_LIMIT
    rng = np.random.default_rng(7)
    x, acc0 = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    _compare(run(module, x, acc0), _onnxruntime(model, {"x": x, "acc0": acc0}))


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


def test_a_scan_over_a_run_time_length_runs_on_the_host():
    """The same Scan with its sequence axis a run-time dim: one ``nn.loop`` whose body
    reads each scanned input at the iteration (the first backwards), its outputs stacked,
    the second reversed and the first moved to axis 1; one compile runs every length."""
    model = _scan_model("n")
    module = import_onnx(model)
    assert _op_names(module).count("nn.loop") == 1 and "nn.take" in _op_names(module)
    exe = partita.compile(model)
    assert "nn.loop" in "".join(exe.runtime.plan.host_ops)
    rng = np.random.default_rng(6)
    for length in (5, 1, 3):
        args = [rng.standard_normal(s).astype(np.float32) for s in ((4,), (4,), (4, length), (length, 4))]
        want = _onnxruntime(model, dict(zip(("s0", "p0", "us", "vs"), args)))
        got = exe.run(*args)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape, (length, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"length {length}")
    # An empty sequence (onnxruntime 1.32 stops with a floating-point exception there): the
    # states as given, no element stacked.
    s0, p0 = rng.standard_normal((2, 4)).astype(np.float32)
    s, p, ys0, ys1 = exe.run(s0, p0, np.zeros((4, 0), np.float32), np.zeros((0, 4), np.float32))
    np.testing.assert_array_equal(s, s0)
    np.testing.assert_array_equal(p, p0)
    assert ys0.shape == (4, 0) and ys1.shape == (0, 4)


def test_an_error_in_a_body_names_the_body_and_its_node():
    body = helper.make_graph([helper.make_node("ImageDecoder", ["s_in"], ["s_out"], name="decoder"),
                              helper.make_node("Identity", ["u"], ["y"])], "body",
                             [_info("s_in", F32, [2]), _info("u", F32, [2])],
                             [_info("s_out", F32, [2]), _info("y", F32, [2])])
    model = _model([helper.make_node("Scan", ["s0", "us"], ["s", "ys"], name="scan", body=body, num_scan_inputs=1)],
                   [_info("s0", F32, [2]), _info("us", F32, [3, 2])], [_info("s"), _info("ys")])
    with pytest.raises(PartitaError, match=r"node 0 'scan' \(Scan\): its body \(iteration 0\): node 0 'decoder' "
                                           r"\(ImageDecoder\): unsupported op type 'ImageDecoder'"):
        import_onnx(model)
