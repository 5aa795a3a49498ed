"""Named parameters (issue 25): weights stay in their file and the IR names them
(``#nn.parameter``), the compiled-model file stores them by name at the precision they
are computed in, files over 4 GiB and ONNX models over 2 GB work, and a GPU load holds
no more host memory than its staging buffers."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.recording_driver import RecordingDriver

import partita
import partita.runtime.plan_load as plan_load
from partita import artifact
from partita.dialects import make_context, nn
from partita.driver import load_module
from partita.ir import PartitaError, parse_module
from partita.ir.constants import constant_values
from partita.ir.parameters import PARAMETER_THRESHOLD_BYTES, ParameterAttr
from partita.runtime.cuda import CudaDevice
from partita.runtime.device import SimulatedDevice
from partita.runtime.plan import Runtime
from partita.target import CompilationConfig


def _linear(folder: Path, hidden: int, layers: int = 2) -> tuple[Path, list[np.ndarray]]:
    """Gemm(transB=1) layers (torch's nn.Linear export): each weight is used as stored,
    its external data beside the model in ``weights.bin``."""
    rng = np.random.default_rng(0)
    nodes, inits, arrays, x = [], [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
        b = rng.standard_normal(hidden).astype(np.float32)
        arrays += [w, b]
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"g{i}"], transB=1),
                  helper.make_node("Relu", [f"g{i}"], [f"h{i}"])]
        x = f"h{i}"
    graph = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, hidden])], inits)
    path = folder / "linear.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path),
                    save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
                    size_threshold=0)
    return path, arrays


def _expected(x: np.ndarray, arrays: list[np.ndarray]) -> np.ndarray:
    for w, b in zip(arrays[::2], arrays[1::2]):
        x = np.maximum(x @ w.T + b, 0)
    return x


def _constants(module) -> list[nn.ConstantOp]:
    return [op for op in module.walk() if isinstance(op, nn.ConstantOp)]


def _external_offsets(path: Path) -> dict[str, int]:
    model = onnx.load(str(path), load_external_data=False)
    return {t.name: int(next(e.value for e in t.external_data if e.key == "offset")) for t in model.graph.initializer}


def _external_f32(name: str, dims: list[int], location: str, offset: int = 0) -> TensorProto:
    """An f32 initializer whose data is ``location``'s bytes from ``offset``."""
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(4 * int(np.prod(dims))))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def _import_peak(path: Path) -> tuple[object, int]:
    """The module of ``path`` and the peak of Python's allocations while importing it."""
    tracemalloc.start()
    try:
        module = load_module(str(path))
        return module, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _load_on_recording_gpu(module, drv: RecordingDriver) -> tuple[Runtime, int]:
    """A runtime loading ``module`` onto the recording driver, and the peak of Python's
    host allocations during that load less the driver's stand-ins for device memory."""
    tracemalloc.start()
    try:
        runtime = Runtime(module, CudaDevice(driver=drv))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return runtime, peak - sum(block.nbytes for block in drv.memory.values())


def test_external_weights_import_as_named_parameters_and_print_by_name(tmp_path: Path) -> None:
    texts = {}
    for hidden in (64, 256):
        folder = tmp_path / str(hidden)
        folder.mkdir()
        path, arrays = _linear(folder, hidden)
        module = load_module(str(path))
        offsets = _external_offsets(path)
        params = {op.value.key.data: op for op in _constants(module) if isinstance(op.value, ParameterAttr)}
        big_bias = hidden * 4 >= PARAMETER_THRESHOLD_BYTES  # 256 B, 1 KiB: small constants stay dense
        assert set(params) == {"w0", "w1"} | ({"b0", "b1"} if big_bias else set())
        for name, op in params.items():
            assert op.value.file.data == str((folder / "weights.bin").resolve())
            assert op.value.offset.data == offsets[name]
            np.testing.assert_array_equal(constant_values(op), arrays[int(name[1]) * 2 + (name[0] == "b")])
            assert isinstance(constant_values(op), np.memmap) and not constant_values(op).flags.writeable
        bias = next(op for op in _constants(module) if op.value.type.get_shape() == (hidden,))
        assert isinstance(bias.value, ParameterAttr) == big_bias
        texts[hidden] = str(module).replace(str(folder), "DIR")
    assert '#nn.parameter<"w0" : tensor<64x64xf32>, file "DIR/weights.bin" at ' in texts[64]
    # The printed module names the weights: 16x the weights, about the same text.
    assert len(texts[256]) < len(texts[64]) + 200, (len(texts[64]), len(texts[256]))


