"""Native CUDA lowering of fused injective functions: CUDA C emission and kernel records.

Typical use (``cuda-codegen`` does this for a whole module)::

    program = emit_program([fused_function, ...])   # one translation unit
    binary = partita.lowering.nvrtc.compile_cuda(program, arch="sm_90")
    records = {name: fused_record(k) for name, k in program.kernels.items()}
"""

from .emitter import (
    BLOCK_SIZE,
    FUSABLE_OPS,
    CudaProgram,
    FusedKernel,
    emit_kernel,
    emit_program,
    is_fusable,
)
from .records import KIND, MAX_GRID, FusedRecord, fused_record

__all__ = [
    "BLOCK_SIZE", "FUSABLE_OPS", "KIND", "MAX_GRID",
    "CudaProgram", "FusedKernel", "FusedRecord",
    "emit_kernel", "emit_program", "fused_record", "is_fusable",
]
