"""Issue 23, item 9 (IR): inputs that ended in "internal error" (exit 70) are located
``file:line:col: error:`` with exit 1, from ``partita-opt``, ``partita-compile`` and
``partita-run`` alike."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from partita.tools import compile as compile_tool
from partita.tools import opt, run

MULTI_BLOCK = """func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  cf.br ^bb1
^bb1:
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""

F16_LITERAL = """func.func @main(%x: tensor<4xf16>) -> tensor<4xf16> {
  %c = arith.constant dense<1.0e10> : tensor<4xf16>
  %0 = nn.add %x, %c : (tensor<4xf16>, tensor<4xf16>) -> tensor<4xf16>
  func.return %0 : tensor<4xf16>
}
"""

F32_LITERAL = F16_LITERAL.replace("f16", "f32").replace("1.0e10", "1.0e300")

NO_BODY = """func.func private @ext(tensor<4xf32>) -> tensor<4xf32>
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @ext(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""

EMPTY_PARTITION_FUNCTION = """func.func private @p0(%a: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "p0", byoc.primitive, byoc.inline} {
  func.return %a : tensor<4xf32>
}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @p0(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""

EMPTY_PARTITION = """func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = byoc.partition(%x) {byoc.compiler = "cutlass", byoc.global_symbol = "p0", byoc.primitive} ({
  ^bb0(%a: tensor<4xf32>):
    byoc.yield %a : tensor<4xf32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""

# 2^32 x 2^32 f32 elements: 2^66 bytes, past int64 and any device.
HUGE = """func.func @main(%x: tensor<4294967296x4294967296xf32>) -> tensor<4294967296x4294967296xf32> {
  %0 = nn.relu %x : (tensor<4294967296x4294967296xf32>) -> tensor<4294967296x4294967296xf32>
  %1 = nn.relu %0 : (tensor<4294967296x4294967296xf32>) -> tensor<4294967296x4294967296xf32>
  func.return %1 : tensor<4294967296x4294967296xf32>
}
"""

# (name, text, where the error is, what it says, partitioners that reach it)
CASES = [
    # Branches need ``cf`` ops, which the tools refuse before any pass; the partitioner
    # passes refuse the blocks themselves (see the ``partita-opt`` test below).
    ("multi_block", MULTI_BLOCK, "2:3", "'cf.br' op cannot be lowered by Partita", ("collage", "eager")),
    ("f16_literal", F16_LITERAL, "2:29", "out of range for f16", ("none",)),
    ("f32_literal", F32_LITERAL, "2:29", "out of range for f32", ("none",)),
    ("no_body", NO_BODY, "3:3", "calls @ext, a declaration with no body", ("collage", "none")),
    ("empty_partition_function", EMPTY_PARTITION_FUNCTION, "1:1", "has no operation for CUTLASS",
     ("collage", "eager", "none")),
    ("empty_partition", EMPTY_PARTITION, "2:3", "has no operation for CUTLASS", ("collage", "eager", "none")),
    ("huge", HUGE, "2:3", "do not fit in int64", ("none",)),
]


def located_error(capsys: pytest.CaptureFixture[str], code: int, path: Path, where: str, needle: str) -> None:
    err = capsys.readouterr().err
    assert code == 1, err
    assert "internal error" not in err and "Traceback" not in err, err
    assert re.search(rf"{re.escape(str(path))}:{where}: error: .*{re.escape(needle)}", err), err


@pytest.mark.parametrize("name, text, where, needle, partitioners", CASES, ids=[c[0] for c in CASES])
def test_compile_and_run_locate_the_error(tmp_path, capsys, name, text, where, needle, partitioners):
    path = tmp_path / f"{name}.mlir"
    path.write_text(text)
    for partitioner in partitioners:
        code = compile_tool.main([str(path), "-o", str(tmp_path / "out.partita"), "--partitioner", partitioner,
                                  "--cache-dir", str(tmp_path), "-q"])
        located_error(capsys, code, path, where, needle)
        assert not (tmp_path / "out.partita").exists()
        code = run.main([str(path), "--partitioner", partitioner, "--cache-dir", str(tmp_path), "-q"])
        located_error(capsys, code, path, where, needle)


@pytest.mark.parametrize("name, text, where, needle", [(c[0], c[1], c[2], c[3]) for c in CASES[1:3]])
def test_opt_locates_out_of_range_literals(tmp_path, capsys, name, text, where, needle):
    path = tmp_path / f"{name}.mlir"
    path.write_text(text)
    located_error(capsys, opt.main([str(path)]), path, where, needle)


@pytest.mark.parametrize("pass_name", ["collage-partition", "annotate-target", "partition-graph", "merge-composite"])
def test_partitioner_passes_refuse_multi_block_functions(tmp_path, capsys, pass_name):
    path = tmp_path / "multi_block.mlir"
    path.write_text(MULTI_BLOCK)
    located_error(capsys, opt.main([str(path), "-p", pass_name]), path, "1:1", "has 2 blocks")


def test_in_range_literals_still_parse(tmp_path, capsys):
    # 65504 is f16's largest finite value: the range check must not refuse it.
    path = tmp_path / "max.mlir"
    path.write_text(F16_LITERAL.replace("1.0e10", "65504.0"))
    code = opt.main([str(path)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "dense<6.550400e+04>" in out.out