def test_a_module_with_parameters_round_trips_through_text_and_runs(tmp_path: Path) -> None:
    path, arrays = _linear(tmp_path, 64)
    text = str(load_module(str(path)))
    again = parse_module(text, make_context(), "printed.mlir")
    assert str(again) == text
    exe = partita.compile(text, ["llvm"], cache_dir=tmp_path / "cache")
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(exe.run(x)[0], _expected(x, arrays), rtol=1e-5, atol=1e-5)


def test_a_parameter_whose_file_is_gone_is_a_located_error(tmp_path: Path) -> None:
    path, _ = _linear(tmp_path, 64)
    text = str(load_module(str(path)))
    (tmp_path / "weights.bin").unlink()
    module = parse_module(text, make_context(), "gone.mlir")  # parsing and printing never read weights
    op = next(op for op in _constants(module) if isinstance(op.value, ParameterAttr))
    with pytest.raises(PartitaError, match=r"gone.mlir:\d+:\d+: .*parameter 'w\d': cannot read its file"):
        constant_values(op)
    with pytest.raises(PartitaError, match="parameter 'w\\d': cannot read its file"):
        partita.compile(text, ["llvm"], cache_dir=tmp_path / "cache").run(np.zeros((2, 64), np.float32))


def _weight_bytes(module) -> int:
    runtime = Runtime(module, SimulatedDevice())
    try:
        return sum(array.nbytes for array in runtime.plan.constants.values())
    finally:
        runtime.close()


