"""The report's estimated total counts every call site, not each distinct function once."""

from __future__ import annotations

from partita.dialects import make_context
from partita.driver import call_counts
from partita.ir import parse_module
from partita.report import PartitionRow, Report

LAYERS = """
func.func private @kernel(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
func.func private @layer(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @kernel(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @kernel(%0) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @layer(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @layer(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = func.call @layer(%1) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}
"""


def test_call_counts_multiply_through_callers():
    module = parse_module(LAYERS, make_context(), "layers")
    counts = call_counts(module, "main")
    assert counts["layer"] == 3 and counts["kernel"] == 6
    assert "main" not in counts


def test_estimated_total_counts_every_call():
    rows = [PartitionRow("collage_cutlass_0", "cutlass", ("nn.dense",), cost=2e-6, calls=12),
            PartitionRow("collage_cutlass_1", "cutlass", ("nn.dense",), cost=1e-6)]
    report = Report(rows)
    assert report.total_cost == 12 * 2e-6 + 1e-6
    assert "estimated total 25.00 us" in str(report)
    assert "12" in report.table().splitlines()[2]


BOUNDS = """
func.func @main(%x: tensor<2x8xf32>, %a: tensor<4096x4096xf16>, %b: tensor<4096x4096xf16>) -> (tensor<2x8xf32>, tensor<4096x4096xf16>) {
  %0 = nn.relu %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %1 = nn.matmul %a, %b : (tensor<4096x4096xf16>, tensor<4096x4096xf16>) -> tensor<4096x4096xf16>
  func.return %0, %1 : tensor<2x8xf32>, tensor<4096x4096xf16>
}
"""


def test_each_row_says_what_bounds_its_estimate(tmp_path):
    """A tiny kernel costs its launch (every row of a small model read "3.00 us" with no
    reason); a 4096^3 f16 GEMM is bound by the tensor cores."""
    import partita

    exe = partita.compile(BOUNDS, ["cuda -arch=sm_90", "cutlass -sm=90", "llvm"], partitioner="eager")
    rows = {row.ops: row for row in exe.partitions if row.cost is not None}
    assert rows[("nn.relu",)].bound == "launch"
    assert rows[("nn.matmul",)].bound == "compute"
    table = exe.report().table()
    assert "(launch)" in table and "(compute)" in table
    exe.save(tmp_path / "bounds.partita")  # the bound travels with the compiled model
    again = partita.load(tmp_path / "bounds.partita")
    assert {row.ops: row.bound for row in again.partitions} == {row.ops: row.bound for row in exe.partitions}
