"""CUDA C++ emission for CUTLASS partitions: one translation unit per kernel type.

:func:`emit_units` turns ``[(label, KernelSpec, KernelConfig), ...]`` (a label is the
partition function's name) into one :class:`CudaSource` per distinct CUTLASS kernel type
(:func:`type_key`): the kernel's declaration (``using <alias> = ...;``), a runner that
builds its ``Params`` on the device from plain pointers and sizes (no host compiler is
needed), ONE ``extern "C" __global__`` entry named after the configuration
(:func:`entry_name`), its shared-memory size and its launch contract. Every problem dim
is a run-time argument, so nothing in a unit names a partition, a module or a shape: the
unit's text, and so its NVRTC cache key, depends on the configuration alone, and the
second module (or shape) using it is a cache hit. :func:`emit_module` puts the types of
several configurations in one unit (what benchmarks and tests compile at once).

Entry ABI (C calling convention, all parameters by value)::

    entry(const T* in_0, ..., const T* in_k,   // the kernel's inputs, in order:
                                               //   dense: x, w[, bias | residual]
                                               //   batch_matmul: a, b[, bias]
                                               //   conv2d: x, w[, bias]
                                               //   (an int8 GEMM or convolution: x, w,
                                               //   za, zb[, bias], i32 bias and output)
          T* out,                              // the output tensor
          int* workspace,                      // ONLY when split_k > 1
          int d_0, ...)                        // every problem dim (GEMM_DIMS):
                                               //   dense: M, N, K;
                                               //   batch_matmul: batch, M, N, K;
                                               //   conv2d: N, H, W, C, K, R, S, P, Q,
                                               //   pads, strides, dilations

A partition's record keeps its spec, whose static dims :meth:`EntryInfo.args` packs as
those arguments (with the run-time ones of ``KernelSpec.dynamic_dims`` read off the
operands) when a shape signature is bound. The split-k workspace holds ``grid_m *
grid_n`` ints that must be zero before the first launch; the kernel leaves it zeroed
again. Launch geometry (grid, block, dynamic shared memory) is computed in Python by
:class:`EntryInfo`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from partita.lowering.contracts import contract_constant, key_digest

from .kernels import CTYPES, KernelConfig, KernelSpec, by_kernel_type, entry_contract

_EPILOGUE = {
    "none": "cutlass::epilogue::thread::LinearCombination<{args}>",
    "bias": "cutlass::epilogue::thread::LinearCombination<{args}>",
    "bias_relu": "cutlass::epilogue::thread::LinearCombinationRelu<{args}>",
    "bias_gelu": "cutlass::epilogue::thread::LinearCombinationGELU<{args}>",
    # LinearCombinationGELU's own form with the tanh approximation (GELU_taylor) instead of erf.
    "bias_gelu_tanh": "cutlass::epilogue::thread::LinearCombinationGeneric<cutlass::epilogue::thread::GELU_taylor, "
                      "{args}, cutlass::epilogue::thread::ScaleType::Default, "
                      "cutlass::FloatRoundStyle::round_to_nearest, true>",
    "residual": "cutlass::epilogue::thread::LinearCombination<{args}>",
}
"""The thread epilogue of each ``KernelSpec.epilogue`` (``{args}``: output type, vector
width, accumulator and compute types)."""
_SPLIT_K_EPILOGUE = {
    "bias_relu": "cutlass::epilogue::thread::LinearCombinationGeneric<cutlass::epilogue::thread::ReLu, {args}>",
}
"""Where a serial split-k kernel needs another thread epilogue. LinearCombinationRelu
turns ReLU off on the partial sums with a NaN threshold, which CUTLASS 4's NaN-propagating
``ReLu`` passes into every output (all NaN, seen on an H200); LinearCombinationGeneric
skips its activation on those partitions instead."""


def thread_epilogue(spec: KernelSpec, cfg: KernelConfig, args: str) -> str:
    """The C++ thread epilogue of ``spec`` under ``cfg`` (``args``: output type, vector
    width, accumulator and compute types)."""
    table = _SPLIT_K_EPILOGUE if cfg.split_k > 1 else {}
    return table.get(spec.epilogue, _EPILOGUE[spec.epilogue]).format(args=args)


_HEADERS = (
    "cutlass/cutlass.h",
    "cutlass/numeric_types.h",
    "cutlass/gemm/gemm.h",
    "cutlass/gemm/kernel/default_gemm.h",
    "cutlass/gemm/kernel/gemm_batched.h",
    "cutlass/gemm/threadblock/threadblock_swizzle.h",
    "cutlass/conv/conv2d_problem_size.h",
    "cutlass/conv/kernel/default_conv2d_fprop.h",
    "cutlass/epilogue/thread/linear_combination.h",
    "cutlass/epilogue/thread/linear_combination_relu.h",
    "cutlass/epilogue/thread/linear_combination_gelu.h",
)
_BROADCAST_HEADERS = (
    "cutlass/gemm/kernel/default_gemm_universal.h",
    "cutlass/gemm/kernel/gemm_with_fused_epilogue.h",
    "cutlass/epilogue/threadblock/default_epilogue_with_broadcast.h",
    "cutlass/epilogue/thread/linear_combination_residual_block.h",
    "cutlass/conv/kernel/default_conv2d_fprop_with_broadcast.h",
)
"""What a unit with a broadcast epilogue (a bias and a residual) includes besides: only
those units parse them."""

_IDENT_CHARS = re.compile(r"\W")


@dataclass(frozen=True)
class ParamDesc:
    """One entry parameter."""

    name: str
    kind: str     # "ptr" (device pointer) | "int" (32-bit)
    size: int     # bytes in the argument buffer
    role: str     # "input" | "output" | "workspace" | "dim"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _log_tile(swizzle: int, tiles_n: int) -> int:
    # GemmIdentityThreadblockSwizzle<N>::get_log_tile
    if swizzle >= 8 and tiles_n >= 6:
        return 3
    if swizzle >= 4 and tiles_n >= 3:
        return 2
    if swizzle >= 2 and tiles_n >= 2:
        return 1
    return 0


@dataclass(frozen=True)
class EntryInfo:
    """Everything a launcher needs to know about one partition's launch of an entry: the
    entry (shared by every partition of its kernel type) and the partition's spec, whose
    static dims are packed as the entry's dim arguments."""

    name: str                        # the entry's C name (entry_name: by configuration)
    spec: KernelSpec
    config: KernelConfig
    kernel_type: str                 # C++ alias of the CUTLASS kernel
    params: tuple[ParamDesc, ...]
    smem_symbol: str                 # __device__ int holding sizeof(SharedStorage)
    lines: tuple[int, int]           # 1-based inclusive line range of the entry

    @property
    def dynamic_dims(self) -> tuple[str, ...]:
        return self.spec.dynamic_dims

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.config.threads, 1, 1)

    def tiled_shape(self, dims: dict[str, int] | None = None) -> tuple[int, int, int]:
        M, N, _ = self.spec.gemm_problem(dims)
        tb = self.config.threadblock
        if self.spec.op == "batch_matmul":
            k = min(self.spec.batch_count(dims), 65535)
        else:
            k = self.config.split_k
        return _ceil_div(M, tb[0]), _ceil_div(N, tb[1]), k

    def grid(self, dims: dict[str, int] | None = None) -> tuple[int, int, int]:
        """Launch grid for the given run-time dims (mirrors CUTLASS's swizzles)."""
        self._check_dims(dims)
        tm, tn, tk = self.tiled_shape(dims)
        if self.spec.op == "batch_matmul":   # GemmBatchedIdentityThreadblockSwizzle
            return (tm, tn, tk)
        tile = 1 << _log_tile(self.config.swizzle, tn)
        return (tm * tile, _ceil_div(tn, tile), tk)

    def workspace_bytes(self, dims: dict[str, int] | None = None) -> int:
        """Bytes of zero-initialised int workspace (serial split-k semaphores)."""
        if self.config.split_k <= 1:
            return 0
        tm, tn, _ = self.tiled_shape(dims)
        return 4 * tm * tn

    def _check_dims(self, dims) -> None:
        missing = [d for d in self.dynamic_dims if d not in (dims or {})]
        if missing:
            raise ValueError(f"{self.name}: missing run-time dims {missing}")

    def output_shape(self, dims: dict[str, int] | None = None) -> tuple[int, ...]:
        s, d = self.spec, dict(dims or {})
        if s.op in ("dense", "batch_matmul"):
            M, N, _ = s.gemm_problem(d)
            return (M, N) if s.op == "dense" else (s.batch_count(d), M, N)
        n = s.input_shape[0]
        return (d["N"] if n is None else n, *s.conv_output(d), s.filter_shape[0])

    def problem_values(self, dims: dict[str, int] | None = None) -> dict[str, int]:
        """Every problem dim the entry takes (``GEMM_DIMS``): the spec's static ones and
        the run-time ones from ``dims``."""
        self._check_dims(dims)
        static = problem_values(self.spec)
        return {d: int(dims[d]) if static[d] is None else int(static[d])  # type: ignore[index,arg-type]
                for d in GEMM_DIMS[self.spec.op]}

    def args(self, pointers: dict[str, int], dims: dict[str, int] | None = None
             ) -> list[tuple[str, int]]:
        """``[(kind, value)]`` for :func:`partita.runtime.arguments.pack_kernel_args`.

        ``pointers`` maps input names, ``"out"`` and (with split-k)
        ``"workspace"`` to device addresses; ``dims`` gives the run-time dims (the
        static ones come from the spec).
        """
        values = self.problem_values(dims)
        out = []
        for p, kind in zip(self.params, self.arg_kinds):
            if kind == "ptr" and p.name in ("za", "zb") and p.name not in pointers:
                out.append(("ptr", 0))  # an int8 GEMM's zero points are never read: one may stand for both
            elif kind == "ptr":
                out.append(("ptr", int(pointers[p.name])))
            else:
                out.append(("int", values[p.name]))
        return out

    @property
    def arg_kinds(self) -> tuple[str, ...]:
        """The kernel's parameter kinds, known without a launch: what ``args`` packs."""
        return tuple("ptr" if p.kind == "ptr" else "int" for p in self.params)

    @property
    def abi(self) -> tuple[str, ...]:
        """The entry's parameters as ``name:kind:element type``, in order (its contract
        holds them)."""
        return tuple(f"{p.name}:{p.kind}:" + ("int32" if p.kind == "int" or p.role == "workspace"
                                                else self.spec.role_dtype(p.name)) for p in self.params)

    @property
    def contract(self) -> bytes:
        """The digest the entry's cubin holds (``partita.lowering.contracts``): its name,
        kernel type and ABI, which no shape enters."""
        return entry_contract(self.name, type_key(self.spec, self.config), self.abi)


