"""``nn.random`` (ONNX RandomUniform / RandomNormal, their ``Like`` forms and Bernoulli):
Philox-4x32-10 against its published known answers; the draws' ranges and moments; seeded
and unseeded nodes; and the native kernel built for the host drawing the reference's values
(uniform ones bit for bit, normal ones to the last bits of double ``log`` / ``cos``)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support.cuda_host import have_gxx  # tests/support/cuda_host.py

import partita
from partita.ir import PartitaError
from partita.runtime.reference.nn.random import philox4x32, random_draws

N = 20000
ONNX_OPS = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli"}
"""The op types these tests convert (``tests/frontends/test_onnx_import.py`` counts them)."""


def _model(nodes, inputs, outputs, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _out(name: str, elem: int = TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, None)


def test_philox_matches_its_known_answers() -> None:
    """Random123's known-answer vectors of Philox-4x32-10 (the zero counter and key, and
    the digits of pi)."""
    zero = philox4x32(tuple(np.zeros(1, np.uint64) for _ in range(4)), 0)
    assert [int(w[0]) for w in zero] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    counter = tuple(np.array([w], np.uint64) for w in (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344))
    pi = philox4x32(counter, 0xA4093822 | (0x299F31D0 << 32))
    assert [int(w[0]) for w in pi] == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def test_uniform_and_normal_draws_have_their_range_and_moments() -> None:
    model = _model([helper.make_node("RandomUniform", [], ["u"], shape=[N], low=-2.0, high=6.0, seed=1.0),
                    helper.make_node("RandomNormal", [], ["z"], shape=[N], mean=3.0, scale=0.5, seed=1.0)],
                   [], [_out("u"), _out("z")])
    u, z = partita.compile(model).run()
    assert u.dtype == z.dtype == np.float32 and u.shape == z.shape == (N,)
    assert u.min() >= -2.0 and u.max() < 6.0
    sigma = 8 / np.sqrt(12 * N)  # the uniform mean's standard error
    assert abs(u.mean() - 2.0) < 5 * sigma and abs(u.std() - 8 / np.sqrt(12)) < 0.05
    assert abs(z.mean() - 3.0) < 5 * 0.5 / np.sqrt(N) and abs(z.std() - 0.5) < 0.01
    # draws are independent of their neighbours: no correlation between successive ones
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 5 / np.sqrt(N)


def test_a_like_draw_takes_its_input_shape_and_type() -> None:
    """RandomUniformLike of a tensor with a run-time dim: its shape at every run, its type
    unless ``dtype`` says another (Bernoulli's body casts its draws so)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["n", 3])
    model = _model([helper.make_node("RandomUniformLike", ["x"], ["u"]),
                    helper.make_node("RandomNormalLike", ["x"], ["z"], dtype=TensorProto.DOUBLE)],
                   [x], [_out("u", TensorProto.FLOAT16), _out("z", TensorProto.DOUBLE)])
    exe = partita.compile(model)
    for n in (5, 300):
        u, z = exe.run(np.zeros((n, 3), np.float16))
        assert u.shape == z.shape == (n, 3) and u.dtype == np.float16 and z.dtype == np.float64
        assert 0 <= u.min() and u.max() <= 1


def test_seeds_key_the_draws_and_runs_repeat_them() -> None:
    """A seed keys the generator (its float32 bits); nodes without one draw independently
    of each other (keyed by their output names); every run draws the same values."""
    nodes = [helper.make_node("RandomUniform", [], [name], shape=[64], **seed)
             for name, seed in (("a", {"seed": 7.0}), ("b", {"seed": 7.0}), ("c", {"seed": 7.5}), ("d", {}),
                                ("e", {}))]
    exe = partita.compile(_model(nodes, [], [_out(n) for n in "abcde"]))
    a, b, c, d, e = exe.run()
    assert np.array_equal(a, b) and not np.array_equal(a, c) and not np.array_equal(d, e)
    assert all(np.array_equal(x, y) for x, y in zip(exe.run(), (a, b, c, d, e)))


def test_bernoulli_draws_ones_with_its_probabilities() -> None:
    """Bernoulli is 1 with probability p (never at 0, always at 1), as its definition and
    onnxruntime say, whatever ONNX's function body (Greater: 1 - p) would give."""
    p = helper.make_tensor_value_info("p", TensorProto.FLOAT, [4, N // 4])
    model = _model([helper.make_node("Bernoulli", ["p"], ["y"], seed=2.0)], [p], [_out("y")], opset=15)
    probs = np.repeat(np.array([0.0, 0.1, 0.5, 1.0], np.float32)[:, None], N // 4, axis=1)
    (y,) = partita.compile(model).run(probs)
    assert set(np.unique(y)) <= {0.0, 1.0}
    share = y.mean(axis=1)
    assert share[0] == 0 and share[3] == 1 and abs(share[1] - 0.1) < 0.02 and abs(share[2] - 0.5) < 0.03


def test_an_unsupported_dtype_is_a_located_error() -> None:
    model = _model([helper.make_node("RandomUniform", [], ["u"], shape=[3], dtype=TensorProto.INT32)], [],
                   [_out("u", TensorProto.INT32)])
    with pytest.raises(PartitaError, match=r"RandomUniform.*float16, bfloat16, float or double"):
        partita.compile(model)


@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16],
                         ids=TensorProto.DataType.Name)
def test_the_kernel_on_the_host_draws_the_reference_values(elem, tmp_path) -> None:
    """The native kernel (one thread an element, Philox at its flat index) built for the
    host draws the reference's values bit for bit (the harness compares every kernel with
    the reference; a normal draw rounded to f32 or narrower, as double ``log`` / ``cos`` of
    two libms may differ in their last bit); and NVRTC builds it for the GPU (no host step)."""
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    from support.kernel_harness import run_host_kernels  # tests/support/kernel_harness.py

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 37])
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["u"], dtype=elem, low=-1.0, high=3.0, seed=5.0)]
    outputs = [_out("u", elem)]
    if elem != TensorProto.DOUBLE:
        nodes.append(helper.make_node("RandomNormalLike", ["x"], ["z"], dtype=elem, mean=0.5, scale=2.0))
        outputs.append(_out("z", elem))
    model = _model(nodes, [x], outputs)
    inputs = [np.zeros((29, 37), np.float32)]
    got, left = run_host_kernels(model, inputs, tmp_path, max_blocks=4)
    assert not left, left
    want = partita.compile(model, "llvm").run(*inputs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint8), w.view(np.uint8))
    draws = random_draws("uniform", 29 * 37, 0x40A00000)  # seed 5.0 is key 0x40a00000
    dtype = {TensorProto.FLOAT16: np.float16, TensorProto.BFLOAT16: ml_dtypes.bfloat16}.get(elem)
    expect = -1.0 + 4.0 * draws
    expect = expect.astype(np.float32).astype(dtype) if dtype else expect.astype(want[0].dtype)
    np.testing.assert_array_equal(want[0].reshape(-1), expect)  # the reference is the documented generator
    assert not partita.compile(model).runtime.plan.host_ops  # NVRTC builds the same kernels for the GPU
