"""Initializers embedded in an ``.onnx`` file stay in the file
(``partita.frontends.onnx.embedded``): they import as named parameters of the model file at
their ``raw_data``'s offset, the import never holds their bytes, and what the walk does not
expect falls back to the ordinary load."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import partita
from partita.dialects import nn
from partita.frontends.onnx import import_onnx, load_model
from partita.frontends.onnx.embedded import parse_leaving_weights
from partita.ir import PartitaError
from partita.ir.constants import constant_values
from partita.ir.parameters import PARAMETER_THRESHOLD_BYTES, ParameterAttr


def _mlp(folder: Path, hidden: int = 64, name: str = "mlp.onnx") -> tuple[Path, dict[str, np.ndarray]]:
    """MatMul + Add + Relu, then Gemm(transB): weights and a large bias embedded, a small
    bias too (under the threshold), and a bf16 initializer (no NumPy layout of its own)."""
    rng = np.random.default_rng(0)
    arrays = {
        "w0": (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32),
        "b0": rng.standard_normal(hidden * 8).astype(np.float32)[:hidden],  # 256 B: stays dense
        "w1": (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32),
        "b1": rng.standard_normal(hidden).astype(np.float32),
    }
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m0"]), helper.make_node("Add", ["m0", "b0"], ["a0"]),
             helper.make_node("Relu", ["a0"], ["h0"]), helper.make_node("Gemm", ["h0", "w1", "b1"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, hidden])],
                              [numpy_helper.from_array(a, k) for k, a in arrays.items()])
    path = folder / name
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path, arrays


def _expected(x: np.ndarray, a: dict[str, np.ndarray]) -> np.ndarray:
    return np.maximum(x @ a["w0"] + a["b0"], 0) @ a["w1"].T + a["b1"]


def _parameters(module) -> dict[str, ParameterAttr]:
    return {op.value.key.data: op.value for op in module.walk()
            if isinstance(op, nn.ConstantOp) and isinstance(op.value, ParameterAttr)}


def test_embedded_weights_become_parameters_of_the_model_file_at_their_offsets(tmp_path: Path) -> None:
    path, arrays = _mlp(tmp_path)
    before = path.read_bytes()
    model = load_model(path, external_data=False)
    rewritten = {t.name: {e.key: e.value for e in t.external_data} for t in model.graph.initializer
                 if t.data_location == TensorProto.EXTERNAL}
    assert set(rewritten) == {"w0", "w1"}  # b0 and b1 (256 B) are under the threshold
    assert PARAMETER_THRESHOLD_BYTES > arrays["b1"].nbytes
    for name, info in rewritten.items():
        assert info["location"] == path.name and int(info["length"]) == arrays[name].nbytes
        offset = int(info["offset"])
        assert before[offset:offset + arrays[name].nbytes] == arrays[name].tobytes()  # the payload itself
        assert not next(t for t in model.graph.initializer if t.name == name).HasField("raw_data")
    params = _parameters(import_onnx(path))
    assert set(params) == {"w0", "w1"}
    for name, param in params.items():
        assert param.file.data == str(path.resolve()) and param.offset.data == int(rewritten[name]["offset"])
    np.testing.assert_array_equal(np.asarray(constant_values(next(
        op for op in import_onnx(path).walk() if isinstance(op, nn.ConstantOp) and op.value == params["w1"]))),
        arrays["w1"])
    assert path.read_bytes() == before  # the user's file is read, never written


def test_a_model_with_embedded_weights_runs_and_compiles_to_a_file(tmp_path: Path) -> None:
    path, arrays = _mlp(tmp_path)
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    exe = partita.compile(str(path), ["llvm"], cache_dir=tmp_path / "cache")
    np.testing.assert_allclose(exe.run(x)[0], _expected(x, arrays), rtol=1e-5, atol=1e-5)
    saved = tmp_path / "mlp.partita"
    exe.save(saved)
    path.unlink()  # the compiled file holds the weights itself
    np.testing.assert_allclose(partita.load(saved).run(x)[0], _expected(x, arrays), rtol=1e-5, atol=1e-5)


def test_the_import_never_holds_the_embedded_weights(tmp_path: Path) -> None:
    """8 MiB of embedded weights: the ordinary load reads the file into one bytes object;
    walking the mapped file, the import allocates a small fraction of that."""
    path, _ = _mlp(tmp_path, hidden=1024)
    weights = path.stat().st_size
    tracemalloc.start()
    try:
        module = import_onnx(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert set(_parameters(module)) == {"w0", "w1", "b0", "b1"}  # 4 KiB biases: parameters too
    assert peak < weights / 8, (peak, weights)


def test_a_graph_given_in_two_parts_is_loaded_the_ordinary_way(tmp_path: Path) -> None:
    """Protobuf merges a message field given twice; the walk declines such a file and the
    ordinary load reads it (the weights then enter the IR as dense constants, correctly)."""
    path, arrays = _mlp(tmp_path)
    model = onnx.load(str(path))
    nodes_only = onnx.ModelProto()
    nodes_only.graph.node.extend(model.graph.node)
    rest = onnx.ModelProto()
    rest.CopyFrom(model)
    del rest.graph.node[:]
    split = tmp_path / "split.onnx"
    split.write_bytes(rest.SerializeToString() + nodes_only.SerializeToString())
    assert parse_leaving_weights(split, PARAMETER_THRESHOLD_BYTES) is None
    x = np.ones((2, 64), np.float32)
    exe = partita.compile(str(split), ["llvm"], cache_dir=tmp_path / "cache")
    np.testing.assert_allclose(exe.run(x)[0], _expected(x, arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cut", [0.5, 0.999])
def test_a_truncated_model_is_still_a_clear_error(tmp_path: Path, cut: float) -> None:
    path, _ = _mlp(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * cut)])
    assert parse_leaving_weights(path, PARAMETER_THRESHOLD_BYTES) is None
    with pytest.raises(PartitaError, match="is not an ONNX model"):
        import_onnx(path)


def test_loading_with_external_data_still_reads_every_payload(tmp_path: Path) -> None:
    path, arrays = _mlp(tmp_path)
    model = load_model(path)  # external_data=True: what tools that re-save the model need
    for tensor in model.graph.initializer:
        assert tensor.data_location == TensorProto.DEFAULT
        np.testing.assert_array_equal(numpy_helper.to_array(tensor), arrays[tensor.name])


def test_bf16_and_already_external_initializers(tmp_path: Path) -> None:
    """A bf16 payload is named in place too (read through onnx's external-data loader); an
    initializer that already has external data is left as it is."""
    import ml_dtypes

    w = np.random.default_rng(2).standard_normal((32, 32)).astype(ml_dtypes.bfloat16)
    init = numpy_helper.from_array(w.view(np.uint16), "w")
    init.data_type = TensorProto.BFLOAT16
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "bf",
                              [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 32])], [init])
    path = tmp_path / "bf.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = parse_leaving_weights(path, PARAMETER_THRESHOLD_BYTES)
    assert model is not None and model.graph.initializer[0].data_location == TensorProto.EXTERNAL
    x = np.eye(2, 32, dtype=np.float32).astype(ml_dtypes.bfloat16)
    got = partita.compile(str(path), ["llvm"], cache_dir=tmp_path / "cache").run(x)[0]
    np.testing.assert_array_equal(got.astype(np.float32), w[:2].astype(np.float32))

    (tmp_path / "ext").mkdir()
    external, _ = _mlp(tmp_path / "ext")
    model = onnx.load(str(external))
    onnx.save_model(model, str(external), save_as_external_data=True, location="ext.bin", size_threshold=0)
    assert parse_leaving_weights(external, PARAMETER_THRESHOLD_BYTES) is None  # nothing embedded to leave
    files = {p.file.data for p in _parameters(import_onnx(external)).values()}
    assert files == {str((external.parent / "ext.bin").resolve())}


def test_an_explicit_default_data_location_is_still_embedded(tmp_path: Path) -> None:
    """``onnx.save`` of a model loaded with its external data writes ``data_location:
    DEFAULT`` out (as torch's exports re-saved in one file have it): still a payload."""
    path, arrays = _mlp(tmp_path)
    model = onnx.load(str(path))
    for tensor in model.graph.initializer:
        tensor.data_location = TensorProto.DEFAULT
    assert all(t.HasField("data_location") for t in model.graph.initializer)
    onnx.save_model(model, str(path))
    assert set(_parameters(import_onnx(path))) == {"w0", "w1"}
    x = np.ones((2, 64), np.float32)
    exe = partita.compile(str(path), ["llvm"], cache_dir=tmp_path / "cache")
    np.testing.assert_allclose(exe.run(x)[0], _expected(x, arrays), rtol=1e-5, atol=1e-5)
