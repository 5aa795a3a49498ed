"""Weights are never copied (issue 25): ONNX external data is read once, from beside the
model, straight into the IR's bytes; constant values are read-only views of them; the
compiled-model file has a page-aligned weights section written by streaming, and loading
maps it; the simulated device reads weights in place and a GPU gets them through pinned
staging buffers in chunks."""

from __future__ import annotations

import hashlib
import json
import mmap
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.recording_driver import RecordingDriver

import partita
import partita.runtime.plan_load as plan_load
from partita import artifact
from partita.dialects import nn
from partita.driver import load_module
from partita.ir import PartitaError
from partita.ir.constants import constant_values
from partita.ir.parameters import PARAMETER_THRESHOLD_BYTES, ParameterAttr
from partita.runtime.cuda import CudaDevice
from partita.runtime.device import SimulatedDevice
from partita.runtime.plan import Runtime

HIDDEN = 64


def _mlp(folder: Path, layers: int = 2, hidden: int = HIDDEN) -> tuple[Path, list[np.ndarray]]:
    """An MLP whose weights are ONNX external data in ``weights.bin`` beside the model."""
    rng = np.random.default_rng(0)
    nodes, inits, arrays, x = [], [], [], "x"
    for i in range(layers):
        w = rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.1
        b = rng.standard_normal(hidden).astype(np.float32)
        arrays += [w, b]
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"h{i}"])]
        x = f"h{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "mlp.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    return path, arrays


def _expected(x: np.ndarray, arrays: list[np.ndarray]) -> np.ndarray:
    for w, b in zip(arrays[::2], arrays[1::2]):
        x = np.maximum(x @ w + b, 0)
    return x


