"""CUTLASS lowering: kernel specs, configuration choice and CUDA C++ emission.

Typical use (IR independent)::

    spec = KernelSpec.dense(M=None, N=768, K=768, dtype="float16", epilogue="bias_gelu")
    cfg = choose_config(spec, sm=80)
    src = emit_module([("tvmgen_default_cutlass_main_0", spec, cfg)])
    binary = partita.lowering.nvrtc.compile_cuda(src, arch="sm_80")
"""

import sys


def _import_cutlass_library() -> None:
    """Imports ``cutlass_library`` with a bare command line. Its generator module parses
    ``sys.argv`` when first imported (``argparse.parse_known_args``), so a tool's own ``-h``
    or ``--help`` printed CUTLASS's usage (``--disable-cutlass-package-imports``) and exited."""
    argv, sys.argv = sys.argv, sys.argv[:1]
    try:
        import cutlass_library  # noqa: F401 - imported for its side effect, once
    finally:
        sys.argv = argv


_import_cutlass_library()

from .emitter import CudaSource, EntryInfo, ParamDesc, emit_module  # noqa: E402 - after the guarded import
from .kernels import (  # noqa: E402
    DTYPES,
    EPILOGUES,
    OPS,
    SUPPORTED_EPILOGUES,
    KernelConfig,
    KernelSpec,
    UnsupportedKernel,
    choose_config,
    procedural_name,
)

__all__ = [
    "DTYPES",
    "EPILOGUES",
    "OPS",
    "SUPPORTED_EPILOGUES",
    "CudaSource",
    "EntryInfo",
    "KernelConfig",
    "KernelSpec",
    "ParamDesc",
    "UnsupportedKernel",
    "choose_config",
    "emit_module",
    "procedural_name",
]
