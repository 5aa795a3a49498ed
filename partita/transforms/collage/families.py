"""The kernel families the roofline costs a target's candidates with (``KernelFamily``):
on ``sm_90a`` the cutlass target builds CUTLASS 3 Hopper kernels (TMA + wgmma) for the GEMMs
``partita.lowering.cutlass.sm90`` takes and its Sm80 kernels for the rest, whose speeds
differ by nearly two; costing both as one spec placed a Hopper GEMM as if it were an Sm80
one. A candidate is asked what its codegen would ask: the kernel spec of its ops as a
partition function, and whether that spec has a Hopper kernel (``why_not_sm90``)."""

from __future__ import annotations

from functools import partial

from xdsl.dialects.func import FuncOp

from partita.collage.cost import KernelFamily
from partita.collage.graph import DataflowGraph
from partita.collage.search import Candidate
from partita.ir import PartitaError
from partita.lowering.cutlass.codegen import partition_kernel
from partita.lowering.cutlass.kernels import F32_MATH
from partita.lowering.cutlass.options import CutlassOptions
from partita.lowering.cutlass.sm90 import why_not_sm90
from partita.runtime.cuda import parse_arch
from partita.target import CompilationConfig, Target
from partita.transforms.collage.measure import candidate_module

__all__ = ["HOPPER_CUTLASS", "HOPPER_FAMILIES", "cutlass_sm", "kernel_families"]


def cutlass_sm(config: CompilationConfig) -> int | str:
    """The cutlass target's ``sm``; left unset, the cuda target's arch decides (``90a``
    from ``sm_90a``: the CUTLASS 3 Hopper kernels need the arch-specific target)."""
    cutlass = config.find_target_for_kind("cutlass")
    try:
        if cutlass is not None and "sm" in cutlass.options:
            return parse_arch(str(cutlass.options["sm"]))[0]
        cuda = config.find_target_for_kind("cuda")
        if cuda is not None and str(cuda.get("arch")).startswith("sm_"):
            number, suffix = parse_arch(str(cuda.get("arch")))
            return f"{number}{suffix}" if suffix == "a" and number == 90 else number
    except ValueError as err:
        raise PartitaError(str(err)) from None
    return int(Target("cutlass").get("sm"))


def _hopper_or_sm80(graph: DataflowGraph, candidate: Candidate, f32_math: str) -> str:
    """``cutlass-sm90a`` where the candidate's kernel spec has a Hopper kernel (its f32
    GEMMs in the target's ``f32_math``), else ``cutlass`` (also for a graph not built from
    IR, or ops no CUTLASS kernel takes: the pattern table is what offers them)."""
    ops = getattr(graph, "ops", None)
    if ops is None:
        return "cutlass"
    function = candidate_module([ops[v] for v in sorted(candidate.nodes)]).body.block.first_op
    assert isinstance(function, FuncOp)
    try:
        spec = partition_kernel(function).spec
    except PartitaError:
        return "cutlass"
    return "cutlass-sm90a" if why_not_sm90(spec, f32_math) is None else "cutlass"


HOPPER_FAMILIES = {math: KernelFamily("sm90a" if math == "tf32" else f"sm90a_{math}", ("cutlass", "cutlass-sm90a"),
                                      partial(_hopper_or_sm80, f32_math=math)) for math in F32_MATH}
"""The cutlass target on ``sm_90a`` by how it multiplies f32 (``CutlassOptions.f32_math``):
Hopper kernels where they apply (f32 ones in TF32 math only), Sm80 ones elsewhere."""
HOPPER_CUTLASS = HOPPER_FAMILIES["tf32"]
"""The cutlass target's family on ``sm_90a`` with its default options."""


def kernel_families(config: CompilationConfig) -> dict[str, KernelFamily]:
    """The families of ``config``'s targets whose kernels depend on the arch: the cutlass
    target's when it builds for ``sm_90a``. Empty otherwise (each target its own spec)."""
    cutlass = config.find_target_for_kind("cutlass")
    if cutlass is None or cutlass_sm(config) != "90a":
        return {}
    return {"cutlass": HOPPER_FAMILIES[CutlassOptions.from_target(cutlass).f32_math]}
