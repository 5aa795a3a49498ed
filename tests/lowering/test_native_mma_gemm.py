"""The native GEMM on tensor cores: f16 / bf16 GEMM kernels of ``cuda-codegen`` tile
64x64 outputs over 4 warps, each a 32x32 register tile of ``mma.sync`` m16n8k16 products.

Checked without a GPU twice over: the kernels built for the host with g++ (where
``partita_mma_*`` computes the same fragment product from warp shuffles) match the
reference on odd sizes, every transpose and broadcast form and fused epilogues; and the
NVRTC sm_90 cubin's SASS multiplies with HMMA."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import check_kernels, fuse, host_ops  # tests/support/kernel_check.py

from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.records import RECORDS, fused_record

# odd M, N, K (several tiles and K steps, no aligned extent), every operand layout,
# batch broadcasting, and epilogues fused after the product
GEMMS = """
func.func @mm_T(%a: tensor<2x?x37xT>, %b: tensor<37x100xT>, %bias: tensor<100xT>) -> tensor<2x?x100xT> {
  %0 = nn.matmul %a, %b : (tensor<2x?x37xT>, tensor<37x100xT>) -> tensor<2x?x100xT>
  %1 = nn.add %0, %bias : (tensor<2x?x100xT>, tensor<100xT>) -> tensor<2x?x100xT>
  %2 = nn.gelu %1 : (tensor<2x?x100xT>) -> tensor<2x?x100xT>
  func.return %2 : tensor<2x?x100xT>
}
func.func @dense_T(%x: tensor<?x70x33xT>, %w: tensor<90x33xT>) -> tensor<?x70x90xT> {
  %0 = nn.dense %x, %w : (tensor<?x70x33xT>, tensor<90x33xT>) -> tensor<?x70x90xT>
  %1 = nn.relu %0 : (tensor<?x70x90xT>) -> tensor<?x70x90xT>
  func.return %1 : tensor<?x70x90xT>
}
func.func @bmm_nn_T(%a: tensor<?x67x19xT>, %b: tensor<?x19x65xT>) -> tensor<?x67x65xT> {
  %0 = nn.batch_matmul %a, %b {transpose_b = false} : (tensor<?x67x19xT>, tensor<?x19x65xT>) -> tensor<?x67x65xT>
  func.return %0 : tensor<?x67x65xT>
}
func.func @bmm_tn_T(%a: tensor<?x19x67xT>, %b: tensor<?x19x65xT>) -> tensor<?x67x65xT> {
  %0 = nn.batch_matmul %a, %b {transpose_a = true, transpose_b = false} : (tensor<?x19x67xT>, tensor<?x19x65xT>) -> tensor<?x67x65xT>
  func.return %0 : tensor<?x67x65xT>
}
func.func @bmm_tt_T(%a: tensor<1x19x67xT>, %b: tensor<?x65x19xT>) -> tensor<?x67x65xT> {
  %0 = nn.batch_matmul %a, %b {transpose_a = true} : (tensor<1x19x67xT>, tensor<?x65x19xT>) -> tensor<?x67x65xT>
  func.return %0 : tensor<?x67x65xT>
}
"""


def _module(dtypes=("f16", "bf16")):
    return fuse("\n".join(GEMMS.replace("T", t) for t in dtypes))


def test_f16_and_bf16_gemms_become_mma_kernels() -> None:
    module = _module()
    assert host_ops(module) == []
    program = program_of(module)
    assert program is not None
    for name, kernel in program.kernels.items():
        assert kernel.kind == "gemm", name
        dtype = "bf16" if "bf16" in name else "f16"
        assert f"partita_mma_{dtype}(acc[mi][ni], af[mi], bf[ni]);" in kernel.code, name
        record = RECORDS["gemm"].from_attr(fused_record(kernel))
        # 64x64 tiles of 128 threads; grid: N tiles, M tiles, batch
        batch = 3 if record.batch else 1
        assert record.geometry((3, 70, 90)) == ((2, -(-(210 // batch) // 64), batch), (128, 1, 1))
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in program.code
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in program.code


def test_f32_gemms_keep_the_simt_kernel() -> None:
    """f32 (exact, like the reference) and integer GEMMs stay on the 16x16 SIMT loop."""
    program = program_of(_module(("f32",)))
    assert program is not None and "partita_mma" not in program.code
    record = RECORDS["gemm"].from_attr(fused_record(next(iter(program.kernels.values()))))
    assert record.geometry((3, 70, 90))[1] == (16, 16, 1)


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_mma_kernels_compute_the_reference_semantics(tmp_path: Path) -> None:
    anchors = check_kernels(_module(), tmp_path)
    assert anchors == ["nn.matmul", "nn.dense", "nn.batch_matmul", "nn.batch_matmul", "nn.batch_matmul"] * 2


def test_sm90_cubin_multiplies_with_hmma() -> None:
    from support.sass import sass_by_function, sass_of

    from partita.lowering import nvrtc

    program = program_of(_module())
    assert program is not None
    binary = nvrtc.compile_cuda(program, arch="sm_90", name="partita_fused.cu")
    per_function = sass_by_function(sass_of(binary.path))
    for name, kernel in program.kernels.items():
        body = per_function[kernel.entry]
        hmma = len(re.findall(r"\bHMMA\.16816\.F32", body))
        # 2x4 products per K step, the loop not unrolled further
        assert hmma >= 8, f"{name}: {hmma} HMMA"
        # no local-memory traffic in the main loop (the accumulators stay in registers);
        # ptxas may park a few index values across it (bmm_nn: 5 STL before the loop)
        main = body[body.index("BAR.SYNC"):body.rindex("HMMA")]
        assert "STL" not in main and "LDL" not in main, f"{name} spills in its main loop"
        assert body.count("STL") <= 8, f"{name}: {body.count('STL')} STL"


def test_records_from_before_gemv_schedules_read_as_tiles_only() -> None:
    """A gemm record written before a gemm kernel could hold a warp-per-output schedule
    (no ``gemv_rows``) reads back as tiles at every row count."""
    from xdsl.dialects.builtin import DictionaryAttr

    program = program_of(_module(("f16",)))
    assert program is not None
    record = fused_record(next(iter(program.kernels.values())))
    old = RECORDS["gemm"].from_attr(DictionaryAttr({k: v for k, v in record.data.items() if k != "gemv_rows"}))
    assert old.gemv_rows == 0 and old == RECORDS["gemm"].from_attr(record)
    assert old.geometry((3, 1, 90)) == ((2, 1, 3), (128, 1, 1))