@dataclass(frozen=True)
class CudaSource:
    """One CUDA translation unit and, per label (partition), the launch of its entry."""

    code: str
    entries: dict[str, EntryInfo]
    #: C++ alias -> 1-based inclusive line range of its declaration
    kernel_lines: dict[str, tuple[int, int]] = field(default_factory=dict)

    def entries_at_line(self, line: int) -> list[str]:
        """Labels (partitions) whose entry's code, or whose kernel type declaration, spans
        ``line``."""
        hits = []
        for label, e in self.entries.items():
            lo, hi = e.lines
            klo, khi = self.kernel_lines.get(e.kernel_type, (0, -1))
            if lo <= line <= hi or klo <= line <= khi:
                hits.append(label)
        return hits


# -- C++ fragments ------------------------------------------------------------

def type_key(spec: KernelSpec, cfg: KernelConfig) -> tuple:
    """What makes two partitions' kernels differ. Problem shapes are run-time arguments of
    the entry: one instantiation (and one NVRTC program) per key, shared across shapes."""
    key = (spec.op, spec.dtype, spec.dtype_b, spec.epilogue, cfg.opcode_class, cfg.arch_tag,
           cfg.instruction_shape, cfg.threadblock, cfg.warp_count, cfg.stages,
           cfg.alignment_a, cfg.alignment_b, cfg.alignment_c, cfg.split_k,
           cfg.swizzle, cfg.iterator_algorithm, cfg.math)
    return key + (spec.layout, spec.broadcast)


