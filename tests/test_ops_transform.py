"""Data-movement ops of the ``transform`` family (Pad in every mode, Reshape with allowzero,
Flatten with a negative axis, Concat / Transpose on any element type, Shape with
start/end, Identity, Dropout's inference mask): ONNX import, reference, and native CUDA
kernels built for the host (tests/kernel_harness.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError
from partita.runtime.reference import run

from cuda_host import have_gxx  # tests/cuda_host.py
from test_ops_indexing import check, data, make  # tests/test_ops_indexing.py

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
