"""Facts of NVIDIA architectures that both code generation and the runtime read."""

from __future__ import annotations

__all__ = ["max_dynamic_smem"]

# Opt-in dynamic shared memory per block by compute capability major.minor (CUDA
# programming guide, "Technical Specifications per Compute Capability").
_SMEM = {"80": 163 * 1024, "87": 163 * 1024, "90": 227 * 1024, "100": 227 * 1024, "103": 227 * 1024}
_SMEM_DEFAULT = 99 * 1024  # 8.6, 8.9, 12.x


def max_dynamic_smem(arch: str | int | None) -> int:
    """The most dynamic shared memory a block may opt in to on ``arch`` (``sm_90``,
    ``sm_90a``, ``90``...); the largest of any arch when it is unknown (the simulated
    device)."""
    if not arch:
        return max(_SMEM.values())
    digits = "".join(c for c in str(arch).removeprefix("sm_") if c.isdigit())
    return _SMEM.get(digits, _SMEM_DEFAULT)
