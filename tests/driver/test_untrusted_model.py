"""A compiled-model file is untrusted input: an edited ``.partita`` with its digests
recomputed (as anyone editing it can) is checked record by record before anything is
allocated or loaded, and names no host file."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest
from support.artifact_files import reseal  # tests/support/artifact_files.py
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

import partita
from partita.ir import PartitaError
from partita.runtime.cuda import CudaDevice
from partita.runtime.device import SimulatedDevice
from partita.tools import run as run_tool

MODEL = """
func.func @main(%x: tensor<8x64xf32>, %w1: tensor<32x64xf32>, %w2: tensor<16x32xf32>) -> tensor<8x16xf32> {
  %0 = nn.dense %x, %w1 : (tensor<8x64xf32>, tensor<32x64xf32>) -> tensor<8x32xf32>
  %1 = nn.relu %0 : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %2 = nn.dense %1, %w2 : (tensor<8x32xf32>, tensor<16x32xf32>) -> tensor<8x16xf32>
  %3 = nn.tanh %2 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %3 : tensor<8x16xf32>
}
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("untrusted")
    exe = partita.compile(MODEL, partitioner="eager")
    path = tmp / "model.partita"
    exe.save(path)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    w1 = rng.standard_normal((32, 64)).astype(np.float32)
    w2 = rng.standard_normal((16, 32)).astype(np.float32)
    inputs = [x, w1, w2]
    return path.read_bytes(), inputs, exe.run(*inputs)[0]


def _edited(tmp_path: Path, saved, edit_module=None, edit_parts=None) -> Path:
    path = tmp_path / "edited.partita"
    path.write_bytes(reseal(saved[0], edit_module, edit_parts))
    return path


def test_resealing_alone_changes_nothing(saved, tmp_path) -> None:
    loaded = partita.load(_edited(tmp_path, saved, lambda text: text))
    np.testing.assert_array_equal(loaded.run(*saved[1])[0], saved[2])


def _sub(pattern: str, replacement: str, count: int = 1):
    def edit(text: str) -> str:
        new, n = re.subn(pattern, replacement, text, count=count)
        assert n, pattern
        return new
    return edit


@pytest.mark.parametrize("edit, message", [
    (_sub(r"byoc.offset = 1024 : i64", f"byoc.offset = {-2**36} : i64"), "do not lie inside the 2048-byte arena"),
    (_sub(r"byoc.offset = 512 : i64", "byoc.offset = 1920 : i64"), "do not lie inside the 2048-byte arena"),
    (_sub(r"byoc.arena_size = 2048 : i64", "byoc.arena_size = 1024 : i64"), "do not lie inside the 1024-byte arena"),
    (_sub(r"byoc.arena_size = 2048 : i64", f"byoc.arena_size = {-2**40} : i64"), "is outside"),
    (_sub(r"byoc.arena_size = 2048 : i64", f"byoc.arena_size = {2**62} : i64"), "is outside"),
    # the relu's output placed over its live input
    (_sub(r"byoc.offset = 1024 : i64", "byoc.offset = 0 : i64"), "overlaps a buffer live at the same time"),
])
def test_a_bad_memory_plan_is_refused_before_any_allocation(saved, tmp_path, edit, message) -> None:
    loaded = partita.load(_edited(tmp_path, saved, edit))
    device = SimulatedDevice()
    with pytest.raises(PartitaError, match=message):
        loaded.load(device)
    assert device.counts["alloc"] == 0
    # partita-run says so as a located error, exit 1
    assert run_tool.main([str(_edited(tmp_path, saved, edit))]) == 1


@pytest.mark.parametrize("elements", [2**61, 2**62 - 1, 2**46 + 1])
def test_plan_memory_refuses_arenas_no_device_has(elements, tmp_path) -> None:
    """2^63..2^64 bytes used to wrap negative in the i64 ``byoc.arena_size``."""
    from partita.tools import opt

    source = tmp_path / "big.mlir"
    source.write_text(f"""
func.func private @k(tensor<{elements}xf32>) -> tensor<{elements}xf32> attributes {{byoc.extern}}
func.func @main(%x: tensor<{elements}xf32>) -> tensor<{elements}xf32> {{
  %0 = byoc.alloc_tensor() : tensor<{elements}xf32>
  %1 = byoc.call_extern @k(%x) outs(%0) : (tensor<{elements}xf32>) -> tensor<{elements}xf32>, tensor<{elements}xf32>
  func.return %1 : tensor<{elements}xf32>
}}
""")
    assert opt.main([str(source), "-p", "plan-memory", "-o", str(tmp_path / "out.mlir")]) == 1
    assert not (tmp_path / "out.mlir").exists()


