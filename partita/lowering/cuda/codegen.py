"""``cuda-codegen``: native CUDA kernels for the fused functions of a module.

TVM's lowering of primitive functions for the ``cuda`` target, for the groups
``fuse-native-kernels`` outlined:

1. selects every function with a body, ``byoc.primitive`` and a ``cuda`` target whose body
   is injective ops, or one row reduction (softmax on the last axis, layer_norm, a
   reduction or arg-reduction over the last axes), GEMM
   (dense, matmul, batch_matmul) or pool (max / avg / global avg) with an element-wise
   epilogue (others are left as they are and run on the host);
2. emits one CUDA C kernel per function (``partita.lowering.cuda.kernel``), all of them
   in ONE translation unit, and compiles it with NVRTC (content-addressed cache);
3. records the cubin as ``byoc.binary @cuda_sm90`` with one kernel record per function,
   of kind ``fused``, ``rowwise``, ``gemm`` or ``window`` (``partita.lowering.cuda.records``);
4. marks the functions extern, their bodies kept in ``@<name>_reference`` siblings, so
   ``lower-extern-calls`` turns the calls into ``byoc.call_extern`` (with shape functions
   derived from the siblings for dynamic dims) and the runtime launches or emulates them.

``partita-opt -t cuda-c`` prints the translation unit instead (no NVRTC), and
``cuda_from_binaries`` rebuilds it from a lowered module: the reference siblings still
hold the bodies, and the emitter is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr, SymbolRefAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute
from xdsl.passes import ModulePass
from xdsl.utils.target import Target

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.lowering import nvrtc
from partita.lowering.binaries import cache_attributes, fresh_symbol
from partita.lowering.cuda.contracts import with_contracts
from partita.lowering.cuda.fusion import kernel_function_error
from partita.lowering.cuda.kernel import function_arch
from partita.lowering.cuda.program import CudaProgram, emit_program
from partita.lowering.cuda.records import KINDS, fused_record
from partita.lowering.functions import mark_extern
from partita.target import Target as PartitaTarget

__all__ = ["CudaCTarget", "CudaCodegen", "cuda_from_binaries", "fused_functions", "target_arch"]

TARGET_KIND = "cuda"


def fused_functions(module: ModuleOp) -> list[FuncOp]:
    """Primitive ``cuda`` functions with a body a kernel can compute, in module order."""
    out = []
    for op in module.ops:
        if not isinstance(op, FuncOp) or not op.body.blocks or byoc.PRIMITIVE not in op.attributes:
            continue
        target = op.attributes.get(byoc.TARGET)
        if isinstance(target, byoc.TargetAttr) and target.kind.data == TARGET_KIND and kernel_function_error(op) is None:
            out.append(op)
    return out


def target_arch(functions: list[FuncOp], override: str = "") -> str:
    """The arch to compile for: the pass option, else the functions' cuda target's."""
    if override:
        return override if override.startswith("sm_") else f"sm_{override}"
    found = {function_arch(function) for function in functions}
    assert "" not in found, "a fused cuda function carries its cuda target"
    if len(found) > 1:
        raise PartitaError(f"fused cuda functions disagree on the target arch ({', '.join(sorted(found))})")
    return found.pop() if found else str(PartitaTarget(TARGET_KIND).get("arch"))


@dataclass(frozen=True)
class CudaCodegen(ModulePass):
    """Compile every fused ``cuda`` function of the module into one cubin."""

    name = "cuda-codegen"

    arch: str = ""
    """``sm_90`` (or ``90``); empty takes the functions' cuda target ``arch``."""
    cache_dir: str | None = None
    """Cubin cache directory; default ``$PARTITA_CACHE_DIR`` or ``~/.cache/partita``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "statistics", nvrtc.CompileStatistics())  # not an option

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.arch:  # a typo in the option is an error even when nothing is fused
            try:
                nvrtc.check_arch(self.arch)
            except ValueError as err:
                raise PartitaError(f"{self.name}: {err}") from None
        functions = fused_functions(op)
        if not functions:
            return
        arch = target_arch(functions, self.arch)
        program = with_contracts(emit_program(functions, arch))
        try:
            binary = nvrtc.compile_cuda(program, arch=arch, name="partita_fused.cu", cache_dir=self.cache_dir)
        except nvrtc.NvrtcError as err:
            names = ", ".join(f"@{e}" for e in err.entries) or "the module"
            raise PartitaError(f"NVRTC failed to compile the fused CUDA kernels of {names} for {arch}:\n{err.log}") from None
        except ValueError as err:  # a malformed arch
            raise PartitaError(f"cuda-codegen: {err}") from None
        attributes: dict[str, Attribute] = {
            "format": StringAttr("cubin"),
            "target": byoc.TargetAttr(TARGET_KIND, {"arch": StringAttr(arch)}),
            "arch": StringAttr(arch),
            "key": StringAttr(binary.key),
            byoc.DIGEST: StringAttr(binary.digest),
            **cache_attributes(binary.path),
            "kernels": DictionaryAttr({name: fused_record(k) for name, k in program.kernels.items()}),
        }
        op.body.block.add_op(byoc.BinaryOp(fresh_symbol(op, f"cuda_{arch.replace('_', '')}"), attributes))
        self.statistics.record(binary)
        mark_extern(op, functions)


@dataclass(frozen=True)
class CudaCTarget(Target):
    """``partita-opt -t cuda-c``: the CUDA C ``cuda-codegen`` would compile."""

    name = "cuda-c"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        functions = fused_functions(module)
        output.write(with_contracts(emit_program(functions)).code if functions else "// no fused cuda functions in this module\n")


def cuda_from_binaries(module: ModuleOp) -> str:
    """The CUDA C each fused-kernel ``byoc.binary`` was compiled from, rebuilt from the
    ``@<name>_reference`` bodies of its functions (the emitter is deterministic, so the
    text, and its NVRTC cache key, come out the same)."""
    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, FuncOp)}
    units = []
    for op in module.ops:
        if not isinstance(op, byoc.BinaryOp):
            continue
        kernels = op.attributes["kernels"]
        assert isinstance(kernels, DictionaryAttr)
        names = [n for n, r in kernels.data.items() if isinstance(r, DictionaryAttr) and r.data.get("kind") in [StringAttr(k) for k in KINDS]]
        if not names:
            continue
        bodies = []
        for name in names:
            reference = functions.get(byoc.reference_name(name))
            if reference is None or reference.attributes.get(byoc.REFERENCE_IMPL) != SymbolRefAttr(name):
                raise PartitaError(f"cannot rebuild the CUDA C of @{name}: its @{name}_reference body is gone")
            bodies.append(_renamed(reference, name))
        units.append(f"// byoc.binary @{op.sym_name.data}\n{with_contracts(emit_program(bodies)).code}")
    return "\n".join(units) if units else "// no compiled fused CUDA kernels in this module"


def _renamed(function: FuncOp, name: str) -> FuncOp:
    clone = function.clone()
    clone.sym_name = StringAttr(name)
    return clone


def program_of(module: ModuleOp) -> CudaProgram | None:
    """The translation unit ``cuda-codegen`` would compile for ``module`` (None if empty)."""
    functions = fused_functions(module)
    return with_contracts(emit_program(functions)) if functions else None