def test_fp16_stores_weights_at_half_size_in_the_file_and_on_the_device(tmp_path: Path) -> None:
    path, arrays = _linear(tmp_path, 256)
    x = np.random.default_rng(2).standard_normal((2, 256)).astype(np.float32)
    sizes, weights = {}, {}
    for precision in ("fp32", "fp16", "bf16"):
        exe = partita.compile(path, ["llvm"], precision=precision, cache_dir=tmp_path / "cache")
        params = [op.value for op in _constants(exe.module) if isinstance(op.value, ParameterAttr)]
        if precision != "fp32":  # retyped, not converted: the IR still names the f32 bytes
            assert params and all(str(p.stored_element) == "f32" and p.stored_bytes() == 256 * 256 * 4
                                  for p in params if p.type.get_shape() == (256, 256))
        saved = tmp_path / f"{precision}.partita"
        exe.save(saved)
        sizes[precision] = saved.stat().st_size
        loaded = partita.load(saved)
        weights[precision] = _weight_bytes(loaded.module)
        tolerance = {"fp32": 1e-5, "fp16": 2e-2, "bf16": 1e-1}[precision]
        np.testing.assert_allclose(loaded.run(x)[0], _expected(x, arrays), rtol=tolerance, atol=tolerance)
    full = sum(a.nbytes for a in arrays)
    assert weights["fp32"] >= full
    for low in ("fp16", "bf16"):
        assert weights[low] == weights["fp32"] // 2, weights
        # The file shrinks by half of the weights (module text and cubins aside).
        assert abs((sizes["fp32"] - sizes[low]) - full // 2) < 16 << 10, sizes


class _SparseFile:
    """A file written the way ``artifact.writer`` writes (sequential, then the header over
    its placeholder) where runs of zeros become holes: a >4 GiB compiled model in a few
    KiB of disk."""

    def __init__(self, path: Path):
        self.handle = open(path, "wb")  # noqa: SIM115 (closed by close())
        self.end = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        if len(view) >= 4096 and not np.frombuffer(view, np.uint8).any():
            self.handle.seek(len(view), os.SEEK_CUR)
        else:
            self.handle.write(view)
        self.end = max(self.end, self.handle.tell())
        return len(view)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.handle.seek(offset, whence)

    def close(self) -> None:
        self.handle.truncate(self.end)
        self.handle.close()


def test_a_compiled_model_over_4_gib_has_64_bit_offsets_everywhere(tmp_path: Path) -> None:
    """A 4 GiB + 4 KiB parameter (zeros, a sparse source file) before a small one: the
    small one's offset is past 2**32 in the header and in the module, and it loads from
    there. Neither file takes disk or memory for the zeros (about 30 s: saving and loading
    each hash the 4 GiB)."""
    big = (4 << 30) + 4096
    source = tmp_path / "source.bin"
    w = np.arange(256, dtype=np.float32)
    with open(source, "wb") as handle:
        handle.truncate(big)
        handle.seek(big)
        handle.write(w.tobytes())
    text = f"""
func.func @main(%x: tensor<256xf32>) -> tensor<256xf32> {{
  %big = nn.constant #nn.parameter<"big" : tensor<{big}xi8>, file "{source}" at 0>
  %w = nn.constant #nn.parameter<"w" : tensor<256xf32>, file "{source}" at {big}>
  %0 = nn.add %x, %w : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  func.return %0 : tensor<256xf32>
}}"""
    module = parse_module(text, make_context(), "big.mlir")
    model = artifact.CompiledModel(module, "", CompilationConfig("llvm"), [])
    saved = tmp_path / "big.partita"
    sink = _SparseFile(saved)
    artifact.writer(model)(sink)
    sink.close()
    assert saved.stat().st_size > big and os.stat(saved).st_blocks * 512 < 64 << 20  # sparse on disk
    data = open(saved, "rb").read(1 << 20)
    (header_len,) = struct.unpack("<Q", data[16:24])
    header = json.loads(data[24 : 24 + header_len])
    (_, big_size, big_digest, big_name), (w_offset, w_size, w_digest, w_name) = header["weights"]
    assert (big_name, big_size, w_name, w_size) == ("big", big, "w", 1024)
    assert w_offset >= big and w_offset % artifact.WEIGHT_ALIGNMENT == 0
    assert w_digest == hashlib.sha256(w.tobytes()).hexdigest()
    assert f'file "" at {w_offset}>' in data[24 + header_len :].decode(errors="replace")
    loaded = artifact.load(saved)  # every digest checked, the 4 GiB one by streaming
    ops = {op.value.key.data: op for op in _constants(loaded.module)}
    section = ops["w"].value.offset.data - w_offset
    assert section % artifact.SECTION_ALIGNMENT == 0 and ops["w"].value.offset.data > 1 << 32
    np.testing.assert_array_equal(constant_values(ops["w"]), w)


def test_an_onnx_model_over_2_gb_imports_without_reading_its_weights(tmp_path: Path) -> None:
    """2.5 GB of external data (a sparse file): protobuf's 2 GB limit is the model file's,
    the importer maps the data, so import takes neither the time nor the memory of it."""
    rows, cols = 20480, 32768  # 2.68 GB of f32
    data = tmp_path / "big.bin"
    with open(data, "wb") as handle:
        handle.truncate(4096 + rows * cols * 4)
    weight = _external_f32("w", [rows, cols], "big.bin", 4096)
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "big",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cols])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows])], [weight])
    path = tmp_path / "big.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    module, peak = _import_peak(path)
    (op,) = [op for op in _constants(module) if isinstance(op.value, ParameterAttr)]
    assert op.value.type.get_shape() == (rows, cols) and op.value.offset.data == 4096
    assert op.value.stored_bytes() > 2**31
    assert peak < 64 << 20, peak


