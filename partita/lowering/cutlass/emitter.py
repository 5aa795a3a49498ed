"""CUDA C++ emission for CUTLASS partitions.

:func:`emit_module` turns ``[(entry_name, KernelSpec, KernelConfig), ...]``
into ONE translation unit.  Each distinct CUTLASS kernel type is declared once
(``using <name> = ...;``) and every partition gets an ``extern "C" __global__``
entry that builds the kernel's ``Params`` on the device from plain pointers and
sizes, so no host compiler is needed.

Entry ABI (C calling convention, all parameters by value)::

    entry(const T* in_0, ..., const T* in_k,   // partition inputs, in order:
                                               //   dense: x, w[, bias]
                                               //   batch_matmul: a, b[, bias]
                                               //   conv2d: x, w[, bias]
          T* out,                              // the output tensor
                                               //   (an int8 GEMM: x, w, za, zb[, bias],
                                               //   i32 bias and output)
          int* workspace,                      // ONLY when split_k > 1
          int dyn_0, ...)                      // run-time dims, in the order of
                                               //   KernelSpec.dynamic_dims:
                                               //   dense: M; batch_matmul: those of
                                               //   batch, M, N, K; conv2d: N

The split-k workspace holds ``grid_m * grid_n`` ints that must be zero before
the first launch; the kernel leaves it zeroed again.  Launch geometry (grid,
block, dynamic shared memory) is computed in Python by :class:`EntryInfo`.
Static dimensions are constants the entry passes to its kernel's runner, which takes every
GEMM dim as an argument: entries of one configuration share one instantiation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from partita.lowering.contracts import contract_constant

from .kernels import DTYPE_BYTES, KernelConfig, KernelSpec, entry_contract

_CTYPE = {"float16": "cutlass::half_t", "bfloat16": "cutlass::bfloat16_t", "float32": "float",
          "int8": "int8_t", "uint8": "uint8_t", "int32": "int32_t"}
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

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    """Everything a launcher needs to know about one entry."""

    name: str
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
        n = s.input_shape[0] if s.input_shape[0] is not None else d["N"]
        p, q = s.output_hw
        return (n, p, q, s.filter_shape[0])

    def args(self, pointers: dict[str, int], dims: dict[str, int] | None = None
             ) -> list[tuple[str, int]]:
        """``[(kind, value)]`` for :func:`partita.runtime.arguments.pack_kernel_args`.

        ``pointers`` maps input names, ``"out"`` and (with split-k)
        ``"workspace"`` to device addresses; ``dims`` gives the run-time dims.
        """
        self._check_dims(dims)
        out = []
        for p, kind in zip(self.params, self.arg_kinds):
            if kind == "ptr" and p.name in ("za", "zb") and p.name not in pointers:
                out.append(("ptr", 0))  # an int8 GEMM's zero points are never read: one may stand for both
            elif kind == "ptr":
                out.append(("ptr", int(pointers[p.name])))
            else:
                out.append(("int", int(dims[p.name])))  # type: ignore[index]
        return out

    @property
    def arg_kinds(self) -> tuple[str, ...]:
        """The kernel's parameter kinds, known without a launch: what ``args`` packs."""
        return tuple("ptr" if p.kind == "ptr" else "int" for p in self.params)


@dataclass(frozen=True)
class CudaSource:
    """One CUDA translation unit and its per-entry metadata."""

    code: str
    entries: dict[str, EntryInfo]
    #: C++ alias -> 1-based inclusive line range of its declaration
    kernel_lines: dict[str, tuple[int, int]] = field(default_factory=dict)

    def entries_at_line(self, line: int) -> list[str]:
        """Entries whose own code, or whose kernel type declaration, spans ``line``."""
        hits = []
        for e in self.entries.values():
            lo, hi = e.lines
            klo, khi = self.kernel_lines.get(e.kernel_type, (0, -1))
            if lo <= line <= hi or klo <= line <= khi:
                hits.append(e.name)
        return hits


