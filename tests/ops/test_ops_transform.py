"""Data-movement ops of the ``transform`` family (Pad in every mode, Reshape with allowzero,
Flatten with a negative axis, Concat / Transpose on any element type, Shape with
start/end, Identity, Dropout's inference mask): ONNX import, reference, and native CUDA
kernels built for the host (tests/support/kernel_harness.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h
from ops.test_ops_indexing import check, data, make  # tests/ops/test_ops_indexing.py
from support.cuda_host import have_gxx  # tests/support/cuda_host.py

from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError
from partita.runtime.reference import run

pytestmark = pytest.mark.skipif(not have_gxx(), reason="needs g++ to build kernels for the host")


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
def test_pad_modes(tmp_path, mode, dtype) -> None:
    x = data((3, 4), dtype)
    pads = np.array([1, 2, 2, 3])  # before: axis0 1, axis1 2; after: axis0 2, axis1 3
    inits = [("p", pads), ("v", np.array(7, dtype))]
    m = make([h.make_node("Pad", ["x", "p", "v"], ["y"], mode=mode)], [("x", dtype, [3, 4])],
             ["y"], inits, opset=13)
    widths = ((1, 2), (2, 3))
    want = np.pad(x, widths, constant_values=7) if mode == "constant" else np.pad(x, widths, mode=mode)
    check(m, [x], tmp_path, [want])


def test_pad_axes_opset18_and_dynamic_batch(tmp_path) -> None:
    x = data((2, 3, 5), np.float16)
    m = make([h.make_node("Pad", ["x", "p", "", "a"], ["y"], mode="edge")],
             [("x", np.float16, ["n", 3, 5])], ["y"],
             [("p", np.array([1, 0, 2, 1])), ("a", np.array([-1, 1]))], opset=18)
    check(m, [x], tmp_path, [np.pad(x, ((0, 0), (0, 1), (1, 2)), mode="edge")])


@pytest.mark.parametrize("axis", [-1, -2, -3, 0, 3])
def test_flatten_axes_including_negative(axis) -> None:
    x = data((2, 3, 4), np.float32)
    m = make([h.make_node("Flatten", ["x"], ["y"], axis=axis)], [("x", np.float32, [2, 3, 4])],
             ["y"], opset=13)
    (y,) = run(import_onnx(m), x)
    split = axis + 3 if axis < 0 else axis
    np.testing.assert_array_equal(y, x.reshape(int(np.prod(x.shape[:split])), -1))


def test_reshape_allowzero() -> None:
    x = np.zeros((0, 3, 4), np.float32)
    m = make([h.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)],
             [("x", np.float32, [0, 3, 4])], ["y"], [("s", np.array([3, 4, 0]))], opset=14)
    (y,) = run(import_onnx(m), x)
    assert y.shape == (3, 4, 0)
    m = make([h.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)],
             [("x", np.float32, [2, 3])], ["y"], [("s", np.array([0, 6]))], opset=14)
    with pytest.raises(PartitaError, match="cannot reshape 6 elements"):
        import_onnx(m)


@pytest.mark.parametrize("dtype", [np.bool_, np.int64, np.uint8, np.float64])
def test_concat_and_transpose_any_type(tmp_path, dtype) -> None:
    a, b = data((2, 3), dtype), data((2, 1), dtype, 1)
    m = make([h.make_node("Concat", ["a", "b"], ["c"], axis=-1),
              h.make_node("Transpose", ["c"], ["y"], perm=[1, 0])],
             [("a", dtype, [2, 3]), ("b", dtype, [2, 1])], ["y"])
    check(m, [a, b], tmp_path, [np.concatenate([a, b], 1).T])


def test_shape_start_end_and_dropout_mask(tmp_path) -> None:
    m = make([h.make_node("Shape", ["x"], ["s"], start=-2, end=100),
              h.make_node("Identity", ["x"], ["i"]),
              h.make_node("Dropout", ["i"], ["d", "mask"])],
             [("x", np.float32, ["n", 3, 4])], ["s", "d", "mask"], opset=15)
    x = data((2, 3, 4), np.float32)
    s, d, mask = run(import_onnx(m), x)
    np.testing.assert_array_equal(s, [3, 4])
    np.testing.assert_array_equal(d, x)
    assert mask.dtype == np.bool_ and mask.shape == x.shape and mask.all()
    check(m, [x], tmp_path)


def test_run_time_dims_used_as_data(tmp_path) -> None:
    """Shapes over dynamic dims used as tensor data, as Hugging Face's mask code exports
    them (``Range(0, batch) * seq + Range(0, seq)`` indexes a flattened mask): each dim is
    read with ``nn.shape_of`` at run time, dim arithmetic becomes element-wise ops, and
    every op runs in a kernel, at two shapes."""
    inits = [("zero", np.array(0)), ("one", np.array(1)), ("two", np.array(2)), ("ax0", np.array([0])),
             ("ax1", np.array([1]))]
    m = make([h.make_node("Shape", ["x"], ["s"]),
              h.make_node("Gather", ["s", "zero"], ["batch"], axis=0),
              h.make_node("Gather", ["s", "one"], ["seq"], axis=0),
              h.make_node("Range", ["zero", "batch", "one"], ["rb"]),
              h.make_node("Range", ["zero", "seq", "one"], ["rs"]),
              h.make_node("Unsqueeze", ["rb", "ax1"], ["rb2"]),
              h.make_node("Mul", ["rb2", "seq"], ["base"]),
              h.make_node("Add", ["base", "rs"], ["index"]),
              h.make_node("Flatten", ["mask"], ["flat"], axis=2),
              h.make_node("Gather", ["flat", "index"], ["picked"], axis=0),
              h.make_node("Mul", ["batch", "seq"], ["count"]),
              h.make_node("Div", ["seq", "two"], ["half"]),
              h.make_node("Unsqueeze", ["half", "ax0"], ["half1"]),
              h.make_node("Concat", ["s", "half1"], ["shape_and_half"], axis=0)],
             [("x", np.float32, ["b", "n", 3]), ("mask", np.int64, ["b", "n"])],
             ["picked", "count", "shape_and_half"], inits)
    module = import_onnx(m)
    assert "nn.shape_of" in str(module)
    for b, n in ((2, 5), (3, 2)):
        x, mask = data((b, n, 3), np.float32), data((b, n), np.int64, n)
        (tmp_path / str(n)).mkdir()
        check(m, [x, mask], tmp_path / str(n), [mask[:, :, None], np.array(b * n), np.array([b, n, 3, n // 2])])


def test_reshape_minus_one_is_inferred_symbolically() -> None:
    """GPT-2's export: ``ids.view(-1, seq)`` keeps the batch dim, so a later
    ``mask.view(Shape(ids2)[0], -1)`` infers ``seq``; a flatten to ``[b*n, h]`` and back to
    ``Shape(x)[:2] + [h]`` gives the input's dims again (no unknown ``?``)."""
    inits = [("one", np.array(1)), ("zero", np.array(0)), ("ax0", np.array([0])), ("m1", np.array([-1])),
             ("s0", np.array([0])), ("s2", np.array([2])), ("h", np.array([4]))]
    m = make([h.make_node("Shape", ["ids"], ["s"]),
              h.make_node("Gather", ["s", "one"], ["seq"], axis=0),
              h.make_node("Unsqueeze", ["seq", "ax0"], ["seq1"]),
              h.make_node("Concat", ["m1", "seq1"], ["view"], axis=0),
              h.make_node("Reshape", ["ids", "view"], ["ids2"]),
              h.make_node("Shape", ["ids2"], ["s2_"]),
              h.make_node("Gather", ["s2_", "zero"], ["b"], axis=0),
              h.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
              h.make_node("Concat", ["b1", "m1"], ["view2"], axis=0),
              h.make_node("Reshape", ["mask", "view2"], ["mask2"]),
              h.make_node("Flatten", ["x"], ["flat"], axis=2),
              h.make_node("Shape", ["x"], ["sx"]),
              h.make_node("Slice", ["sx", "s0", "s2"], ["bn"]),
              h.make_node("Concat", ["bn", "h"], ["back"], axis=0),
              h.make_node("Reshape", ["flat", "back"], ["x2"])],
             [("ids", np.int64, ["batch", "seq"]), ("mask", np.int64, ["batch", "seq"]),
              ("x", np.float32, ["batch", "seq", 4])], ["ids2", "mask2", "x2"], inits)
    module = import_onnx(m)
    ret = list(module.ops)[0].body.block.last_op
    assert [str(v.type) for v in ret.operands] == ["tensor<?x?xi64>"] * 2 + ["tensor<?x?x4xf32>"]
    for b, n in ((2, 5), (1, 3)):
        ids, mask, x = data((b, n), np.int64), data((b, n), np.int64, 1), data((b, n, 4), np.float32)
        for got, want in zip(run(module, ids, mask, x), (ids, mask, x)):
            np.testing.assert_array_equal(got, want)