def entry_name(spec: KernelSpec, cfg: KernelConfig) -> str:
    """The C name of the entry of (spec, cfg)'s kernel type: the configuration's CUTLASS
    name and 8 hex digits of its :func:`type_key` (the name alone does not tell every key
    apart: the split-k slice count, a broadcast operand), the same in every run."""
    return f"{_IDENT_CHARS.sub('_', cfg.name or 'cutlass_kernel')}_{key_digest(type_key(spec, cfg))}"


#: The problem dims a runner takes, in order.
GEMM_DIMS = {
    "dense": ("M", "N", "K"),
    "batch_matmul": ("batch", "M", "N", "K"),
    "conv2d": ("N", "H", "W", "C", "K", "R", "S", "P", "Q", "pad_h", "pad_w", "stride_h", "stride_w",
               "dilation_h", "dilation_w"),
}


def problem_values(spec: KernelSpec) -> dict[str, int | None]:
    """The static value of every entry dim (``GEMM_DIMS``; ``None``: read off the
    operands at run time)."""
    if spec.op != "conv2d":
        return {d: getattr(spec, d) for d in GEMM_DIMS[spec.op]}
    n, h, w, c = spec.input_shape  # type: ignore[misc]
    k, r, s, _ = spec.filter_shape  # type: ignore[misc]
    p, q = spec.output_hw
    return {"N": n, "H": h, "W": w, "C": c, "K": k, "R": r, "S": s, "P": p, "Q": q,
            "pad_h": spec.padding[0], "pad_w": spec.padding[1], "stride_h": spec.strides[0],
            "stride_w": spec.strides[1], "dilation_h": spec.dilation[0], "dilation_w": spec.dilation[1]}


