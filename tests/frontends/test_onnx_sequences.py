"""ONNX sequences (lists of tensors), resolved at import (``partita/frontends/onnx/sequences.py``)
and at the graph boundary (one argument or result per element, grouped by the entry's
``onnx.sequence_inputs`` / ``onnx.sequence_outputs``): compiled end to end and checked
against onnxruntime, with the located errors for what the import cannot know."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import partita
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError
from partita.ir.abi import SequenceSpan, flatten, regroup, sequence_spans
from partita.tools import run as run_tool

ONNX_OPS = ("SequenceEmpty", "SequenceConstruct", "SequenceLength", "SequenceAt", "SequenceInsert", "SequenceErase",
            "ConcatFromSequence", "SplitToSequence", "SequenceMap", "OptionalGetElement")
"""The op types this file converts (``test_onnx_import`` checks every converter has a test)."""

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _tensor(name, elem=F32, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _sequence(name, elem=F32, shape=None):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def _int(name, value):
    return helper.make_tensor(name, I64, [], [value])


def _onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _check(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, list) == isinstance(w, list)
        if isinstance(w, list):
            assert len(g) == len(w)
            for ge, we in zip(g, w):
                np.testing.assert_allclose(ge, we, rtol=1e-6)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-6)


def _compile(model, **options):
    return partita.compile(model, partitioner="eager", **options)


def test_split_to_sequence_then_concat():
    """Equal chunks with a smaller last one, sizes, keepdims=0, and both concatenations."""
    nodes = [
        helper.make_node("SplitToSequence", ["x", "two"], ["chunks"], axis=1),  # 2, 2, 1
        helper.make_node("ConcatFromSequence", ["chunks"], ["joined"], axis=1),
        helper.make_node("SplitToSequence", ["x", "sizes"], ["parts"], axis=1),
        helper.make_node("SequenceLength", ["parts"], ["count"]),
        helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
        helper.make_node("ConcatFromSequence", ["rows"], ["stacked"], axis=-1, new_axis=1),
    ]
    inits = [_int("two", 2), helper.make_tensor("sizes", I64, [2], [1, 4])]
    model = _model(nodes, [_tensor("x", F32, [3, 5])],
                   [_tensor("joined"), _tensor("count", I64, []), _tensor("stacked"), _sequence("parts")], inits)
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    got = _compile(model).run(x)
    _check(got, _onnxruntime(model, {"x": x}))
    assert [p.shape for p in got[3]] == [(3, 1), (3, 4)]


def test_insert_erase_at_with_negative_positions():
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["s0"]),
        helper.make_node("SequenceInsert", ["s0", "c", "minus_one"], ["s1"]),  # a, c, b
        helper.make_node("SequenceInsert", ["s1", "a"], ["s2"]),  # a, c, b, a
        helper.make_node("SequenceErase", ["s2", "minus_three"], ["s3"]),  # a, b, a
        helper.make_node("SequenceAt", ["s3", "minus_two"], ["second"]),  # b
        helper.make_node("SequenceErase", ["s3"], ["s4"]),  # a, b
        helper.make_node("SequenceInsert", ["s4", "c", "two"], ["s5"]),  # a, b, c: position n appends
    ]
    inits = [_int("minus_one", -1), _int("minus_three", -3), _int("minus_two", -2), _int("two", 2)]
    model = _model(nodes, [_tensor(n, F32, [2]) for n in "abc"], [_tensor("second", F32, [2]), _sequence("s5")],
                   inits)
    feeds = {n: np.full(2, k, np.float32) for k, n in enumerate("abc")}
    got = _compile(model).run(**feeds)
    _check(got, _onnxruntime(model, feeds))
    assert [float(e[0]) for e in got[1]] == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("position", [-3, -1, 0, 1, 2, 3])
def test_run_time_positions_select_element_by_element(position):
    """SequenceAt, SequenceInsert and SequenceErase at a position known only at run time:
    the sequence's length is known at import, each element chosen on the device (``nn.where``)
    between elements of one shape, and whole (``nn.choose``) where shapes differ."""
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
        helper.make_node("SequenceAt", ["s", "at"], ["picked"]),
        helper.make_node("SequenceErase", ["s", "at"], ["erased"]),
        helper.make_node("SequenceInsert", ["s", "d", "where"], ["inserted"]),
        helper.make_node("SequenceConstruct", ["a", "w"], ["mixed"]),  # lengths 2 and 3
        helper.make_node("SequenceInsert", ["mixed", "d", "where_mixed"], ["grown"]),
    ]
    inputs = [_tensor(n, F32, [2]) for n in "abcd"] + [_tensor("w", F32, [3]), _tensor("at", I64, []),
                                                        _tensor("where", I64, [1]), _tensor("where_mixed", I64, [])]
    model = _model(nodes, inputs, [_tensor("picked", F32, [2]), _sequence("erased"), _sequence("inserted"),
                                   _sequence("grown")])
    imported = str(import_onnx(model))
    assert "nn.where" in imported and "nn.choose" in imported
    exe = _compile(model)
    feeds = {n: np.full(2, k, np.float32) for k, n in enumerate("abcd")}
    feeds["w"] = np.full(3, 7, np.float32)
    feeds["at"] = np.array(max(min(position, 2), -3), np.int64)  # in [-3, 2]: an element of s
    feeds["where"] = np.array([position], np.int64)  # in [-3, 3]: an insertion may append
    feeds["where_mixed"] = np.array(max(min(position, 2), -2), np.int64)  # the mixed sequence has 2
    _check(exe.run(**feeds), _onnxruntime(model, feeds))


def test_sequence_map_with_a_tensor_and_a_sequence_input():
    body = helper.make_graph(
        [helper.make_node("Add", ["e", "f"], ["s"]), helper.make_node("Mul", ["s", "t"], ["y"])],
        "body", [_tensor("e", F32, ["N"]), _tensor("f", F32, ["N"]), _tensor("t", F32, [1])], [_tensor("y", F32, ["N"])])
    nodes = [helper.make_node("SequenceMap", ["xs", "ys", "t"], ["out"], body=body)]
    model = _model(nodes, [_sequence("xs", F32, ["N"]), _sequence("ys", F32, ["N"]), _tensor("t", F32, [1])],
                   [_sequence("out", F32, ["N"])])
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(n).astype(np.float32) for n in (3, 4, 5)]
    ys = [rng.standard_normal(n).astype(np.float32) for n in (3, 4, 5)]
    t = np.array([2.0], np.float32)
    exe = _compile(model, sequence_lengths={"xs": 3, "ys": 3})
    # elements of several lengths through one '?' dim, positional and by name
    _check(exe.run(xs, ys, t), _onnxruntime(model, {"xs": xs, "ys": ys, "t": t}))
    _check(exe.run(xs=xs, ys=tuple(ys), t=t), _onnxruntime(model, {"xs": xs, "ys": ys, "t": t}))


def test_a_sequence_input_is_one_argument_per_element():
    model = _model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)],
                   [_sequence("xs", F32, [2, "W"])], [_tensor("y")])
    module = import_onnx(model, sequence_lengths={"xs": 2})
    main = next(iter(module.ops))
    assert [str(t) for t in main.function_type.inputs.data] == ["tensor<2x?xf32>", "tensor<2x?xf32>"]
    assert sequence_spans(main, "inputs") == [SequenceSpan("xs", 0, 2)]
    # a model whose elements have no shape takes each element's shape
    bare = _model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)], [_sequence("xs")], [_tensor("y")])
    module = import_onnx(bare, sequence_lengths={"xs": [(1, 3), (2, 3)]})
    assert [str(t) for t in next(iter(module.ops)).function_type.inputs.data] == ["tensor<1x3xf32>", "tensor<2x3xf32>"]
    xs = [np.ones((1, 3), np.float32), np.zeros((2, 3), np.float32)]
    _check(_compile(bare, sequence_lengths={"xs": [(1, 3), (2, 3)]}).run(xs), _onnxruntime(bare, {"xs": xs}))


def test_sequence_input_errors():
    model = _model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)],
                   [_sequence("xs", F32, [2])], [_tensor("y")])
    with pytest.raises(PartitaError, match=r"graph input 'xs' is a sequence, whose length the model does not give: "
                                           r"compile with sequence_lengths=\{'xs': n\}"):
        _compile(model)
    with pytest.raises(PartitaError, match="sequence_lengths names 'x', which is not a sequence input"):
        _compile(model, sequence_lengths={"x": 2})
    with pytest.raises(PartitaError, match=r"element 0 given shape \[3\], the model's elements have 2"):
        _compile(model, sequence_lengths={"xs": [[3]]})
    exe = _compile(model, sequence_lengths={"xs": 2})
    with pytest.raises(PartitaError, match=r"@main input 'xs' was compiled for a sequence of 2 tensors, got 3"):
        exe.run([np.ones(2, np.float32)] * 3)
    with pytest.raises(PartitaError, match=r"@main input 'xs' is a sequence: pass a list of 2 arrays"):
        exe.run(np.ones(2, np.float32))
    bare = _model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)], [_sequence("xs")], [_tensor("y")])
    with pytest.raises(PartitaError, match="the model gives its elements no shape: give each element's shape"):
        _compile(bare, sequence_lengths={"xs": 2})
    with pytest.raises(PartitaError, match="sequence_lengths apply to ONNX models only"):
        partita.compile("func.func @main() {\n  func.return\n}\n", sequence_lengths={"xs": 2})


@pytest.mark.parametrize("node, inputs, message", [
    (helper.make_node("SequenceAt", ["s", "p"], ["y"]), [_tensor("p", I64, [2])],
     r"node 1 'y' \(SequenceAt\): the position must have one element, got shape \[2\]"),
    (helper.make_node("SequenceAt", ["s", "five"], ["y"]), [],
     r"the position 5 is out of range for a sequence of 2 tensors \(accepted: -2 to 1\)"),
    (helper.make_node("SequenceInsert", ["s", "p"], ["y"]), [_tensor("p", I64, [])],
     r"the tensor inserted is INT64, but the sequence holds FLOAT tensors"),
    (helper.make_node("Relu", ["s"], ["y"]), [], r"node 1 'y' \(Relu\): input #0 \('X'\) must be a tensor, got a sequence"),
    (helper.make_node("SequenceLength", ["a"], ["y"]), [],
     r"input #0 \('input_sequence'\) must be a sequence, got a tensor"),
    (helper.make_node("SplitToSequence", ["a", "p"], ["y"]), [_tensor("p", I64, [])],
     r"the split is computed at run time and is not 1-D of a static length"),
])
def test_what_the_import_cannot_know_is_a_located_error(node, inputs, message):
    model = _model([helper.make_node("SequenceConstruct", ["a", "a"], ["s"]), node],
                   [_tensor("a", F32, [2]), *inputs], [_tensor("y")], [_int("five", 5)])
    with pytest.raises(PartitaError, match=message):
        import_onnx(model)


def test_a_loop_unrolled_at_import_carries_a_sequence():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["f"], to=F32),
         helper.make_node("Mul", ["x", "f"], ["scaled"]),
         helper.make_node("SequenceInsert", ["seq", "scaled"], ["seq_out"])],
        "body", [_tensor("i", I64, []), _tensor("c", TensorProto.BOOL, []), _sequence("seq")],
        [_tensor("c_out", TensorProto.BOOL, []), _sequence("seq_out")])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=F32),
             helper.make_node("Loop", ["three", "", "empty"], ["seq"], body=body),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0, new_axis=1)]
    model = _model(nodes, [_tensor("x", F32, [2])], [_tensor("y")], [_int("three", 3)])
    x = np.array([1.0, 2.0], np.float32)
    _check(_compile(model).run(x), _onnxruntime(model, {"x": x}))
    # a Loop the host runs cannot carry one
    host = _model(nodes[:1] + [helper.make_node("Loop", ["n", "", "empty"], ["seq"], body=body)],
                  [_tensor("x", F32, [2]), _tensor("n", I64, [])], [_sequence("seq")])
    with pytest.raises(PartitaError, match="this Loop runs on the host .* cannot carry a sequence"):
        import_onnx(host)


def test_empty_and_optional_sequences_pass_through():
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=I64),
             helper.make_node("SequenceConstruct", ["a"], ["one"]),
             helper.make_node("OptionalGetElement", ["one"], ["same"])]
    model = _model(nodes, [_tensor("a", I64, [2])], [_sequence("empty", I64), _sequence("same", I64)], opset=18)
    a = np.array([4, 5], np.int64)
    got = _compile(model).run(a)
    _check(got, _onnxruntime(model, {"a": a}))
    assert got[0] == []


def test_flatten_and_regroup_keep_the_source_order():
    spans = [SequenceSpan("s", 1, 2), SequenceSpan("e", 3, 0)]
    assert regroup(["x", "s0", "s1", "y"], spans) == ["x", ["s0", "s1"], [], "y"]
    assert flatten(["x", ["s0", "s1"], [], "y"], {}, spans, 4, "@f") == (["x", "s0", "s1", "y"], {})
    assert flatten([], {"s": ("s0", "s1")}, spans, 4, "@f")[1] == {"s[0]": "s0", "s[1]": "s1"}


def test_a_saved_model_keeps_its_sequence_output(tmp_path, capsys):
    nodes = [helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0),
             helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0)]
    model = _model(nodes, [_tensor("x", F32, [3, 2])], [_sequence("rows"), _tensor("total", F32, [])])
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    exe = _compile(model)
    path = tmp_path / "seq.partita"
    exe.save(path)
    loaded = partita.load(path)
    got = loaded.run(x)
    _check(got, _onnxruntime(model, {"x": x}))
    assert sequence_spans(loaded.entry_function(), "outputs") == [SequenceSpan("rows", 0, 3)]
    # partita-run prints the sequence as one output, and writes its elements by index
    np.savez(tmp_path / "in.npz", x=x)
    assert run_tool.main([str(path), "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz"),
                          "-q"]) == 0
    printed = capsys.readouterr().out
    assert "rows: sequence of 3\n  [0] float32[1, 2] mean 0.5\n" in printed
    assert "total: float32[] mean 15" in printed
    with np.load(tmp_path / "out.npz") as out:
        assert sorted(out) == ["rows[0]", "rows[1]", "rows[2]", "total"]
        np.testing.assert_array_equal(out["rows[2]"], x[2:])


def test_partita_run_takes_a_sequence_length(tmp_path, capsys):
    model = _model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)],
                   [_sequence("xs", F32, [2])], [_tensor("y")])
    path = tmp_path / "concat.onnx"
    path.write_bytes(model.SerializeToString())
    assert run_tool.main([str(path), "--partitioner", "eager", "--sequence-length", "xs=3", "-q",
                          "--cache-dir", str(tmp_path)]) == 0
    assert "y: float32[6]" in capsys.readouterr().out


def test_if_on_a_run_time_condition_selects_sequences_element_by_element():
    def branch(name, value):
        return helper.make_graph(
            [helper.make_node("Mul", ["x", value], ["m"]), helper.make_node("SequenceConstruct", ["m", "x"], [name])],
            name, [], [_sequence(name, F32, [2])])

    nodes = [helper.make_node("If", ["c"], ["s"], then_branch=branch("t", "two"), else_branch=branch("e", "three"))]
    model = _model(nodes, [_tensor("c", TensorProto.BOOL, []), _tensor("x", F32, [2])], [_sequence("s", F32, [2])],
                   [helper.make_tensor("two", F32, [], [2.0]), helper.make_tensor("three", F32, [], [3.0])])
    exe = _compile(model)
    x = np.array([1.0, -1.0], np.float32)
    for c in (True, False):
        _check(exe.run(np.array(c), x), _onnxruntime(model, {"c": np.array(c), "x": x}))