def test_a_gpu_load_holds_the_staging_buffers_and_a_small_constant_of_host_memory(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """16 MiB of weights go up through two 512 KiB pinned buffers: during the load, pinned
    memory peaks at those two and other host memory (Python's allocations, NumPy's
    included, less the recording driver's stand-ins for device and pinned memory) stays
    under 2 MiB. Reading the weights into memory first would take 16 MiB."""
    path, arrays = _linear(tmp_path, 1024, layers=4)
    exe = partita.compile(path, ["llvm"], cache_dir=tmp_path / "cache")
    saved = tmp_path / "linear.partita"
    exe.save(saved)
    loaded = partita.load(saved)
    chunk = 512 << 10
    monkeypatch.setattr(plan_load, "STAGING_CHUNK_BYTES", chunk)
    drv = RecordingDriver()
    live, peak_pinned = {}, [0]
    alloc, free = drv.cuMemHostAlloc, drv.cuMemFreeHost

    def host_alloc(nbytes, flags):
        result = alloc(nbytes, flags)
        live[int(result[1])] = nbytes
        peak_pinned[0] = max(peak_pinned[0], sum(live.values()))
        return result

    def host_free(ptr):
        live.pop(int(ptr), None)
        return free(ptr)

    monkeypatch.setattr(drv, "cuMemHostAlloc", host_alloc)
    monkeypatch.setattr(drv, "cuMemFreeHost", host_free)
    weights = sum(a.nbytes for a in arrays)
    assert weights > 16 << 20
    runtime, host = _load_on_recording_gpu(loaded.module, drv)
    assert peak_pinned[0] == 2 * chunk and not live
    assert drv.calls["cuMemcpyHtoDAsync"] >= weights // chunk
    assert host - peak_pinned[0] < 2 << 20, (host, peak_pinned[0])
    x = np.random.default_rng(3).standard_normal((2, 1024)).astype(np.float32)
    np.testing.assert_allclose(runtime.run(x)[0], _expected(x, arrays), rtol=1e-4, atol=1e-4)
    runtime.close()


def _matmul(folder: Path, hidden: int, layers: int = 2) -> tuple[Path, list[np.ndarray]]:
    """MatMul by [K, N] weights: ``nn.dense`` takes [N, K], so each is a parameter with perm [1, 0]."""
    rng = np.random.default_rng(4)
    nodes, inits, arrays, x = [], [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
        arrays.append(w)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"h{i}"])]
        x = f"h{i}"
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, hidden])], inits)
    path = folder / "mm.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path),
                    save_as_external_data=True, all_tensors_to_one_file=True, location="mm.bin", size_threshold=0)
    return path, arrays


def _matmul_expected(x: np.ndarray, arrays: list[np.ndarray]) -> np.ndarray:
    for w in arrays:
        x = np.maximum(x @ w, 0)
    return x


def test_a_matmul_weight_is_a_transposed_parameter_laid_out_once_where_it_is_saved(tmp_path: Path) -> None:
    path, arrays = _matmul(tmp_path, 128)
    module = load_module(str(path))
    params = [op.value for op in _constants(module) if isinstance(op.value, ParameterAttr)]
    assert [p.key.data for p in params] == ["w0", "w1"] and all(p.permutation == (1, 0) for p in params)
    assert " at 0 perm [1, 0]>" in str(module)
    for attr, w in zip(params, arrays):  # a strided view of the file: no copy
        values = constant_values(next(op for op in _constants(module) if op.value == attr))
        assert not values.flags.c_contiguous and np.array_equal(values, w.T)
    x = np.random.default_rng(5).standard_normal((2, 128)).astype(np.float32)
    for precision, tolerance in (("fp32", 1e-5), ("fp16", 2e-2)):
        exe = partita.compile(path, ["llvm"], precision=precision, cache_dir=tmp_path / "cache")
        np.testing.assert_allclose(exe.run(x)[0], _matmul_expected(x, arrays), rtol=tolerance, atol=tolerance)
        saved = tmp_path / f"mm-{precision}.partita"
        exe.save(saved)
        loaded = partita.load(saved)
        stored = [op for op in _constants(loaded.module) if isinstance(op.value, ParameterAttr)]
        assert len(stored) == 2 and not any(op.value.perm.data for op in stored)
        for op, w in zip(stored, arrays):  # saved laid out as nn.dense takes it: [N, K], C order
            values = constant_values(op)
            assert values.flags.c_contiguous
            np.testing.assert_allclose(values.astype(np.float32), w.T, rtol=tolerance, atol=tolerance)
        np.testing.assert_allclose(loaded.run(x)[0], _matmul_expected(x, arrays), rtol=tolerance, atol=tolerance)


