"""Splats become device fills (issue 24): a splat constant stays one element through the
compiler and the launch plan fills its weight buffer on the device (driver memsets on CUDA,
a fill of the arena on the simulated device); nothing of its size is built on the host."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.recording_driver import RecordingDriver

import partita
from partita.dialects import make_context
from partita.ir import parse_module
from partita.ir.constants import materialize_limit
from partita.runtime.cuda import CudaDevice
from partita.runtime.plan import Runtime

# One splat of each element width (1, 2, 4 and 8 bytes) and one ordinary constant.
CONSTANTS = """
func.func @main() -> (tensor<1000xf64>, tensor<7x5xi64>, tensor<33xf16>, tensor<3xbf16>, tensor<9xi1>, tensor<5xi8>,
                      tensor<11xf32>, tensor<2x3xf32>) {
  %0 = nn.constant dense<-1.25> : tensor<1000xf64>
  %1 = nn.constant dense<-3> : tensor<7x5xi64>
  %2 = nn.constant dense<0.5> : tensor<33xf16>
  %3 = nn.constant dense<2.0> : tensor<3xbf16>
  %4 = nn.constant dense<true> : tensor<9xi1>
  %5 = nn.constant dense<-7> : tensor<5xi8>
  %6 = nn.constant dense<3.5> : tensor<11xf32>
  %7 = nn.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  func.return %0, %1, %2, %3, %4, %5, %6, %7 : tensor<1000xf64>, tensor<7x5xi64>, tensor<33xf16>, tensor<3xbf16>,
                                               tensor<9xi1>, tensor<5xi8>, tensor<11xf32>, tensor<2x3xf32>
}
"""
EXPECTED = [(-1.25, (1000,), "f8"), (-3, (7, 5), "i8"), (0.5, (33,), "f2"), (2.0, (3,), "bfloat16"),
            (True, (9,), "?"), (-7, (5,), "i1"), (3.5, (11,), "f4")]


def _check(outputs) -> None:
    import ml_dtypes  # noqa: F401 - registers bfloat16 with NumPy

    for out, (value, shape, dtype) in zip(outputs, EXPECTED, strict=False):
        assert out.shape == shape and out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out, np.full(shape, value, out.dtype))
    np.testing.assert_array_equal(outputs[-1], np.arange(1, 7, dtype=np.float32).reshape(2, 3))


def test_splats_are_driver_memsets_on_cuda() -> None:
    drv = RecordingDriver()
    runtime = Runtime(parse_module(CONSTANTS, make_context()), CudaDevice(driver=drv))
    _check(runtime.run())
    # Only the 24-byte ordinary constant crosses from the host; each splat is one memset of
    # its width, an 8-byte one two 32-bit 2D memsets (one per word, the element as pitch).
    assert drv.calls["cuMemcpyHtoDAsync:bytes"] == 24 and drv.calls["cuMemcpyHtoDAsync"] == 1
    assert drv.calls["cuMemsetD8Async"] == 2  # i1, i8
    assert drv.calls["cuMemsetD16Async"] == 2  # f16, bf16
    assert drv.calls["cuMemsetD32Async"] == 1  # f32
    assert drv.calls["cuMemsetD2D32Async"] == 4  # f64, i64
    assert drv.calls["cuMemsetD2D32Async:bytes"] == 2 * 4 * (1000 + 35)
    runtime.close()
    assert "memory" not in drv.live()


def test_splats_are_arena_fills_on_the_simulated_device() -> None:
    runtime = Runtime(parse_module(CONSTANTS, make_context()), "simulated")
    _check(runtime.run())
    counts = runtime.device.counts
    # The one non-splat weight (24 bytes) is read in place (issue 25), not uploaded.
    assert counts["fill"] == 7 and counts["map_host"] == 1 and counts["upload"] == 0
    assert counts["fill_bytes"] == 8000 + 280 + 66 + 6 + 9 + 5 + 44


def test_fill_stand_in_refuses_what_the_driver_refuses() -> None:
    """The recording driver's memsets check alignment and bounds as the driver does, so a
    fill at a wrong offset fails here too."""
    drv = RecordingDriver()
    device = CudaDevice(driver=drv)
    buf = device.alloc(64)
    stream = device.create_stream()
    from partita.runtime.cuda import CudaError

    with pytest.raises(CudaError):
        device.fill(int(buf) + 2, np.array(1.0, np.float32), 4, stream)  # misaligned for 32 bits
    with pytest.raises(CudaError):
        device.fill(int(buf), np.array(1.0, np.float64), 9, stream)  # 72 bytes in 64
    device.fill(int(buf) + 8, np.array(-2.0, np.float64), 7, stream)
    device.synchronize(stream)
    np.testing.assert_array_equal(np.frombuffer(drv.read(int(buf), 64), np.float64), [0.0] + [-2.0] * 7)
    device.destroy_stream(stream)
    device.free(buf)


def _light_vgg19_classifier(path: Path) -> None:
    """The head of onnx's ``light_vgg19``: a 4096x25088 f32 Gemm weight made by
    ``ConstantOfShape`` (392 MiB once stored)."""
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["W"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.01])),
        helper.make_node("Gemm", ["X", "W", "B"], ["Y"], transB=1),
        helper.make_node("Relu", ["Y"], ["Z"]),
    ]
    initializers = [numpy_helper.from_array(np.array([4096, 25088], np.int64), "shape"),
                    numpy_helper.from_array(np.linspace(-1, 1, 4096, dtype=np.float32), "B")]
    graph = helper.make_graph(nodes, "light_vgg19_head", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 25088])],
                              [helper.make_tensor_value_info("Z", TensorProto.FLOAT, [1, 4096])], initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_constant_of_shape_gemm_weight_loads_as_a_device_fill(tmp_path: Path) -> None:
    import onnxruntime as ort

    path = tmp_path / "head.onnx"
    _light_vgg19_classifier(path)
    x = np.random.default_rng(0).random((1, 25088), dtype=np.float32)
    # No host buffer of a splat anywhere in import, compile and load: a 1 MiB limit holds.
    with materialize_limit(1 << 20):
        exe = partita.compile(str(path), cache_dir=tmp_path / "cache")
        (z,) = exe.run(x)
    (expected,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    np.testing.assert_allclose(z, expected, rtol=1e-5, atol=1e-4)
    counts = exe.runtime.device.counts
    assert counts["fill"] == 1 and counts["fill_bytes"] == 4096 * 25088 * 4
    assert counts["upload_bytes"] < 1 << 20  # the bias and the input, not the weight
