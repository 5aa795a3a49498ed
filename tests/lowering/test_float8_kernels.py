"""8-bit floats in native kernels (``f8E4M3FN``, ``f8E5M2`` and their FNUZ forms): stored as
bytes, computed in float, converted by Partita's own decode / encode (round to nearest
even; a saturating cast clamps to the largest value, a non-saturating one overflows to
infinity or NaN as the format has them). The kernels built for the host cast every f16
value, the values around each format's largest one and around its smallest subnormals,
infinities and NaN exactly as the reference (ml_dtypes) does, and a fused QuantizeLinear /
DequantizeLinear pair through a float8 type too; nothing runs on the host."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support.cuda_host import have_gxx  # tests/support/cuda_host.py

import partita

FORMATS = {"f8E4M3FN": (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
           "f8E5M2": (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
           "f8E4M3FNUZ": (TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz),
           "f8E5M2FNUZ": (TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz)}


def _probe_values(dtype) -> np.ndarray:
    """Every finite f16 value, the neighbourhood of the format's largest value (the
    midpoint to the next step is where rounding turns into overflow) and of its smallest
    subnormal (half of it rounds to zero), infinities, NaN, signed zeros."""
    f16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    info = ml_dtypes.finfo(dtype)
    top, tiny = float(info.max), float(info.smallest_subnormal)
    step = top - float(np.nextafter(np.array(top, dtype), np.array(0, dtype)))  # the top binade's spacing
    marks = np.array([top, top + step / 2, top + step, tiny, tiny / 2, tiny * 1.5, tiny * 0.75, 1e30, 3e38],
                     np.float32)
    near = np.concatenate([np.nextafter(marks, np.float32(np.inf)), marks, np.nextafter(marks, np.float32(0))])
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)
    return np.concatenate([f16, near, -near, special]).astype(np.float32)


def _cast_model(name: str) -> onnx.ModelProto:
    elem, _ = FORMATS[name]
    nodes = [helper.make_node("Cast", ["x"], ["saturated"], to=elem, saturate=1),
             helper.make_node("Cast", ["x"], ["overflowing"], to=elem, saturate=0),
             helper.make_node("Cast", ["saturated"], ["back"], to=TensorProto.FLOAT)]
    outputs = [helper.make_tensor_value_info(n, t, None) for n, t in
               [("saturated", elem), ("overflowing", elem), ("back", TensorProto.FLOAT)]]
    graph = helper.make_graph(nodes, "casts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit for bit, but that a NaN may be any NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint8 if got.itemsize == 1 else np.uint32),
                                  want[~nan].view(np.uint8 if want.itemsize == 1 else np.uint32))


@pytest.mark.parametrize("name", list(FORMATS))
def test_casts_round_and_overflow_as_the_reference(name, tmp_path) -> None:
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    from support.kernel_harness import run_host_kernels  # tests/support/kernel_harness.py

    x = _probe_values(FORMATS[name][1])
    model = _cast_model(name)
    got, left = run_host_kernels(model, [x], tmp_path, max_blocks=4)
    assert not left, left  # every cast is a kernel
    want = partita.compile(model, "llvm").run(x)  # the reference executor on the host
    for g, w in zip(got, want, strict=True):
        _same(np.asarray(g), np.asarray(w))
    saturated, overflowing, _ = got
    top = float(ml_dtypes.finfo(FORMATS[name][1]).max)
    assert set(saturated[x == np.inf].astype(np.float32).tolist()) == {top}
    beyond = overflowing[x == np.inf].astype(np.float32)
    assert np.isinf(beyond).all() if name == "f8E5M2" else np.isnan(beyond).all()  # infinity, if the format has one


@pytest.mark.parametrize("name", ["f8E4M3FN", "f8E5M2"])
def test_a_float8_quantize_dequantize_pair_is_one_kernel(name, tmp_path) -> None:
    """QuantizeLinear into a float8 type (saturating) and DequantizeLinear back, with a
    scale and a zero point, fused into one kernel equal to the reference."""
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    from support.kernel_harness import run_host_kernels

    elem, dtype = FORMATS[name]
    zero = onnx.numpy_helper.from_array(np.array(0.5, dtype), "zp")
    scale = onnx.numpy_helper.from_array(np.array(0.125, np.float32), "scale")
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 33])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 33])], [scale, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = (np.random.default_rng(0).standard_normal((64, 33)) * 40).astype(np.float32)
    x[0, :4] = [np.inf, -np.inf, np.nan, 1e9]
    (got,), left = run_host_kernels(model, [x], tmp_path)
    assert not left, left
    (want,) = partita.compile(model, "llvm").run(x)
    _same(got, want)
    assert not partita.compile(model).runtime.plan.host_ops  # NVRTC builds it for the GPU: nothing left on the host


@pytest.mark.parametrize("name", list(FORMATS))
def test_a_float8_bitcast_moves_the_bits(name, tmp_path) -> None:
    """BitCast between a float8 type and uint8 reads and writes the stored byte, NaNs
    (their signs and payloads kept through the float a kernel computes in), negative zero
    and all."""
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    from support.kernel_harness import run_host_kernels

    nodes = [helper.make_node("BitCast", ["x"], ["f"], to=FORMATS[name][0]),
             helper.make_node("Cast", ["f"], ["wide"], to=TensorProto.FLOAT),
             helper.make_node("BitCast", ["f"], ["bits"], to=TensorProto.UINT8)]
    graph = helper.make_graph(nodes, "bitcast", [helper.make_tensor_value_info("x", TensorProto.UINT8, [256])],
                              [helper.make_tensor_value_info("wide", TensorProto.FLOAT, [256]),
                               helper.make_tensor_value_info("bits", TensorProto.UINT8, [256])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    x = np.arange(256, dtype=np.uint8)
    (wide, bits), left = run_host_kernels(model, [x], tmp_path)
    assert not left, left
    np.testing.assert_array_equal(bits, x)
    _same(wide, x.view(FORMATS[name][1]).astype(np.float32))