def test_a_transposed_parameter_goes_up_to_a_gpu_in_row_blocks(tmp_path: Path, monkeypatch) -> None:
    path, arrays = _matmul(tmp_path, 512)
    exe = partita.compile(path, ["llvm"], cache_dir=tmp_path / "cache")
    chunk = 64 << 10  # 32 rows of 512 f32 a chunk
    monkeypatch.setattr(plan_load, "STAGING_CHUNK_BYTES", chunk)
    drv = RecordingDriver()
    runtime, host = _load_on_recording_gpu(exe.module, drv)
    assert host - 2 * chunk < 512 << 10, host  # a weight is 1 MiB: never copied whole
    for op in _constants(exe.module):
        if isinstance(op.value, ParameterAttr):
            ptr = runtime.plan.param_ptr[op.result]
            block = next(b for base, b in drv.memory.items() if base <= ptr < base + b.nbytes)
            start = ptr - block.ctypes.data
            got = block[start : start + 512 * 512 * 4].view(np.float32).reshape(512, 512)
            np.testing.assert_array_equal(got, arrays[int(op.value.key.data[1])].T)
    x = np.random.default_rng(6).standard_normal((2, 512)).astype(np.float32)
    np.testing.assert_allclose(runtime.run(x)[0], _matmul_expected(x, arrays), rtol=1e-4, atol=1e-4)
    runtime.close()


def test_convert_layout_makes_an_ohwi_view_of_a_conv_weight_not_a_copy(tmp_path: Path) -> None:
    w = np.random.default_rng(7).standard_normal((8, 4, 3, 3)).astype(np.float32)
    (tmp_path / "conv.bin").write_bytes(bytes(4096) + w.tobytes())
    text = f"""
func.func @main(%x: tensor<1x4x8x8xf32>) -> tensor<1x8x8x8xf32> {{
  %w = nn.constant #nn.parameter<"conv.weight" : tensor<8x4x3x3xf32>, file "{tmp_path / 'conv.bin'}" at 4096>
  %0 = nn.conv2d %x, %w {{padding = array<i64: 1, 1, 1, 1>}} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x8x8xf32>
  func.return %0 : tensor<1x8x8x8xf32>
}}"""
    from xdsl.context import Context

    from partita.transforms.convert_layout import ConvertLayout

    module = parse_module(text, make_context(), "conv.mlir")
    ConvertLayout(conv2d="NHWC").apply(Context(), module)
    (op,) = _constants(module)
    assert isinstance(op.value, ParameterAttr) and op.value.permutation == (0, 2, 3, 1)
    assert op.value.key.data == "conv.weight" and op.value.offset.data == 4096
    np.testing.assert_array_equal(constant_values(op), w.transpose(0, 2, 3, 1))
    x = np.random.default_rng(8).standard_normal((1, 4, 8, 8)).astype(np.float32)
    before = partita.compile(text, ["llvm"], cache_dir=tmp_path / "cache").run(x)[0]
    exe = partita.compile(str(module), ["llvm"], cache_dir=tmp_path / "cache")
    exe.save(tmp_path / "conv.partita")
    np.testing.assert_allclose(partita.load(tmp_path / "conv.partita").run(x)[0], before, rtol=1e-5, atol=1e-5)


