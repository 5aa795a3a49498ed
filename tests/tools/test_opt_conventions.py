"""partita-opt's mlir-opt conventions that lit cannot reach: warnings and remarks a pass
raises meeting their expectations, the input kind by content, the xDSL plugin's tables."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from partita.frontends.file_kind import FileKind, file_kind
from partita.ir.diagnostics import RemarkWarning, format_location
from partita.tools import opt
from partita.tools.pass_help import describe, option_infos
from partita.transforms import get_all_passes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclasses.dataclass(frozen=True)
class WarnEachFunction(ModulePass):
    """Warns at every function (a remark for functions named ``remark*``)."""

    name = "test-warn-each-function"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for function in op.walk():
            if isinstance(function, func.FuncOp):
                where = format_location(function.location)
                if function.sym_name.data.startswith("remark"):
                    warnings.warn(f"{where}: noted {function.sym_name.data}", RemarkWarning, stacklevel=2)
                else:
                    warnings.warn(f"{where}: suspicious {function.sym_name.data}", stacklevel=2)


@pytest.fixture
def with_warning_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    passes = {**get_all_passes(), WarnEachFunction.name: lambda: WarnEachFunction}
    monkeypatch.setattr(opt, "get_all_passes", lambda: passes)


def run_opt(tmp_path: Path, text: str, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    source = tmp_path / "input.mlir"
    source.write_text(text)
    code = opt.main([str(source), *args])
    return code, capsys.readouterr().err


WARNED = """\
// expected-warning@+1 {{suspicious f}}
func.func @f() {
  func.return
}
// expected-remark@+1 {{noted remark_g}}
func.func @remark_g() {
  func.return
}
"""


def test_warnings_and_remarks_meet_their_expectations(tmp_path: Path, with_warning_pass: None, capsys) -> None:
    code, err = run_opt(tmp_path, WARNED, "--verify-diagnostics", "-p", WarnEachFunction.name, capsys=capsys)
    assert (code, err) == (0, "")


def test_an_unexpected_warning_fails_verification(tmp_path: Path, with_warning_pass: None, capsys) -> None:
    text = WARNED.replace("// expected-warning@+1 {{suspicious f}}\n", "")
    code, err = run_opt(tmp_path, text, "--verify-diagnostics", "-p", WarnEachFunction.name, capsys=capsys)
    assert code == 1
    assert "input.mlir:1: unexpected warning: suspicious f" in err


def test_a_warning_on_the_wrong_line_fails_verification(tmp_path: Path, with_warning_pass: None, capsys) -> None:
    text = WARNED.replace("expected-warning@+1", "expected-warning@+2")
    code, err = run_opt(tmp_path, text, "--verify-diagnostics", "-p", WarnEachFunction.name, capsys=capsys)
    assert code == 1
    assert "input.mlir:2: unexpected warning: suspicious f" in err
    assert 'input.mlir:3: error: expected warning "suspicious f" was not produced' in err


def test_file_kind_by_content(tmp_path: Path) -> None:
    onnx_bytes = (EXAMPLES / "encoder.onnx").read_bytes()
    (tmp_path / "model").write_bytes(onnx_bytes)
    (tmp_path / "model.mlir").write_bytes(onnx_bytes)  # a misleading extension
    (tmp_path / "ir.txt").write_text("func.func @f() {\n  func.return\n}\n")
    (tmp_path / "unicode.mlir").write_text("// caf\u00e9 " * 2000)  # a character cut by the sniffed prefix
    (tmp_path / "compiled").write_bytes(b"PARTITA-MODEL\0\1\0" + bytes(32))
    assert file_kind(EXAMPLES / "encoder.onnx") is FileKind.ONNX
    assert file_kind(tmp_path / "model") is FileKind.ONNX
    assert file_kind(tmp_path / "model.mlir") is FileKind.ONNX
    assert file_kind(tmp_path / "ir.txt") is FileKind.MLIR
    assert file_kind(tmp_path / "unicode.mlir") is FileKind.MLIR
    assert file_kind(tmp_path / "compiled") is FileKind.PARTITA


def test_every_pass_is_described_with_its_options() -> None:
    for name, factory in get_all_passes().items():
        cls = factory()
        text = describe(cls)
        assert text and not text.startswith(cls.__name__ + "("), name
        for info in option_infos(cls):
            assert "_" not in info.name, (name, info.name)
    infos = {i.name: i for i in option_infos(get_all_passes()["collage-partition"]())}
    assert (infos["max-depth"].type_name, infos["max-depth"].default) == ("int", "3")


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_is_partita_opts_own(flag: str) -> None:
    """In a fresh process (where ``cutlass_library``, which parses ``sys.argv`` when first
    imported, has not been imported yet): partita-opt's own usage, not CUTLASS's."""
    done = subprocess.run([sys.executable, "-c", "import sys; from partita.tools.opt import main; sys.exit(main())", flag],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "--pass-pipeline" in done.stdout and "--list-passes" in done.stdout
    assert "cutlass-package-imports" not in done.stdout