def test_shape_vectors_reshaped_and_read_back() -> None:
    """ViT's export reshapes a shape vector ``Concat(batch, -1, -1)`` to ``[-1]`` before
    ``Expand``ing the class token; LLaMA's reads a static dim of a dynamic shape
    (``Shape(q)[3] // 2``) as a Slice bound, which must fold to a plain integer."""
    inits = [("zero", np.array(0)), ("three", np.array(2)), ("two", np.array(2)), ("ax0", np.array([0])),
             ("m1", np.array([-1])), ("flat", np.array([-1])), ("m1s", np.array(-1)), ("ones", np.array([1, 1, 1])),
             ("cls", np.ones((1, 1, 4), np.float32)), ("axl", np.array([2])), ("big", np.array([2**62]))]
    m = make([h.make_node("Shape", ["x"], ["s"]),
              h.make_node("Gather", ["s", "zero"], ["b"], axis=0),
              h.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
              h.make_node("Concat", ["b1", "m1", "m1"], ["c"], axis=0),
              h.make_node("Reshape", ["c", "flat"], ["target"]),
              h.make_node("Shape", ["target"], ["target_rank"]),
              h.make_node("Equal", ["target", "m1s"], ["eq"]),
              h.make_node("Where", ["eq", "ones", "target"], ["t2"]),
              h.make_node("Expand", ["cls", "t2"], ["tokens"]),
              h.make_node("Gather", ["s", "three"], ["d"], axis=0),
              h.make_node("Div", ["d", "two"], ["half"]),
              h.make_node("Unsqueeze", ["half", "ax0"], ["half1"]),
              h.make_node("Slice", ["x", "half1", "big", "axl"], ["upper"])],
             [("x", np.float32, ["batch", 3, 4])], ["tokens", "target_rank", "upper"], inits)
    x = data((2, 3, 4), np.float32)
    tokens, rank, upper = run(import_onnx(m), x)
    np.testing.assert_array_equal(tokens, np.ones((2, 1, 4), np.float32))
    np.testing.assert_array_equal(rank, [3])
    np.testing.assert_array_equal(upper, x[:, :, 2:])


