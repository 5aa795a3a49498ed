"""The narrow storage types in native kernels: ONNX INT4 / UINT4 / INT2 / UINT2 (a byte each,
the value in the low bits), FP4 (E2M1) and the MX scale E8M0. Casts into and out of them,
QuantizeLinear / DequantizeLinear through them and data movement of them are kernels, not
host steps: the kernels built for the host give the reference's bytes (its definitions where
ONNX leaves a value undefined, whichever ml_dtypes is installed; ONNX's E8M0 rounding modes)
for every f16 value, the rounding ties, values past each range, infinities and both NaNs; and
NVRTC builds them for the GPU."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.cuda_host import have_gxx  # tests/support/cuda_host.py

import partita
from partita.runtime.cuda import cuda_status

NARROW = {TensorProto.INT4: ml_dtypes.int4, TensorProto.UINT4: ml_dtypes.uint4, TensorProto.INT2: ml_dtypes.int2,
          TensorProto.UINT2: ml_dtypes.uint2, TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn,
          TensorProto.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu}
_NAME = lambda t: TensorProto.DataType.Name(t)  # noqa: E731

def _probe_values() -> np.ndarray:
    """Every f16 value (FP4's ties 0.25 ... 5 and E8M0's powers of two among them), values
    past every integer range and past int32 (where a float's conversion differs between x86
    and CUDA), infinities, both NaNs, f32 subnormals around E8M0's smallest 2^-127."""
    f16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    wide = np.array([2.0**31, 2.0**31 - 128, -(2.0**31), -(2.0**31) - 256, 3e9, 1e10, 1e30, 3.4e38,
                     2.0**127, 1.5 * 2.0**127, 2.0**-127, 1.5 * 2.0**-128, 1e-45], np.float32)
    special = np.array([np.inf, -np.inf, np.nan, -np.nan], np.float32)
    return np.concatenate([f16, wide, -wide, special])


def _model(nodes, inputs, outputs, initializers=(), opset: int = 25) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _info(name: str, elem: int, n: int):
    return helper.make_tensor_value_info(name, elem, [n])


def _same_bytes(got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.itemsize == 1:
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    else:  # a float result: equal, NaN where NaN
        np.testing.assert_array_equal(got, want)


def _on_the_host(model: onnx.ModelProto, inputs: list[np.ndarray], tmp_path) -> list[np.ndarray]:
    """``model``'s outputs from its kernels built for the host, equal byte for byte to the
    reference executor's; nothing is left to a host step."""
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    from support.kernel_harness import run_host_kernels  # tests/support/kernel_harness.py

    got, left = run_host_kernels(model, inputs, tmp_path, max_blocks=4)
    assert not left, left
    want = partita.compile(model, "llvm").run(*inputs)
    for g, w in zip(got, want, strict=True):
        _same_bytes(g, w)
    return got


@pytest.mark.parametrize("to", sorted(NARROW), ids=_NAME)
def test_a_cast_from_f32_into_a_narrow_type_and_back_is_a_kernel(to, tmp_path) -> None:
    x = _probe_values()
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to), helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)],
                   [_info("x", TensorProto.FLOAT, x.size)], [_info("y", to, x.size), _info("z", TensorProto.FLOAT, x.size)])
    y, z = _on_the_host(model, [x], tmp_path)
    if to == TensorProto.INT4:  # what the reference is: truncation toward zero, 0 past the range
        sample = np.array([7.875, -8.875, 8.0, -9.0, 100.0, 1e10, np.inf, np.nan], np.float32)
        assert np.asarray(y)[[np.flatnonzero((x == v) | (np.isnan(v) & np.isnan(x)))[0] for v in sample]] \
            .astype(int).tolist() == [7, -8, 0, 0, 0, 0, 0, 0]
    if to == TensorProto.FLOAT4E2M1:  # ties to even, saturating at 6, no NaN
        ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, np.inf], np.float32)
        assert np.asarray(z)[[np.flatnonzero(x == v)[0] for v in ties]].tolist() == [0, 1, 1, 2, 2, 4, 4, 6, 6]
    assert not partita.compile(model).runtime.plan.host_ops  # NVRTC builds the same kernels for the GPU


@pytest.mark.parametrize("to", [TensorProto.INT4, TensorProto.UINT2, TensorProto.FLOAT4E2M1], ids=_NAME)
def test_an_f64_converts_through_f32_as_the_reference(to, tmp_path) -> None:
    """An f64 rounds into FP4 through f32, as ONNX's reference converts it (a double just
    past a tie becomes the tie, which rounds to even), and past an integer type's range,
    int32's too, is 0 as in the reference."""
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    x = np.concatenate([ties, ties + 1e-12, ties - 1e-12, -ties - 1e-12, [3e9, -3e9, 1e300, np.inf, np.nan, 15.5]])
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to)], [_info("x", TensorProto.DOUBLE, x.size)],
                   [_info("y", to, x.size)])
    (y,) = _on_the_host(model, [x], tmp_path)
    if to == TensorProto.FLOAT4E2M1:
        above = np.asarray(y)[ties.size:2 * ties.size].astype(np.float32)
        assert above.tolist() == [0, 1, 1, 2, 2, 4, 4]


