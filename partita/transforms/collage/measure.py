"""Measured costs for Collage: a candidate lowered like a model and timed through its launch plan.

TVM's Collage costs a candidate by building it with its backend and running it through
its VM. Here :class:`CandidateTimer` does the same through Partita's one launch plan:

1. the candidate's ops (clones) become the body of a one-function module: values entering
   from outside (arguments, constants, results of other ops) become arguments, the values
   used outside become results (:func:`candidate_module`);
2. the function is lowered as a partition is: ``cutlass`` -> a ``byoc.compiler =
   "cutlass"`` function through ``cutlass-codegen``; ``cuda`` -> ``fuse-native-kernels``
   then ``cuda-codegen`` (every op must end up in a fused kernel); ``cublas`` / ``cudnn``
   / ``tensorrt`` -> their codegen's library record; then, as ``partita.compile`` ends,
   ``mark-compiler-functions-as-extern``, ``lower-extern-calls`` and ``plan-memory``;
3. a ``LaunchPlan`` of it is made on the measurement device (cubins read as at load,
   sha256 checked; library plans made outside the timed region) and profiled
   (``Runtime.profile``, ``partita.runtime.profile``): ``warmup`` runs, then ``repeat``
   runs with device events around each step on the plan's stream; a candidate's time is
   the sum of its kernel and library steps' medians, in seconds.

Targets without a codegen here (``llvm``), candidates the codegen would not take (a
``cuda`` group with a non-injective op, a CUTLASS match whose shape the kernel library
rejects), library targets whose library is not installed, and graphs not built from IR
are *unmeasurable*: :meth:`CandidateTimer.time` returns ``None`` and
:func:`measuring_estimator` asks its fallback (the roofline model), recording why in
:attr:`CandidateTimer.unmeasured`.

What costs what: every new candidate is one NVRTC compile (seconds, more for CUTLASS).
The cubin cache (``cache_dir``, content-addressed) makes a candidate whose C++ was
compiled before cost no NVRTC work, but it is still loaded and run. The persistent
:class:`~partita.collage.cost.CostCache` (``collage-partition{cache=...}``) is what makes a
second partitioning measure nothing at all: candidates are then looked up by structural
hash before the timer is asked.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.dialects.func import CallOp, FuncOp, ReturnOp
from xdsl.ir import Block, Operation, OpResult, Region, SSAValue

from partita.collage.cost import CostEstimator, MeasuringEstimator
from partita.collage.graph import DataflowGraph
from partita.collage.search import Candidate
from partita.dialects import byoc, make_context, nn
from partita.ir import PartitaError
from partita.lowering.cuda.codegen import CudaCodegen, fused_functions
from partita.lowering.cutlass.codegen import CutlassCodegen, partition_kernel
from partita.lowering.cutlass.tuning import KERNEL_ATTR
from partita.lowering.library import LIBRARY_CODEGENS
from partita.runtime.contracts import TimingDevice
from partita.runtime.cuda import CudaDevice, CudaError, cuda_available, parse_arch
from partita.runtime.plan import Runtime
from partita.transforms.fuse_native_kernels import FuseNativeKernels
from partita.transforms.lower_extern_calls import LowerExternCalls
from partita.transforms.mark_compiler_functions_as_extern import MarkCompilerFunctionsAsExtern
from partita.transforms.plan_memory import PlanMemory

__all__ = ["MEASURABLE_TARGETS", "CandidateTimer", "candidate_module", "measuring_estimator", "open_timing_device"]

LIBRARY_TARGETS: frozenset[str] = frozenset({"cublas", "cudnn", "tensorrt"})
"""Targets whose candidates are library calls (their codegen's record, a library step of the plan)."""
MEASURABLE_TARGETS: frozenset[str] = frozenset({"cutlass", "cuda"}) | LIBRARY_TARGETS
"""Targets whose candidates :class:`CandidateTimer` compiles; the others fall back."""

FUNCTION = "collage_measure"
"""Name of the candidate function (fixed, so equal candidates give equal C++ and hit the
cubin cache across runs)."""



def open_timing_device(stack: ExitStack, what: str, instead: str) -> TimingDevice:
    """The first CUDA device, closed when ``stack`` closes; a PartitaError saying that
    ``what`` (``collage-partition: cost=measure``) needs one, and what to do ``instead``,
    when there is none."""
    if not cuda_available():
        raise PartitaError(f"{what} needs a CUDA device and none is available; {instead}")
    try:
        device = CudaDevice()
    except CudaError as err:
        raise PartitaError(f"{what} cannot open the CUDA device: {err}") from None
    stack.callback(device.close)
    return device


def candidate_module(ops: Sequence[Operation], name: str = FUNCTION) -> ModuleOp:
    """A module holding ``func.func @name`` whose body is clones of ``ops`` (in the given
    order, which must be a topological one): the values ``ops`` use but do not define are
    its arguments, in order of first use; the results used by ops outside ``ops`` are its
    results (the last op's result if none is)."""
    members = set(ops)
    inputs: list[SSAValue] = []
    for op in ops:
        for operand in op.operands:
            if not (isinstance(operand, OpResult) and operand.op in members) and operand not in inputs:
                inputs.append(operand)
    outputs = [r for op in ops for r in op.results if any(use.operation not in members for use in r.uses)]
    if not outputs:
        outputs = list(ops[-1].results)
    block = Block(arg_types=[v.type for v in inputs])
    mapping: dict[SSAValue, SSAValue] = dict(zip(inputs, block.args))
    for op in ops:
        block.add_op(op.clone(value_mapper=mapping))
    block.add_op(ReturnOp(*(mapping[v] for v in outputs)))
    function = FuncOp(name, ([v.type for v in inputs], [v.type for v in outputs]), Region(block))
    return ModuleOp([function])


@dataclass
class CandidateTimer:
    """Compiles candidates and times their launch plans on ``device`` (a
    ``partita.runtime.cuda.CudaDevice`` or any ``TimingDevice``; its owner closes it);
    see the module docstring."""

    device: TimingDevice
    arch: str | None = None
    """``sm_90``...; default ``device.arch``."""
    cache_dir: str | Path | None = None
    """Cubin cache directory; default ``$PARTITA_CACHE_DIR`` or ``~/.cache/partita``."""
    dynamic_dim: int = 1
    """The size given to every dynamic dimension of the inputs."""
    warmup: int = 2
    """Untimed runs of a candidate's plan first (library warm-up, caches)."""
    repeat: int = 10
    """Timed runs; a step's time is their median."""
    burst: int = 8
    """Copies of each step enqueued back to back in a timed run, timed as their mean
    (``StepClock``): a library call's host work then hides behind the device's run of
    the copy before, as in a model's run, instead of counting as device time."""
    seed: int = 0
    measured: int = 0
    """Candidates timed on the device."""
    unmeasured: dict[str, int] = field(default_factory=dict)
    """Why candidates were not measured -> how many times."""
    libraries: dict[str, Any] = field(default_factory=dict)
    """Library bindings by target (loaded on first use; stand-ins in tests)."""
    _ctx: Context | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.dynamic_dim < 1:
            raise PartitaError(f"cost=measure: the dynamic dimension size must be >= 1, got {self.dynamic_dim}")
        if self.warmup < 0 or self.repeat < 1 or self.burst < 1:
            raise PartitaError("cost=measure: needs warmup >= 0, repeat >= 1 and burst >= 1")
        if self.arch is None:
            self.arch = str(getattr(self.device, "arch", "") or "sm_90")
        if not self.arch.startswith("sm_"):
            self.arch = f"sm_{self.arch}"

    @property
    def name(self) -> str:
        return f"measure:{getattr(self.device, 'name', 'cuda')}:{self.arch}:h{self.dynamic_dim}"

    # ---------------------------------------------------------------- entry points
    def __call__(self, graph: DataflowGraph, candidate: Candidate) -> float | None:
        """Seconds for ``candidate`` of ``graph`` (an ``OpGraph``: it knows its ops), or
        ``None`` when it cannot be measured."""
        ops = getattr(graph, "ops", None)
        if ops is None:
            return self._skip("graph not built from IR")
        return self.time([ops[v] for v in sorted(candidate.nodes)], candidate.target)

    def time(self, ops: Sequence[Operation], target: str, kernel: str = "") -> float | None:
        """Seconds for ``ops`` (topologically ordered) on ``target``, or ``None``;
        ``kernel``: a ``cutlass`` candidate's pinned configuration (``cutlass.kernel``)."""
        built = self.build(ops, target, kernel)
        if isinstance(built, str):
            return self._skip(built)
        module, entry = built
        seconds = self._time_plan(module, entry, target)
        if seconds is None:
            return self._skip(f"no {target} library")
        self.measured += 1
        return seconds

    def build(self, ops: Sequence[Operation], target: str, kernel: str = "") -> tuple[ModuleOp, str] | str:
        """``ops`` compiled for ``target`` as a module whose entry function's launch plan
        is timed, or why not (the kernels land in the cubin cache: ``--warm-cache`` builds
        the benchmarks' candidates on a machine without the GPU this way)."""
        if target not in MEASURABLE_TARGETS:
            return f"no codegen for {target}"
        if not ops:
            return "empty candidate"
        module = candidate_module(ops)
        (function,) = module.ops
        assert isinstance(function, FuncOp)
        if target in LIBRARY_TARGETS:
            why = lower_library_candidate(self.ctx, module, function, target)
        elif target == "cutlass":
            why = self._lower_cutlass(module, function, kernel)
        else:
            why = self._lower_cuda(module, function)
        if why is not None:
            return why
        # A compiler function (cutlass, a library) is called from an entry, as from @main;
        # a cuda candidate's function already calls its fused kernels.
        entry = function if target == "cuda" else _entry_calling(module, function)
        for pass_ in (MarkCompilerFunctionsAsExtern(), LowerExternCalls(), PlanMemory()):
            pass_.apply(self.ctx, module)
        return module, entry.sym_name.data

    # -------------------------------------------------------------------- lowering
    def _skip(self, why: str) -> None:
        self.unmeasured[why] = self.unmeasured.get(why, 0) + 1

    @property
    def ctx(self) -> Context:
        if self._ctx is None:
            self._ctx = make_context()
        return self._ctx

    def _lower_cutlass(self, module: ModuleOp, function: FuncOp, kernel: str = "") -> str | None:
        """``cutlass-codegen`` on the function (a reason string if it would not take it),
        with ``kernel`` pinned when given."""
        if len(function.function_type.outputs) != 1:
            return "cutlass candidate with several results"
        function.attributes[byoc.COMPILER] = StringAttr("cutlass")
        if kernel:
            function.attributes[KERNEL_ATTR] = StringAttr(kernel)
        try:
            partition_kernel(function)  # what the codegen checks first; rejecting is not an error here
        except PartitaError:
            return "not a CUTLASS kernel"
        assert self.arch is not None
        # sm_90a keeps its suffix: the candidate is timed as the CUTLASS 3 Hopper kernel a
        # compile for that arch would run, not as the Sm80 one
        number, suffix = parse_arch(self.arch)
        sm = f"{number}{suffix}" if suffix == "a" and number == 90 else number
        CutlassCodegen(sm=sm, cache_dir=_str(self.cache_dir)).apply(self.ctx, module)
        return None

    def _lower_cuda(self, module: ModuleOp, function: FuncOp) -> str | None:
        """``fuse-native-kernels`` + ``cuda-codegen``: every op must land in a kernel."""
        function.attributes[byoc.TARGET] = byoc.TargetAttr("cuda", {"arch": StringAttr(str(self.arch))})
        FuseNativeKernels(target="cuda").apply(self.ctx, module)
        if any(not isinstance(op, CallOp | ReturnOp | nn.ReshapeOp) for op in function.body.block.ops):
            return "cuda candidate with an op no fused kernel runs"
        kernels = [f for f in module.ops if isinstance(f, FuncOp) and f is not function]
        if not kernels:
            return "cuda candidate with no kernel (reshapes only)"
        if len(fused_functions(module)) != len(kernels):  # what cuda-codegen would leave to the host
            return "cuda candidate the fused-kernel emitter rejects"
        CudaCodegen(arch=str(self.arch), cache_dir=_str(self.cache_dir)).apply(self.ctx, module)
        return None

    # ---------------------------------------------------------------------- timing
    def _time_plan(self, module: ModuleOp, entry: str, target: str) -> float | None:
        """Seconds per run of the kernel and library steps of ``entry``'s launch plan on
        the device (``None``: the library of a library target is missing)."""
        try:
            runtime = Runtime(module, self.device, entry=entry, graphs=False, libraries=self.libraries)
        except PartitaError:
            if target in LIBRARY_TARGETS:  # the extra (or its library) is missing: the roofline answers
                return None
            raise
        try:
            rng = np.random.default_rng(self.seed)
            inputs = [self._array(t, rng) for t in runtime.plan.function.function_type.inputs]
            profile = runtime.profile(*inputs, repeat=self.repeat, warmup=self.warmup, burst=self.burst)
        finally:
            runtime.close()  # candidates are many: keep no cubin loaded, no plan made
        if not profile.measured:
            raise PartitaError(f"cost=measure: {profile.note}")
        steps = [s for s in profile.steps if s.kind != "host"]
        if not steps:
            raise PartitaError("cost=measure: the codegen produced no kernel for a candidate")
        return sum(s.seconds for s in steps if s.seconds is not None)

    def _shape(self, typ: Any) -> tuple[int, ...]:
        assert isinstance(typ, TensorType)
        return tuple(self.dynamic_dim if d < 0 else d for d in typ.get_shape())

    @staticmethod
    def _dtype(typ: Any) -> np.dtype:
        assert isinstance(typ, TensorType)
        name = str(typ.element_type)
        if name not in nn.NUMPY_DTYPES:
            raise PartitaError(f"cost=measure: cannot make inputs of element type {name}")
        return nn.NUMPY_DTYPES[name]

    def _array(self, typ: Any, rng: np.random.Generator) -> np.ndarray:
        shape, dtype = self._shape(typ), self._dtype(typ)
        if dtype.kind == "f" or dtype.name == "bfloat16":
            return rng.uniform(-1.0, 1.0, shape).astype(dtype)
        if dtype.kind == "b":
            return rng.integers(0, 2, shape).astype(dtype)
        return rng.integers(0, 4, shape).astype(dtype)


def _str(path: str | Path | None) -> str | None:
    return None if path is None else str(path)


def lower_library_candidate(ctx: Context, module: ModuleOp, function: FuncOp, target: str) -> str | None:
    """Runs ``target``'s codegen on the candidate module; a reason if it rejects it."""
    module_name, cls = LIBRARY_CODEGENS[target]
    codegen = getattr(importlib.import_module(module_name), cls)()
    function.attributes[byoc.COMPILER] = StringAttr(target)
    try:
        codegen.apply(ctx, module.clone())  # a rejection must leave the module as it was
    except PartitaError:
        return f"not a {target} partition"
    codegen.apply(ctx, module)
    return None


def _entry_calling(module: ModuleOp, function: FuncOp) -> FuncOp:
    """``func.func @<function>_entry`` calling ``function`` with its arguments (what
    ``outline-compiler-functions`` leaves in ``@main``), added to ``module``."""
    inputs, outputs = function.function_type.inputs.data, function.function_type.outputs.data
    block = Block(arg_types=inputs)
    call = CallOp(function.sym_name.data, block.args, outputs)
    block.add_ops([call, ReturnOp(*call.results)])
    entry = FuncOp(f"{function.sym_name.data}_entry", (inputs, outputs), Region(block))
    module.body.block.add_op(entry)
    return entry


def measuring_estimator(
    timer: Callable[[DataflowGraph, Candidate], float | None] | CandidateTimer,
    fallback: CostEstimator,
    *,
    available: Callable[[], bool] | None = None,
    name: str | None = None,
) -> MeasuringEstimator:
    """A :class:`MeasuringEstimator` timing candidates with ``timer``, and costing those it
    cannot measure with ``fallback``. The name (part of cost-cache keys) says both."""

    def build_and_time(graph: DataflowGraph, candidate: Candidate) -> float:
        seconds = timer(graph, candidate)
        return fallback.estimate(graph, candidate) if seconds is None else seconds

    if name is None:
        name = f"{getattr(timer, 'name', 'measure')}/{getattr(fallback, 'name', type(fallback).__name__)}"
    return MeasuringEstimator(build_and_time, available=available, name=name)