def test_one_large_dense_constant_used_twice_is_stored_once_by_name(tmp_path: Path) -> None:
    w = np.random.default_rng(9).standard_normal((32, 32)).astype(np.float32)
    module = parse_module("""
func.func @main(%x: tensor<2x32xf32>) -> tensor<2x32xf32> {
  func.return %x : tensor<2x32xf32>
}""", make_context(), "dup.mlir")
    block = module.ops.first.body.block
    first, second = nn.ConstantOp(w), nn.ConstantOp(w)
    second.properties["value"] = first.value  # the same attribute, as a clone shares it
    block.insert_op_before(first, block.first_op)
    block.insert_op_before(second, block.first_op)
    saved = tmp_path / "dup.partita"
    artifact.save(artifact.CompiledModel(module, "", CompilationConfig("llvm"), []), saved)
    data = saved.read_bytes()
    (header_len,) = struct.unpack("<Q", data[16:24])
    rows = json.loads(data[24 : 24 + header_len])["weights"]
    assert len(rows) == 1 and rows[0][1] == w.nbytes and len(rows[0]) == 4
    loaded = artifact.load(saved)
    values = [constant_values(op) for op in _constants(loaded.module)]
    assert len(values) == 2 and all(np.array_equal(v, w) for v in values)


def test_small_external_constants_still_fold_while_weights_stay_parameters(tmp_path: Path) -> None:
    """A Reshape's shape stored as external data (16 bytes) is read and folded into the
    op; the 64 KiB weight beside it stays a parameter."""
    w = np.random.default_rng(10).standard_normal((128, 128)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array([2, 128], np.int64), "shape"), numpy_helper.from_array(w, "w")]
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Gemm", ["r", "w"], ["y"], transB=1)],
        "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 128])], inits)
    path = tmp_path / "fold.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path),
                    save_as_external_data=True, all_tensors_to_one_file=True, location="fold.bin", size_threshold=0)
    module = load_module(str(path))
    constants = _constants(module)
    assert [op.value.key.data for op in constants] == ["w"]  # the shape was folded away
    assert any(op.name == "nn.reshape" for op in module.walk())
    x = np.random.default_rng(11).standard_normal((2, 2, 64)).astype(np.float32)
    exe = partita.compile(path, ["llvm"], cache_dir=tmp_path / "cache")
    np.testing.assert_allclose(exe.run(x)[0], x.reshape(2, 128) @ w.T, rtol=1e-5, atol=1e-5)


