"""Issue 14's reproducers: every tool turns bad input, options, files and memory into
``error: ...`` with exit code 1, never a traceback, and loses nothing the user passed in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from partita.lowering import nvrtc
from partita.tools import boundary, import_model, opt, run
from partita.tools import compile as compile_tool

EXAMPLES = Path(__file__).parents[2] / "examples"
MLP = """func.func @main(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) -> tensor<?x32xf32> {
  %0 = nn.dense %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  func.return %0 : tensor<?x32xf32>
}
"""


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.mlir"
    path.write_text(MLP)
    return path


def fails_cleanly(capsys: pytest.CaptureFixture[str], code: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert code == 1, err
    assert "error:" in err and "Traceback" not in err and "internal error" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def run_fails(capsys, *args: str, needles: tuple[str, ...] = (), cache: Path) -> str:
    return fails_cleanly(capsys, run.main([*args, "-q", "--cache-dir", str(cache)]), *needles)


# -- partita-run options and files ------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--device", "bogus"], "unknown device 'bogus'"),
        (["--entry", "nope"], "entry=@nope: no such function"),
        (["--seed", "-1"], "argument --seed: -1 is below the minimum of 0"),
        (["--dynamic-size", "-1"], "argument --dynamic-size"),
        (["--targets", "cutlass -sm=-1,llvm", "--partitioner", "eager"], "target 'cutlass -sm=-1'"),
        (["--targets", "cuda -arch=sm_xx,llvm"], "bad arch 'sm_xx'"),
        (["--targets", "cuda -arch=sm_999,llvm"], "not supported by this NVRTC"),
        (["--partitioner", "greedy"], "invalid choice: 'greedy'"),
    ],
)
def test_bad_options(model: Path, tmp_path: Path, capsys, args: list[str], needle: str) -> None:
    run_fails(capsys, str(model), "--partitioner", "none", *args, needles=(needle,), cache=tmp_path)


def test_inputs_of_one_array(model: Path, tmp_path: Path, capsys) -> None:
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros((2, 64), np.float32))
    run_fails(capsys, str(model), "--partitioner", "none", "--inputs", str(npy), needles=("numpy.savez",), cache=tmp_path)
    garbage = tmp_path / "x.npz"
    garbage.write_bytes(b"PK\x03\x04 not really a zip")
    run_fails(capsys, str(model), "--partitioner", "none", "--inputs", str(garbage), needles=("cannot read inputs",), cache=tmp_path)


@pytest.mark.parametrize("where", ["directory", "slash", "under_a_file", "proc"])
def test_unwritable_outputs(model: Path, tmp_path: Path, capsys, where: str) -> None:
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    output = {
        "directory": str(tmp_path),
        "slash": str(tmp_path / "out") + "/",
        "under_a_file": str(afile / "x.npz"),
        "proc": "/proc/x.npz",
    }[where]
    run_fails(capsys, str(model), "--partitioner", "none", "--output", output, cache=tmp_path)
    assert afile.read_text() == "keep me"
    assert not (tmp_path / "out").exists()  # `out/` never becomes a file called `out`


def test_output_to_a_special_file_keeps_it_special(model: Path, tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    assert run.main([str(model), "--partitioner", "none", "-q", "--output", str(fifo), "--cache-dir", str(tmp_path)]) == 0
    data = reader.communicate(timeout=30)[0]
    assert data.startswith(b"PK") and fifo.is_fifo()
    assert run.main([str(model), "--partitioner", "none", "-q", "--output", os.devnull, "--cache-dir", str(tmp_path)]) == 0
    assert Path(os.devnull).is_char_device()


def test_huge_declared_onnx_dim(tmp_path: Path, capsys) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [100000, 100000, 100000])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    path = tmp_path / "huge.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    # 4e15 bytes: no device has the address space (plan-memory says so before any input is made)
    run_fails(capsys, str(path), "--partitioner", "none", needles=("exceeds", "address space of a device"), cache=tmp_path)


def test_non_utf8_mlir(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.mlir"
    path.write_bytes(b"func.func @main() {\n\xff\xfe}\n")
    run_fails(capsys, str(path), needles=(f"{path}:2:1: error: the file is not UTF-8 text",), cache=tmp_path)
    fails_cleanly(capsys, opt.main([str(path)]))


def test_use_before_def_is_located_in_every_tool(tmp_path: Path, capsys) -> None:
    path = tmp_path / "dom.mlir"
    path.write_text(
        "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %0 = nn.relu %0 : (tensor<4xf32>) -> tensor<4xf32>\n"
        "  func.return %0 : tensor<4xf32>\n}\n"
    )
    needle = f"{path}:2:3: error: 'nn.relu' op operand #0"
    fails_cleanly(capsys, opt.main([str(path)]), needle)
    run_fails(capsys, str(path), "--partitioner", "none", needles=(needle,), cache=tmp_path)


def _nested_partitions(depth: int) -> str:
    lines = ["func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {"]
    for level in range(depth):
        lines.append(f'%r{level} = byoc.partition(%x) {{byoc.compiler = "cutlass"}} ({{')
    lines.append("byoc.yield %x : tensor<4xf32>")
    for level in reversed(range(depth)):
        close = "}) : (tensor<4xf32>) -> tensor<4xf32>"
        lines.append(close if level == 0 else f"{close}\nbyoc.yield %r{level} : tensor<4xf32>")
    lines.append("func.return %r0 : tensor<4xf32>\n}")
    return "\n".join(lines)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(_nested_partitions(300), id="partitions"),
        pytest.param("builtin.module {\n" * 1000 + "}\n" * 1000, id="modules"),
        pytest.param('"test.op"() {a = ' + "[" * 1000 + "]" * 1000 + "} : () -> ()\n", id="attribute"),
    ],
)
def test_deep_nesting_is_a_located_error(tmp_path: Path, capsys, text: str) -> None:
    path = tmp_path / "deep.mlir"
    path.write_text(text)
    err = fails_cleanly(capsys, opt.main([str(path)]), "nesting too deep")
    assert err.startswith(f"{path}:")
    run_fails(capsys, str(path), "--partitioner", "none", needles=("nesting too deep",), cache=tmp_path)


# -- ONNX ------------------------------------------------------------------------------


def _onnx(tmp_path: Path, inits=(), dims=(2, 4)) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y], initializer=list(inits))
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_onnx_initializer_of_the_wrong_size(tmp_path: Path, capsys) -> None:
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    weight.raw_data = weight.raw_data[:10]
    path = _onnx(tmp_path, [weight])
    fails_cleanly(capsys, import_model.main([str(path)]), "initializer 'w'", "[4, 4] FLOAT", "10 bytes")
    run_fails(capsys, str(path), needles=("initializer 'w'",), cache=tmp_path)


def test_onnx_negative_dim(tmp_path: Path, capsys) -> None:
    path = _onnx(tmp_path, dims=(-5, 4))
    fails_cleanly(capsys, import_model.main([str(path)]), "graph input 'x' has a negative dimension -5")


def test_onnx_load_errors_say_why(tmp_path: Path, capsys) -> None:
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    weight.data_location = TensorProto.EXTERNAL
    weight.ClearField("raw_data")
    location = weight.external_data.add()
    location.key, location.value = "location", "../../etc/passwd"
    path = _onnx(tmp_path, [weight])
    fails_cleanly(capsys, import_model.main([str(path)]), "is not an ONNX model:", "points outside the directory")


# -- partita-opt ------------------------------------------------------------------------


def test_pass_option_errors_name_the_pass(model: Path, capsys) -> None:
    fails_cleanly(capsys, opt.main([str(model), "-p", "cutlass-codegen{sm=abc}"]), "pass 'cutlass-codegen'")
    fails_cleanly(capsys, opt.main([str(model), "-p", "cutlass-codegen{sm=999}"]), "cutlass-codegen: sm=999")
    fails_cleanly(capsys, opt.main([str(model), "-p", "cuda-codegen{arch=sm_xx}"]), "bad arch 'sm_xx'")
    fails_cleanly(capsys, opt.main([str(model), "-p", "cuda-codegen{arch=native}"]),
                  "resolved to the GPU present by partita.compile")
    fails_cleanly(capsys, opt.main([str(model), "--no-such-flag"]), "unrecognized arguments")


def test_opt_output_to_a_directory_keeps_the_input(model: Path, tmp_path: Path, capsys) -> None:
    fails_cleanly(capsys, opt.main([str(model), "-o", str(tmp_path) + "/"]), "is a directory")
    assert model.read_text() == MLP


# -- the boundary itself ---------------------------------------------------------------


def test_unexpected_exceptions_are_internal_errors(capsys) -> None:
    def bug() -> int:
        raise KeyError("oops")

    assert boundary.run_tool("partita-x", bug) == boundary.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "partita-x: error: internal error: KeyError" in err and "please report" in err
    assert "Traceback" not in err


def test_expected_failures_exit_1(capsys) -> None:
    for exc, needle in [
        (MemoryError(), "out of memory"),
        (RecursionError(), "nesting too deep"),
        (FileNotFoundError(2, "No such file or directory", "x.mlir"), "'x.mlir': No such file"),
    ]:

        def fail(exc=exc) -> int:
            raise exc

        assert boundary.run_tool("partita-x", fail) == 1
        assert needle in capsys.readouterr().err


def test_tools_exit_1_in_a_real_process(model: Path, tmp_path: Path) -> None:
    for module, args in [
        ("partita.tools.run", [str(model), "--device", "bogus", "--cache-dir", str(tmp_path)]),
        ("partita.tools.opt", [str(model), "-p", "no-such-pass"]),
        ("partita.tools.import_model", [str(tmp_path / "missing.onnx")]),
        ("partita.tools.compile", [str(model), "-o", str(tmp_path) + "/"]),
    ]:
        proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True)
        assert proc.returncode == 1, (module, proc.stderr)
        assert "error:" in proc.stderr and "Traceback" not in proc.stderr, (module, proc.stderr)


def test_compile_refuses_to_overwrite_its_input(model: Path, tmp_path: Path, capsys) -> None:
    fails_cleanly(capsys, compile_tool.main([str(model), "-o", str(model), "-q"]), "refusing to overwrite")
    assert model.read_text() == MLP


def test_unterminated_string_is_an_error_not_a_hang(tmp_path: Path, capsys) -> None:
    # xDSL's string-literal regex backtracks exponentially here; Partita's lexes linearly.
    path = tmp_path / "string.mlir"
    path.write_text('"test.op"() {a = "' + "a\\" * 2 + "abc def " * 40 + "\n} : () -> ()\n")
    fails_cleanly(capsys, opt.main([str(path)]), f"{path}:1:")


_BINARY = re.compile(r'byoc\.binary @(\w+) attributes \{[^\n]*?sha256 = "([0-9a-f]{64})", nvrtc = "(\d+\.\d+)"')


def _cubins(text: str) -> dict[str, tuple[str, str]]:
    """``{symbol: (sha256, nvrtc)}`` of the cubins a printed module names."""
    return {symbol: (digest, version) for symbol, digest, version in _BINARY.findall(text)}


def test_printed_lowered_module_runs(capsys, tmp_path: Path) -> None:
    """Kernel records round-trip through text, and the printed IR names its cubins by
    sha256 alone: on a machine whose cache starts empty, the codegen (the pinned NVRTC)
    reproduces the example's cubins bit for bit, and the lowered example runs from its IR."""
    pipeline = EXAMPLES / "pipeline"
    text = (pipeline / "6-lowered.mlir").read_text()
    cubins = _cubins(text)
    assert sorted(cubins) == ["cuda_sm90", "cutlass_sm90", "cutlass_sm90_1"], text  # two CUTLASS configurations
    assert "path = " not in text and "cache_dir = " not in text  # no file of the machine that wrote it
    (recorded,) = {version for _, version in cubins.values()}
    if "{}.{}".format(*nvrtc.nvrtc_version()) == recorded:
        # What compiling the example on this machine gives (cache hits after the first time).
        assert opt.main([str(pipeline / "4-fused.mlir"), "-p", "cutlass-codegen{sm=90},cuda-codegen{arch=sm_90}",
                         "-o", str(tmp_path / "5-codegen.mlir")]) == 0
        assert _cubins((tmp_path / "5-codegen.mlir").read_text()) == cubins
    elif not all((nvrtc.default_cache_dir() / f"{digest}.cubin").is_file() for digest, _ in cubins.values()):
        pytest.skip(f"the example's cubins come from NVRTC {recorded} (the pinned one), this is "
                    "{}.{}: pip install 'nvidia-cuda-nvrtc=={}.*'".format(*nvrtc.nvrtc_version(), recorded))
    capsys.readouterr()
    assert run.main([str(pipeline / "6-lowered.mlir"), "--partitioner", "none", "-q"]) == 0
    assert "output0: float16[1, 64]" in capsys.readouterr().out


def test_lowered_module_without_its_cubins_is_an_error(capsys, tmp_path: Path, monkeypatch) -> None:
    """A cubin named by digest and missing from this machine's cache is a user error that
    says how to get it, not a traceback."""
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path / "empty"))
    code = run.main([str(EXAMPLES / "pipeline" / "6-lowered.mlir"), "--partitioner", "none", "-q"])
    fails_cleanly(capsys, code, "is not in the cubin cache", str(tmp_path / "empty"), "compiled by NVRTC")
