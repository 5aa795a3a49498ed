"""Indexing ops (Gather, GatherElements, GatherND, ScatterND, ScatterElements, Slice, Split,
Expand, Tile, Trilu, Range, ConstantOfShape, OneHot, ...): ONNX import, NumPy reference,
and native CUDA kernels built for the host (tests/support/kernel_harness.py), in several element
types; run-time dims resolved to shape references end to end."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_harness import run_host_kernels  # tests/support/kernel_harness.py

from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError
from partita.runtime.reference import run

pytestmark = pytest.mark.skipif(not have_gxx(), reason="needs g++ to build kernels for the host")

ONNX_TYPES = {np.float32: TP.FLOAT, np.float16: TP.FLOAT16, np.float64: TP.DOUBLE,
              np.int64: TP.INT64, np.int32: TP.INT32, np.int8: TP.INT8, np.uint8: TP.UINT8,
              np.uint16: TP.UINT16, np.bool_: TP.BOOL, ml_dtypes.bfloat16: TP.BFLOAT16}


def make(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    """A model; ``inputs`` are ``(name, dtype, shape)``, ``outputs`` names, ``inits``
    ``(name, array)``."""
    graph = h.make_graph(
        nodes, "g",
        [h.make_tensor_value_info(n, ONNX_TYPES[np.dtype(t).type], s) for n, t, s in inputs],
        [h.make_tensor_value_info(n, TP.UNDEFINED, None) for n in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def check(model, inputs, tmp_path, expect=None):
    """Kernels on the host agree with the reference op by op; every op is in a kernel;
    the result matches ``expect`` (NumPy) when given."""
    outs, left = run_host_kernels(model, inputs, tmp_path)
    assert left == [], f"ops left in @main: {left}"
    if expect is not None:
        for got, want in zip(outs, expect):
            assert got.shape == np.asarray(want).shape
            np.testing.assert_array_equal(got, want)
    return outs


@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.bool_, ml_dtypes.bfloat16])
def test_gather_negative_indices_dynamic_axis(tmp_path, dtype) -> None:
    idx = np.array([[0, -1], [2, -3]], np.int64)
    m = make([h.make_node("Gather", ["x", "i"], ["y"], axis=1)], [("x", dtype, [2, "n", 3])],
             ["y"], [("i", idx)])
    x = data((2, 5, 3), dtype)
    check(m, [x], tmp_path, [np.take(x, idx % 5, axis=1)])


def test_gather_scalar_index_and_embedding(tmp_path) -> None:
    table = data((10, 4), np.float32)
    m = make([h.make_node("Gather", ["t", "ids"], ["e"]),
              h.make_node("Gather", ["e", "k"], ["y"], axis=1)],
             [("ids", np.int64, ["b", "s"])], ["e", "y"], [("t", table), ("k", np.array(-2))])
    ids = np.array([[1, 9, 0], [3, -1, 2]], np.int64)
    e = table[ids % 10]
    check(m, [ids], tmp_path, [e, e[:, -2]])


def test_gather_elements_and_gather_nd(tmp_path) -> None:
    idx = np.array([[1, -1, 0], [0, 0, 2]], np.int32)
    ndi = np.array([[[1], [0]], [[0], [1]]], np.int64)
    m = make([h.make_node("GatherElements", ["x", "i"], ["y"], axis=1),
              h.make_node("GatherND", ["x", "j"], ["z"], batch_dims=1)],
             [("x", np.int32, [2, 3])], ["y", "z"], [("i", idx), ("j", ndi)])
    x = data((2, 3), np.int32)
    gnd = np.stack([x[b][ndi[b][:, 0]] for b in range(2)])
    check(m, [x], tmp_path, [np.take_along_axis(x, idx % 3, 1), gnd])


@pytest.mark.parametrize("reduction", ["none", "add", "mul"])
def test_scatter_nd_kv_cache_update(tmp_path, reduction) -> None:
    # cache[b, pos] = new (a KV-cache write at positions 1 and 3 of batch rows 0 and 1)
    idx = np.array([[0, 1], [1, 3], [0, 1]], np.int64)
    m = make([h.make_node("ScatterND", ["c", "i", "u"], ["y"], reduction=reduction)],
             [("c", np.float16, [2, 4, 8]), ("u", np.float16, [3, 8])], ["y"], [("i", idx)])
    c, u = data((2, 4, 8), np.float16), data((3, 8), np.float16, 1)
    want = c.astype(np.float32)
    for n, (b, p) in enumerate(idx):
        want[b, p] = u[n] if reduction == "none" else (want[b, p] + u[n].astype(np.float32)
                                                      if reduction == "add" else want[b, p] * u[n])
        want = want.astype(np.float16).astype(np.float32)
    check(m, [c, u], tmp_path, [want.astype(np.float16)])


def test_scatter_elements_negative_indices(tmp_path) -> None:
    idx = np.array([[1, -1], [0, 2]], np.int64)
    m = make([h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction="add")],
             [("x", np.int64, [2, 3]), ("u", np.int64, [2, 2])], ["y"], [("i", idx)], opset=18)
    x, u = data((2, 3), np.int64), data((2, 2), np.int64, 1)
    want = x.copy()
    for r in range(2):
        for c in range(2):
            want[r, idx[r, c] % 3] += u[r, c]
    check(m, [x, u], tmp_path, [want])


@pytest.mark.parametrize("dtype", [np.bool_, np.float64, np.uint8])
def test_slice_negative_steps_and_clamping(tmp_path, dtype) -> None:
    x = data((4, 6, 5), dtype)
    inits = [("s", np.array([-1, 100, 1])), ("e", np.array([-100, -7, 4])),
             ("a", np.array([0, 1, -1])), ("st", np.array([-2, 1, 2]))]
    m = make([h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], [("x", dtype, [4, 6, 5])],
             ["y"], inits)
    check(m, [x], tmp_path, [x[-1:-100:-2, 100:-7, 1:4:2]])


def test_slice_opset9_attributes(tmp_path) -> None:
    x = data((3, 4), np.float32)
    m = make([h.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[1000, -1], axes=[0, 1])],
             [("x", np.float32, [3, 4])], ["y"], opset=9)
    check(m, [x], tmp_path, [x[1:, -3:-1]])


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_unequal_and_equal(tmp_path, opset) -> None:
    x = data((2, 7), np.int8)
    if opset == 11:
        node = h.make_node("Split", ["x"], ["a", "b"], axis=1, split=[3, 4])
        inits = []
    elif opset == 13:
        node = h.make_node("Split", ["x", "s"], ["a", "b"], axis=-1)
        inits = [("s", np.array([3, 4]))]
    else:
        node = h.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2)
        inits = []
    m = make([node], [("x", np.int8, [2, 7])], ["a", "b"], inits, opset=opset)
    cut = 3 if opset != 18 else 4
    check(m, [x], tmp_path, [x[:, :cut], x[:, cut:]])


def test_expand_tile_trilu_onehot(tmp_path) -> None:
    x = data((3, 1), np.uint16)
    inits = [("shape", np.array([2, 1, 4])), ("rep", np.array([2, 3])), ("k", np.array(-1)),
             ("depth", np.array(4.0, np.float32)), ("vals", np.array([0.5, 2.0], np.float32))]
    m = make([h.make_node("Expand", ["x", "shape"], ["e"]),
              h.make_node("Tile", ["x", "rep"], ["t"]),
              h.make_node("Trilu", ["m", "k"], ["tl"], upper=0),
              h.make_node("Trilu", ["m"], ["tu"]),
              h.make_node("OneHot", ["ids", "depth", "vals"], ["oh"], axis=0)],
             [("x", np.uint16, [3, 1]), ("m", np.float32, [3, 4]), ("ids", np.int64, [3])],
             ["e", "t", "tl", "tu", "oh"], inits, opset=14)
    mm, ids = data((3, 4), np.float32), np.array([0, -1, 3], np.int64)
    oh = np.where(np.arange(4)[:, None] == ids % 4, 2.0, 0.5).astype(np.float32)
    check(m, [x, mm, ids], tmp_path, [np.broadcast_to(x, (2, 3, 4)), np.tile(x, (2, 3)),
                                      np.tril(mm, -1), np.triu(mm), oh])


def test_shape_ops_fold_at_import() -> None:
    m = make([h.make_node("Shape", ["x"], ["s"], start=-2),
              h.make_node("ConstantOfShape", ["s"], ["c"],
                          value=numpy_helper.from_array(np.array([7], np.int32))),
              h.make_node("Range", ["z", "n", "one"], ["r"]),
              h.make_node("Size", ["x"], ["n_el"]),
              h.make_node("EyeLike", ["c"], ["eye"], k=1)],
             [("x", np.float32, [2, 3, 4])], ["c", "r", "n_el", "eye"],
             [("z", np.array(1.0, np.float32)), ("n", np.array(4.5, np.float32)),
              ("one", np.array(1.5, np.float32))])
    module = import_onnx(m)
    assert [op.name for op in module.ops.first.body.block.ops] == ["nn.constant"] * 4 + ["func.return"]
    c, r, n, eye = run(module, data((2, 3, 4), np.float32))
    np.testing.assert_array_equal(c, np.full((3, 4), 7, np.int32))
    np.testing.assert_array_equal(r, np.array([1.0, 2.5, 4.0], np.float32))
    assert n == 24 and eye.dtype == np.int32
    np.testing.assert_array_equal(eye, np.eye(3, 4, 1, dtype=np.int32))


def test_bert_style_dynamic_sequence(tmp_path) -> None:
    """input_ids[batch, seq], attention_mask[batch, seq]: position ids from
    Range(0, Shape(ids)[1]), token type ids from ConstantOfShape(Shape(ids)), the mask
    expanded to [batch, 1, seq, seq], positions also sliced from a table to seq."""
    hidden, vocab, max_pos = 4, 11, 16
    inits = [("tok", data((vocab, hidden), np.float32)), ("pos", data((max_pos, hidden), np.float32, 1)),
             ("typ", data((2, hidden), np.float32, 2)), ("one", np.array(1)), ("zero", np.array(0)),
             ("ax0", np.array([0])), ("ax1", np.array([1])), ("ax12", np.array([1, 2])),
             ("buf", np.arange(max_pos)[None, :]), ("b0", np.array([0])), ("minus1", np.array([1, 1, -1, 1]))]
    nodes = [
        h.make_node("Shape", ["ids"], ["shp"]),
        h.make_node("Gather", ["shp", "one"], ["seq"], axis=0),
        h.make_node("Range", ["zero", "seq", "one"], ["pos_ids"]),
        h.make_node("Unsqueeze", ["pos_ids", "ax0"], ["pos_ids2"]),
        h.make_node("Unsqueeze", ["seq", "ax0"], ["seq1"]),
        h.make_node("Slice", ["buf", "b0", "seq1", "ax1"], ["pos_ids_buf"]),
        h.make_node("ConstantOfShape", ["shp"], ["types"],
                    value=numpy_helper.from_array(np.array([0], np.int64))),
        h.make_node("Gather", ["tok", "ids"], ["e_tok"]),
        h.make_node("Gather", ["pos", "pos_ids2"], ["e_pos"]),
        h.make_node("Gather", ["pos", "pos_ids_buf"], ["e_pos2"]),
        h.make_node("Gather", ["typ", "types"], ["e_typ"]),
        h.make_node("Add", ["e_tok", "e_pos"], ["s1"]),
        h.make_node("Add", ["s1", "e_typ"], ["emb"]),
        h.make_node("Unsqueeze", ["mask", "ax12"], ["m4"]),
        h.make_node("Concat", ["minus1", "seq1"], ["tshape"], axis=0),
        h.make_node("Shape", ["m4"], ["m4shape"]),
        h.make_node("Gather", ["m4shape", "b0"], ["bdim"], axis=0),
        h.make_node("Concat", ["bdim", "one_1", "seq1", "seq1"], ["target"], axis=0),
        h.make_node("Expand", ["m4", "target"], ["mask4"]),
    ]
    inits.append(("one_1", np.array([1])))
    m = make(nodes, [("ids", np.int64, ["batch", "seq"]), ("mask", np.int64, ["batch", "seq"])],
             ["emb", "e_pos2", "mask4"], inits)
    module = import_onnx(m)
    text = str(module)
    assert "nn.arange" in text and "nn.broadcast_to" in text and "nn.strided_slice" in text
    for batch, seq in ((2, 5), (1, 3)):
        ids = np.random.default_rng(seq).integers(0, vocab, (batch, seq))
        mask = (np.arange(seq)[None, :] < seq - 1).astype(np.int64).repeat(batch, 0)
        tok, pos, typ = (dict(inits)[k] for k in ("tok", "pos", "typ"))
        emb = tok[ids] + pos[np.arange(seq)][None] + typ[0]
        mask4 = np.broadcast_to(mask[:, None, None, :], (batch, 1, seq, seq))
        (tmp_path / f"{batch}").mkdir()
        outs = check(m, [ids, mask], tmp_path / f"{batch}", None)
        np.testing.assert_allclose(outs[0], emb, rtol=1e-6)
        np.testing.assert_array_equal(outs[1], np.broadcast_to(pos[:seq], (1, seq, hidden)))
        np.testing.assert_array_equal(outs[2], mask4)


def test_data_dependent_shapes_import_as_staged_ops() -> None:
    """A run-time NonZero is ``nn.nonzero`` (its size known once it has run), a computed
    Reshape target an ``nn.dyn`` the plan sizes when the value is read back
    (tests/runtime/test_data_dependent_shapes.py runs both)."""
    m = make([h.make_node("NonZero", ["x"], ["y"])], [("x", np.float32, [3])], ["y"])
    assert "nn.nonzero" in str(import_onnx(m))
    m = make([h.make_node("Abs", ["s"], ["t"]), h.make_node("Reshape", ["x", "t"], ["y"])],
             [("x", np.float32, [6]), ("s", np.int64, [2])], ["y"])
    assert 'param_names = "shape"' in str(import_onnx(m))
    # A size computed from dims that size no tensor is still a located error.
    m = make([h.make_node("Shape", ["x"], ["s"]),
              h.make_node("Add", ["s", "s"], ["s2"]),
              h.make_node("Range", ["z", "s2", "o"], ["r"])],
             [("x", np.float32, ["n"])], ["r"], [("z", np.array(0)), ("o", np.array(1))])
    with pytest.raises(PartitaError, match="Range.*computed from other dimensions"):
        import_onnx(m)


@pytest.mark.parametrize("partitioner", ["collage", "eager"])
def test_bert_style_compiles_and_runs_every_op_in_a_kernel(tmp_path, partitioner) -> None:
    """partita.compile with the default targets: the run-time dims flow through the shape
    functions; the report shows no op left in @main."""
    import partita

    vocab, hidden = 7, 4
    inits = [("tok", data((vocab, hidden), np.float32)), ("one", np.array(1)),
             ("zero", np.array(0)), ("ax0", np.array([0])), ("ax12", np.array([1, 2])),
             ("pos", data((32, hidden), np.float32, 1)), ("k1", np.array(1))]
    nodes = [
        h.make_node("Shape", ["ids"], ["shp"]),
        h.make_node("Gather", ["shp", "one"], ["seq"], axis=0),
        h.make_node("Range", ["zero", "seq", "one"], ["pos_ids"]),
        h.make_node("Gather", ["tok", "ids"], ["e_tok"]),
        h.make_node("Gather", ["pos", "pos_ids"], ["e_pos"]),
        h.make_node("Add", ["e_tok", "e_pos"], ["emb"]),
        h.make_node("Unsqueeze", ["mask", "ax12"], ["m4"]),
        h.make_node("Trilu", ["m4", "k1"], ["causal"], upper=0),
    ]
    m = make(nodes, [("ids", np.int64, ["batch", "seq"]), ("mask", np.int64, ["batch", "seq"])],
             ["emb", "causal"], inits)
    exe = partita.compile(m, partitioner=partitioner, cache_dir=tmp_path)
    report = str(exe.report())
    assert "(in @main)" not in report, report
    tok, pos = inits[0][1], inits[5][1]
    for batch, seq in ((2, 5), (3, 2)):
        ids = np.random.default_rng(seq).integers(0, vocab, (batch, seq))
        mask = np.ones((batch, seq), np.int64)
        emb, causal = exe.run(ids, mask)
        np.testing.assert_allclose(emb, tok[ids] + pos[:seq], rtol=1e-6)
        np.testing.assert_array_equal(causal, np.tril(mask[:, None, None, :], 1))


def test_trilu_with_a_run_time_diagonal(tmp_path) -> None:
    m = make([h.make_node("Trilu", ["x", "k"], ["y"], upper=1)],
             [("x", np.int8, [2, 3, 5]), ("k", np.int64, [])], ["y"], opset=14)
    x = data((2, 3, 5), np.int8)
    for k in (-1, 2):
        (tmp_path / str(k)).mkdir()
        check(m, [x, np.array(k)], tmp_path / str(k), [np.triu(x, k)])


def test_expand_shape_from_a_torch_style_where_equal(tmp_path) -> None:
    """torch.onnx exports expand(-1, ...) as Where(Equal(shape, -1), ones, shape)."""
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Concat", ["one", "s"], ["s3"], axis=0),
             h.make_node("Equal", ["s3", "m1"], ["eq"]),
             h.make_node("Where", ["eq", "ones", "s3"], ["target"]),
             h.make_node("Expand", ["b", "target"], ["y"])]
    m = make(nodes, [("x", np.float32, ["n", 4]), ("b", np.float32, [3, 1, 1])], ["y"],
             [("one", np.array([3])), ("m1", np.array(-1)), ("ones", np.array([1, 1, 1]))])
    x, b = data((5, 4), np.float32), data((3, 1, 1), np.float32, 1)
    check(m, [x, b], tmp_path, [np.broadcast_to(b, (3, 5, 4))])


def test_slices_of_a_dynamic_axis(tmp_path) -> None:
    """x[:, 1:] (size seq - 1), x[:, 1:-1] (seq - 2), x[:, 1::2] (every other one from
    the second), x[:, -1:] (the last token), x[:, -3:-1] and x[:, 1:3] (static sizes,
    assuming the axis holds them, which binding checks) on a dynamic sequence axis; a
    stride with an end is a clear error."""
    inits = [("one", np.array([1])), ("big", np.array([2**63 - 1])), ("m1", np.array([-1])),
             ("m3", np.array([-3])), ("ax", np.array([1])), ("three", np.array([3])), ("two", np.array([2]))]
    m = make([h.make_node("Slice", ["x", "one", "big", "ax"], ["tail"]),
              h.make_node("Slice", ["x", "m1", "big", "ax"], ["last"]),
              h.make_node("Slice", ["x", "m3", "m1", "ax"], ["mid"]),
              h.make_node("Slice", ["x", "one", "three", "ax"], ["head"]),
              h.make_node("Slice", ["x", "one", "m1", "ax"], ["inner"]),
              h.make_node("Slice", ["x", "one", "big", "ax", "two"], ["every"])],
             [("x", np.float32, [2, "seq", 3])], ["tail", "last", "mid", "head", "inner", "every"], inits)
    for seq in (3, 6):
        x = data((2, seq, 3), np.float32, seq)
        (tmp_path / str(seq)).mkdir()
        check(m, [x], tmp_path / str(seq), [x[:, 1:], x[:, -1:], x[:, -3:-1], x[:, 1:3], x[:, 1:-1], x[:, 1::2]])
    import partita

    head = make([h.make_node("Slice", ["x", "one", "three", "ax"], ["head"])], [("x", np.float32, [2, "seq", 3])],
                ["head"], inits)
    with pytest.raises(PartitaError, match=r"its result would be 2x1x3 with these inputs, but its type says tensor<2x2x3xf32>"):
        partita.compile(head).run(data((2, 2, 3), np.float32))  # [1:3] of two tokens
    bad = make([h.make_node("Slice", ["x", "one", "three", "ax", "two"], ["y"])],
               [("x", np.float32, [2, "seq", 3])], ["y"], inits)
    with pytest.raises(PartitaError, match="slicing dynamic dimension 1 with start 1, end 3, step 2"):
        import_onnx(bad)


def test_the_first_k_of_a_data_dependent_axis(tmp_path) -> None:
    """``keep[:k]`` of what a NonZero (an NMS) kept holds min(kept, k) rows, as ONNX clamps
    (torchvision's RPN keeps its ``post_nms_top_n`` best proposals this way): the slice of an
    axis only a run sizes is clamped (``?``), not assumed to hold ``k``. Checked against
    onnxruntime for fewer and more hits than ``k``, with a [1::2] of the same axis."""
    import partita

    ort = pytest.importorskip("onnxruntime")
    inits = [("zero", np.array([0])), ("four", np.array([4])), ("one", np.array([1])), ("two", np.array([2])),
             ("big", np.array([2**63 - 1]))]
    m = make([h.make_node("NonZero", ["x"], ["nz"]),
              h.make_node("Transpose", ["nz"], ["hits"], perm=[1, 0]),
              h.make_node("Slice", ["hits", "zero", "four", "zero"], ["first"]),
              h.make_node("Slice", ["hits", "one", "big", "zero", "two"], ["odd"])],
             [("x", np.float32, [3, 4])], ["first", "odd"], inits)
    for output in m.graph.output:
        output.type.tensor_type.elem_type = TP.INT64  # onnxruntime wants them typed
    sliced = next(op for op in import_onnx(m).walk() if op.name == "nn.strided_slice")
    assert list(sliced.clamped) == [0] and str(sliced.result.type) == "tensor<?x2xi64>"
    exe = partita.compile(m, cache_dir=tmp_path)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for hits in (2, 9):
        x = np.zeros(12, np.float32)
        x[np.random.default_rng(hits).choice(12, hits, replace=False)] = 1
        x = x.reshape(3, 4)
        got, want = exe.run(x), session.run(None, {"x": x})
        assert [g.shape for g in got] == [w.shape for w in want] == [(min(hits, 4), 2), (hits // 2, 2)]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_slice_and_split_at_offsets_from_run_time_dims(tmp_path) -> None:
    """A slice starting at ``n - 2`` and a split into ``[n - 1, 1]`` along a dynamic axis of
    size ``n`` (an RPN cuts its concatenated anchors into levels of H * W * A each): the
    bounds are computed from the dims and read when the plan binds, as onnxruntime does."""
    import partita

    ort = pytest.importorskip("onnxruntime")
    inits = [("one", np.array([1])), ("two", np.array([2])), ("big", np.array([2**63 - 1])), ("ax", np.array([1]))]
    m = make([h.make_node("Shape", ["x"], ["s"]), h.make_node("Slice", ["s", "one", "two"], ["n"]),
              h.make_node("Sub", ["n", "two"], ["start"]), h.make_node("Sub", ["n", "one"], ["rest"]),
              h.make_node("Slice", ["x", "start", "big", "ax"], ["last_two"]),
              h.make_node("Concat", ["rest", "one"], ["sizes"], axis=0),
              h.make_node("Split", ["x", "sizes"], ["head", "tail"], axis=1)],
             [("x", np.float32, [2, "n", 3])], ["last_two", "head", "tail"], inits)
    for output in m.graph.output:
        output.type.tensor_type.elem_type = TP.FLOAT
    exe = partita.compile(m, cache_dir=tmp_path)
    assert 'kind = "slice"' in str(exe) and 'kind = "split"' in str(exe)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (3, 6):
        x = data((2, n, 3), np.float32, n)
        got, want = exe.run(x), session.run(None, {"x": x})
        assert [g.shape for g in got] == [w.shape for w in want] == [(2, 2, 3), (2, n - 1, 3), (2, 1, 3)]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_clamped_and_strided_slices_of_a_dynamic_axis_on_the_host(tmp_path) -> None:
    """The kernels of a clamped ``[1:4]`` and a ``[1::2]`` of a dynamic axis, built for the
    host, against the reference at 3 and 7 rows (below and past the clamp)."""
    from support.kernel_check import check_kernels, fuse  # tests/support/kernel_check.py

    big = 2**63 - 1
    text = f"""
func.func @main(%x: tensor<?x3xf32>) -> (tensor<?x3xf32>, tensor<?x3xf32>) {{
  %a = nn.strided_slice %x {{begin = array<i64: 1, 0>, end = array<i64: 4, {big}>, strides = array<i64: 1, 1>, clamped = array<i64: 0>}} : (tensor<?x3xf32>) -> tensor<?x3xf32>
  %b = nn.strided_slice %x {{begin = array<i64: 1, 0>, end = array<i64: {big}, {big}>, strides = array<i64: 2, 1>}} : (tensor<?x3xf32>) -> tensor<?x3xf32>
  func.return %a, %b : tensor<?x3xf32>, tensor<?x3xf32>
}}
"""
    for rows in (3, 7):
        (tmp_path / str(rows)).mkdir()
        assert len(check_kernels(fuse(text), tmp_path / str(rows), dynamic=rows)) == 2  # two kernels, checked


@pytest.mark.parametrize("partitioner", ["collage", "eager"])
def test_gpt_style_causal_mask_and_last_token_compile(tmp_path, partitioner) -> None:
    """The causal bias sliced from a [1, 1, max, max] buffer to [seq, seq] (two shape
    references), added to scores, and the last position gathered; every op in a kernel."""
    import partita

    max_len = 8
    buf = np.tril(np.ones((max_len, max_len), np.float32))[None, None]
    inits = [("buf", buf), ("z2", np.array([0, 0])), ("ax", np.array([2, 3])),
             ("one", np.array(1)), ("neg", np.array(-10000.0, np.float32)),
             ("onef", np.array(1.0, np.float32)), ("last", np.array(-1))]
    nodes = [h.make_node("Shape", ["s"], ["shp"]),
             h.make_node("Gather", ["shp", "ax"], ["ends"]),
             h.make_node("Slice", ["buf", "z2", "ends", "ax"], ["causal"]),
             h.make_node("Sub", ["onef", "causal"], ["inv"]),
             h.make_node("Mul", ["inv", "neg"], ["bias"]),
             h.make_node("Add", ["s", "bias"], ["masked"]),
             h.make_node("Gather", ["masked", "last"], ["y"], axis=2)]
    m = make(nodes, [("s", np.float32, ["b", 2, "seq", "seq"])], ["y"], inits)
    exe = partita.compile(m, partitioner=partitioner, cache_dir=tmp_path)
    assert "(in @main)" not in str(exe.report()), str(exe.report())
    for seq in (3, 5):
        s = data((1, 2, seq, seq), np.float32, seq)
        (y,) = exe.run(s)
        want = (s + (1 - buf[:, :, :seq, :seq]) * -10000.0)[:, :, -1]
        np.testing.assert_allclose(y, want, rtol=1e-6)
