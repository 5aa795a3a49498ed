"""The small things a new user meets at once in partita-run / partita-compile and the
package (issue #22): each one says what happens or refuses, none is silent."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import partita
from partita.tools import compile as compile_tool
from partita.tools import run

ROOT = Path(__file__).resolve().parents[2]
RELU = """func.func @main(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = nn.relu %x : (tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return %0 : tensor<?x8xf32>
}
"""


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "relu.mlir"
    path.write_text(RELU)
    return path


def host_only(model: Path, *args: str) -> list[str]:
    """Everything on the host: no NVRTC work, so these tests stay fast."""
    return [str(model), "--partitioner", "none", "--fallback-device", "cpu", *args]


def test_random_inputs_are_announced(model: Path, capsys) -> None:
    assert run.main(host_only(model, "--dynamic-size", "3", "--seed", "5")) == 0
    err = capsys.readouterr().err
    assert "no --inputs: running on random inputs (seed 5, '?' dims of size 3)" in err


def test_inputs_from_a_file_are_not_called_random(model: Path, tmp_path: Path, capsys) -> None:
    np.savez(tmp_path / "in.npz", x=np.ones((2, 8), np.float32))
    assert run.main(host_only(model, "--inputs", str(tmp_path / "in.npz"))) == 0
    captured = capsys.readouterr()
    assert "random" not in captured.err
    assert "output0: float32[2, 8] mean 1\n" in captured.out


def test_dynamic_size_zero_is_refused(model: Path, capsys) -> None:
    assert run.main(host_only(model, "--dynamic-size", "0")) == 1
    err = capsys.readouterr().err
    assert "argument --dynamic-size: 0 is below the minimum of 1" in err and "nan" not in err


@pytest.mark.parametrize("tool", ["run", "compile"])
def test_output_in_a_missing_directory_is_refused(model: Path, tmp_path: Path, tool: str, capsys) -> None:
    missing = tmp_path / "no" / "such" / "out.npz"
    if tool == "run":
        code = run.main(host_only(model, "-q", "--output", str(missing)))
    else:
        code = compile_tool.main(host_only(model, "-q", "-o", str(missing)))
    assert code == 1
    assert f"the directory '{missing.parent}' does not exist" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_compile_options_with_a_compiled_model_are_refused(model: Path, tmp_path: Path, capsys) -> None:
    compiled = tmp_path / "relu.partita"
    assert compile_tool.main(host_only(model, "-q", "-o", str(compiled))) == 0
    capsys.readouterr()
    assert run.main([str(compiled), "-q", "--targets", "cuda,cutlass,llvm", "--cost", "roofline"]) == 1
    err = capsys.readouterr().err
    assert "is already compiled, so --targets, --cost cannot apply to it" in err
    assert run.main([str(compiled), "-q"]) == 0


def test_compiling_a_compiled_model_is_refused(model: Path, tmp_path: Path, capsys) -> None:
    compiled = tmp_path / "relu.partita"
    assert compile_tool.main(host_only(model, "-q", "-o", str(compiled))) == 0
    capsys.readouterr()
    assert compile_tool.main([str(compiled), "-q", "-o", str(tmp_path / "again.partita")]) == 1
    assert "is a compiled Partita model, not textual IR or an ONNX model as partita-compile takes" in capsys.readouterr().err


def test_compile_honours_fallback_device(model: Path, tmp_path: Path, capsys) -> None:
    # With no partitioner, the relu is left to the fallback device: the host for cpu.
    compiled = tmp_path / "relu.partita"
    assert compile_tool.main(host_only(model, "-q", "--report", "-o", str(compiled))) == 0
    report = capsys.readouterr().out
    assert "llvm (NumPy)" in report and "1 host step(s)" in report
    exe = partita.load(compiled)
    out = exe.run(np.array([[-1.0] * 8], np.float32))
    assert np.array_equal(out[0], np.zeros((1, 8), np.float32))


def test_a_model_file_without_extension_is_read_for_what_it_is(tmp_path: Path, capsys) -> None:
    onnx_copy = tmp_path / "encoder_model"
    shutil.copy(ROOT / "examples" / "encoder.onnx", onnx_copy)
    assert run.main([str(onnx_copy), "-q", "--partitioner", "none", "--fallback-device", "cpu"]) == 0
    assert "float32[1, 16, 64]" in capsys.readouterr().out
    assert run.main([str(tmp_path / "no_such_model"), "-q"]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_report_counts_cubins_and_kernels_apart(model: Path, capsys) -> None:
    assert run.main(host_only(model, "--report")) == 0
    captured = capsys.readouterr()
    assert re.search(r"^cubins: \d+ compiled by NVRTC, \d+ from the cache$", captured.out, re.MULTILINE)
    assert "kernel compiles" not in captured.out
    # Where the plan ran is said once, in the report, not again on the timing line.
    both = captured.out + captured.err
    assert both.count("running on simulated device") <= 1


def test_dir_shows_the_lazy_entry_points() -> None:
    names = dir(partita)
    assert {"compile", "load", "Executable", "__version__"} <= set(names)


def test_license_is_the_apache_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()


def test_readme_names_the_cubin_cache_the_code_uses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from partita.lowering import nvrtc

    monkeypatch.delenv("PARTITA_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert nvrtc.default_cache_dir() == tmp_path / ".cache" / "partita" / "cubins"
    assert "default `~/.cache/partita/cubins`" in (ROOT / "README.md").read_text()


def test_one_line_ir_longer_than_a_file_name_is_still_ir() -> None:
    text = RELU.replace("\n", " ") + " " * 400  # over NAME_MAX: Path.is_file() would raise
    exe = partita.compile(text, partitioner="none", fallback_device="cpu")
    np.testing.assert_array_equal(exe.run(np.array([[-1.0, 2.0] * 4], np.float32))[0], [[0.0, 2.0] * 4])


def test_an_empty_result_is_called_empty_not_nan(model: Path, tmp_path: Path, capsys) -> None:
    np.savez(tmp_path / "empty.npz", x=np.ones((0, 8), np.float32))
    assert run.main(host_only(model, "-q", "--inputs", str(tmp_path / "empty.npz"))) == 0
    captured = capsys.readouterr()
    assert captured.out == "output0: float32[0, 8] (empty)\n"
    assert "nan" not in captured.out + captured.err and "warning" not in captured.err.lower()