def gemm_layout(spec: KernelSpec) -> dict[str, tuple[str, ...]]:
    """Leading dimensions and batch strides of a GEMM's operands, each as the dims whose
    product it is (``()``: a stride of 0, the operand broadcast). The runner spells them
    in C++ and :func:`gemm_strides` evaluates them, so both read one definition.

    A is ``[M,K]`` row-major (``lda = K``) or, transposed, ``[K,M]`` column-major
    (``lda = M``); B is ``[N,K]`` column-major (``ldb = K``) or ``[K,N]`` row-major
    (``ldb = N``); the output is ``[M,N]`` row-major."""
    return {
        "lda": ("M",) if spec.transpose_a else ("K",),
        "ldb": ("K",) if spec.transpose_b else ("N",),
        "ldd": ("N",),
        "stride_a": () if spec.broadcast_a else ("M", "K"),
        "stride_b": () if spec.broadcast_b else ("N", "K"),
        "stride_d": ("M", "N"),
    }


def gemm_strides(spec: KernelSpec, dims: dict[str, int] | None = None) -> dict[str, int]:
    """:func:`gemm_layout` evaluated at the problem's dims (run-time ones from ``dims``)."""
    M, N, K = spec.gemm_problem(dims)
    values = {"M": M, "N": N, "K": K}
    out = {}
    for name, factors in gemm_layout(spec).items():
        v = 1
        for f in factors:
            v *= values[f]
        out[name] = v if factors else 0
    return out


def _c_product(factors: tuple[str, ...]) -> str:
    if not factors:
        return "(int64_t)0"
    return " * ".join(["(int64_t)" + factors[0], *factors[1:]])


def _shape(t) -> str:
    m, n, k = t
    return f"cutlass::gemm::GemmShape<{m}, {n}, {k}>"


def _tn_8bit_gemm_decl(alias: str, spec: KernelSpec, cfg: KernelConfig) -> str:
    """A TN GEMM of 8-bit operands: an Sm80 IMMA GEMM (s8 / u8, i32 accumulators, an i32
    linear combination ``alpha * acc + beta * C``, all integers, saturating MMA) or an Sm89
    FP8 one (E4M3 / E5M2, f32 accumulators through CUTLASS's staged accumulation, not the
    fast-accumulate form, an f32 output)."""
    acc, math = ("int32_t", "OpMultiplyAddSaturate") if spec.is_int8 else ("float", "OpMultiplyAdd")
    epi = thread_epilogue(spec, cfg, f"{acc}, {cfg.alignment_c}, {acc}, {acc}")
    return (
        f"using {alias} = typename cutlass::gemm::kernel::DefaultGemm<\n"
        f"    {CTYPES[spec.dtype]}, cutlass::layout::RowMajor, {cfg.alignment_a},\n"
        f"    {CTYPES[spec.b_dtype]}, cutlass::layout::ColumnMajor, {cfg.alignment_b},\n"
        f"    {acc}, cutlass::layout::RowMajor, {acc}, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm{cfg.arch_tag},\n"
        f"    {_shape(cfg.threadblock)}, {_shape(cfg.warp_shape)}, {_shape(cfg.instruction_shape)},\n"
        f"    {epi},\n"
        f"    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<{cfg.swizzle}>, {cfg.stages}, false,\n"
        f"    cutlass::arch::{math}>::GemmKernel;\n")


def _int8_conv_decl(alias: str, spec: KernelSpec, cfg: KernelConfig) -> str:
    """An Sm80 IMMA implicit-GEMM convolution (fprop, optimized iterators): s8 / u8 NHWC
    data and an OHWI (CUTLASS's KRSC, its "NHWC" filter) s8 / u8 filter, i32 accumulators,
    an i32 linear combination into an i32 NHWC output."""
    epi = thread_epilogue(spec, cfg, f"int32_t, {cfg.alignment_c}, int32_t, int32_t")
    return (
        f"using {alias} = typename cutlass::conv::kernel::DefaultConv2dFprop<\n"
        f"    {CTYPES[spec.dtype]}, cutlass::layout::TensorNHWC, {CTYPES[spec.b_dtype]}, cutlass::layout::TensorNHWC,\n"
        f"    int32_t, cutlass::layout::TensorNHWC, int32_t, cutlass::arch::OpClassTensorOp, "
        f"cutlass::arch::Sm{cfg.arch_tag},\n"
        f"    {_shape(cfg.threadblock)}, {_shape(cfg.warp_shape)}, {_shape(cfg.instruction_shape)},\n"
        f"    {epi},\n"
        f"    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<{cfg.swizzle}>, {cfg.stages},\n"
        f"    cutlass::arch::OpMultiplyAddSaturate, cutlass::conv::IteratorAlgorithm::kOptimized,\n"
        f"    cutlass::conv::StrideSupport::kStrided, {cfg.alignment_a}, {cfg.alignment_b}>::Kernel;\n")


