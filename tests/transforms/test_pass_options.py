"""Unquoted pass-option values (paths), as mlir-opt takes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from partita.tools.opt import main
from partita.transforms.pass_options import quote_option_values


@pytest.mark.parametrize(
    ("spec", "quoted"),
    [
        ("cutlass-codegen{cache-dir=/tmp/x}", 'cutlass-codegen{cache-dir="/tmp/x"}'),
        ("a{n=3 f=1.5e-3 b=true id=sm_90 name=my-pass}", "a{n=3 f=1.5e-3 b=true id=sm_90 name=my-pass}"),
        ('b{targets="cuda -arch=sm_90,cutlass" p=./x.json}', 'b{targets="cuda -arch=sm_90,cutlass" p="./x.json"}'),
        ("c{targets=cutlass,cuda costs=llvm=1,cutlass=2}", 'c{targets=cutlass,cuda costs="llvm=1","cutlass=2"}'),
        ("canonicalize,cse", "canonicalize,cse"),
        ('d{p="/already/quoted"}', 'd{p="/already/quoted"}'),
    ],
)
def test_quote_option_values(spec: str, quoted: str) -> None:
    assert quote_option_values(spec) == quoted


def test_partita_opt_takes_an_unquoted_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.mlir"
    model.write_text("""
func.func @main(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) -> tensor<4x16xf32> {
  %0 = nn.dense %x, %w : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  func.return %0 : tensor<4x16xf32>
}
""")
    cache = tmp_path / "costs.v1.json"
    assert main([str(model), "-p", f"collage-partition{{targets=cutlass,cuda,llvm cache={cache}}}"]) == 0
    assert "collage_cutlass_0" in capsys.readouterr().out
    assert json.loads(cache.read_text())["entries"]
