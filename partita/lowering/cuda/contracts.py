"""Launch contracts of ``cuda-codegen``'s fused kernels (see ``partita.lowering.contracts``):
a kernel's contract is the extern function it implements, its record kind and every
record field (entry, geometry, input and output shapes and element types, run-time dims,
parameter list, fused ops), checked when a shape signature is bound, after the launch's
geometry and parameter-layout checks.
"""

from __future__ import annotations

import dataclasses

from partita.lowering.contracts import contract_constant, contract_symbol, digest_fields
from partita.lowering.cuda.program import CudaProgram
from partita.lowering.cuda.records import RECORDS, FusedRecord, fused_record

__all__ = ["contract_digest", "contract_symbol", "with_contracts"]


def contract_digest(function: str, kind: str, record: FusedRecord) -> bytes:
    """The sha256 of the launch contract of ``record`` (of ``kind``) for ``@function``."""
    return digest_fields({"function": function, "kind": kind, **dataclasses.asdict(record)})


def with_contracts(program: CudaProgram) -> CudaProgram:
    """``program`` with each kernel's contract constant appended (deterministic: the same
    functions give the same text, so NVRTC's cache key is unchanged between compiles)."""
    lines = ["", "// Launch contracts (partita.lowering.cuda.contracts), checked at load"]
    for function, kernel in program.kernels.items():
        record = RECORDS[kernel.kind].from_attr(fused_record(kernel))
        lines.append(contract_constant(kernel.entry, contract_digest(function, kernel.kind, record)))
    return dataclasses.replace(program, code=program.code + "\n".join(lines) + "\n")