def _kernel_decl(alias: str, spec: KernelSpec, cfg: KernelConfig) -> str:
    if spec.is_int8 and spec.op == "conv2d":
        return _int8_conv_decl(alias, spec, cfg)
    if spec.is_int8 or spec.is_fp8:
        return _tn_8bit_gemm_decl(alias, spec, cfg)
    T = CTYPES[spec.dtype]
    opclass = "cutlass::arch::OpClassTensorOp" if cfg.opcode_class == "tensorop" \
        else "cutlass::arch::OpClassSimt"
    arch = f"cutlass::arch::Sm{cfg.arch_tag}"
    swz = f"cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<{cfg.swizzle}>"
    # 3xTF32 splits each f32 operand into two TF32 parts (three MMAs); plain f32 operands
    # on a tensor-op kernel are TF32.
    mma = "cutlass::arch::OpMultiplyAddFastF32" if cfg.math == "3xtf32" else "cutlass::arch::OpMultiplyAdd"
    common = (f"    {_shape(cfg.threadblock)}, {_shape(cfg.warp_shape)}, "
              f"{_shape(cfg.instruction_shape)},\n")
    if spec.broadcast_epilogue and spec.op == "dense":
        return _broadcast_gemm_decl(alias, spec, cfg, opclass, arch, common, swz, mma)
    if spec.broadcast_epilogue:
        epi = f"{alias}_op"
        default = "DefaultConv2dFpropWithBroadcast"
        prefix = f"using {alias}_op = {_residual_block(spec, cfg)};\n"
    else:
        epi = thread_epilogue(spec, cfg, f"{T}, {cfg.alignment_c}, float, float")
        default, prefix = "DefaultConv2dFprop", ""
    if spec.op == "conv2d":
        algo = {"optimized": "kOptimized", "analytic": "kAnalytic"}[cfg.iterator_algorithm]
        return prefix + (
            f"using {alias} = typename cutlass::conv::kernel::{default}<\n"
            f"    {T}, cutlass::layout::TensorNHWC, {T}, cutlass::layout::TensorNHWC,\n"
            f"    {T}, cutlass::layout::TensorNHWC, float, {opclass}, {arch},\n"
            f"{common}"
            f"    {epi},\n    {swz}, {cfg.stages}, {mma},\n"
            f"    cutlass::conv::IteratorAlgorithm::{algo}, cutlass::conv::StrideSupport::kStrided,\n"
            f"    {cfg.alignment_a}, {cfg.alignment_b}>::Kernel;\n")
    split = "true" if cfg.split_k > 1 else "false"
    layout_a = "cutlass::layout::ColumnMajor" if spec.transpose_a else "cutlass::layout::RowMajor"
    layout_b = "cutlass::layout::ColumnMajor" if spec.transpose_b else "cutlass::layout::RowMajor"
    base = (
        f"typename cutlass::gemm::kernel::DefaultGemm<\n"
        f"    {T}, {layout_a}, {cfg.alignment_a},\n"
        f"    {T}, {layout_b}, {cfg.alignment_b},\n"
        f"    {T}, cutlass::layout::RowMajor, float, {opclass}, {arch},\n"
        f"{common}"
        f"    {epi},\n    {swz}, {cfg.stages}, {split}, {mma}>::GemmKernel")
    if spec.op == "dense":
        return f"using {alias} = {base};\n"
    return (
        f"using {alias}_base = {base};\n"
        f"using {alias} = cutlass::gemm::kernel::GemmBatched<\n"
        f"    typename {alias}_base::Mma, typename {alias}_base::Epilogue,\n"
        f"    cutlass::gemm::threadblock::GemmBatchedIdentityThreadblockSwizzle>;\n")