# -- C++ fragments ------------------------------------------------------------

def _type_key(spec: KernelSpec, cfg: KernelConfig) -> tuple:
    """What makes two entries' runners differ. Problem shapes are run-time arguments of
    the runner: one instantiation per configuration, shared across shapes."""
    key = (spec.op, spec.dtype, spec.dtype_b, spec.epilogue, cfg.opcode_class, cfg.arch_tag,
           cfg.instruction_shape, cfg.threadblock, cfg.warp_count, cfg.stages,
           cfg.alignment_a, cfg.alignment_b, cfg.alignment_c, cfg.split_k,
           cfg.swizzle, cfg.iterator_algorithm, cfg.math)
    return key + (spec.layout, spec.broadcast)


#: The problem dims a runner takes, in order.
GEMM_DIMS = {
    "dense": ("M", "N", "K"),
    "batch_matmul": ("batch", "M", "N", "K"),
    "conv2d": ("N", "H", "W", "C", "K", "R", "S", "P", "Q", "pad_h", "pad_w", "stride_h", "stride_w",
               "dilation_h", "dilation_w"),
}


def _problem_values(spec: KernelSpec) -> dict[str, int | None]:
    """The static value of every runner dim (``None``: the entry's run-time argument)."""
    if spec.op != "conv2d":
        return {"batch": spec.batch, "M": spec.M, "N": spec.N, "K": spec.K}
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


def _int8_gemm_decl(alias: str, spec: KernelSpec, cfg: KernelConfig) -> str:
    """An Sm80 IMMA GEMM: s8 / u8 operands (TN), i32 accumulators, an i32 linear
    combination (``alpha * acc + beta * C``, all integers) into an i32 output."""
    epi = _EPILOGUE[spec.epilogue].format(args=f"int32_t, {cfg.alignment_c}, int32_t, int32_t")
    return (
        f"using {alias} = typename cutlass::gemm::kernel::DefaultGemm<\n"
        f"    {_CTYPE[spec.dtype]}, cutlass::layout::RowMajor, {cfg.alignment_a},\n"
        f"    {_CTYPE[spec.b_dtype]}, cutlass::layout::ColumnMajor, {cfg.alignment_b},\n"
        f"    int32_t, cutlass::layout::RowMajor, int32_t, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm{cfg.arch_tag},\n"
        f"    {_shape(cfg.threadblock)}, {_shape(cfg.warp_shape)}, {_shape(cfg.instruction_shape)},\n"
        f"    {epi},\n"
        f"    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<{cfg.swizzle}>, {cfg.stages}, false,\n"
        f"    cutlass::arch::OpMultiplyAddSaturate>::GemmKernel;\n")


