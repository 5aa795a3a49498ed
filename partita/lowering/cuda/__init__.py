"""Native CUDA lowering of fused functions (injective, row reductions, GEMMs, pools): CUDA C
emission and kernel records.

Typical use (``cuda-codegen`` does this for a whole module)::

    program = emit_program([fused_function, ...])   # one translation unit
    binary = partita.lowering.nvrtc.compile_cuda(program, arch="sm_90")
    records = {name: fused_record(k) for name, k in program.kernels.items()}
"""

from .fusion import ANCHOR_OPS, WINDOW_OPS, is_anchor, is_fusable
from .kernel import FusedKernel, emit_kernel
from .program import CudaProgram, emit_program
from .records import KIND, KINDS, MAX_GRID, FusedRecord, GemmRecord, RowwiseRecord, WindowRecord, fused_record
from .schedules import BLOCK_SIZE, GEMM_TILE

__all__ = [
    "ANCHOR_OPS", "BLOCK_SIZE", "GEMM_TILE", "KIND", "KINDS", "MAX_GRID", "WINDOW_OPS",
    "CudaProgram", "FusedKernel", "FusedRecord", "GemmRecord", "RowwiseRecord", "WindowRecord",
    "emit_kernel", "emit_program", "fused_record", "is_anchor", "is_fusable",
]