# -- no host paths, no external data ---------------------------------------------------


def _relabel_library(text: str) -> str:
    """The cutlass cubin relabelled ``format = "library"`` with a host path."""
    text = re.sub(r'(byoc.binary @cutlass_sm90 attributes \{format = )"cubin"', r'\1"library"', text)
    return _with_path(text, "/etc/passwd")


def _with_path(text: str, path: str, binary: str = "cutlass_sm90") -> str:
    """``text`` with byoc.binary @binary naming ``path`` (instead of any path it had)."""
    text = re.sub(r'path = "[^"]*", ', "", text)
    new, n = re.subn(rf'(byoc.binary @{binary} attributes \{{format = "\w+", )', rf'\1path = "{path}", ', text)
    assert n == 1
    return new


@pytest.mark.parametrize("edit", [
    _relabel_library,
    lambda text: _with_path(text, "/etc/passwd"),
    lambda text: _with_path(text, "/dev/zero"),
    _sub(r'(byoc.binary @cutlass_sm90 attributes \{format = "cubin", )', r'\1cache_dir = "/etc", '),
])
def test_a_compiled_model_names_no_host_path(saved, tmp_path, edit) -> None:
    with pytest.raises(PartitaError, match="names a host (path|cache)"):
        partita.load(_edited(tmp_path, saved, edit))


def test_a_kernel_record_in_a_library_binary_reads_nothing(saved, tmp_path) -> None:
    """The same relabelling given as IR (``partita-run model.mlir``): the loader reads
    cubins only from binaries of a cubin format, never a library record's path."""
    loaded = partita.load(_edited(tmp_path, saved))
    module = partita.driver.load_module(_relabel_library(str(loaded)))
    from partita.runtime.plan import Runtime

    driver = RecordingDriver()
    with pytest.raises(PartitaError, match="is not a cubin"):
        Runtime(module, CudaDevice(driver=driver))
    assert not driver.images and driver.calls["cuMemAlloc"] == 0


@pytest.mark.parametrize("target", ["fifo", "/dev/zero", "nodigest"])
def test_a_cubin_path_is_read_only_as_a_verified_regular_file(saved, tmp_path, target) -> None:
    import os
    import threading

    loaded = partita.load(_edited(tmp_path, saved))
    text = str(loaded)
    if target == "fifo":
        fifo = tmp_path / "cubin.fifo"
        os.mkfifo(fifo)
        text = _with_path(text, str(fifo))
    elif target == "nodigest":
        text, n = re.subn(r'(@cutlass_sm90 attributes \{format = "cubin", .*?)sha256 = "[0-9a-f]{64}", ', r"\1", text)
        assert n == 1
        text = _with_path(text, "/etc/passwd")
    else:
        text = _with_path(text, target)
    module = partita.driver.load_module(text)
    from partita.runtime.plan import Runtime

    errors = []

    def load():
        try:
            Runtime(module, SimulatedDevice())
        except PartitaError as err:
            errors.append(str(err))

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the loader hangs"
    assert errors and ("not a regular file" in errors[0] or "records no sha256" in errors[0]), errors


def _trt_external(text: str) -> str:
    import base64

    import onnx

    record = re.search(r'model = "([A-Za-z0-9+/=]+)"', text)
    model = onnx.ModelProto()
    model.ParseFromString(base64.b64decode(record.group(1)))
    tensor = onnx.TensorProto(name="stolen", data_type=onnx.TensorProto.UINT8, dims=[16])
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value=".ssh/id_fake")
    model.graph.initializer.append(tensor)
    data = model.SerializeToString()
    text = text.replace(record.group(1), base64.b64encode(data).decode())
    old = re.search(r'kind = "tensorrt", digest = "([0-9a-f]{64})"', text).group(1)
    return text.replace(old, hashlib.sha256(data).hexdigest())


@pytest.fixture(scope="module")
def tensorrt_saved(tmp_path_factory):
    exe = partita.compile(MODEL, ["cuda -arch=sm_90", "tensorrt", "llvm"], partitioner="eager")
    path = tmp_path_factory.mktemp("trt") / "trt.partita"
    exe.save(path)
    return path.read_bytes()


def test_a_tensorrt_sub_model_with_external_data_is_refused(tensorrt_saved, tmp_path, monkeypatch) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_fake").write_bytes(b"SECRET-KEY-BYTES")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "edited.partita"
    path.write_bytes(reseal(tensorrt_saved, _trt_external))
    with pytest.raises(PartitaError, match="keeps tensor 'stolen' in external data"):
        partita.load(path)
    assert run_tool.main([str(path), "-o", str(tmp_path / "out.npz")]) == 1
    assert not (tmp_path / "out.npz").exists()


