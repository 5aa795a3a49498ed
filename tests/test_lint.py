"""The code rules in pyproject.toml hold: the layers of DESIGN.md (``lint-imports``: a
module imports only the layers below it, no import circles between siblings) and ruff's
rule set."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> list[str]:
    exe = shutil.which(name)
    if exe is None:
        pytest.skip(f"{name} is not installed (pip install '.[test]')")
    return [exe]


def _lint_imports() -> list[str]:
    return _tool("lint-imports")


def test_import_contracts_are_kept() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([*_lint_imports(), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout, result.stdout


def test_a_wrong_way_import_breaks_the_contract(tmp_path: Path) -> None:
    # The contract must be able to fail: a copy of the package whose ir layer imports the
    # driver is rejected.
    shutil.copytree(ROOT / "partita", tmp_path / "partita", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "partita" / "ir" / "diagnostics.py", "a") as handle:
        handle.write("\nimport partita.driver  # noqa: E402\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([*_lint_imports(), "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "partita.ir is not allowed to import partita.driver" in result.stdout


def test_ruff_is_clean() -> None:
    result = subprocess.run([*_tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