def _residual_block(spec: KernelSpec, cfg: KernelConfig) -> str:
    """The broadcast epilogue's thread op: ``unary((acc + bias) + C)`` in f32, ``unary``
    the identity or, for ``bias_residual_relu``, ReLU."""
    T = CTYPES[spec.dtype]
    unary = "ReLu" if spec.epilogue.endswith("_relu") else "Identity"
    return (f"cutlass::epilogue::thread::LinearCombinationResidualBlock<{T}, float, float, {T}, {cfg.alignment_c}, "
            f"cutlass::epilogue::thread::Identity, cutlass::plus, cutlass::epilogue::thread::{unary}>")


def _broadcast_gemm_decl(alias: str, spec: KernelSpec, cfg: KernelConfig, opclass: str, arch: str, common: str,
                         swz: str, mma: str) -> str:
    """A dense GEMM with CUTLASS's broadcast epilogue: ``D = (acc + bias) + C``, the bias a
    vector broadcast over the rows and C the residual (``LinearCombinationResidualBlock``
    with identity activation, ``plus`` and identity). The main loop is
    ``DefaultGemmUniversal``'s for the same configuration (so its tiles, stages and math
    are the other dense kernels'); the epilogue reads the bias vector per column beside C."""
    T = CTYPES[spec.dtype]
    op = _residual_block(spec, cfg)
    if cfg.opcode_class == "tensorop":
        epilogue = (f"typename cutlass::epilogue::threadblock::DefaultEpilogueWithBroadcastTensorOp<\n"
                    f"    typename {alias}_base::Epilogue::Shape, typename {alias}_base::Epilogue::WarpMmaOperator,\n"
                    f"    {alias}_base::Epilogue::kPartitionsK, {T}, {T}, {T}, {alias}_op, {cfg.alignment_c}>::Epilogue")
    else:
        epilogue = (f"typename cutlass::epilogue::threadblock::DefaultEpilogueWithBroadcastSimt<\n"
                    f"    typename {alias}_base::Mma::Shape, typename {alias}_base::Mma::Operator,\n"
                    f"    {T}, {T}, {T}, {alias}_op, {cfg.alignment_c}>::Epilogue")
    return (
        f"using {alias}_op = {op};\n"
        f"using {alias}_base = typename cutlass::gemm::kernel::DefaultGemmUniversal<\n"
        f"    {T}, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, {cfg.alignment_a},\n"
        f"    {T}, cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, {cfg.alignment_b},\n"
        f"    {T}, cutlass::layout::RowMajor, float, {opclass}, {arch},\n"
        f"{common}"
        f"    {alias}_op,\n    {swz}, {cfg.stages}, {mma}>::GemmKernel;\n"
        f"using {alias} = cutlass::gemm::kernel::GemmWithFusedEpilogue<\n"
        f"    typename {alias}_base::Mma, {epilogue}, {swz}>;\n")


def _signature(spec: KernelSpec, params: tuple[ParamDesc, ...]) -> str:
    sig = []
    for p in params:
        T = CTYPES[spec.role_dtype(p.name)]
        if p.kind == "int":
            sig.append(f"int {p.name}")
        elif p.role == "input":
            sig.append(f"const {T}* __restrict__ {p.name}")
        elif p.role == "workspace":
            sig.append(f"int* {p.name}")
        else:
            sig.append(f"{T}* {p.name}")
    return ", ".join(sig)


def _runner_name(alias: str) -> str:
    return f"{alias}_run"


def _entry(info: EntryInfo) -> str:
    """The kernel type's ``extern "C"`` entry (every problem dim an argument) and its
    shared-memory size."""
    # With N and K run-time values, ptxas held the sm_90 IMMA main loop to 128 registers
    # and spilled one per K tile; a minimum of one block per SM lets it take the 150 it
    # needs (measured; the FP8 main loop is the same shape; the float kernels keep
    # ptxas's own choice).
    eight_bit = info.spec.is_int8 or info.spec.is_fp8
    bounds = f"{info.config.threads}, 1" if eight_bit else f"{info.config.threads}"
    return (
        f'extern "C" __global__ void __launch_bounds__({bounds})\n'
        f"{info.name}({_signature(info.spec, info.params)}) {{\n"
        f"  {_runner_name(info.kernel_type)}({', '.join(p.name for p in info.params)});\n"
        "}\n"
        f'extern "C" __device__ int {info.smem_symbol} = (int)sizeof(typename {info.kernel_type}::SharedStorage);\n'
    )


