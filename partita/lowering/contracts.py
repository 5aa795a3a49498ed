"""Launch contracts: a generated kernel carries, in its own cubin, the digest of what it
was generated for, so a record pointing at the wrong kernel is refused at load.

Two kernels with the same parameter layout (a ``relu`` and a ``tanh`` over the same
shapes, a CUTLASS GEMM with a ReLU and one with a GELU epilogue) pass every check a
cubin's ``KPARAM_INFO`` allows: a compiled-model file whose records name each other's
entries would run the wrong one silently. Each code generator therefore appends to its
translation unit, per kernel, a constant

    extern "C" __device__ const unsigned char <entry>_contract[32] = {...};

holding the sha256 of the kernel's contract: the fields of its record that decide what
it computes and the parameters it takes (each generator says which). The loader
recomputes the digest from the record it launches with and compares it with the cubin's
constant before anything runs (``partita.runtime.validate.CheckedModule.check_contract``),
so a stale or mismatched binary is refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["CONTRACT_SUFFIX", "DIGEST_BYTES", "contract_constant", "contract_symbol", "digest_fields", "key_digest"]

CONTRACT_SUFFIX = "_contract"
DIGEST_BYTES = 32


def contract_symbol(entry: str) -> str:
    """The data symbol holding the contract of kernel ``entry``."""
    return entry + CONTRACT_SUFFIX


def digest_fields(fields: Mapping[str, Any]) -> bytes:
    """The sha256 of ``fields`` as canonical JSON (sorted keys, tuples as lists)."""
    text = json.dumps(dict(fields), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).digest()


def key_digest(key: Any, digits: int = 8) -> str:
    """The first ``digits`` hex digits of the sha256 of ``key`` (JSON data: a kernel type
    key of strings, ints and tuples): a suffix that tells kernel types apart in C names,
    the same in every process."""
    return digest_fields({"key": key}).hex()[:digits]


def contract_constant(entry: str, digest: bytes) -> str:
    """The C declaration of kernel ``entry``'s contract constant (one line)."""
    values = ", ".join(str(b) for b in digest)
    return f'extern "C" __device__ const unsigned char {contract_symbol(entry)}[{DIGEST_BYTES}] = {{{values}}};'