@pytest.mark.parametrize("source", [TensorProto.INT64, TensorProto.UINT8, TensorProto.INT32, TensorProto.BOOL], ids=_NAME)
@pytest.mark.parametrize("to", [TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.FLOAT4E2M1], ids=_NAME)
def test_integers_wrap_into_the_narrow_integers_and_widen_back(source, to, tmp_path) -> None:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(source)
    info = np.iinfo(dtype) if dtype != np.bool_ else None
    values = np.arange(-40, 40) if info is None or info.min < 0 else np.arange(0, 80)
    x = (values % 2 == 0) if dtype == np.bool_ else values.astype(dtype)
    if info is not None:
        x = np.concatenate([x, np.array([info.min, info.max], dtype)])
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to),
                    helper.make_node("Cast", ["y"], ["i"], to=TensorProto.INT32),
                    helper.make_node("Cast", ["y"], ["u"], to=TensorProto.UINT8),
                    helper.make_node("Cast", ["y"], ["h"], to=TensorProto.FLOAT16)],
                   [_info("x", source, x.size)],
                   [_info("y", to, x.size), _info("i", TensorProto.INT32, x.size), _info("u", TensorProto.UINT8, x.size),
                    _info("h", TensorProto.FLOAT16, x.size)])
    _on_the_host(model, [x], tmp_path)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_a_cast_into_e8m0_rounds_as_onnx_says(round_mode, saturate, tmp_path) -> None:
    x = _probe_values()
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, saturate=saturate, round_mode=round_mode)],
                   [_info("x", TensorProto.FLOAT, x.size)], [_info("y", TensorProto.FLOAT8E8M0, x.size)])
    (y,) = _on_the_host(model, [x], tmp_path)
    want = numpy_helper.to_float8e8m0(x, bool(saturate), round_mode)  # ONNX's own
    np.testing.assert_array_equal(np.asarray(y).view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("to", [TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.UINT2,
                                TensorProto.FLOAT4E2M1], ids=_NAME)
def test_quantize_and_dequantize_through_a_narrow_type_is_one_kernel(to, tmp_path) -> None:
    """Saturated to the type's range (or FP4's 6), per channel, fused into one kernel."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((48, 8)) * 6).astype(np.float32)
    x[0, :4] = [np.inf, -np.inf, 1e9, -1e9]
    zero = np.array([0, 1, 0, 1, 0, 1, 0, 1] if to != TensorProto.FLOAT4E2M1 else [0] * 8)
    scale = numpy_helper.from_array((rng.random(8) + 0.25).astype(np.float32), "scale")
    zp = numpy_helper.from_array(zero.astype(NARROW[to]), "zero")
    model = _model([helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], axis=1),
                    helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], axis=1)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [48, 8])],
                   [helper.make_tensor_value_info("q", to, [48, 8]), helper.make_tensor_value_info("y", TensorProto.FLOAT, [48, 8])],
                   [scale, zp], opset=21)
    q, _ = _on_the_host(model, [x], tmp_path)
    q = np.asarray(q).astype(np.float32)
    assert q.max() == float(ml_dtypes.finfo(NARROW[to]).max if to == TensorProto.FLOAT4E2M1 else ml_dtypes.iinfo(NARROW[to]).max)


@pytest.mark.parametrize("elem", [TensorProto.INT4, TensorProto.UINT2, TensorProto.FLOAT4E2M1, TensorProto.FLOAT8E8M0],
                         ids=_NAME)
def test_narrow_tensors_move_as_bytes(elem, tmp_path) -> None:
    """Transpose, Concat and Gather of a narrow tensor carry every stored value unchanged
    (E8M0's 2^-127, an f32 subnormal, and its NaN too)."""
    rng = np.random.default_rng(1)
    dtype = NARROW[elem]
    x = np.arange(256, dtype=np.uint8).reshape(16, 16).view(dtype) if elem == TensorProto.FLOAT8E8M0 \
        else (rng.integers(0, 256, (16, 16)).astype(np.uint8) & 0x0F).view(dtype)
    if elem in (TensorProto.INT2, TensorProto.UINT2):
        x = (x.view(np.uint8) & 0x03).view(dtype)
    index = numpy_helper.from_array(np.array([3, 0, 15, -1], np.int64), "index")
    model = _model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
                    helper.make_node("Concat", ["t", "x"], ["c"], axis=0),
                    helper.make_node("Gather", ["c", "index"], ["g"], axis=1)],
                   [helper.make_tensor_value_info("x", elem, [16, 16])],
                   [helper.make_tensor_value_info("g", elem, [32, 4])], [index])
    (g,) = _on_the_host(model, [x], tmp_path)
    np.testing.assert_array_equal(np.asarray(g).view(np.uint8), np.concatenate([x.T, x])[:, [3, 0, 15, 15]].view(np.uint8))


@pytest.mark.gpu
@pytest.mark.skipif(cuda_status() is not None, reason=f"needs a CUDA device ({cuda_status()})")
@pytest.mark.parametrize("to", sorted(NARROW), ids=_NAME)
def test_narrow_casts_on_the_gpu(to) -> None:  # pragma: no cover - no GPU in CI
    """On the GPU, where a float's conversion to int saturates (the host build's x86 gives
    INT_MIN): past int32, infinities and NaN still convert as the reference says (each
    value tested against the type's range before any conversion)."""
    x = _probe_values()
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to), helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)],
                   [_info("x", TensorProto.FLOAT, x.size)], [_info("y", to, x.size), _info("z", TensorProto.FLOAT, x.size)])
    got = partita.compile(model).run(x)
    want = partita.compile(model, "llvm").run(x)
    for g, w in zip(got, want, strict=True):
        _same_bytes(g, w)