def _runner(alias: str, spec: KernelSpec, cfg: KernelConfig) -> str:
    """One ``__noinline__`` device function per distinct kernel: it builds the CUTLASS
    params on the device and runs the kernel (NVRTC compiles its body once)."""
    Kt = alias
    T, TB, TC = (CTYPES[spec.role_dtype(r)] for r in ("x", "w", "out"))
    params = _params(spec, cfg)
    beta = ("1" if spec.source else "0") if spec.is_int8 else "1.0f" if spec.source else "0.0f"
    alpha = "1" if spec.is_int8 else "1.0f"
    src = spec.source or "out"
    # GemmWithFusedEpilogue names its thread op only through its epilogue
    output_op = "Epilogue::OutputOp" if spec.broadcast_epilogue else "OutputOp"
    lines = [f"__device__ __noinline__ void {_runner_name(alias)}({_signature(spec, params)}) {{",
             f"  using Kernel = {Kt};"]
    tb = cfg.threadblock
    if spec.op in ("dense", "batch_matmul"):
        layout = {k: _c_product(v) for k, v in gemm_layout(spec).items()}
        lines += [
            "  cutlass::gemm::GemmCoord problem(M, N, K);",
            f"  {T}* A = const_cast<{T}*>({params[0].name});",
            f"  {TB}* B = const_cast<{TB}*>({params[1].name});",
            f"  {TC}* C = const_cast<{TC}*>({src});",
            f"  typename Kernel::{output_op}::Params epi({alpha}, {beta});",
        ]
        # the bias is one row, broadcast over rows (ldc 0) and batches (stride 0); a
        # residual is [M, N] like the output
        ldc = "0" if spec.bias_is_source else "N"
        if spec.broadcast_epilogue:
            # GemmWithFusedEpilogue's own arguments: C the residual, the bias its broadcast
            # vector (ldr 0: one row for every row), no second output (T)
            lines += [
                "  typename Kernel::Arguments args(cutlass::gemm::GemmUniversalMode::kGemm, problem, 1, epi,",
                f"      A, B, C, out, const_cast<{TC}*>(bias), nullptr, 0, 0, 0, 0, 0, 0, K, K, N, N, 0, 0);",
                "  typename Kernel::Params params(args, 0, 0);",
            ]
        elif spec.op == "dense":
            ws = "workspace" if cfg.split_k > 1 else "nullptr"
            lines += [
                f"  cutlass::gemm::GemmCoord tiled = typename Kernel::ThreadblockSwizzle()"
                f".get_tiled_shape(problem, {{{tb[0]}, {tb[1]}, {tb[2]}}}, {cfg.split_k});",
                f"  typename Kernel::Params params(problem, tiled, {{A, K}}, {{B, K}}, "
                f"{{C, {ldc}}}, {{out, N}}, epi, {ws});",
            ]
        else:
            strc = "(int64_t)0" if spec.bias_is_source else layout["stride_d"]
            lines += [
                f"  cutlass::gemm::GemmCoord tiled((M + {tb[0] - 1}) / {tb[0]}, "
                f"(N + {tb[1] - 1}) / {tb[1]}, gridDim.z);",
                f"  typename Kernel::Params params(problem, tiled, {{A, {layout['lda']}}}, {layout['stride_a']}, "
                f"{{B, {layout['ldb']}}}, {layout['stride_b']}, {{C, {ldc}}}, {strc}, {{out, N}}, "
                f"{layout['stride_d']}, epi, batch);",
            ]
    else:
        bias_layout = ("cutlass::layout::TensorNHWC(cutlass::layout::TensorNHWC::Stride(0))"
                       if spec.bias_is_source else "cutlass::layout::TensorNHWC::packed({N, P, Q, K})")
        lines += [
            "  cutlass::conv::Conv2dProblemSize problem(N, H, W, C, K, R, S, P, Q, pad_h, pad_w, stride_h, stride_w,",
            "      dilation_h, dilation_w, cutlass::conv::Mode::kCrossCorrelation, 1, 1);",
            "  typename Kernel::Arguments args(problem,",
            f"      {{const_cast<{T}*>(x), cutlass::layout::TensorNHWC::packed({{N, H, W, C}})}},",
            f"      {{const_cast<{TB}*>(w), cutlass::layout::TensorNHWC::packed({{K, R, S, C}})}},",
            f"      {{const_cast<{TC}*>({src}), {bias_layout}}},",
            "      {out, cutlass::layout::TensorNHWC::packed({N, P, Q, K})},",
            f"      typename Kernel::EpilogueOutputOp::Params({alpha}, {beta})"
            # the broadcast epilogue's vector: the bias, one row for every output pixel (ldr 0)
            + (f", cutlass::conv::SplitKMode::kSerial, const_cast<{TC}*>(bias), nullptr, 0, 0);"
               if spec.broadcast_epilogue else ");"),
            "  typename Kernel::Params params(args, nullptr);",
        ]
    lines += [
        "  extern __shared__ int partita_smem[];",
        "  Kernel op;",
        "  op(params, *reinterpret_cast<typename Kernel::SharedStorage*>(partita_smem));",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _params(spec: KernelSpec, cfg: KernelConfig) -> tuple[ParamDesc, ...]:
    """The entry's (and its runner's) parameters: pointers, then every problem dim, static
    or not, so one entry serves every shape of its kernel type."""
    ps = [ParamDesc(n, "ptr", 8, "input") for n in spec.input_names]
    ps.append(ParamDesc("out", "ptr", 8, "output"))
    if cfg.split_k > 1:
        ps.append(ParamDesc("workspace", "ptr", 8, "workspace"))
    ps += [ParamDesc(d, "int", 4, "dim") for d in GEMM_DIMS[spec.op]]
    return tuple(ps)


def entry_info(spec: KernelSpec, cfg: KernelConfig, alias: str | None = None,
               lines: tuple[int, int] = (0, 0)) -> EntryInfo:
    """The launch description of a partition of ``spec`` on its kernel type's entry
    (``alias``: the C++ name of its kernel in the unit, by default the configuration's)."""
    name = entry_name(spec, cfg)
    return EntryInfo(name=name, spec=spec, config=cfg, kernel_type=alias or _alias_base(cfg),
                     params=_params(spec, cfg), smem_symbol=f"{name}_smem_bytes", lines=lines)


def _alias_base(cfg: KernelConfig) -> str:
    return _IDENT_CHARS.sub("_", cfg.name or "cutlass_kernel")


def emit_module(kernels: list[tuple[str, KernelSpec, KernelConfig]]) -> CudaSource:
    """One CUDA C++ translation unit with the kernel type of every ``(label, spec,
    config)`` once: declaration, runner, entry, shared-memory size and launch contract.
    ``entries`` maps each label to its :class:`EntryInfo`; labels never enter the code."""
    types: dict[tuple, str] = {}
    decls: list[tuple[str, KernelSpec, KernelConfig]] = []
    plan: dict[str, tuple[KernelSpec, KernelConfig, str]] = {}
    for label, spec, cfg in kernels:
        if label in plan:
            raise ValueError(f"duplicate partition label {label!r}")
        key = type_key(spec, cfg)
        alias = types.get(key)
        if alias is None:
            base = _alias_base(cfg)
            alias, i = base, 1
            while alias in types.values():
                i += 1
                alias = f"{base}_v{i}"
            types[key] = alias
            decls.append((alias, spec, cfg))
        plan[label] = (spec, cfg, alias)
    names = [entry_name(spec, cfg) for _, spec, cfg in decls]
    if len(set(names)) != len(names):
        raise ValueError(f"two kernel types share an entry name: {sorted(names)}")

    out: list[str] = ["// Generated by partita.lowering.cutlass -- one translation unit per CUTLASS "
                      "kernel configuration.\n"]
    broadcast = any(spec.broadcast_epilogue for _, spec, _ in decls)
    out += [f"#include <{h}>\n" for h in _HEADERS + _BROADCAST_HEADERS * broadcast]
    out.append("\n")

    def cur_line() -> int:
        return "".join(out).count("\n") + 1

    kernel_lines: dict[str, tuple[int, int]] = {}
    entry_lines: dict[str, tuple[int, int]] = {}
    contracts = []
    for alias, spec, cfg in decls:
        text = _kernel_decl(alias, spec, cfg) + _runner(alias, spec, cfg)
        lo = cur_line()
        out.append(text)
        kernel_lines[alias] = (lo, lo + text.count("\n") - 1)
        info = entry_info(spec, cfg, alias)
        text = _entry(info)
        lo = cur_line()
        out.append(text)
        entry_lines[alias] = (lo, lo + text.count("\n") - 1)
        contracts.append(contract_constant(info.name, info.contract) + "\n")
    out.append("\n// Launch contracts (partita.lowering.contracts), checked at load\n")
    out += contracts
    entries = {label: entry_info(spec, cfg, alias, entry_lines[alias]) for label, (spec, cfg, alias) in plan.items()}
    return CudaSource(code="".join(out), entries=entries, kernel_lines=kernel_lines)


def emit_units(kernels: list[tuple[str, KernelSpec, KernelConfig]]) -> list[CudaSource]:
    """One translation unit per kernel type of ``kernels`` (in order of first use): each
    depends on its configuration alone, so NVRTC compiles it once for every module and
    shape that uses it (the cubin cache keys it by its text)."""
    return [emit_module(group) for group in by_kernel_type(kernels, type_key)]
