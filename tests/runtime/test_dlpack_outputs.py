"""Device outputs are DLPack producers: torch.from_dlpack reads them, and they can be fed
back to exe.run; on CUDA the capsule aliases the output and frees nothing of ours."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

import partita
from partita.runtime.interop import (
    _LIVE_EXPORTS,
    KDL_CUDA,
    DeviceArray,
    dlpack_tensor,
    export_dlpack,
)

RELU = """func.func @main(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = nn.relu %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}
"""


@pytest.fixture(scope="module")
def exe() -> partita.Executable:
    return partita.compile(RELU, partitioner="none", fallback_device="cpu")


def test_torch_reads_a_device_output(exe: partita.Executable) -> None:
    torch = pytest.importorskip("torch")
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    (out,) = exe.run(x, outputs="device")
    assert isinstance(out, DeviceArray)
    tensor = torch.from_dlpack(out)
    np.testing.assert_array_equal(tensor.numpy(), np.maximum(x, 0))


def test_a_device_output_feeds_the_next_run(exe: partita.Executable) -> None:
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    (out,) = exe.run(x, outputs="device")
    again = exe.run(out)[0]
    np.testing.assert_array_equal(again, np.maximum(x, 0))


def test_requires_grad_tensors_are_detached(exe: partita.Executable) -> None:
    torch = pytest.importorskip("torch")
    x = torch.linspace(-1, 1, 16).reshape(2, 8).requires_grad_()
    np.testing.assert_array_equal(exe.run(x)[0], torch.relu(x).detach().numpy())


class _FakeCudaDevice:
    simulated = False
    ordinal = 0


def test_a_cuda_capsule_describes_the_output_and_releases_its_owner() -> None:
    # No GPU here: check the capsule itself (what a consumer would read) and its lifetime.
    buffer = np.arange(6, dtype=np.float16).reshape(2, 3)
    array = DeviceArray(_FakeCudaDevice(), buffer.ctypes.data, (2, 3), np.float16)
    assert array.__dlpack_device__() == (KDL_CUDA, 0)
    before = len(_LIVE_EXPORTS)
    capsule = array.__dlpack__()
    device_type, device_id, tensor = dlpack_tensor(capsule)
    assert (device_type, device_id) == (KDL_CUDA, 0)
    assert (tensor.ptr, tensor.shape, tensor.dtype) == (buffer.ctypes.data, (2, 3), np.dtype(np.float16))
    assert len(_LIVE_EXPORTS) == before + 1 and sys.getrefcount(array) > 2  # the capsule keeps it alive
    del capsule, tensor
    gc.collect()
    assert len(_LIVE_EXPORTS) == before  # an unconsumed capsule's destructor released it


def test_a_capsule_numpy_consumes_is_released_by_the_consumer() -> None:
    buffer = np.arange(4, dtype=np.int32)

    class Producer:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            return export_dlpack(buffer.ctypes.data, (4,), np.dtype(np.int32), 1, 0, owner=buffer)

    before = len(_LIVE_EXPORTS)
    view = np.from_dlpack(Producer())
    np.testing.assert_array_equal(view, buffer)
    assert len(_LIVE_EXPORTS) == before + 1  # numpy holds it while the view lives
    del view
    gc.collect()
    assert len(_LIVE_EXPORTS) == before


@pytest.mark.gpu
def test_torch_reads_a_cuda_output_in_place() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device and a CUDA build of torch")
    exe = partita.compile(RELU, partitioner="none")
    x = torch.linspace(-1, 1, 16, device="cuda").reshape(2, 8)
    (out,) = exe.run(x, outputs="device")
    tensor = torch.from_dlpack(out)
    assert tensor.device.type == "cuda" and tensor.data_ptr() == out.ptr
    torch.testing.assert_close(tensor, torch.relu(x))
    torch.testing.assert_close(torch.from_numpy(exe.run(out)[0]).cuda(), torch.relu(x))