def test_an_fp16_parameter_is_converted_a_staging_chunk_at_a_time_on_its_way_to_a_gpu(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """Compiled for fp16 and run without saving: the f32 weights are read from their
    file and converted into the pinned buffers, never into a whole converted copy; the
    device holds f16."""
    path, arrays = _matmul(tmp_path, 512, layers=3)
    exe = partita.compile(path, ["llvm"], precision="fp16", cache_dir=tmp_path / "cache")
    params = [op for op in _constants(exe.module) if isinstance(op.value, ParameterAttr)]
    assert len(params) == 3 and all(str(op.value.stored_element) == "f32" for op in params)
    chunk = 64 << 10
    monkeypatch.setattr(plan_load, "STAGING_CHUNK_BYTES", chunk)
    drv = RecordingDriver()
    runtime, host = _load_on_recording_gpu(exe.module, drv)
    assert host - 2 * chunk < 256 << 10, host  # a converted weight would be 512 KiB
    for op in params:
        ptr = runtime.plan.param_ptr[op.result]
        block = next(b for base, b in drv.memory.items() if base <= ptr < base + b.nbytes)
        start = ptr - block.ctypes.data
        got = block[start : start + 512 * 512 * 2].view(np.float16).reshape(512, 512)
        np.testing.assert_array_equal(got, arrays[int(op.value.key.data[1])].T.astype(np.float16))
    x = np.random.default_rng(12).standard_normal((2, 512)).astype(np.float32)
    np.testing.assert_allclose(runtime.run(x)[0], _matmul_expected(x, arrays), rtol=3e-2, atol=3e-2)
    runtime.close()


def test_a_loaded_model_refuses_weights_from_a_file_replaced_since_it_was_loaded(tmp_path: Path) -> None:
    """Weights are mapped when the plan is made, after the load checked the digests: a
    compiled model written over the loaded one in between is refused, never run."""
    path, arrays = _linear(tmp_path, 64)
    exe = partita.compile(path, ["llvm"], cache_dir=tmp_path / "cache")
    saved = tmp_path / "model.partita"
    exe.save(saved)
    loaded = partita.load(saved)
    op = next(op for op in _constants(loaded.module) if isinstance(op.value, ParameterAttr))
    assert ' checked "' in str(op)
    np.testing.assert_array_equal(constant_values(op), arrays[0])
    (tmp_path / "other").mkdir()
    other, _ = _linear(tmp_path / "other", 64, layers=3)
    partita.compile(other, ["llvm"], cache_dir=tmp_path / "cache").save(saved)  # written atomically over it
    with pytest.raises(PartitaError, match="was replaced or changed since it was loaded"):
        constant_values(op)
    with pytest.raises(PartitaError, match="was replaced or changed since it was loaded"):
        Runtime(loaded.module, SimulatedDevice())
    x = np.random.default_rng(13).standard_normal((2, 64)).astype(np.float32)
    assert partita.load(saved).run(x)[0].shape == (2, 64)  # loading it again is fine


def test_a_transposed_weight_is_a_parameter_however_large(tmp_path: Path) -> None:
    """``MatMul(x, Transpose(W))`` (torch's export of a tied lm_head): the transpose of a
    mapped weight is a permuted view, so ``nn.dense`` takes ``W`` as stored, with no
    transpose op left to run, even past the import's fold budget (80 MiB here, in a sparse
    external file: nothing is read)."""
    from partita.frontends.onnx.folding import FOLD_LIMIT_BYTES

    rows, cols = 20480, 1024  # [vocab, hidden]
    assert rows * cols * 4 > FOLD_LIMIT_BYTES
    data = tmp_path / "w.bin"
    with open(data, "wb") as handle:
        handle.truncate(rows * cols * 4)
        handle.seek(0)
        handle.write(np.arange(cols, dtype=np.float32).tobytes())  # row 0 of W: 0, 1, 2, ...
    weight = _external_f32("lm_head.weight", [rows, cols], "w.bin")
    graph = helper.make_graph([helper.make_node("Transpose", ["lm_head.weight"], ["wt"], perm=[1, 0]),
                               helper.make_node("MatMul", ["x", "wt"], ["y"])], "tied",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cols])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows])], [weight])
    path = tmp_path / "tied.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    module, peak = _import_peak(path)
    assert peak < 16 << 20, peak
    kinds = [op.name for op in module.walk() if op.name.startswith("nn.")]
    assert "nn.transpose" not in kinds and "nn.dense" in kinds, kinds
    (param,) = [op.value for op in _constants(module) if isinstance(op.value, ParameterAttr)]
    assert param.get_shape() == (rows, cols) and not param.perm.data  # W as stored: [N, K]
    x = np.zeros((1, cols), np.float32)
    x[0, 2] = 1.0
    y = partita.compile(str(path), ["llvm"], cache_dir=tmp_path / "cache").run(x)[0]
    assert y.shape == (1, rows) and y[0, 0] == 2.0 and not y[0, 1:].any()


def test_a_weight_past_f16s_range_saturates_when_retyped(tmp_path: Path) -> None:
    """An f32 parameter read as f16 (``to-mixed-precision``): values past 65504 become
    65504 (an attention mask's 1e6, whose product with 0 must stay 0, not NaN), whether read
    whole or streamed into a compiled-model file; infinities and NaN stay."""
    from xdsl.dialects.builtin import Float16Type, Float32Type, TensorType

    from partita.ir.parameters import converted_chunks, parameter_values

    values = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 1.5, 65504.0, 70000.0], np.float32)
    path = tmp_path / "w.bin"
    path.write_bytes(values.tobytes())
    attr = ParameterAttr.make("w", TensorType(Float32Type(), [8]), path, 0).retyped(Float16Type())
    read = parameter_values(attr)
    streamed = np.frombuffer(b"".join(bytes(c) for c in converted_chunks(attr)), np.float16)
    want = np.array([65504, -65504, np.inf, -np.inf, np.nan, 1.5, 65504, 65504], np.float16)
    for got in (read, streamed):
        np.testing.assert_array_equal(got, want)
