"""partita-opt as a user meets it: located errors, exit codes, no tracebacks, safe output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from partita.tools.opt import main

GOOD = """\
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""


def run_opt(tmp_path: Path, text: str, *args: str) -> tuple[int, str, str]:
    src = tmp_path / "input.mlir"
    src.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "partita.tools.opt", str(src), *args], capture_output=True, text=True
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_good_input_round_trips(tmp_path: Path) -> None:
    code, out, err = run_opt(tmp_path, GOOD)
    assert (code, err) == (0, "")
    assert "nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>" in out


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        # Bad syntax: a type where an operand is expected.
        (GOOD.replace("nn.relu %x", "nn.relu f32"), ":2:", "operand expected"),
        # An op no dialect defines.
        (GOOD.replace("nn.relu", "nn.frobnicate"), ":2:", "nn.frobnicate"),
        # Parses, but fails its verifier: relu must keep its type.
        (GOOD.replace("4xf32> {", "5xf32> {").replace("-> tensor<4xf32>\n", "-> tensor<5xf32>\n").replace("%0 : tensor<4xf32>", "%0 : tensor<5xf32>"), ":2:3:", "'nn.relu' op"),
    ],
    ids=["syntax", "unknown-op", "verifier"],
)
def test_errors_are_located_and_exit_1(tmp_path: Path, text: str, where: str, message: str) -> None:
    code, out, err = run_opt(tmp_path, text)
    assert code == 1
    first = err.splitlines()[0]
    assert first.startswith(str(tmp_path / "input.mlir") + where), err
    assert ": error: " in first and message in err
    assert "Traceback" not in err


def test_bad_pipeline_and_unknown_pass(tmp_path: Path) -> None:
    for pipeline in ("bind-target{", "no-such-pass"):
        code, _, err = run_opt(tmp_path, GOOD, "-p", pipeline)
        assert code == 1 and err.startswith("error: ") and "Traceback" not in err


def test_missing_input_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing.mlir")]) == 1
    assert "No such file" in capsys.readouterr().err


def test_output_never_overwrites_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "input.mlir"
    src.write_text(GOOD)
    assert main([str(src), "-o", str(src)]) == 1
    assert "refusing to overwrite the input" in capsys.readouterr().err
    assert src.read_text() == GOOD


def test_output_file_written_whole(tmp_path: Path) -> None:
    src, dst = tmp_path / "input.mlir", tmp_path / "out.mlir"
    src.write_text(GOOD)
    assert main([str(src), "-o", str(dst)]) == 0
    assert "nn.relu" in dst.read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left
    umask = os.umask(0)
    os.umask(umask)
    assert dst.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would have made it
    dst.chmod(0o640)
    assert main([str(src), "-o", str(dst)]) == 0
    assert dst.stat().st_mode & 0o777 == 0o640  # an existing file keeps its mode


def test_failed_output_keeps_previous_file(tmp_path: Path) -> None:
    src, dst = tmp_path / "input.mlir", tmp_path / "out.mlir"
    src.write_text(GOOD.replace("nn.relu", "nn.frobnicate"))
    dst.write_text("previous")
    assert main([str(src), "-o", str(dst)]) == 1
    assert dst.read_text() == "previous"


def test_verify_diagnostics_checks_expectations(tmp_path: Path) -> None:
    bad = GOOD.replace("4xf32> {", "5xf32> {").replace("-> tensor<4xf32>\n", "-> tensor<5xf32>\n").replace("%0 : tensor<4xf32>", "%0 : tensor<5xf32>")
    expected = bad.replace("  %0 = nn.relu", "  // expected-error@+1 {{'nn.relu' op}}\n  %0 = nn.relu")
    assert run_opt(tmp_path, expected, "--verify-diagnostics")[0] == 0
    # The wrong message, the wrong line, or an error that never comes all fail.
    assert run_opt(tmp_path, expected.replace("'nn.relu' op", "something else"), "--verify-diagnostics")[0] == 1
    assert run_opt(tmp_path, expected.replace("@+1", "@+2"), "--verify-diagnostics")[0] == 1
    code, _, err = run_opt(tmp_path, "// expected-error {{never}}\n" + GOOD, "--verify-diagnostics")
    assert code == 1 and 'expected error "never" was not produced' in err


def test_split_input_file_locations_count_from_the_whole_file(tmp_path: Path) -> None:
    bad = GOOD.replace("nn.relu", "nn.frobnicate")
    code, _, err = run_opt(tmp_path, GOOD + "// -----\n" + bad, "--split-input-file")
    assert code == 1
    assert f"{tmp_path / 'input.mlir'}:7:" in err  # line 2 of the second chunk
