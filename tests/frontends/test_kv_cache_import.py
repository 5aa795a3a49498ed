"""KV-cache decoder steps import (issue 24): positions ``Range(past, past + 1)`` with a
dynamic start, a ``Range`` whose limit is computed from several dims (``past + seq``, the
key positions of a causal mask), and ``present`` key/values concatenated along the sequence
axis; each step is checked against onnxruntime at two past lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import partita
from partita.tools import import_model

D, H, HD, MAX_POS = 8, 2, 4, 64


def attention_nodes(key: str, value: str, hidden: str) -> list[onnx.NodeProto]:
    """``q_new`` attending to the caches ``key`` / ``value`` ([B, H, S, HD]), the keys where
    ``hidden`` is true masked out, then projected by ``wo`` to ``out`` (the initializers
    ``scale``, ``neg``, ``model`` and ``wo`` are the caller's)."""
    return [
        helper.make_node("Transpose", [key], ["k_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q_new", "k_t"], ["scores_raw"]),
        helper.make_node("Mul", ["scores_raw", "scale"], ["scores"]),
        helper.make_node("Where", [hidden, "neg", "scores"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", value], ["ctx_bhsd"]),
        helper.make_node("Transpose", ["ctx_bhsd"], ["ctx_bshd"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_bshd", "model"], ["ctx"]),
        helper.make_node("MatMul", ["ctx", "wo"], ["out"]),
    ]


def _decoder_step(path: Path, seq: int | str) -> None:
    """One attention layer of a decoder as exporters write it: the positions of the new
    tokens start at the past length read from ``past_key``'s shape."""
    rng = np.random.default_rng(0)
    weights = {name: (rng.standard_normal(shape) * 0.3).astype(np.float32)
               for name, shape in [("wq", (D, D)), ("wk", (D, D)), ("wv", (D, D)), ("wo", (D, D)),
                                   ("pos_table", (MAX_POS, D))]}
    initializers = [numpy_helper.from_array(v, k) for k, v in weights.items()] + [
        numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
        [("two", 2), ("one_i", 1), ("zero_i", 0), ("heads", [1, -1, H, HD]), ("model", [1, -1, D]),
         ("ax0", [0]), ("ax1", [1])]] + [numpy_helper.from_array(np.array(-1e9, np.float32), "neg")]
    nodes = [
        helper.make_node("Shape", ["past_key"], ["pk_shape"]),
        helper.make_node("Gather", ["pk_shape", "two"], ["past"], axis=0),
    ]
    if isinstance(seq, int):  # a decode step: one new token, limit past + 1
        nodes.append(helper.make_node("Add", ["past", "one_i"], ["limit"]))
    else:  # a prefill or speculative step: limit past + seq, from two tensors' dims
        nodes += [helper.make_node("Shape", ["x"], ["x_shape"]),
                  helper.make_node("Gather", ["x_shape", "one_i"], ["seq"], axis=0),
                  helper.make_node("Add", ["past", "seq"], ["limit"])]
    nodes += [
        helper.make_node("Range", ["past", "limit", "one_i"], ["positions"]),
        helper.make_node("Gather", ["pos_table", "positions"], ["pos_emb"], axis=0),
        helper.make_node("Add", ["x", "pos_emb"], ["h"]),
    ]
    for name in "qkv":
        nodes += [helper.make_node("MatMul", ["h", f"w{name}"], [f"{name}_flat"]),
                  helper.make_node("Reshape", [f"{name}_flat", "heads"], [f"{name}_bshd"]),
                  helper.make_node("Transpose", [f"{name}_bshd"], [f"{name}_new"], perm=[0, 2, 1, 3])]
    nodes += [
        helper.make_node("Concat", ["past_key", "k_new"], ["present_key"], axis=2),
        helper.make_node("Concat", ["past_value", "v_new"], ["present_value"], axis=2),
        # Causal mask: key position j is hidden from query position i when j > i.
        helper.make_node("Range", ["zero_i", "limit", "one_i"], ["key_positions"]),
        helper.make_node("Unsqueeze", ["key_positions", "ax0"], ["kp_row"]),
        helper.make_node("Unsqueeze", ["positions", "ax1"], ["qp_col"]),
        helper.make_node("Greater", ["kp_row", "qp_col"], ["hidden"]),
        *attention_nodes("present_key", "present_value", "hidden"),
    ]
    initializers.append(numpy_helper.from_array(np.array(HD ** -0.5, np.float32), "scale"))
    cache = [1, H, "past", HD]
    graph = helper.make_graph(
        nodes, "decoder_step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, D]),
         helper.make_tensor_value_info("past_key", TensorProto.FLOAT, cache),
         helper.make_tensor_value_info("past_value", TensorProto.FLOAT, cache)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, seq, D]),
         helper.make_tensor_value_info("present_key", TensorProto.FLOAT, [1, H, None, HD]),
         helper.make_tensor_value_info("present_value", TensorProto.FLOAT, [1, H, None, HD])],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


@pytest.mark.parametrize("seq", [1, "seq"], ids=["decode", "dynamic_seq"])
def test_decoder_step_matches_onnxruntime_at_two_past_lengths(tmp_path: Path, seq) -> None:
    import onnxruntime as ort

    path = tmp_path / "step.onnx"
    _decoder_step(path, seq)
    exe = partita.compile(str(path), cache_dir=tmp_path / "cache")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    steps = [(3, 1), (7, 1)] if seq == 1 else [(3, 2), (7, 1)]
    for past, new in steps:
        feeds = {"x": rng.standard_normal((1, new, D)).astype(np.float32),
                 "past_key": rng.standard_normal((1, H, past, HD)).astype(np.float32),
                 "past_value": rng.standard_normal((1, H, past, HD)).astype(np.float32)}
        expected = session.run(None, feeds)
        got = exe.run(**feeds)
        for name, e, g in zip(["out", "present_key", "present_value"], expected, got, strict=True):
            assert g.shape == e.shape == ((1, new, D) if name == "out" else (1, H, past + new, HD))
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, err_msg=f"{name} at past {past}")
    assert not exe.runtime.plan.host_ops  # positions, mask and cache concat all in kernels


def test_range_bounds_from_several_dims_import(tmp_path: Path, capsys) -> None:
    """The positions of a decode step are an ``nn.arange`` of static size 1 plus the past
    length read at run time; the key positions are sized by the concatenated cache."""
    path = tmp_path / "step.onnx"
    _decoder_step(path, 1)
    assert import_model.main([str(path)]) == 0
    ir = capsys.readouterr().out
    assert "nn.arange" in ir and "-> tensor<1xi64>" in ir and "nn.shape_of" in ir
    assert "-> tensor<?xi64>" in ir  # the key positions, as long as the present cache


def _kv_positions_before_the_cache(path: Path) -> onnx.ModelProto:
    """transformers 5's decoder mask starts from ``arange(past + seq)``, the past read off
    the cache input and the new tokens' count off the ids, before any layer concatenates
    its cache (so no tensor of the graph has that length yet); here the key positions are
    compared with the query positions ``past + arange(seq)`` into a causal mask, and the
    cache is concatenated after."""
    nodes = [
        helper.make_node("Shape", ["past_key"], ["ps"]), helper.make_node("Gather", ["ps", "two"], ["past"], axis=0),
        helper.make_node("Shape", ["ids"], ["is"]), helper.make_node("Gather", ["is", "one"], ["seq"], axis=0),
        helper.make_node("Add", ["past", "seq"], ["total"]),
        helper.make_node("Range", ["zero", "total", "one"], ["kv_pos"]),
        helper.make_node("Range", ["past", "total", "one"], ["q_pos"]),
        helper.make_node("Unsqueeze", ["q_pos", "axis1"], ["q_col"]),
        helper.make_node("LessOrEqual", ["kv_pos", "q_col"], ["visible"]),
        helper.make_node("Cast", ["visible"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Concat", ["past_key", "new_key"], ["present_key"], axis=2),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             [("zero", 0), ("one", 1), ("two", 2), ("axis1", [1])]]
    graph = helper.make_graph(
        nodes, "mask", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"]),
                        helper.make_tensor_value_info("past_key", TensorProto.FLOAT, [1, 2, "past", 4]),
                        helper.make_tensor_value_info("new_key", TensorProto.FLOAT, [1, 2, "seq", 4])],
        [helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["seq", "total"]),
         helper.make_tensor_value_info("present_key", TensorProto.FLOAT, [1, 2, "total", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return model


def test_key_positions_sized_by_a_sum_of_dims_before_any_tensor_has_it(tmp_path: Path) -> None:
    """``arange(past + seq)`` before the cache is concatenated is an ``nn.arange`` whose two
    shape references (the past cache's dim and the ids') add up: it imports, runs in a
    kernel, and equals onnxruntime in prefill and decode steps."""
    import onnxruntime as ort

    path = tmp_path / "mask.onnx"
    _kv_positions_before_the_cache(path)
    exe = partita.compile(str(path), cache_dir=tmp_path / "cache")
    (arange,) = [op for op in exe.module.walk() if op.name == "nn.arange" and len(op.operands) == 2] or [None]
    assert arange is not None and list(arange.targets) == [0, 0]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for past, seq in [(0, 5), (5, 1), (9, 1)]:
        feeds = {"ids": np.zeros((1, seq), np.int64), "past_key": rng.standard_normal((1, 2, past, 4)).astype(np.float32),
                 "new_key": rng.standard_normal((1, 2, seq, 4)).astype(np.float32)}
        for got, want in zip(exe.run(**feeds), session.run(None, feeds), strict=True):
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    assert not exe.runtime.plan.host_ops
    from support.cuda_host import have_gxx  # tests/support/cuda_host.py

    if have_gxx():  # the kernels built for the host: the arange's length is the sum of the two dims
        from support.kernel_harness import run_host_kernels  # tests/support/kernel_harness.py

        got, left = run_host_kernels(onnx.load(path), list(feeds.values()), tmp_path)
        assert not left, left
        for g, want in zip(got, session.run(None, feeds), strict=True):
            np.testing.assert_array_equal(g, want)


def test_a_decode_steps_position_in_float_math_runs_at_run_time(tmp_path: Path) -> None:
    """A step of one token (the ids' length static): its position is ``past``, a shape
    computation, cast to float and scaled into rotary angles. Integer shape arithmetic
    folds at import; the float part is data: cos(past * inv_freq) computed at run time
    (folded as dims it would truncate 0.1 to 0), equal to onnxruntime at two lengths."""
    import onnxruntime as ort

    inv_freq = (1.0 / 10000 ** (np.arange(0, 8, 2) / 8)).astype(np.float32)
    nodes = [helper.make_node("Shape", ["past_key"], ["ps"]), helper.make_node("Gather", ["ps", "two"], ["past"], axis=0),
             helper.make_node("Add", ["past", "zeros"], ["pos"]),  # past + arange(1), folded by the exporter
             helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["posf", "axis1"], ["col"]),
             helper.make_node("Mul", ["col", "inv_freq"], ["angles"]),
             helper.make_node("Cos", ["angles"], ["cos"]),
             helper.make_node("Mul", ["posf", "half"], ["scaled"])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in [("zeros", [0]), ("two", 2), ("axis1", [1])]]
    inits += [numpy_helper.from_array(inv_freq, "inv_freq"), numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    graph = helper.make_graph(nodes, "rope", [helper.make_tensor_value_info("past_key", TensorProto.FLOAT, [1, 2, "past", 4])],
                              [helper.make_tensor_value_info("cos", TensorProto.FLOAT, [1, 4]),
                               helper.make_tensor_value_info("scaled", TensorProto.FLOAT, [1])], inits)
    path = tmp_path / "rope.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    exe = partita.compile(str(path), cache_dir=tmp_path / "cache")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for past in (5, 11):
        feeds = {"past_key": np.zeros((1, 2, past, 4), np.float32)}
        for got, want in zip(exe.run(**feeds), session.run(None, feeds), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert not exe.runtime.plan.host_ops