def _constants(module) -> list[nn.ConstantOp]:
    return [op for op in module.walk() if isinstance(op, nn.ConstantOp)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("mlp")
    path, arrays = _mlp(folder)
    exe = partita.compile(path, ["llvm"], cache_dir=folder / "cache")
    saved = folder / "mlp.partita"
    exe.save(saved)
    return exe, saved, arrays


def test_external_data_is_read_beside_the_model_into_the_ir_without_a_copy(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "model").mkdir()
    path, arrays = _mlp(tmp_path / "model")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # never relative to the working directory
    module = load_module(str(path))
    by_shape = {tuple(op.value.get_shape()): op for op in _constants(module)}
    bias = by_shape[(HIDDEN,)]
    values = constant_values(bias)
    # The bias is kept as read from the file: the view is of the attribute's own bytes.
    assert not values.flags.writeable
    assert np.shares_memory(values, np.frombuffer(bias.value.data.data, np.uint8))
    assert any(np.array_equal(values, b) for b in arrays[1::2])
    # MatMul's weight is used transposed (nn.dense takes [N, K]): a parameter with perm
    # [1, 0], a strided view of the file, right values.
    weights = [op for op in _constants(module) if op.value.get_shape() == (HIDDEN, HIDDEN)]
    assert all(isinstance(op.value, ParameterAttr) and op.value.permutation == (1, 0) for op in weights)
    assert any(np.array_equal(constant_values(op), arrays[0].T) for op in weights)


def test_missing_or_short_external_data_names_the_tensor(tmp_path: Path) -> None:
    path, _ = _mlp(tmp_path)
    data = tmp_path / "weights.bin"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(PartitaError, match="initializer 'w0': its external data .*weights.bin' ends before byte"):
        load_module(str(path))
    data.unlink()
    with pytest.raises(PartitaError, match="initializer 'w0': cannot read its external data"):
        load_module(str(path))


def _layout(saved: Path) -> tuple[dict, int, int]:
    """The header, header length and weights-section offset of a format-2 file."""
    data = saved.read_bytes()
    (header_len,) = struct.unpack("<Q", data[16:24])
    header = json.loads(data[24 : 24 + header_len])
    end = 24 + header_len + max(p["offset"] + p["size"] for p in header["parts"])
    return header, header_len, -(-end // artifact.SECTION_ALIGNMENT) * artifact.SECTION_ALIGNMENT


def test_saved_weights_are_page_aligned_hashed_and_loaded_as_views_of_the_mapped_file(compiled, tmp_path: Path) -> None:
    exe, saved, arrays = compiled
    header, _, section = _layout(saved)
    data = saved.read_bytes()
    assert data[14:16] == struct.pack("<H", 3) and section % 4096 == 0
    assert len(header["weights"]) == len(_constants(exe.module)) > 0
    for row, op in zip(header["weights"], _constants(exe.module)):
        offset, size, digest = row[:3]
        payload = constant_values(op).tobytes()
        assert offset % artifact.WEIGHT_ALIGNMENT == 0
        assert data[section + offset : section + offset + size] == payload
        assert hashlib.sha256(payload).hexdigest() == digest
        # A weight of at least the parameter threshold is stored by name (issue 25).
        assert (len(row) == 4) == (size >= PARAMETER_THRESHOLD_BYTES)
    loaded = partita.load(saved)
    kinds = set()
    for op in _constants(loaded.module):
        if isinstance(op.value, ParameterAttr):  # names the file and the weight's offset in it
            assert op.value.file.data == str(saved.resolve())
            assert isinstance(constant_values(op), np.memmap)
            kinds.add("parameter")
        else:
            payload = op.value.data.data
            assert isinstance(payload, memoryview) and isinstance(payload.obj, mmap.mmap) and payload.readonly
            kinds.add("dense")
        assert not constant_values(op).flags.writeable
    assert kinds == {"parameter", "dense"}
    x = np.random.default_rng(1).standard_normal((2, HIDDEN)).astype(np.float32)
    np.testing.assert_allclose(loaded.run(x)[0], _expected(x, arrays), rtol=1e-5, atol=1e-5)
    # A loaded model saves again from its mapping, to the same bytes.
    loaded.save(tmp_path / "again.partita")
    assert (tmp_path / "again.partita").read_bytes() == data


def test_a_changed_weight_or_padding_byte_is_named(compiled, tmp_path: Path) -> None:
    _, saved, _ = compiled
    header, _, section = _layout(saved)
    offset, size = header["weights"][1][:2]
    for at, why in [(section + offset + size // 2, "weight 1 does not match its sha256"),
                    (section - 1, "the padding before a weight is not zeros")]:
        data = bytearray(saved.read_bytes())
        data[at] ^= 0x40
        damaged = tmp_path / "damaged.partita"
        damaged.write_bytes(bytes(data))
        with pytest.raises(PartitaError, match=why):
            partita.load(damaged)


def test_a_format_1_file_still_loads(compiled, tmp_path: Path) -> None:
    """Format 1: one part 'weights.bin' with the weights packed, and a sha256 of the
    whole file as trailer (built here from a format-2 file's pieces)."""
    _, saved, arrays = compiled
    header, header_len, section = _layout(saved)
    data = saved.read_bytes()
    base = 24 + header_len
    parts = [(p["name"], data[base + p["offset"] : base + p["offset"] + p["size"]]) for p in header["parts"]]
    # Format 1 had no parameters: each constant was a placeholder, its weight by position.
    text = re.sub(r'#nn.parameter<"[^"]*" : (tensor<[^>]*>), file "" at \d+>', r"dense<0.0> : \1",
                  parts[0][1].decode())
    parts[0] = ("module.mlir", text.encode())
    weights = [data[section + row[0] : section + row[0] + row[1]] for row in header["weights"]]
    table, at = [], 0
    for blob in weights:
        table.append([at, len(blob)])
        at += len(blob)
    parts.insert(1, ("weights.bin", b"".join(weights)))
    entries, at = [], 0
    for name, blob in parts:
        entries.append({"name": name, "offset": at, "size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()})
        at += len(blob)
    old = json.dumps({**header, "weights": table, "parts": entries}).encode()
    body = b"PARTITA-MODEL\0" + struct.pack("<H", 1) + struct.pack("<Q", len(old)) + old
    body += b"".join(blob for _, blob in parts)
    v1 = tmp_path / "v1.partita"
    v1.write_bytes(body + hashlib.sha256(body).digest())
    x = np.random.default_rng(2).standard_normal((2, HIDDEN)).astype(np.float32)
    np.testing.assert_allclose(partita.load(v1).run(x)[0], _expected(x, arrays), rtol=1e-5, atol=1e-5)


def test_the_simulated_device_reads_weights_in_place(compiled) -> None:
    _, saved, arrays = compiled
    loaded = partita.load(saved)
    device = SimulatedDevice()
    runtime = Runtime(loaded.module, device)
    constants = _constants(loaded.module)
    assert device.counts["map_host"] == len(constants) and device.counts["upload"] == 0
    for op in constants:
        ptr = runtime.plan.param_ptr[op.result]
        seen = device.view(ptr, op.value.get_shape(), constant_values(op).dtype)
        assert np.shares_memory(seen, runtime.plan.constants[op.result]) and not seen.flags.writeable
        if isinstance(op.value, ParameterAttr):  # a view of the mapped compiled-model file
            owner = seen
            while not isinstance(owner, np.memmap):
                owner = owner.base
            assert owner.filename == str(saved.resolve()) and owner.offset == op.value.offset.data
    x = np.random.default_rng(3).standard_normal((2, HIDDEN)).astype(np.float32)
    np.testing.assert_allclose(runtime.run(x)[0], _expected(x, arrays), rtol=1e-5, atol=1e-5)
    runtime.close()
    assert not device.allocated_bytes


def test_gpu_weights_go_up_in_chunks_through_pinned_staging(compiled, monkeypatch) -> None:
    _, saved, _ = compiled
    loaded = partita.load(saved)
    monkeypatch.setattr(plan_load, "STAGING_CHUNK_BYTES", 4096)  # a 16 KiB weight: 4 chunks
    drv = RecordingDriver()
    runtime = Runtime(loaded.module, CudaDevice(driver=drv))
    constants = _constants(loaded.module)
    chunks = sum(-(-constant_values(op).nbytes // 4096) for op in constants)
    assert drv.calls["cuMemHostAlloc"] == 2 and drv.calls["cuMemFreeHost"] == 2 and not drv.pinned
    assert drv.calls["cuMemcpyHtoDAsync"] == chunks > len(constants)
    for op in constants:  # every byte arrived where the plan says the weight is
        ptr = runtime.plan.param_ptr[op.result]
        payload = constant_values(op).tobytes()
        block = next(b for base, b in drv.memory.items() if base <= ptr < base + b.nbytes)
        start = ptr - block.ctypes.data
        assert block[start : start + len(payload)].tobytes() == payload
    runtime.close()


_PEAK = (
    "import re, sys\n"
    "from partita.tools import {tool}\n"
    "code = {tool}.main({argv!r})\n"
    "print('peak_kib', re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _peak_mib(tool: str, argv: list[str], cwd: Path) -> float:
    """The peak resident memory of ``partita-<tool> argv`` in a fresh process (its own
    VmHWM: ru_maxrss would count the pytest process that forked it)."""
    script = _PEAK.format(tool=tool, argv=argv)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=cwd, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stderr.split("peak_kib")[1].split()[0]) / 1024


def test_compile_and_run_grow_by_about_the_weights(tmp_path: Path) -> None:
    """partita-compile and partita-run of a model with 50 MB of weights peak at most 1.5
    times the weights above the same model with 1 MB of them (the interpreter, modules
    and kernels are the same). Copying the weights twice would fail it."""
    peaks = {}
    for hidden in (256, 2048):
        folder = tmp_path / str(hidden)
        folder.mkdir()
        model, arrays = _mlp(folder, layers=3, hidden=hidden)
        compiled = folder / "mlp.partita"
        weights = sum(a.nbytes for a in arrays) / 2**20
        compile_peak = _peak_mib("compile", [str(model), "-o", str(compiled), "-q", "--targets", "llvm"], tmp_path)
        run_peak = _peak_mib("run", [str(compiled), "-q"], tmp_path)
        peaks[hidden] = (weights, compile_peak, run_peak)
    (small, c0, r0), (large, c1, r1) = peaks[256], peaks[2048]
    assert large > 45
    assert c1 - c0 < 1.5 * (large - small), peaks
    assert r1 - r0 < 1.5 * (large - small), peaks


def test_a_constant_node_with_external_data_is_read_beside_the_model(tmp_path: Path, monkeypatch) -> None:
    from onnx.external_data_helper import convert_model_to_external_data

    value = np.arange(4096, dtype=np.float32).reshape(64, 64)
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(value, "k")),
         helper.make_node("Add", ["x", "k"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    convert_model_to_external_data(model, location="k.bin", size_threshold=0, convert_attribute=True)
    onnx.save_model(model, str(tmp_path / "m.onnx"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    (op,) = _constants(load_module(str(tmp_path / "m.onnx")))
    np.testing.assert_array_equal(constant_values(op), value)


def test_bfloat16_external_data_takes_onnx_s_reader(tmp_path: Path, monkeypatch) -> None:
    """An element type whose file layout is not NumPy's is read by onnx, from the same folder."""
    from onnx.external_data_helper import convert_model_to_external_data

    tensor = helper.make_tensor("k", TensorProto.BFLOAT16, [64, 64], np.full(4096, 1.5, np.float32).tolist())
    graph = helper.make_graph([helper.make_node("Add", ["x", "k"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [64, 64])], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    convert_model_to_external_data(model, location="k.bin", size_threshold=0)
    onnx.save_model(model, str(tmp_path / "m.onnx"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    (op,) = _constants(load_module(str(tmp_path / "m.onnx")))
    np.testing.assert_array_equal(constant_values(op).astype(np.float32), np.full((64, 64), 1.5, np.float32))
