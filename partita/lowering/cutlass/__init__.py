"""CUTLASS lowering: kernel specs, configuration choice and CUDA C++ emission.

Typical use (IR independent)::

    spec = KernelSpec.dense(M=None, N=768, K=768, dtype="float16", epilogue="bias_gelu")
    cfg = choose_config(spec, sm=80)
    src = emit_module([("tvmgen_default_cutlass_main_0", spec, cfg)])
    binary = partita.lowering.nvrtc.compile_cuda(src, arch="sm_80")
"""

from .emitter import CudaSource, EntryInfo, ParamDesc, emit_module
from .kernels import (
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