def test_a_model_proto_never_reads_external_data_from_the_working_directory(tmp_path, monkeypatch) -> None:
    import onnx
    from onnx import helper

    (tmp_path / "weights.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    w = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[4])
    w.data_location = onnx.TensorProto.EXTERNAL
    w.external_data.add(key="location", value="weights.bin")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    monkeypatch.chdir(tmp_path)  # the file sits in the working directory: still not read
    with pytest.raises(PartitaError, match="keeps its data in an external file"):
        partita.compile(model)
    # Saved beside its data, the model's path reads it from the model's own folder.
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "weights.bin").rename(folder / "weights.bin")
    onnx.save(model, folder / "model.onnx")
    monkeypatch.chdir(tmp_path / "..")
    exe = partita.compile(folder / "model.onnx")
    np.testing.assert_array_equal(exe.run(np.ones(4, np.float32))[0], np.arange(4, dtype=np.float32) + 1)


# -- launches against the cubin and the device ------------------------------------------


@pytest.mark.parametrize("edit, message", [
    (_sub(r'entry = "main_fused_0"', 'entry = "no_such_kernel"'), "'no_such_kernel' is not in the cubin of @cuda_sm90"),
    (_sub(r"smem = 24576 : i64", f"smem = {2**40} : i64"), "bytes of shared memory"),
    (_sub(r"smem = 24576 : i64", "smem = -4 : i64"), "bytes of shared memory"),
    (_sub(r"block = 256 : i64", "block = 1024 : i64"), "exceeds the 256 it was compiled for"),
    (_sub(r"block = 256 : i64", f"block = {2**40} : i64"), "block"),
    (_sub(r"block = 256 : i64", "block = 0 : i64"), "block"),
    (_sub(r"block = \[128 : i64, 1 : i64, 1 : i64\]", "block = [0 : i64, 1 : i64, 1 : i64]"), "block"),
    (_sub(r"block = \[128 : i64, 1 : i64, 1 : i64\]", "block = [128 : i64, 1 : i64, 4096 : i64]"), "block"),
    (_sub(r"warp_count = \[2 : i64, 2 : i64, 1 : i64\]", "warp_count = [0 : i64, 2 : i64, 1 : i64]"), "block"),
    (_sub(r"threadblock = \[64 : i64, 64 : i64, 16 : i64\]", "threadblock = [64 : i64, 0 : i64, 16 : i64]"), "block"),
    # 64 warps: 2048 threads, more than any block (and than the kernel's bound of 128)
    (_sub(r"block = \[128 : i64, 1 : i64, 1 : i64\], (.*?)warp_count = \[2 : i64, 2 : i64, 1 : i64\]",
          r"block = [2048 : i64, 1 : i64, 1 : i64], \1warp_count = [8 : i64, 8 : i64, 1 : i64]"), "block"),
    # one more run-time dim: an int argument the kernel does not take
    (_sub(r"dims = \[\], params = \[\"in0:ptr:8\", \"out:ptr:8\"\]",
          'dims = [[0 : i64, 0 : i64]], params = ["in0:ptr:8", "out:ptr:8"]'), "packs arguments as"),
])
@pytest.mark.parametrize("device", ["simulated", "recording"])
def test_a_launch_the_kernel_was_not_compiled_for_never_reaches_a_device(saved, tmp_path, edit, message, device) -> None:
    try:
        loaded = partita.load(_edited(tmp_path, saved, edit))
    except PartitaError as err:  # refused by the record's own check at load: as good
        assert message == "block" and "kernel record of" in str(err), err
        return
    driver = RecordingDriver()
    target = SimulatedDevice() if device == "simulated" else CudaDevice(driver=driver)
    with pytest.raises(PartitaError, match=message):
        loaded.load(target).run(*saved[1])
    assert not driver.launches and driver.calls["cuLaunchKernel"] == 0


@pytest.mark.parametrize("edit", [_sub(r'layout = "tn"', 'layout = ""'), _sub(r'layout = "tn"', 'layout = "main"'),
                                  _sub(r'broadcast = ""', 'broadcast = "tn"')])
def test_a_gemm_layout_that_is_no_layout_is_refused(saved, tmp_path, edit) -> None:
    # Found by the artifact fuzzer (two string literals swapped): an IndexError at load.
    with pytest.raises(PartitaError, match=r"'byoc.binary' op kernel record of @\w+: spec '(layout|broadcast)' = "):
        partita.load(_edited(tmp_path, saved, edit)).run(*saved[1])