def test_a_dim_only_reshape_infers_reads_back_from_its_result() -> None:
    """``Shape`` of a reshape whose -1 is known only at run time reads the result's dim."""
    m = make([h.make_node("Reshape", ["x", "s"], ["y"]),
              h.make_node("Shape", ["y"], ["sy"]),
              h.make_node("Add", ["sy", "sy"], ["twice"])],
             [("x", np.float32, ["n", "m"])], ["sy", "twice"], [("s", np.array([-1, 2]))])
    module = import_onnx(m)
    assert "nn.shape_of" in str(module)
    sy, twice = run(module, data((3, 4), np.float32))
    np.testing.assert_array_equal(sy, [6, 2])
    np.testing.assert_array_equal(twice, [12, 4])


def test_dims_carried_through_ops_keep_reshapes_static() -> None:
    """The attention merge of exported transformers: ``[b, s, 32]`` split into heads,
    transposed, scaled by a table over positions, multiplied, sliced, transposed back and reshaped to ``Shape(x)[:2] + [-1]``
    infers ``-1 = 32`` only if the run-time dims are followed through every op (ONNX shape
    inference names them ``unk__N``), so the projection after it has a static K."""
    inits = [("zero", np.array(0)), ("one", np.array(1)), ("ax0", np.array([0])), ("heads", np.array([4, 8])),
             ("m1", np.array([-1])), ("s0", np.array([0])), ("s1", np.array([2**62])), ("ax3", np.array([3])),
             ("two", np.array([2])), ("ax013", np.array([0, 1, 3])), ("w", data((32, 16), np.float32, 3))]
    m = make([h.make_node("Shape", ["x"], ["s"]),
              h.make_node("Slice", ["s", "s0", "two"], ["bs"]),
              h.make_node("Concat", ["bs", "heads"], ["split"], axis=0),
              h.make_node("Reshape", ["x", "split"], ["q"]),
              h.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
              h.make_node("Transpose", ["q"], ["kt"], perm=[0, 2, 3, 1]),
              h.make_node("Gather", ["s", "one"], ["seq"], axis=0),
              h.make_node("Range", ["zero", "seq", "one"], ["pos"]),
              h.make_node("Cast", ["pos"], ["posf"], to=1),
              h.make_node("Unsqueeze", ["posf", "ax013"], ["pos4"]),
              h.make_node("Mul", ["qt", "pos4"], ["qr"]),  # rotary-like: a table over positions
              h.make_node("MatMul", ["qr", "kt"], ["scores"]),
              h.make_node("Softmax", ["scores"], ["p"], axis=-1),
              h.make_node("MatMul", ["p", "qt"], ["o"]),
              h.make_node("Slice", ["o", "s0", "s1", "ax3"], ["o2"]),
              h.make_node("Transpose", ["o2"], ["ot"], perm=[0, 2, 1, 3]),
              h.make_node("Concat", ["bs", "m1"], ["merge"], axis=0),
              h.make_node("Reshape", ["ot", "merge"], ["merged"]),
              h.make_node("MatMul", ["merged", "w"], ["y"])],
             [("x", np.float32, ["batch", "seq", 32])], ["y"], inits)
    module = import_onnx(m)
    assert "tensor<?x?x32xf32>, tensor<16x32xf32>) -> tensor<?x?x16xf32>" in str(module)
    x = data((2, 5, 32), np.float32)
    q = x.reshape(2, 5, 4, 8).transpose(0, 2, 1, 3)
    scores = (q * np.arange(5, dtype=np.float32)[:, None]) @ q.transpose(0, 1, 3, 2)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = (p @ q).transpose(0, 2, 1, 3).reshape(2, 5, 32) @ dict(inits)["w"]
    np.testing.assert_allclose(run(module, x)[0], want, rtol=1e-4, atol=1e-5)
