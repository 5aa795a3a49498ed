"""``partita.compile`` checks its arguments before any pass runs: a wrong value is a
``PartitaError`` naming the argument, never a TypeError from deep inside, and nothing is
created on disk for a bad ``cache_dir``."""

from __future__ import annotations

from pathlib import Path

import pytest

import partita
from partita.ir import PartitaError

MLP = """func.func @main(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) -> tensor<?x32xf32> {
  %0 = nn.dense %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  func.return %0 : tensor<?x32xf32>
}
"""


@pytest.mark.parametrize(
    "arguments, needle",
    [
        ({"targets": None}, "targets=None"),
        ({"targets": []}, "targets=[]"),
        ({"targets": [42]}, "targets=[42]"),
        ({"progress": 42}, "progress=42"),
        ({"device": "x"}, "unknown device 'x'"),
        ({"max_depth": "a"}, "max_depth='a'"),
        ({"max_depth": 0}, "max_depth=0"),
        ({"layout": "x"}, "unknown layout 'x'"),
        ({"entry": "nope"}, "entry=@nope: no such function"),
        ({"entry": 3}, "entry=3"),
        ({"cache_dir": 42}, "cache_dir=42"),
        ({"cache_dir": ""}, "cache_dir=''"),
        ({"cost": "guess"}, "unknown cost 'guess'"),
        ({"partitioner": None}, "unknown partitioner None"),
        ({"targets": "cuda -arch=sm_xx,llvm"}, "bad arch 'sm_xx'"),
        ({"targets": "cutlass -sm=999,llvm"}, "not supported by this NVRTC"),
    ],
)
def test_bad_arguments_are_partita_errors(arguments: dict, needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PartitaError) as info:
        partita.compile(MLP, **arguments)
    assert needle in str(info.value)
    assert not list(tmp_path.iterdir())  # e.g. cache_dir=42 does not create ./42


def test_good_arguments_still_compile(tmp_path: Path) -> None:
    seen = []
    exe = partita.compile(
        MLP, "cuda -arch=sm_80,llvm", partitioner="none", cache_dir=tmp_path, layout="NHWC", max_depth=2,
        progress=lambda name, index, count: seen.append(name),
    )
    assert seen and exe.entry == "main"
