"""The ``cutlass`` target's options, as the code generator reads them.

TVM's cutlass target kind has ``sm``, ``use_3xtf32``, ``split_k_slices``,
``profile_all_alignments``, ``find_first_valid``, ``use_multiprocessing``, ``tmp_dir`` and
``use_fast_math``; Partita adds ``use_tf32``. Each one reaches ``cutlass-codegen``:

* ``sm``: the architecture compiled for and the kernel configurations chosen;
* ``use_tf32`` (default on, as cuBLAS and PyTorch do for convolutions): f32 GEMMs and
  convolutions run on tensor cores in TF32 (inputs rounded to a 10-bit mantissa,
  f32 accumulation; on ``sm_90a`` K-major GEMMs on Hopper's TF32 wgmma); off, they run
  exact f32 SIMT FFMA kernels;
* ``use_3xtf32``: f32 on tensor cores with CUTLASS's fast-accurate 3xTF32
  (``OpMultiplyAddFastF32``: each operand split into a big and a small TF32 part, three
  MMAs), about f32 accuracy at tensor-core speed; wins over ``use_tf32``;
* ``split_k_slices``: above 1, the serial split-k slices of every dense kernel with a
  static batch (1: Partita's own heuristic decides);
* ``use_fast_math``: NVRTC's ``--use_fast_math`` (fast ``tanh``/``exp`` in GELU epilogues);
* ``tmp_dir``: where the cubins go when the pass has no ``cache-dir``;
* ``profile_all_alignments``, ``find_first_valid``, ``use_multiprocessing``: TVM's
  profiler knobs. Partita chooses configurations without profiling: the largest legal
  alignment and the first valid configuration (what ``find_first_valid=1`` and
  ``profile_all_alignments=0`` ask for); so ``find_first_valid=0`` or
  ``profile_all_alignments=1`` is an error that says to use
  ``collage-partition{cost=measure}`` to time candidates, and ``use_multiprocessing``
  changes nothing (the units of a module's configurations always compile in parallel
  processes). The ``byoc.binary``'s ``target`` records every option it was
  compiled with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from xdsl.dialects.func import FuncOp

from partita.dialects import byoc
from partita.ir import PartitaError, op_error
from partita.target import Target, TargetError

__all__ = ["CutlassOptions", "function_options"]

COMPILER = "cutlass"


@dataclass(frozen=True)
class CutlassOptions:
    sm: int = 80
    use_tf32: bool = True
    use_3xtf32: bool = False
    split_k_slices: int = 1
    profile_all_alignments: bool = False
    find_first_valid: bool = True
    use_multiprocessing: bool = False
    tmp_dir: str = ""
    use_fast_math: bool = False

    @staticmethod
    def from_target(target: Target) -> CutlassOptions:
        return CutlassOptions(**{name: target.get(name) for name in CutlassOptions.__dataclass_fields__})

    @property
    def f32_math(self) -> str:
        """How f32 GEMMs and convolutions multiply: ``3xtf32``, ``tf32`` or ``ffma``."""
        if self.use_3xtf32:
            return "3xtf32"
        return "tf32" if self.use_tf32 else "ffma"

    def check(self) -> str | None:
        """Why these options cannot be compiled (``None`` if they can)."""
        if self.sm < 50:
            return f"sm={self.sm} is not supported (sm >= 50)"
        if self.split_k_slices < 1:
            return f"split_k_slices={self.split_k_slices} must be >= 1"
        if self.profile_all_alignments or not self.find_first_valid:
            return ("profile_all_alignments=1 / find_first_valid=0 ask for profiling, which "
                    "cutlass-codegen does not do; time candidates with collage-partition{cost=measure}")
        return None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def explicit(self) -> dict[str, object]:
        """``sm`` and the options that differ from the kind's defaults (what a target
        attribute spells)."""
        defaults = CutlassOptions()
        return {k: v for k, v in self.as_dict().items() if k == "sm" or v != getattr(defaults, k)}


def function_options(functions: Sequence[FuncOp], sm_override: int = 0) -> CutlassOptions:
    """The options of the cutlass functions' target (all must agree), the kind's
    defaults without one; ``sm_override`` (the pass's ``sm``) wins over ``sm``."""
    found: dict[CutlassOptions, FuncOp] = {}
    for function in functions:
        attr = function.attributes.get(byoc.TARGET)
        if isinstance(attr, byoc.TargetAttr) and attr.kind.data == COMPILER:
            try:
                found.setdefault(CutlassOptions.from_target(attr.to_target()), function)
            except TargetError as err:
                raise op_error(function, f"invalid cutlass target: {err}") from None
    if len(found) > 1:
        a, b = list(found.items())[:2]
        raise op_error(
            b[1], f"cutlass functions disagree on the target options ({a[0].as_dict()} vs {b[0].as_dict()})"
        )
    options = next(iter(found), None) or CutlassOptions.from_target(Target(COMPILER))
    if sm_override:
        options = CutlassOptions(**{**options.as_dict(), "sm": sm_override})
    why = options.check()
    if why is not None:
        where = next(iter(found.values()), None)
        if where is not None:
            raise op_error(where, f"cutlass target: {why}")
        raise PartitaError(f"cutlass-codegen: {why}")
    return options