def _kernel_decl(alias: str, spec: KernelSpec, cfg: KernelConfig) -> str:
    if spec.is_int8:
        return _int8_gemm_decl(alias, spec, cfg)
    T = _CTYPE[spec.dtype]
    opclass = "cutlass::arch::OpClassTensorOp" if cfg.opcode_class == "tensorop" \
        else "cutlass::arch::OpClassSimt"
    arch = f"cutlass::arch::Sm{cfg.arch_tag}"
    epi = _EPILOGUE[spec.epilogue].format(args=f"{T}, {cfg.alignment_c}, float, float")
    swz = f"cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<{cfg.swizzle}>"
    # 3xTF32 splits each f32 operand into two TF32 parts (three MMAs); plain f32 operands
    # on a tensor-op kernel are TF32.
    mma = "cutlass::arch::OpMultiplyAddFastF32" if cfg.math == "3xtf32" else "cutlass::arch::OpMultiplyAdd"
    common = (f"    {_shape(cfg.threadblock)}, {_shape(cfg.warp_shape)}, "
              f"{_shape(cfg.instruction_shape)},\n")
    if spec.op == "conv2d":
        algo = {"optimized": "kOptimized", "analytic": "kAnalytic"}[cfg.iterator_algorithm]
        return (
            f"using {alias} = typename cutlass::conv::kernel::DefaultConv2dFprop<\n"
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


def _signature(spec: KernelSpec, params: tuple[ParamDesc, ...]) -> str:
    sig = []
    for p in params:
        T = _CTYPE[spec.role_dtype(p.name)]
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


def _runner_params(spec: KernelSpec, cfg: KernelConfig) -> tuple[ParamDesc, ...]:
    """The runner's parameters: the entry's pointers, then every problem dim (static or
    not), so one runner serves every shape of its configuration."""
    pointers = tuple(p for p in _params(spec, cfg) if p.kind == "ptr")
    return pointers + tuple(ParamDesc(d, "int", 4, "dim") for d in GEMM_DIMS[spec.op])


def _entry(info: EntryInfo) -> str:
    """The partition's ``extern "C"`` entry: a thin wrapper around its kernel's runner,
    so partitions with the same kernel share one compiled body; static dims are passed
    as constants."""
    spec = info.spec
    static = _problem_values(spec)
    args = ", ".join(p.name if p.kind == "ptr" or static[p.name] is None else str(int(static[p.name]))  # type: ignore[arg-type]
                     for p in _runner_params(spec, info.config))
    return (
        f'extern "C" __global__ void __launch_bounds__({info.config.threads})\n'
        f"{info.name}({_signature(info.spec, info.params)}) {{\n"
        f"  {_runner_name(info.kernel_type)}({args});\n"
        "}\n"
        f'extern "C" __device__ int {info.smem_symbol} = (int)sizeof(typename {info.kernel_type}::SharedStorage);\n'
    )


def _runner(alias: str, spec: KernelSpec, cfg: KernelConfig) -> str:
    """One ``__noinline__`` device function per distinct kernel: it builds the CUTLASS
    params on the device and runs the kernel (NVRTC compiles its body once)."""
    Kt = alias
    T, TB, TC = (_CTYPE[spec.role_dtype(r)] for r in ("x", "w", "out"))
    params = _runner_params(spec, cfg)
    beta = ("1" if spec.source else "0") if spec.is_int8 else "1.0f" if spec.source else "0.0f"
    alpha = "1" if spec.is_int8 else "1.0f"
    src = spec.source or "out"
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
            f"  typename Kernel::OutputOp::Params epi({alpha}, {beta});",
        ]
        # the bias is one row, broadcast over rows (ldc 0) and batches (stride 0); a
        # residual is [M, N] like the output
        ldc = "0" if spec.has_bias else "N"
        if spec.op == "dense":
            ws = "workspace" if cfg.split_k > 1 else "nullptr"
            lines += [
                f"  cutlass::gemm::GemmCoord tiled = typename Kernel::ThreadblockSwizzle()"
                f".get_tiled_shape(problem, {{{tb[0]}, {tb[1]}, {tb[2]}}}, {cfg.split_k});",
                f"  typename Kernel::Params params(problem, tiled, {{A, K}}, {{B, K}}, "
                f"{{C, {ldc}}}, {{out, N}}, epi, {ws});",
            ]
        else:
            strc = "(int64_t)0" if spec.has_bias else layout["stride_d"]
            lines += [
                f"  cutlass::gemm::GemmCoord tiled((M + {tb[0] - 1}) / {tb[0]}, "
                f"(N + {tb[1] - 1}) / {tb[1]}, gridDim.z);",
                f"  typename Kernel::Params params(problem, tiled, {{A, {layout['lda']}}}, {layout['stride_a']}, "
                f"{{B, {layout['ldb']}}}, {layout['stride_b']}, {{C, {ldc}}}, {strc}, {{out, N}}, "
                f"{layout['stride_d']}, epi, batch);",
            ]
    else:
        bias_layout = ("cutlass::layout::TensorNHWC(cutlass::layout::TensorNHWC::Stride(0))"
                       if spec.has_bias else "cutlass::layout::TensorNHWC::packed({N, P, Q, K})")
        lines += [
            "  cutlass::conv::Conv2dProblemSize problem(N, H, W, C, K, R, S, P, Q, pad_h, pad_w, stride_h, stride_w,",
            "      dilation_h, dilation_w, cutlass::conv::Mode::kCrossCorrelation, 1, 1);",
            "  typename Kernel::Arguments args(problem,",
            f"      {{const_cast<{T}*>(x), cutlass::layout::TensorNHWC::packed({{N, H, W, C}})}},",
            f"      {{const_cast<{T}*>(w), cutlass::layout::TensorNHWC::packed({{K, R, S, C}})}},",
            f"      {{const_cast<{T}*>({src}), {bias_layout}}},",
            "      {out, cutlass::layout::TensorNHWC::packed({N, P, Q, K})},",
            f"      typename Kernel::EpilogueOutputOp::Params(1.0f, {beta}));",
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
    ps = [ParamDesc(n, "ptr", 8, "input") for n in spec.input_names]
    ps.append(ParamDesc("out", "ptr", 8, "output"))
    if cfg.split_k > 1:
        ps.append(ParamDesc("workspace", "ptr", 8, "workspace"))
    ps += [ParamDesc(d, "int", 4, "dim") for d in spec.dynamic_dims]
    return tuple(ps)


def emit_module(kernels: list[tuple[str, KernelSpec, KernelConfig]]) -> CudaSource:
    """Emit one CUDA C++ translation unit with an entry per ``(name, spec, config)``."""
    seen_names: set[str] = set()
    types: dict[tuple, str] = {}
    decls: list[tuple[str, KernelSpec, KernelConfig]] = []
    plan: list[tuple[str, KernelSpec, KernelConfig, str]] = []
    used_aliases: set[str] = set()
    for name, spec, cfg in kernels:
        if not _IDENT.match(name):
            raise ValueError(f"entry name {name!r} is not a C identifier")
        if name in seen_names:
            raise ValueError(f"duplicate entry name {name!r}")
        seen_names.add(name)
        key = _type_key(spec, cfg)
        alias = types.get(key)
        if alias is None:
            base = re.sub(r"\W", "_", cfg.name or "cutlass_kernel")
            alias, i = base, 1
            while alias in used_aliases:
                i += 1
                alias = f"{base}_v{i}"
            used_aliases.add(alias)
            types[key] = alias
            decls.append((alias, spec, cfg))
        plan.append((name, spec, cfg, alias))

    out: list[str] = ["// Generated by partita.lowering.cutlass -- one TU per module.\n"]
    out += [f"#include <{h}>\n" for h in _HEADERS]
    out.append("\n")

    def cur_line() -> int:
        return "".join(out).count("\n") + 1

    kernel_lines: dict[str, tuple[int, int]] = {}
    for alias, spec, cfg in decls:
        text = _kernel_decl(alias, spec, cfg) + _runner(alias, spec, cfg)
        lo = cur_line()
        out.append(text)
        kernel_lines[alias] = (lo, lo + text.count("\n") - 1)
    out.append("\n")

    entries: dict[str, EntryInfo] = {}
    for name, spec, cfg, alias in plan:
        info = EntryInfo(name=name, spec=spec, config=cfg, kernel_type=alias,
                         params=_params(spec, cfg), smem_symbol=f"{name}_smem_bytes",
                         lines=(0, 0))
        text = _entry(info)
        lo = cur_line()
        out.append(text)
        info = EntryInfo(**{**info.__dict__, "lines": (lo, lo + text.count("\n") - 1)})
        entries[name] = info
    out.append("\n// Launch contracts (partita.lowering.contracts), checked at load\n")
    out += [contract_constant(name, entry_contract(name, spec, cfg)) + "\n" for name, spec, cfg, _ in plan]
    return CudaSource(code="".join(out), entries=entries, kernel_lines=kernel_lines)


def element_bytes(spec: KernelSpec) -> int:
    return DTYPE_BYTES[spec.dtype]


def output_bytes(spec: KernelSpec) -> int:
    return DTYPE_BYTES[spec.out_dtype]
