"""``benchmarks/kernel_report.py``: per-kernel registers, shared memory, instruction mix
and occupancy read from a compiled model's cubins (no GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import partita
from partita.lowering.cubin import nvdisasm_tool

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import kernel_report

MODEL = """
func.func @main(%x: tensor<?x64xf16>, %w: tensor<128x64xf16>, %b: tensor<128xf16>, %y: tensor<?x40x24xbf16>, %z: tensor<24x40xbf16>) -> (tensor<?x128xf16>, tensor<?x40x40xbf16>) {
  %0 = nn.dense %x, %w : (tensor<?x64xf16>, tensor<128x64xf16>) -> tensor<?x128xf16>
  %1 = nn.add %0, %b : (tensor<?x128xf16>, tensor<128xf16>) -> tensor<?x128xf16>
  %2 = nn.matmul %y, %z : (tensor<?x40x24xbf16>, tensor<24x40xbf16>) -> tensor<?x40x40xbf16>
  func.return %1, %2 : tensor<?x128xf16>, tensor<?x40x40xbf16>
}
"""


def test_report_reads_resources_and_mix_from_cubins() -> None:
    if nvdisasm_tool() is None:
        pytest.skip("nvdisasm is not installed")
    # CUTLASS takes both GEMMs: the f16 dense with its bias, the bf16 matmul (batch folded into M)
    exe = partita.compile(MODEL, ["cuda -arch=sm_90", "cutlass -sm=90", "llvm"], partitioner="eager")
    stats = {s.function: s for s in kernel_report.report(exe.module)}
    cutlass = [s for s in stats.values() if s.kind == "cutlass"]
    assert len(cutlass) == 2, exe.report()
    for s in cutlass:
        assert s.mix["HMMA"] > 0 and s.registers > 32 and s.dynamic_smem > 0
        assert 0 < s.occupancy() <= 1
        share, basis = s.estimate()
        assert share.startswith("~") and "HMMA ceiling" in basis
    table = kernel_report.format_table(list(stats.values()))
    assert "HMMA" in table.splitlines()[0] and all(s.name in table for s in cutlass)


def test_occupancy_follows_the_sm90_limits() -> None:
    s = kernel_report.KernelStats("k", "f", registers=255, static_smem=0, dynamic_smem=0, threads=128, mix={})
    # 255 regs -> 8192 per warp; 4 warps per block -> 2 blocks -> 8 of 64 warps
    assert s.occupancy() == 8 / 64
    s = kernel_report.KernelStats("k", "f", registers=32, static_smem=100 * 1024, dynamic_smem=0, threads=256,
                                  mix={"FFMA": 10}, kind="fused")
    assert s.occupancy() == 2 * 8 / 64  # shared memory allows 2 blocks
    assert s.estimate()[0] == "n/a"  # not a GEMM: memory-bound


def test_fp8_kernels_count_on_their_own_pipes() -> None:
    """An FP8 QDQ product on sm_89 (CUTLASS's Sm89 kernel): its main loop is QMMA, and the
    estimate's basis names that pipe."""
    if nvdisasm_tool() is None:
        pytest.skip("nvdisasm is not installed")
    from support.fp8_models import fp8_linear

    model, _ = fp8_linear(k=64, n=48)
    exe = partita.compile(model, ["cuda -arch=sm_89", "cutlass", "llvm"], partitioner="eager")
    (gemm,) = [s for s in kernel_report.report(exe.module) if s.kind == "cutlass"]
    assert gemm.mix["QMMA"] > 0 and gemm.mix["HMMA"] == 0
    share, basis = gemm.estimate()
    assert share.startswith("~") and "QMMA ceiling" in basis


def test_hopper_int8_kernels_count_on_the_wgmma_pipe() -> None:
    """An int8 Hopper kernel's main loop is IGMMA (wgmma on 8-bit integers): the wgmma pipe's
    ceiling, one CTA an SM by design; its count is a column of the table."""
    s = kernel_report.KernelStats("k", "f", registers=168, static_smem=0, dynamic_smem=229504, threads=256,
                                  mix={"IGMMA": 16, "UTMALDG": 2}, kind="cutlass_sm90")
    share, basis = s.estimate()
    assert share == "~80%" and basis == "IGMMA ceiling 80%, 1 CTA/SM by design"
    assert "IGMMA" in kernel_report.format_table([s]).splitlines()[0]
