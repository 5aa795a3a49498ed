"""``cutlass-codegen``: module-at-a-time CUTLASS lowering (TVM's custom lowering hook).

1. outlines the ``cutlass`` partitions (existing global symbols);
2. maps every ``byoc.compiler = "cutlass"`` function, by the ops in its body, to a
   CUTLASS kernel spec and configuration;
3. emits ONE CUDA C++ unit per kernel configuration (its text names no partition and no
   shape: every dim is a run-time argument of the configuration's one entry) and
   compiles the units with NVRTC, in parallel, through the cubin cache;
4. records each unit as a ``byoc.binary`` beside the functions it implements, a record
   per function naming the entry it launches and holding its static dims;
5. marks the functions extern (their semantics stay in a reference sibling).

A function may pin its kernel configuration: ``cutlass.kernel = "<label>"`` (what
``tune-cutlass-kernels`` measured fastest, ``tuning.py``), in place of the tuning table's.

Partitions of one configuration share one instantiation and one cubin, whatever their
shapes; a configuration another module (or shape) compiled before is a cache hit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr, TensorType
from xdsl.dialects.func import CallOp, FuncOp, ReturnOp
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.target import Target

from partita.backends.gemm_forms import batched_gemm, is_zero_constant, residual_of
from partita.dialects import byoc, nn
from partita.ir import PartitaError, op_error
from partita.lowering import nvrtc
from partita.lowering.binaries import cache_attributes, fresh_symbol
from partita.lowering.cubin import Cubin
from partita.lowering.cutlass import (
    CudaSource,
    KernelSpec,
    UnsupportedKernel,
    choose_config,
    emit_module,
)
from partita.lowering.cutlass.emitter import emit_units, problem_values
from partita.lowering.cutlass.kernels import pin_config, splittable, tunable
from partita.lowering.cutlass.options import CutlassOptions, function_options
from partita.lowering.cutlass.records import entry_from_record, entry_record
from partita.lowering.cutlass.sm90 import (
    RECORD_KIND,
    Sm90Source,
    choose_sm90_config,
    emit_sm90_module,
    emit_sm90_units,
    hopper_spec,
    read_layout,
    sm90_from_record,
    sm90_record,
    sm90_tunable,
    why_not_decomposed,
    why_not_sm90,
)
from partita.lowering.cutlass.tuning import (
    COOPERATIVE,
    KERNEL_ATTR,
    SM80_CANDIDATES,
    SM80_SPLITS,
    SM90_CANDIDATES,
    SM90_SPLIT_TILES,
    SM90_SPLITS,
    SPLIT_K_WAVE,
    STREAM_K_MIN_K_TILES,
    is_sm90_label,
    sm80_label,
    sm90_label,
)
from partita.lowering.functions import mark_compiler_functions, outline_compiler_partitions
from partita.target import Target as PartitaTarget

COMPILER = "cutlass"


@dataclass(frozen=True)
class PartitionKernel:
    """A cutlass partition function and the kernel that implements it."""

    function: FuncOp
    spec: KernelSpec
    inputs: tuple[str, ...]  # the entry role of each function argument, in order

    @property
    def name(self) -> str:
        return self.function.sym_name.data


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def _dtype(op: Operation) -> str:
    element = op.results[0].type.element_type  # type: ignore[attr-defined]
    name = str(element)
    if name not in ("f16", "bf16", "f32"):
        raise op_error(op, f"CUTLASS kernels take f16, bf16 or f32, not {name}")
    return nn.NUMPY_DTYPES[name].name


def _argument_roles(function: FuncOp, roles: dict[SSAValue, str]) -> tuple[str, ...]:
    args = function.body.block.args
    names = []
    for arg in args:
        if arg not in roles:
            raise op_error(function, f"argument #{arg.index} is not an operand of the CUTLASS kernel")
        names.append(roles[arg])
    if len(set(names)) != len(names):
        raise op_error(function, "an argument feeds more than one kernel operand")
    return tuple(names)


def _epilogue(ops: Sequence[Operation], function: FuncOp, out_channels: int, channel_axis: int) -> tuple[str, SSAValue | None]:
    """Reads ``[bias_add | add(bias)] [relu | gelu (erf or tanh)]`` after the main op."""
    bias: SSAValue | None = None
    rest = list(ops)
    if rest and isinstance(rest[0], nn.BiasAddOp | nn.AddOp):
        op = rest.pop(0)
        candidate = op.operands[1]
        if isinstance(op, nn.BiasAddOp) and op.axis not in (channel_axis, -1):
            raise op_error(op, "the CUTLASS epilogue adds the bias along the output channels only")
        # [N] or [1, ..., 1, N]: the same N contiguous values, broadcast over the rows.
        shape = _shape(candidate)
        if not shape or shape[-1] != out_channels or any(d != 1 for d in shape[:-1]):
            raise op_error(op, f"the CUTLASS epilogue takes a bias of shape [{out_channels}] (or [1, ..., {out_channels}])")
        bias = candidate
    activation = ""
    if rest and isinstance(rest[0], nn.ReluOp | nn.GeluOp):
        op = rest.pop(0)
        activation = "relu" if isinstance(op, nn.ReluOp) else "gelu" if op.approximate == "none" else "gelu_tanh"
    if rest:
        raise op_error(rest[0], "is not part of a CUTLASS kernel's epilogue")
    if activation and bias is None:
        raise op_error(function, f"a CUTLASS {activation} epilogue needs a bias")
    return ("bias" + ("_" + activation if activation else "")) if bias is not None else "none", bias


def _epilogue_with_residual(main: Operation, ops: Sequence[Operation], function: FuncOp, out_channels: int,
                            channel_axis: int, roles: dict[SSAValue, str]) -> tuple[str, SSAValue | None]:
    """Reads ``[bias] + r [relu]`` (a residual ``r`` of the output's shape, the source C)
    or else :func:`_epilogue`'s forms after a dense or convolution; a residual joins
    ``roles``."""
    rest = list(ops)
    relu = bool(rest) and isinstance(rest[-1], nn.ReluOp)
    body = rest[:-1] if relu else rest
    add = body[-1] if body and len(body) <= 2 and isinstance(body[-1], nn.AddOp) else None
    residual = residual_of(add, body[0] if len(body) == 2 else main) if add is not None else None
    if residual is None:
        return _epilogue(ops, function, out_channels, channel_axis)
    epilogue, bias = _epilogue(body[:-1], function, out_channels, channel_axis)
    if epilogue not in ("none", "bias"):
        raise op_error(main, f"a CUTLASS residual epilogue follows a bias at most, not {epilogue}")
    roles[residual] = "residual"
    return ("residual" if bias is None else "bias_residual") + ("_relu" if relu else ""), bias


def _batched_spec(main: Operation, epilogue_ops: Sequence[Operation], function: FuncOp) -> KernelSpec:
    """The batched-GEMM spec of an ``nn.matmul`` (A ``[..., M, K]``, B ``[..., K, N]``)
    or ``nn.batch_matmul`` (its ``transpose_a`` / ``transpose_b``)."""
    if isinstance(main, nn.BatchMatmulOp):
        ta, tb = bool(main.transpose_a), bool(main.transpose_b)
    else:
        ta, tb = False, False
    a, b = _shape(main.operands[0]), _shape(main.operands[1])
    dims = batched_gemm(a, b, ta, tb)
    if isinstance(dims, str):
        raise op_error(main, dims)
    out = _shape(main.results[0])
    epilogue, _ = _epilogue(epilogue_ops, function, out[-1], len(out) - 1)
    return KernelSpec.batch_matmul(dims["batch"], dims["M"], dims["N"], dims["K"], _dtype(main), epilogue,  # type: ignore[arg-type]
                                   transpose_a=ta, transpose_b=tb, broadcast_a=bool(dims["broadcast_a"]),
                                   broadcast_b=bool(dims["broadcast_b"]))


def _zero_point_check(function: FuncOp, main: nn.IntegerProductOp) -> str:
    """Why the zero points of an int8 GEMM or convolution partition are not known to be 0
    ('' when every call of ``function`` passes constant zeros): the IMMA kernel takes them
    as arguments and does not read them (the frontend folds an activation zero point into
    the bias row)."""
    args = function.body.block.args
    indices = [args.index(v) for _, v, _ in main.factors() if v in args]
    module = function.parent_op()
    name = function.sym_name.data
    calls = [op for op in module.walk() if isinstance(op, CallOp) and op.callee.string_value() == name] \
        if module is not None else []
    if not calls:
        return "its zero points must be constant zeros, and no call of it shows them"
    for call in calls:
        for i in indices:
            if not is_zero_constant(call.arguments[i]):
                return (f"an int8 CUTLASS {_int8_kind(main)} takes zero points that are constant zeros (the native "
                        "kernel takes others)")
    return ""


def _int8_kind(main: nn.IntegerProductOp) -> str:
    return "convolution" if isinstance(main, nn.ConvIntegerOp) else "GEMM"


def _int8_parts(main: nn.IntegerProductOp, epilogue_ops: Sequence[Operation], function: FuncOp, out_channels: int,
                channel_axis: int) -> tuple[str, str, str, SSAValue | None]:
    """What an int8 GEMM and an int8 convolution spec both read, once their zero points are
    known to be constant zeros: A's and B's element types, the epilogue and its i32 bias row."""
    why = _zero_point_check(function, main)
    if why:
        raise op_error(main, why)
    dtype_a, dtype_b = (nn.NUMPY_DTYPES[str(v.type.element_type)].name for v, _, _ in main.factors())  # type: ignore[attr-defined]
    epilogue, bias = _epilogue(epilogue_ops, function, out_channels, channel_axis)
    if bias is not None and str(bias.type.element_type) != "i32":  # type: ignore[attr-defined]
        raise op_error(main, f"an int8 CUTLASS {_int8_kind(main)} adds an i32 bias row")
    return dtype_a, dtype_b, epilogue, bias


def _int8_spec(main: nn.MatmulIntegerOp, epilogue_ops: Sequence[Operation], function: FuncOp
               ) -> tuple[KernelSpec, SSAValue | None]:
    """The int8 dense spec of ``nn.matmul_integer`` with a transposed 2-D rhs ``[N, K]``
    (the TN form) and zero points that are constant zeros, [+ an i32 bias row]."""
    x, w = _shape(main.lhs), _shape(main.rhs)
    if not main.transpose_b or len(w) != 2 or len(x) < 2:
        raise op_error(main, "an int8 CUTLASS GEMM takes a [N, K] rhs (transpose_b) and an lhs of rank >= 2")
    dtype_a, dtype_b, epilogue, bias = _int8_parts(main, epilogue_ops, function, w[0], len(x) - 1)
    m = None if any(d < 0 for d in x[:-1]) else prod(x[:-1])
    return KernelSpec.dense(m, w[0], w[1], dtype_a, epilogue, dtype_b=dtype_b), bias


def _int8_conv_spec(main: nn.ConvIntegerOp, epilogue_ops: Sequence[Operation], function: FuncOp
                    ) -> tuple[KernelSpec, SSAValue | None]:
    """The int8 conv2d spec of an NHWC / OHWI, non-grouped ``nn.conv_integer`` whose zero
    points are constant zeros, [+ an i32 bias row]."""
    if main.SPATIAL != 2 or main.data_layout != "NHWC" or main.kernel_layout != "OHWI" or main.groups != 1:
        raise op_error(main, "an int8 CUTLASS convolution takes NHWC data, OHWI weights and groups = 1")
    x, w = _shape(main.input), _shape(main.weight)
    if x[3] < 0:
        raise op_error(main, "an int8 CUTLASS convolution needs static input channels")
    dtype_a, dtype_b, epilogue, bias = _int8_parts(main, epilogue_ops, function, w[0], 3)
    spec = KernelSpec.conv2d(x, w, tuple(main.strides), tuple(main.padding), tuple(main.dilation), dtype_a, epilogue,
                             dtype_b=dtype_b)  # N, H and W may be run-time dims, as for conv2d
    return spec, bias


FP8_DTYPES = {"f8E4M3FN": "float_e4m3", "f8E5M2": "float_e5m2"}


def _fp8_spec(main: nn.MatmulFloat8Op, epilogue_ops: Sequence[Operation]) -> KernelSpec:
    """The FP8 dense spec of ``nn.matmul_float8`` with a transposed 2-D rhs ``[N, K]`` (the
    TN form) and nothing after it: the f32 product, unscaled."""
    x, w = _shape(main.lhs), _shape(main.rhs)
    if not main.transpose_b or len(w) != 2 or len(x) < 2:
        raise op_error(main, "an FP8 CUTLASS GEMM takes a [N, K] rhs (transpose_b) and an lhs of rank >= 2")
    if epilogue_ops:
        raise op_error(epilogue_ops[0], "is not part of an FP8 CUTLASS GEMM (its scale and bias are the next "
                                        "native kernel's)")
    types = [FP8_DTYPES.get(str(v.type.element_type), "") for v in (main.lhs, main.rhs)]  # type: ignore[attr-defined]
    m = None if any(d < 0 for d in x[:-1]) else prod(x[:-1])
    return KernelSpec.dense(m, w[0], w[1], types[0], dtype_b=types[1])


def partition_kernel(function: FuncOp) -> PartitionKernel:
    """The CUTLASS kernel a partition function's body describes (located error if none)."""
    ops = [op for op in function.body.block.ops if not isinstance(op, ReturnOp)]
    if not ops:
        raise op_error(function, "has no operation for CUTLASS to implement")
    main, epilogue_ops = ops[0], ops[1:]
    try:
        if isinstance(main, nn.DenseOp):
            x, w = _shape(main.operands[0]), _shape(main.operands[1])
            m = None if any(d < 0 for d in x[:-1]) else prod(x[:-1])
            roles = {main.operands[0]: "x", main.operands[1]: "w"}
            epilogue, bias = _epilogue_with_residual(main, epilogue_ops, function, w[0], len(x) - 1, roles)
            spec = KernelSpec.dense(m, w[0], w[1], _dtype(main), epilogue)
        elif isinstance(main, nn.MatmulIntegerOp):
            spec, bias = _int8_spec(main, epilogue_ops, function)
            roles = {main.lhs: "x", main.rhs: "w", main.rhs_zero_point: "zb", main.lhs_zero_point: "za"}
        elif isinstance(main, nn.MatmulFloat8Op):
            spec, bias = _fp8_spec(main, epilogue_ops), None
            roles = {main.lhs: "x", main.rhs: "w"}
        elif isinstance(main, nn.BatchMatmulOp | nn.MatmulOp):
            spec = _batched_spec(main, epilogue_ops, function)
            roles = {main.operands[0]: "a", main.operands[1]: "b"}
            bias = _epilogue(epilogue_ops, function, _shape(main.results[0])[-1], len(_shape(main.results[0])) - 1)[1]
        elif isinstance(main, nn.Conv2DOp):
            if main.data_layout != "NHWC" or main.kernel_layout != "OHWI" or main.groups != 1:
                raise op_error(main, "CUTLASS conv2d takes NHWC data, OHWI weights and groups = 1")
            x, w = _shape(main.operands[0]), _shape(main.operands[1])
            if x[3] < 0:
                raise op_error(main, "CUTLASS conv2d needs static input channels")
            roles = {main.operands[0]: "x", main.operands[1]: "w"}
            epilogue, bias = _epilogue_with_residual(main, epilogue_ops, function, w[0], 3, roles)
            spec = KernelSpec.conv2d(  # N, H and W may be run-time dims (None): the entry takes every dim
                x, w, tuple(main.strides), tuple(main.padding), tuple(main.dilation), _dtype(main), epilogue)
        elif isinstance(main, nn.ConvIntegerOp):
            spec, bias = _int8_conv_spec(main, epilogue_ops, function)
            roles = {main.input: "x", main.weight: "w", main.weight_zero_point: "zb", main.input_zero_point: "za"}
        else:
            raise op_error(main, "has no CUTLASS kernel (dense, matmul, batch_matmul, matmul_integer, matmul_float8, "
                                 "NHWC conv2d and NHWC conv_integer do)")
    except UnsupportedKernel as err:
        raise op_error(function, str(err)) from None
    if bias is not None:
        roles[bias] = "bias"
    if any(not isinstance(v, BlockArgument) for v in roles):
        raise op_error(main, "the operands of a CUTLASS kernel must be the partition's arguments")
    return PartitionKernel(function, spec, _argument_roles(function, roles))


def pinned_kernel(function: FuncOp) -> str:
    """The kernel label ``function`` pins (``cutlass.kernel``), or ``""``."""
    attr = function.attributes.get(KERNEL_ATTR)
    if attr is None:
        return ""
    if not isinstance(attr, StringAttr):
        raise op_error(function, f"'{KERNEL_ATTR}' must be a string, a kernel label such as \"128x128x32_2x2x1_3\"")
    return attr.data


def cutlass_functions(module: ModuleOp) -> list[FuncOp]:
    """Functions with a body whose compiler is cutlass, in module order."""
    return byoc.compiler_functions(module, COMPILER)


def emit_cutlass(module: ModuleOp, options: CutlassOptions | int, *, hopper: bool = False
                 ) -> list[tuple[list[PartitionKernel], CudaSource]]:
    """The module's cutlass functions grouped by kernel configuration (chosen for the
    target ``options``; an ``int`` is an sm with the kind's other defaults), with one
    translation unit per group, its ``entries`` keyed by function name. With ``hopper``,
    the functions :func:`emit_hopper` takes are left out."""
    if isinstance(options, int):
        options = CutlassOptions(sm=options)
    kernels = {k.name: k for k in map(partition_kernel, cutlass_functions(module))}
    if hopper:
        kernels = {name: k for name, k in kernels.items() if not on_hopper(k, options.f32_math)}
    configs = []
    for k in kernels.values():
        try:
            cfg = choose_config(k.spec, options.sm, f32_math=options.f32_math, split_k_slices=options.split_k_slices,
                                kernel=pinned_kernel(k.function))
        except UnsupportedKernel as err:
            raise op_error(k.function, str(err)) from None
        configs.append((k.name, k.spec, cfg))
    return [([kernels[name] for name in unit.entries], unit) for unit in emit_units(configs)]


def emit_hopper(module: ModuleOp, f32_math: str = "tf32") -> list[tuple[list[PartitionKernel], Sm90Source]]:
    """The cutlass functions that have a CUTLASS 3 Hopper kernel (f32 ones when the target's
    ``f32_math`` is TF32), grouped by kernel configuration, with one source per group: each
    group is its own NVRTC program (about a minute of NVRTC each), so the groups compile in
    parallel and are cached apart."""
    kernels = {k.name: k for k in map(partition_kernel, cutlass_functions(module)) if on_hopper(k, f32_math)}
    configs = []
    for k in kernels.values():
        try:
            # a pointwise convolution is built as its GEMM (hopper_spec)
            configs.append((k.name, hopper_spec(k.spec), choose_sm90_config(k.spec, pinned_kernel(k.function), f32_math)))
        except UnsupportedKernel as err:
            raise op_error(k.function, str(err)) from None
    units = emit_sm90_units(configs)
    return [([kernels[name] for name in unit.entries], unit) for unit in units]


def on_hopper(kernel: PartitionKernel, f32_math: str = "tf32") -> bool:
    """Whether, on ``sm_90a``, ``kernel`` runs a CUTLASS 3 Hopper kernel: its spec has one
    (in the target's ``f32_math``) and it pins no Sm80 configuration (which a tuning may
    find faster: split-K for a few rows)."""
    pinned = pinned_kernel(kernel.function)
    return why_not_sm90(kernel.spec, f32_math) is None and (not pinned or is_sm90_label(pinned))


def kernel_candidates(kernel: PartitionKernel, options: CutlassOptions, hopper: bool) -> list[str]:
    """Labels of the configurations ``tune-cutlass-kernels`` times for ``kernel``: the
    tuning table's first, then every other the codegen builds for its spec on
    ``options.sm``: with ``hopper`` the sm_90a kernels where they apply, then the Sm80 ones;
    for a static dense product of less than a wave of tiles, split-K ones too (on sm_90a the
    persistent tiles' ``SM90_SPLITS``, and their stream-K where the last wave is less than
    half full; the Sm80 table's tile and the smallest, ``SM80_SPLITS``). Empty when the spec
    has one kernel only (FP8, int8, f32, convolutions, narrow alignments)."""
    spec = kernel.spec
    labels = []
    try:
        if hopper and why_not_sm90(spec, options.f32_math) is None:
            if not sm90_tunable(spec):
                return []
            table = choose_sm90_config(spec)
            first = sm90_label(table.tile, table.cluster, table.schedule, table.decomposition, table.splits)
            labels = [first] + [label for c in SM90_CANDIDATES if (label := sm90_label(*c)) != first]
            labels += [label for label in _sm90_decomposed(hopper_spec(spec)) if label != first]
        cfg = choose_config(spec, options.sm, f32_math=options.f32_math, split_k_slices=options.split_k_slices)
    except UnsupportedKernel as err:
        raise op_error(kernel.function, str(err)) from None
    if not tunable(spec, cfg):
        return labels
    first = sm80_label(cfg.threadblock, cfg.warp_count, cfg.stages, cfg.split_k)
    sm80 = [first] + [label for c in SM80_CANDIDATES if (label := sm80_label(*c)) != first]
    if splittable(spec):
        M, N, K = spec.gemm_problem()
        # the table's kernel and the smallest tile
        for tile, warps, stages in ((cfg.threadblock, cfg.warp_count, cfg.stages), min(SM80_CANDIDATES)):
            if -(-M // tile[0]) * -(-N // tile[1]) < SPLIT_K_WAVE:
                sm80 += [sm80_label(tile, warps, stages, split) for split in SM80_SPLITS
                         if K // split >= 4 * tile[2] and sm80_label(tile, warps, stages, split) not in sm80]
    for label in sm80:
        try:
            pin_config(spec, cfg, options.sm, label)
        except UnsupportedKernel:  # stages past the arch's shared memory
            continue
        labels.append(label)
    return labels


def _sm90_decomposed(spec: KernelSpec) -> list[str]:
    """The Hopper persistent kernels cutting ``spec``'s K ranges, for a static dense
    product: split-K when its tiles fill less than a wave (at least 4 K tiles a slice, as
    for Sm80), stream-K where CUTLASS's heuristic takes it (a last wave less than half full,
    tiles of more K tiles than it leaves unsplit)."""
    if not splittable(spec):
        return []
    M, N, K = spec.gemm_problem()
    labels = []
    for tile in SM90_SPLIT_TILES:
        if why_not_decomposed(spec, tile, (1, 1, 1), COOPERATIVE, "stream_k") is not None:
            continue
        tiles = -(-M // tile[0]) * -(-N // tile[1])
        if tiles < SPLIT_K_WAVE:
            labels += [sm90_label(tile, (1, 1, 1), COOPERATIVE, "split_k", split) for split in SM90_SPLITS
                       if K // split >= 4 * tile[2]]
        if 0 < 2 * (tiles % SPLIT_K_WAVE) < SPLIT_K_WAVE and K > STREAM_K_MIN_K_TILES * tile[2]:
            labels.append(sm90_label(tile, (1, 1, 1), COOPERATIVE, "stream_k"))
    return labels


def sm_option(owner: str, sm: int | str) -> tuple[int, str]:
    """``90`` -> (90, ""), ``"90a"`` / ``"sm_90a"`` -> (90, "a"); an error naming the
    option and its ``owner`` (``pass 'cutlass-codegen'``, ``target 'cutlass-cpp'``) for
    anything else."""
    m = re.fullmatch(r"(?:sm_?)?(\d+)([af]?)", str(sm).strip())
    if m is None:
        raise PartitaError(f"option 'sm' of {owner} takes a compute capability (80, 90, 90a, ...), not '{sm}'")
    return int(m.group(1)), m.group(2)


@dataclass(frozen=True)
class CutlassCodegen(ModulePass):
    """Lower every cutlass partition of the module to one NVRTC-compiled cubin."""

    name = "cutlass-codegen"

    sm: int | str = 0
    """Compute capability (80, 86, 89, 90, or ``90a``: the cubin is built for the
    arch-specific target); 0 takes the cutlass target's ``sm`` option."""
    cache_dir: str | None = None
    """Cubin cache directory; default ``$PARTITA_CACHE_DIR`` or ``~/.cache/partita``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "statistics", nvrtc.CompileStatistics())  # not an option
        # not an option either: who hears of each NVRTC program as it is done (the tools)
        object.__setattr__(self, "progress", None)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        outline_compiler_partitions(op, COMPILER)
        number, suffix = sm_option(f"pass '{self.name}'", self.sm)
        options = function_options(cutlass_functions(op), number)
        sm = f"{options.sm}{suffix}"  # kernels are chosen by the number, built for the arch
        try:
            nvrtc.check_arch(f"sm_{sm}")
        except ValueError as err:
            raise PartitaError(f"{self.name}: sm={sm}: {err}") from None
        # sm_90a: CUTLASS 3 TMA + wgmma kernels where they apply, Sm80 kernels for the rest;
        # one NVRTC program per kernel configuration, compiled side by side
        hopper = suffix == "a" and options.sm == 90
        groups = emit_cutlass(op, options, hopper=hopper)
        hopper_groups = emit_hopper(op, options.f32_math) if hopper else []
        sources = [unit for _, unit in groups] + [unit for _, unit in hopper_groups]
        if not sources:
            return
        cache_dir = self.cache_dir or options.tmp_dir or None
        names = [next(iter(unit.entries.values())).config.name for unit in sources]

        def compiled(i: int, binary: nvrtc.CompiledBinary, seconds: float) -> None:
            if self.progress is not None:
                how = "from the cache" if binary.cache_hit else "compiled"
                self.progress(f"{how}: {names[i]} for sm_{sm} [{i + 1}/{len(sources)}] +{seconds:.1f}s")

        try:
            binaries = nvrtc.compile_many(sources, jobs=min(len(sources), os.cpu_count() or 1), progress=compiled,
                                          arch=f"sm_{sm}", cache_dir=cache_dir, fast_math=options.use_fast_math)
        except nvrtc.NvrtcError as err:
            names = ", ".join(f"@{e}" for e in err.entries) or "the module"
            raise PartitaError(f"NVRTC failed to compile the CUTLASS kernels of {names} for sm_{sm}:\n{err.log}") from None
        for (kernels, source), binary in zip(groups, binaries):
            entry = next(iter(source.entries.values()))  # every function of a unit launches its one entry
            smem = Cubin(binary.cubin).read_int_global(entry.smem_symbol)
            records = {k.name: entry_record(source.entries[k.name], k.inputs, smem) for k in kernels}
            self._add_binary(op, options, sm, binary, records, "")
        for (sm90_kernels, sm90_source), binary in zip(hopper_groups, binaries[len(groups):]):
            layout = read_layout(binary.cubin, next(iter(sm90_source.entries.values())).kernel_type)
            records = {k.name: sm90_record(sm90_source.entries[k.name], k.inputs, layout) for k in sm90_kernels}
            self._add_binary(op, options, sm, binary, records, "_tma")
        mark_compiler_functions(op, COMPILER)

    def _add_binary(self, op: ModuleOp, options: CutlassOptions, sm: str, binary: nvrtc.CompiledBinary,
                    records: dict[str, Attribute], tag: str) -> None:
        attributes: dict[str, Attribute] = {
            "format": StringAttr("cubin"),
            # every option it was compiled with (those left at their defaults are implied)
            "target": byoc.TargetAttr.from_target(PartitaTarget(COMPILER, options.explicit())),
            "arch": StringAttr(f"sm_{sm}"),
            "key": StringAttr(binary.key),
            byoc.DIGEST: StringAttr(binary.digest),
            **cache_attributes(binary.path),
            "kernels": DictionaryAttr(records),
        }
        op.body.block.add_op(byoc.BinaryOp(fresh_symbol(op, f"cutlass_sm{sm}{tag}"), attributes))
        self.statistics.record(binary)


@dataclass(frozen=True)
class CutlassCppTarget(Target):
    """``partita-opt -t cutlass-cpp``: the CUDA C++ the codegen would compile, with the
    configuration chosen for each partition in a comment above the code."""

    name = "cutlass-cpp"

    sm: int | str = 0

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        number, suffix = sm_option(f"target '{self.name}'", self.sm)
        options = function_options(cutlass_functions(module), number)
        sm = f"{options.sm}{suffix}"
        hopper = suffix == "a" and options.sm == 90
        groups = emit_cutlass(module, options, hopper=hopper)
        hopper_groups = emit_hopper(module, options.f32_math) if hopper else []
        for sm90_kernels, sm90_source in hopper_groups:
            entry = next(iter(sm90_source.entries.values()))
            output.write(f"// CUTLASS 3 Hopper kernel {entry.name} for sm_{sm}, one translation unit per configuration\n")
            for k in sm90_kernels:
                cfg = sm90_source.entries[k.name].config
                output.write(f"// @{k.name}: {cfg.name} (tile {'x'.join(map(str, cfg.tile))}, cluster "
                             f"{'x'.join(map(str, cfg.cluster))}, {cfg.schedule}; args ({', '.join(k.inputs)}); "
                             f"{_dims_comment(k.spec)})\n")
            output.write(sm90_source.code)
        if not groups and not hopper_groups:
            output.write("// no cutlass partition functions in this module\n")
        for kernels, source in groups:
            entry = next(iter(source.entries.values()))
            output.write(f"// CUTLASS kernel {entry.name} for sm_{sm}, one translation unit per configuration\n")
            for k in kernels:
                cfg = source.entries[k.name].config
                output.write(
                    f"// @{k.name}: {cfg.name} ({k.spec.op}, {k.spec.dtype}, epilogue {k.spec.epilogue}; "
                    f"threadblock {'x'.join(map(str, cfg.threadblock))}, {cfg.stages} stages, "
                    f"warps {'x'.join(map(str, cfg.warp_count))}, align {cfg.alignment_a}/{cfg.alignment_b}/"
                    f"{cfg.alignment_c}, split-k {cfg.split_k}; args ({', '.join(k.inputs)}); {_dims_comment(k.spec)})\n"
                )
            output.write(source.code)
            if not source.code.endswith("\n"):
                output.write("\n")


def _dims_comment(spec: KernelSpec) -> str:
    """The problem dims a partition passes to its entry: ``dims M=?, N=768, K=3072``
    (``?``: read off the operands at run time)."""
    return "dims " + ", ".join(f"{d}={'?' if v is None else v}" for d, v in problem_values(spec).items())


def cpp_from_binaries(module: ModuleOp) -> str:
    """The C++ each ``byoc.binary`` was compiled from, rebuilt from its kernel records
    (the records keep spec and configuration, and a unit's text depends on the kernel
    configuration alone, so the source comes out the same)."""
    units = []
    for op in module.ops:
        if not isinstance(op, byoc.BinaryOp):
            continue
        target = op.attributes.get("target")
        if not isinstance(target, byoc.TargetAttr) or target.kind.data != COMPILER:
            continue  # another codegen's artifact
        kernels = op.attributes["kernels"]
        assert isinstance(kernels, DictionaryAttr)
        records = kernels.data
        if records and all(isinstance(r, DictionaryAttr) and r.data.get("kind") == StringAttr(RECORD_KIND)
                           for r in records.values()):
            hopper = {f: sm90_from_record(r)[0] for f, r in records.items()}  # type: ignore[arg-type]
            code = emit_sm90_module([(f, e.spec, e.config) for f, e in hopper.items()]).code
        else:
            entries = {f: entry_from_record(r)[0] for f, r in records.items()}  # type: ignore[arg-type]
            code = emit_module([(f, e.spec, e.config) for f, e in entries.items()]).code
        units.append(f"// byoc.binary @{op.sym_name.data}\n{code}")
    return "\n".join(units) if units else "// no compiled CUTLASS kernels in this module"
