"""Partita as an xDSL plugin (``xdsl.universe`` entry point): its universe's tables, the
entry point in pyproject.toml, and partita-opt working whether the plugin is installed or not."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from xdsl.universe import Universe
from xdsl.xdsl_opt_main import xDSLOptMain

from partita.dialects import make_context
from partita.ir import parse_module
from partita.tools import opt
from partita.tools.universe import PARTITA_UNIVERSE

ROOT = Path(__file__).resolve().parents[2]

PARTITIONED = """\
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = byoc.partition(%x) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0"} ({
  ^bb0(%a: tensor<4xf32>):
    %1 = nn.relu %a : (tensor<4xf32>) -> tensor<4xf32>
    byoc.yield %1 : tensor<4xf32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""


def test_the_entry_point_names_the_universe() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    target = project["project"]["entry-points"]["xdsl.universe"]["partita"]
    module, _, name = target.partition(":")
    assert module == "partita.tools.universe" and name == "PARTITA_UNIVERSE"


def test_the_universe_loads_partitas_constructs() -> None:
    assert isinstance(PARTITA_UNIVERSE, Universe)
    assert PARTITA_UNIVERSE.all_dialects["nn"]().name == "nn"
    assert PARTITA_UNIVERSE.all_dialects["byoc"]().name == "byoc"
    assert PARTITA_UNIVERSE.all_passes["outline-compiler-functions"]().name == "outline-compiler-functions"
    assert PARTITA_UNIVERSE.all_targets["cutlass-cpp"]().name == "cutlass-cpp"


def test_no_name_clashes_with_xdsl() -> None:
    # Multiverse refuses a plugin whose names another universe already has.
    xdsl = Universe.get_multiverse()
    for table in ("all_dialects", "all_passes", "all_targets"):
        ours = set(getattr(PARTITA_UNIVERSE, table))
        assert not ours & (set(getattr(xdsl, table)) - ours), table


@pytest.fixture
def plugin_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The multiverse as it is after ``pip install partita``: xDSL's plus Partita's."""
    base = Universe.get_multiverse()
    merged = Universe(
        all_dialects={**base.all_dialects, **PARTITA_UNIVERSE.all_dialects},
        all_passes={**base.all_passes, **PARTITA_UNIVERSE.all_passes},
        all_targets={**base.all_targets, **PARTITA_UNIVERSE.all_targets},
    )
    monkeypatch.setattr(Universe, "get_multiverse", staticmethod(lambda: merged))


def test_xdsl_opt_runs_partitas_passes_with_the_plugin(plugin_installed: None, tmp_path: Path, capsys) -> None:
    source = tmp_path / "in.mlir"
    source.write_text(PARTITIONED)
    xDSLOptMain(args=[str(source), "-p", "outline-compiler-functions"]).run()
    out = capsys.readouterr().out
    assert "func.func private @tvmgen_default_cutlass_main_0" in out
    assert "func.call @tvmgen_default_cutlass_main_0(%x)" in out


def test_partita_opt_works_with_the_plugin_installed(plugin_installed: None, tmp_path: Path, capsys) -> None:
    # Registering nn/byoc a second time would raise AlreadyRegisteredConstructException.
    source = tmp_path / "in.mlir"
    source.write_text(PARTITIONED)
    assert opt.main([str(source), "-p", "outline-compiler-functions"]) == 0
    assert "func.call @tvmgen_default_cutlass_main_0(%x)" in capsys.readouterr().out


PLUGIN_SCRIPT = """
import importlib.metadata as md, sys, tomllib
value = tomllib.load(open(sys.argv[1], "rb"))["project"]["entry-points"]["xdsl.universe"]["partita"]
real = md.entry_points
def entry_points(**kw):  # what an installed Partita adds to the environment
    found = real(**kw)
    if kw.get("group") == "xdsl.universe" and "partita" not in found.names:
        found = md.EntryPoints([*found, md.EntryPoint(name="partita", value=value, group="xdsl.universe")])
    return found
md.entry_points = entry_points
from xdsl.tools.xdsl_opt import main
sys.argv = ["xdsl-opt", sys.argv[2], "-p", "outline-compiler-functions"]
main()
"""


def test_xdsl_opt_loads_the_plugin_through_the_entry_point(tmp_path: Path) -> None:
    import subprocess
    import sys

    source = tmp_path / "in.mlir"
    source.write_text(PARTITIONED)
    proc = subprocess.run([sys.executable, "-c", PLUGIN_SCRIPT, str(ROOT / "pyproject.toml"), str(source)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "func.call @tvmgen_default_cutlass_main_0(%x)" in proc.stdout


def test_make_context_with_the_plugin_installed(plugin_installed: None) -> None:
    """The multiverse already holds nn and byoc once the plugin is installed: the context
    every Partita tool and test makes registers each name once (twice raises)."""
    ctx = make_context()
    module = parse_module("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                          "  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>\n"
                          "  func.return %0 : tensor<4xf32>\n}", ctx, "plugin.mlir")
    assert any(op.name == "nn.relu" for op in module.walk())
