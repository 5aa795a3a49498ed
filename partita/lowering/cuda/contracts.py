"""Launch contracts: each fused kernel carries, in its own cubin, the digest of what it
was generated for, so a record pointing at the wrong kernel is refused at load.

Two kernels with the same parameter layout (a ``relu`` and a ``tanh`` over the same
shapes) pass every check a cubin's ``KPARAM_INFO`` allows: a compiled-model file whose
records name each other's entries would run the wrong one silently. ``cuda-codegen``
therefore appends to its translation unit, per kernel, a constant

    extern "C" __device__ const unsigned char <entry>_contract[32] = {...};

holding the sha256 of the kernel's launch contract: the extern function it implements,
its record kind and every record field (entry, geometry, input and output shapes and
element types, run-time dims, parameter list, fused ops). The loader recomputes the
digest from the record it launches with and compares it with the cubin's constant when
a shape signature is bound, after the launch's geometry and parameter-layout checks and
before anything runs (``CheckedModule.check_contract``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from partita.lowering.cuda.program import CudaProgram
from partita.lowering.cuda.records import RECORDS, FusedRecord, fused_record

__all__ = ["CONTRACT_SUFFIX", "contract_digest", "contract_symbol", "with_contracts"]

CONTRACT_SUFFIX = "_contract"
DIGEST_BYTES = 32


def contract_symbol(entry: str) -> str:
    """The data symbol holding the contract of kernel ``entry``."""
    return entry + CONTRACT_SUFFIX


def contract_digest(function: str, kind: str, record: FusedRecord) -> bytes:
    """The sha256 of the launch contract of ``record`` (of ``kind``) for ``@function``."""
    fields = dataclasses.asdict(record)
    text = json.dumps({"function": function, "kind": kind, **fields}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).digest()


def with_contracts(program: CudaProgram) -> CudaProgram:
    """``program`` with each kernel's contract constant appended (deterministic: the same
    functions give the same text, so NVRTC's cache key is unchanged between compiles)."""
    lines = ["", "// Launch contracts (partita.lowering.cuda.contracts), checked at load"]
    for function, kernel in program.kernels.items():
        record = RECORDS[kernel.kind].from_attr(fused_record(kernel))
        digest = contract_digest(function, kernel.kind, record)
        values = ", ".join(str(b) for b in digest)
        lines.append(f'extern "C" __device__ const unsigned char {contract_symbol(kernel.entry)}[{DIGEST_BYTES}] = {{{values}}};')
    return dataclasses.replace(program, code=program.code + "\n".join(lines) + "\n")
