"""CUTLASS kernel specifications and configuration choice.

A :class:`KernelSpec` says *what* a partition computes (operation, data type,
epilogue and problem shape, with ``None`` for a dimension that is only known at
run time).  :func:`choose_config` decides *how* CUTLASS computes it
(:class:`KernelConfig`: opcode class, tile shapes, stages, alignments, split-k).
Both are plain frozen dataclasses, independent of any IR, so a pass can build
them from whatever it matches.

Every kernel here is a CUTLASS 2.x device kernel (``DefaultGemm``,
``GemmBatched``, ``DefaultConv2dFprop``) tuned for ``Sm80`` (or ``Sm50`` for the
SIMT fallback); such kernels run unchanged on sm_80 .. sm_90.

Quantized GEMMs (``nn.matmul_integer``) are ``dense`` specs of dtype ``int8`` / ``uint8``
(A's type; ``dtype_b`` names B's when it differs, u8 x s8): int8 tensor cores (IMMA,
``mma.sync.m16n8k32`` with ``satfinite``, CUTLASS's only Sm80 int8 form), i32 accumulation,
an i32 output and an i32 epilogue (``D = acc + C``, C the bias row), so every sum is
exact. They read A row-major and B column-major (TN), 16 elements (bytes) per access.
Quantized convolutions (``nn.conv_integer``, NHWC / OHWI) are ``conv2d`` specs of the same
dtypes on the same IMMA path: an implicit GEMM whose K (``R * S * C``) is read 16 channels
per access, so C must be a multiple of 16.

FP8 GEMMs (``nn.matmul_float8``) are ``dense`` specs of dtype ``float_e4m3`` /
``float_e5m2`` (``dtype_b`` for B's when it differs): Ada's and Hopper's ``mma.sync``
m16n8k32 on 8-bit floats (``Sm89``: CUTLASS's staged accumulation, its partial sums
promoted into f32 accumulators, not the fast-accumulate form), an f32 output and no epilogue
(the dequantize scale and any bias are the next native kernel's); TN, 16 elements
per access like int8.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
from cutlass_library.conv2d_operation import Conv2dOperation
from cutlass_library.gemm_operation import GemmOperation
from cutlass_library.library import (
    ConvKind,
    DataType,
    DataTypeNames,
    EpilogueFunctor,
    GemmKind,
    IteratorAlgorithm,
    LayoutType,
    MathInstruction,
    MathOperation,
    OpcodeClass,
    StrideSupport,
    TensorDescription,
    TileDescription,
)

from partita.backends.gemm_forms import why_not_int8_gemm
from partita.lowering.contracts import digest_fields
from partita.lowering.cutlass.tuning import SM80_CANDIDATES, SM80_SPLITS, parse_sm80_label, sm80_label
from partita.target.arch import max_dynamic_smem

OPS = ("dense", "batch_matmul", "conv2d")
DTYPES = ("float16", "bfloat16", "float32", "int8", "uint8", "float_e4m3", "float_e5m2")
#: 16-bit float types: tensor cores with mma 16x8x16 and f32 accumulation
HALF_DTYPES = ("float16", "bfloat16")
#: 8-bit integer types: tensor cores with mma 16x8x32 (IMMA) and i32 accumulation
INT8_DTYPES = ("int8", "uint8")
#: 8-bit float types: FP8 tensor cores (sm_89 and later) with mma 16x8x32 and f32 accumulation
FP8_DTYPES = ("float_e4m3", "float_e5m2")

EPILOGUES = ("none", "bias", "bias_relu", "bias_gelu", "bias_gelu_tanh", "residual", "bias_residual",
             "bias_residual_relu")
#: epilogues each op supports; ``residual`` adds an ``[M, N]`` tensor (the source C of
#: CUTLASS's linear combination, ``D = acc + 1 * C`` with C's rows ``N`` apart);
#: ``bias_gelu`` is GELU's erf form, ``bias_gelu_tanh`` its tanh approximation (GPT-2's);
#: ``bias_residual`` is ``D = (acc + bias) + C``, a pre-norm transformer's projection
#: back into the residual stream (CUTLASS's broadcast epilogue,
#: ``LinearCombinationResidualBlock``: the bias a broadcast vector, the residual C), and
#: ``bias_residual_relu`` its ReLU, ``relu((acc + bias) + C)``: a ResNet block's second
#: convolution with its batch norm folded, the shortcut and the block's ReLU
SUPPORTED_EPILOGUES = {
    # bias_residual_relu: a pointwise convolution's GEMM view on Hopper (sm90.hopper_spec);
    # no dense pattern makes one
    "dense": ("none", "bias", "bias_relu", "bias_gelu", "bias_gelu_tanh", "residual", "bias_residual",
              "bias_residual_relu"),
    "batch_matmul": ("none", "bias"),
    "conv2d": ("none", "bias", "bias_relu", "bias_residual", "bias_residual_relu"),
}
#: Element types by name, as the runtime checks a call's operands
NUMPY_DTYPES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
                "float32": np.dtype(np.float32), "int8": np.dtype(np.int8), "uint8": np.dtype(np.uint8),
                "int32": np.dtype(np.int32), "float_e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
                "float_e5m2": np.dtype(ml_dtypes.float8_e5m2)}
#: size in bytes of one element
DTYPE_BYTES = {name: dtype.itemsize for name, dtype in NUMPY_DTYPES.items()}
#: the C++ type each names in CUTLASS's templates (the Sm80 and the Hopper emitters)
CTYPES = {"float16": "cutlass::half_t", "bfloat16": "cutlass::bfloat16_t", "float32": "float", "int8": "int8_t",
          "uint8": "uint8_t", "int32": "int32_t", "float_e4m3": "cutlass::float_e4m3_t",
          "float_e5m2": "cutlass::float_e5m2_t"}
_CUTLASS_DTYPE = {"float16": DataType.f16, "bfloat16": DataType.bf16, "float32": DataType.f32,
                  "int8": DataType.s8, "uint8": DataType.u8, "int32": DataType.s32, "float_e4m3": DataType.e4m3,
                  "float_e5m2": DataType.e5m2}


class UnsupportedKernel(ValueError):
    """The spec cannot be lowered to a CUTLASS kernel."""


def _pair(v, what: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    t = tuple(int(x) for x in v)
    if len(t) != 2:
        raise UnsupportedKernel(f"{what} must have 2 entries, got {v!r}")
    return t  # type: ignore[return-value]


def _why_not_fp8(spec: KernelSpec) -> str:
    """Why an FP8 spec has no Sm89 kernel here ('' when it has one)."""
    if spec.op != "dense" or spec.layout != "tn":
        return "FP8 CUTLASS GEMMs are dense (TN: A row-major, B [N, K] column-major)"
    if spec.epilogue != "none":
        return f"FP8 CUTLASS GEMMs take no {spec.epilogue} epilogue (the scale and bias follow in a native kernel)"
    if spec.K is None or spec.K % 16:
        return f"FP8 tensor-op GEMMs read 16 elements per access: K = {spec.K} is not a multiple of 16"
    if spec.N is None or spec.N % 4:
        return f"FP8 tensor-op GEMMs write 4 f32 per access: N = {spec.N} is not a multiple of 4"
    return ""


def _why_not_int8(spec: KernelSpec) -> str:
    """Why an int8 spec has no IMMA kernel here ('' when it has one)."""
    if spec.op == "conv2d":
        if spec.epilogue not in ("none", "bias"):
            return f"int8 CUTLASS convolutions take no {spec.epilogue} epilogue (an i32 bias row at most)"
        k, r, s, c = spec.filter_shape  # type: ignore[misc]
        if c % 16:
            # the optimized iterators read 16 channels (bytes) per access; fewer-channel
            # iterators would read 4 or 8, not worth a kernel type: the native kernel takes it
            return f"int8 CUTLASS convolutions read 16 channels per access: C = {c} is not a multiple of 16"
        return why_not_int8_gemm(k, r * s * c)
    if spec.op != "dense" or spec.layout != "tn":
        return "int8 CUTLASS GEMMs are dense (TN: A row-major, B [N, K] column-major) or NHWC convolutions"
    if spec.epilogue not in ("none", "bias"):
        return f"int8 CUTLASS GEMMs take no {spec.epilogue} epilogue (an i32 bias row at most)"
    return why_not_int8_gemm(spec.N, spec.K)


@dataclass(frozen=True)
class KernelSpec:
    """What one CUTLASS partition computes.

    * ``dense``: ``out[M,N] = x[M,K] @ w[N,K]^T (+ bias[N])``; A row-major, B
      column-major (CUTLASS "tn"), output row-major.  ``M`` may be ``None``.
    * ``batch_matmul``: ``out[b,M,N] = op(a[b]) @ op(b[b]) (+ bias[N])`` where A is
      ``[M,K]`` row-major, or ``[K,M]`` with ``transpose_a``, and B is ``[N,K]`` with
      ``transpose_b`` (the default), or ``[K,N]`` without; ``broadcast_a`` /
      ``broadcast_b`` make that operand one matrix shared by every batch (batch stride
      0). Any of ``batch``, ``M``, ``N``, ``K`` may be ``None`` (a run-time argument).
    * ``conv2d``: NHWC input ``[N,H,W,C]``, OHWI filter ``[K,R,S,C]``, output
      NHWC ``[N,P,Q,K]`` (+ bias[K]); ``N`` may be ``None``.  ``padding`` is
      ``(top, left, bottom, right)``.  In ``int8`` / ``uint8`` (``dtype_b``: the
      filter's type when it differs) the output and bias are i32.

    float16 accumulates in float32; the output has the input's dtype.  Use the
    ``dense`` / ``batch_matmul`` / ``conv2d`` class methods to build one.
    """

    op: str
    dtype: str
    epilogue: str = "none"
    M: int | None = None
    N: int | None = None
    K: int | None = None
    batch: int | None = None
    #: conv2d only: (N, H, W, C) input (``None``: a run-time N, H or W), (K, R, S, C) filter
    input_shape: tuple[int | None, int | None, int | None, int] | None = None
    filter_shape: tuple[int, int, int, int] | None = None
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    #: batch_matmul only: CUTLASS's layout letters (A then B; ``t`` row-major, ``n``
    #: column-major: ``tn`` is a[M,K] times b[N,K]) and the operand broadcast over the
    #: batch ("", "a" or "b"); strings, as kernel records hold no booleans
    layout: str = "tn"
    broadcast: str = ""
    #: int8 GEMMs and convolutions only: B's element type when it is not A's (``uint8``
    #: A times ``int8`` B)
    dtype_b: str = ""

    # -- constructors ------------------------------------------------------
    @classmethod
    def dense(cls, M: int | None, N: int, K: int, dtype: str = "float16",
              epilogue: str = "none", dtype_b: str = "") -> KernelSpec:
        return cls(op="dense", dtype=dtype, epilogue=epilogue, M=M, N=N, K=K,
                   dtype_b="" if dtype_b == dtype else dtype_b)

    @property
    def is_int8(self) -> bool:
        """A quantized GEMM: int8 / uint8 operands, i32 accumulation and output."""
        return self.dtype in INT8_DTYPES

    @property
    def is_fp8(self) -> bool:
        """An FP8 GEMM: 8-bit float operands, f32 accumulation and output."""
        return self.dtype in FP8_DTYPES

    @property
    def b_dtype(self) -> str:
        return self.dtype_b or self.dtype

    @property
    def out_dtype(self) -> str:
        """The output's (and the epilogue source's) element type."""
        return "int32" if self.is_int8 else "float32" if self.is_fp8 else self.dtype

    def role_dtype(self, role: str) -> str:
        """The element type of the entry input ``role`` (or ``out``)."""
        if role in ("w", "b", "zb"):
            return self.b_dtype
        if role in ("bias", "residual", "out"):
            return self.out_dtype
        return self.dtype

    @classmethod
    def batch_matmul(cls, batch: int | None, M: int | None, N: int | None, K: int | None,
                     dtype: str = "float16", epilogue: str = "none", *,
                     transpose_a: bool = False, transpose_b: bool = True,
                     broadcast_a: bool = False, broadcast_b: bool = False) -> KernelSpec:
        if broadcast_a and broadcast_b:
            raise UnsupportedKernel("batch_matmul: at most one operand is broadcast over the batch")
        return cls(op="batch_matmul", dtype=dtype, epilogue=epilogue, batch=batch, M=M, N=N, K=K,
                   layout=("n" if transpose_a else "t") + ("n" if transpose_b else "t"),
                   broadcast="a" if broadcast_a else "b" if broadcast_b else "")

    @property
    def transpose_a(self) -> bool:
        """A is stored ``[K, M]`` (column-major)."""
        return self.layout[0] == "n"

    @property
    def transpose_b(self) -> bool:
        """B is stored ``[N, K]`` (column-major), as ``nn.dense`` weights are."""
        return self.layout[1] == "n"

    @property
    def broadcast_a(self) -> bool:
        return self.broadcast == "a"

    @property
    def broadcast_b(self) -> bool:
        return self.broadcast == "b"

    @classmethod
    def conv2d(cls, input_shape, filter_shape, strides=(1, 1), padding=(0, 0),
               dilation=(1, 1), dtype: str = "float16",
               epilogue: str = "none", dtype_b: str = "") -> KernelSpec:
        pad = tuple(int(p) for p in ((padding,) if isinstance(padding, int) else padding))
        if len(pad) == 1:
            pad = pad * 4
        elif len(pad) == 2:
            pad = (pad[0], pad[1], pad[0], pad[1])
        elif len(pad) != 4:
            raise UnsupportedKernel(f"padding must have 1, 2 or 4 entries: {padding!r}")
        n, h, w, c = (None if d is None or d < 0 else int(d) for d in input_shape)  # the IR's ? is negative
        if c is None:
            raise UnsupportedKernel("conv2d needs static input channels")
        return cls(op="conv2d", dtype=dtype, epilogue=epilogue, input_shape=(n, h, w, c),
                   filter_shape=tuple(int(x) for x in filter_shape),
                   strides=_pair(strides, "strides"), padding=pad,  # type: ignore[arg-type]
                   dilation=_pair(dilation, "dilation"), dtype_b="" if dtype_b == dtype else dtype_b)

    # -- validation and derived shapes ------------------------------------
    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise UnsupportedKernel(f"unknown op {self.op!r}")
        if self.dtype not in DTYPES:
            raise UnsupportedKernel(f"unsupported dtype {self.dtype!r}")
        if self.epilogue not in SUPPORTED_EPILOGUES[self.op]:
            raise UnsupportedKernel(f"{self.op} does not support epilogue {self.epilogue!r}")
        if self.dtype_b and not (self.is_int8 and self.dtype_b in INT8_DTYPES
                                 or self.is_fp8 and self.dtype_b in FP8_DTYPES):
            raise UnsupportedKernel(f"operands of {self.dtype} and {self.dtype_b}: only int8 GEMMs mix "
                                    "signedness (u8 x s8), and FP8 GEMMs E4M3 with E5M2")
        if self.op == "conv2d":
            if self.input_shape is None or self.filter_shape is None:
                raise UnsupportedKernel("conv2d needs input_shape and filter_shape")
            if self.input_shape[3] != self.filter_shape[3]:
                raise UnsupportedKernel("conv2d input channels != filter channels (groups unsupported)")
            if any(d is not None and d <= 0 for d in self.output_hw):
                raise UnsupportedKernel("conv2d output is empty")
            if self.padding[0] < 0 or self.padding[1] < 0:
                raise UnsupportedKernel("negative padding")
        elif self.op == "dense":
            if self.N is None or self.K is None:
                raise UnsupportedKernel(f"{self.op}: N and K must be static")
        elif self.layout not in ("tn", "tt", "nn", "nt") or self.broadcast not in ("", "a", "b"):
            raise UnsupportedKernel(f"batch_matmul: bad layout {self.layout!r} / broadcast {self.broadcast!r}")
        if self.is_int8 or self.is_fp8:  # after the shape checks: a convolution's filter channels are read
            why = _why_not_int8(self) if self.is_int8 else _why_not_fp8(self)
            if why:
                raise UnsupportedKernel(why)

    @property
    def output_hw(self) -> tuple[int | None, int | None]:
        """(P, Q) of a conv2d (``None`` for a run-time H or W)."""
        assert self.input_shape
        _, h, w, _ = self.input_shape
        return None if h is None else self._extent(h, 0), None if w is None else self._extent(w, 1)

    def conv_output(self, dims: dict[str, int] | None = None) -> tuple[int, int]:
        """(P, Q) of a conv2d, its run-time H and W from ``dims``."""
        assert self.input_shape
        _, h, w, _ = self.input_shape
        d = dims or {}
        return self._extent(d["H"] if h is None else h, 0), self._extent(d["W"] if w is None else w, 1)

    def _extent(self, size: int, axis: int) -> int:
        """The output extent of a conv2d's spatial ``axis`` (0: H, 1: W) of input ``size``
        (``padding`` is top, left, bottom, right)."""
        assert self.filter_shape
        kernel = self.filter_shape[1 + axis]
        span = size + self.padding[axis] + self.padding[axis + 2] - self.dilation[axis] * (kernel - 1) - 1
        return span // self.strides[axis] + 1

    @property
    def dynamic_dims(self) -> tuple[str, ...]:
        """Names of the run-time dimensions, in entry-argument order."""
        if self.op == "dense":
            return ("M",) if self.M is None else ()
        if self.op == "batch_matmul":
            return tuple(n for n, v in (("batch", self.batch), ("M", self.M), ("N", self.N), ("K", self.K))
                         if v is None)
        n, h, w, _ = self.input_shape  # type: ignore[misc]
        p, q = self.output_hw
        return tuple(name for name, v in (("N", n), ("H", h), ("W", w), ("P", p), ("Q", q)) if v is None)

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the tensor inputs, in entry-argument order. An int8 GEMM also takes
        its two zero points (``za``, ``zb``): the partition passes them, the codegen proved
        them constant zeros, and the kernel does not read them."""
        base = {"dense": ("x", "w"), "batch_matmul": ("a", "b"), "conv2d": ("x", "w")}[self.op]
        if self.is_int8:
            base += ("za", "zb")
        return base + ("bias",) * self.has_bias + ("residual",) * self.has_residual

    @property
    def has_bias(self) -> bool:
        """The epilogue adds a bias row (broadcast over the rows)."""
        return self.epilogue.startswith("bias")

    @property
    def has_residual(self) -> bool:
        """The epilogue adds a tensor of the output's shape (``[M, N]``, ``[N, P, Q, K]``)."""
        return "residual" in self.epilogue

    @property
    def broadcast_epilogue(self) -> bool:
        """A bias and a residual: CUTLASS's broadcast epilogue (the bias its vector)."""
        return self.has_bias and self.has_residual

    @property
    def source(self) -> str:
        """The input read as the epilogue's source C (``beta = 1``): ``"residual"``,
        ``"bias"`` (a row read with ``ldc = 0``), or ``""`` (none: C is unread, ``beta =
        0``). With both, the residual is C and the bias the broadcast vector."""
        return "residual" if self.has_residual else "bias" if self.has_bias else ""

    @property
    def bias_is_source(self) -> bool:
        """The bias row is read as the source C (rows ``ldc = 0`` apart)."""
        return self.source == "bias"

    def gemm_problem(self, dims: dict[str, int] | None = None) -> tuple[int, int, int]:
        """The (implicit) GEMM problem (M, N, K) with run-time dims filled in."""
        d = dict(dims or {})
        if self.op == "conv2d":
            n = self.input_shape[0]  # type: ignore[index]
            k, r, s, c = self.filter_shape  # type: ignore[misc]
            p, q = self.conv_output(d)
            return (d["N"] if n is None else n) * p * q, k, r * s * c
        def dim(name: str) -> int:
            value = getattr(self, name)
            return value if value is not None else d[name]
        return dim("M"), dim("N"), dim("K")

    @property
    def contiguous_extents(self) -> tuple[int | None, int | None, int | None]:
        """The contiguous (innermost) extent of A, B and the output of a GEMM: what
        bounds each operand's vector alignment (``None``: known only at run time)."""
        if self.op == "conv2d":
            c, k = self.filter_shape[3], self.filter_shape[0]  # type: ignore[index]
            return c, c, k
        a = self.M if self.transpose_a else self.K
        b = self.K if self.transpose_b else self.N
        return a, b, self.N

    @property
    def layout_name(self) -> str:
        """CUTLASS's layout letters: A row-major is ``t``, B column-major is ``n``."""
        return self.layout

    def batch_count(self, dims: dict[str, int] | None = None) -> int:
        if self.op != "batch_matmul":
            return 1
        return self.batch if self.batch is not None else dict(dims or {})["batch"]


def problem_dims(spec: KernelSpec, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Every GEMM problem dim (``batch``, ``M``, ``N``, ``K``) read off the operand shapes
    by entry role (``x``/``w`` of a dense, ``a``/``b`` of a batch_matmul, which may have
    any number of batch dims, a static ``batch`` of 1 folding them into M); an
    :class:`UnsupportedKernel` when they contradict the spec's static dims."""
    if spec.op == "dense":
        x, w = shapes["x"], shapes.get("w")  # a dense's N and K are static: x alone will do
        dims = {"M": math.prod(x[:-1]), "N": spec.N if w is None else w[0], "K": x[-1]}
        r = shapes.get("residual")  # read as C with the output's rows: every row, no broadcast
        if r is not None and (math.prod(r) != dims["M"] * dims["N"] or r[-1:] != (dims["N"],)):
            raise UnsupportedKernel(f"the residual {list(r)} is not the output's {dims['M']} x {dims['N']}")
    elif spec.op == "batch_matmul":
        a, b = shapes["a"], shapes["b"]
        if len(a) < 2 or len(b) < 2:
            raise UnsupportedKernel("batch_matmul operands need rank >= 2")
        folded = spec.batch == 1 and not spec.transpose_a
        dims = {
            "batch": math.prod((b if spec.broadcast_a else a)[:-2]),
            "M": math.prod(a[:-1]) if folded else a[-1] if spec.transpose_a else a[-2],
            "K": a[-2] if spec.transpose_a else a[-1],
            "N": b[-2] if spec.transpose_b else b[-1],
        }
        k_b = b[-1] if spec.transpose_b else b[-2]
        if k_b != dims["K"]:
            raise UnsupportedKernel(f"A reduces over {dims['K']} elements, B over {k_b}")
        if folded:
            dims["batch"] = 1
        elif not (spec.broadcast_a or spec.broadcast_b) and math.prod(b[:-2]) != dims["batch"]:
            raise UnsupportedKernel(f"A has {dims['batch']} batches, B {math.prod(b[:-2])}")
    else:
        raise UnsupportedKernel(f"{spec.op} is not a GEMM")
    for name, value in dims.items():
        static = getattr(spec, name)
        if static is not None and static != value:
            raise UnsupportedKernel(f"the kernel is compiled for {name} = {static}, the operands give {value}")
    return dims


@dataclass(frozen=True)
class KernelConfig:
    """How CUTLASS computes a :class:`KernelSpec`."""

    opcode_class: str               # "tensorop" | "simt"
    arch_tag: int                   # 80 -> cutlass::arch::Sm80, 50 -> Sm50
    instruction_shape: tuple[int, int, int]
    threadblock: tuple[int, int, int]
    warp_count: tuple[int, int, int]
    stages: int
    alignment_a: int
    alignment_b: int
    alignment_c: int
    split_k: int = 1
    swizzle: int = 8                # GemmIdentityThreadblockSwizzle<swizzle>
    iterator_algorithm: str = "optimized"   # conv2d only
    #: How the kernel multiplies: "f16" (HMMA, f32 accumulation), "tf32" / "3xtf32"
    #: (f32 operands on tensor cores), "ffma" (exact f32 SIMT), "hfma" (f16 SIMT).
    math: str = ""
    #: CUTLASS procedural name (set by choose_config)
    name: str = field(default="", compare=True)

    @property
    def warp_shape(self) -> tuple[int, int, int]:
        return tuple(t // w for t, w in zip(self.threadblock, self.warp_count))  # type: ignore[return-value]

    @property
    def threads(self) -> int:
        return 32 * math.prod(self.warp_count)


# -- configuration choice ----------------------------------------------------

def _largest_alignment(dtype: str, *extents: int) -> int:
    cands = (8, 4, 2, 1) if dtype in HALF_DTYPES else (4, 2, 1)
    for a in cands:
        if all(e % a == 0 for e in extents):
            return a
    return 1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_floor(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


def _split_k(spec: KernelSpec, tb: tuple[int, int, int]) -> int:
    """Serial split-k slices: only for static, K-heavy problems with few output tiles."""
    if spec.op != "dense" or spec.M is None:
        return 1
    M, N, K = spec.gemm_problem()
    tiles = _ceil_div(M, tb[0]) * _ceil_div(N, tb[1])
    if K < 4 * max(M, N) or tiles >= 32:
        return 1
    slices = min(16, _pow2_floor(64 // tiles), _pow2_floor(K // (4 * tb[2])))
    return slices if slices >= 2 else 1


F32_MATH = ("tf32", "3xtf32", "ffma")


def choose_config(spec: KernelSpec, sm: int = 80, *, f32_math: str = "ffma",
                  split_k_slices: int = 1, kernel: str = "") -> KernelConfig:
    """Pick a CUTLASS 2.x configuration for ``spec`` on compute capability ``sm``.

    ``f32_math`` says how f32 problems multiply (the ``cutlass`` target's ``use_tf32`` /
    ``use_3xtf32``): ``tf32`` and ``3xtf32`` use tensor cores (mma 16x8x8, f32
    accumulation; 3xTF32 is ``OpMultiplyAddFastF32``) when sm >= 80 (GEMMs at any
    alignment, convolutions at alignment 4), ``ffma`` the exact SIMT kernels. ``split_k_slices`` above 1 fixes
    the serial split-k of static dense problems (the target's option).

    * alignment, per operand: the largest of 8/4/2/1 (f16, bf16) or 4/2/1 (f32) elements
      dividing its contiguous extent (``KernelSpec.contiguous_extents``: K or M for A,
      K or N for B, N for the output of a GEMM; C for the conv operands and K for its
      output), 1 for an extent known only at run time;
    * f16 / bf16 on sm >= 80 with A/B alignment >= 2: tensor cores, mma 16x8x16, f32
      accumulation, multistage (cp.async) main loop (bf16 has no SIMT kernel: refused);
    * f32 on sm >= 80 with ``f32_math`` tf32/3xtf32 and A/B alignment 4: tensor cores as
      above, K tile 16; otherwise exact SIMT FFMA, multistage main loop, alignment 1;
    * f16 / bf16 GEMMs on sm >= 80 with an A or B alignment of 1 (odd or run-time
      contiguous extent): tensor cores with the 2-stage register-staged pipeline;
    * anything else (sm < 80, or f16 convolutions with odd C): SIMT, 2-stage ``Sm50``
      pipeline, alignment 1;
    * tile: 128x128 for big problems, 128x64 for medium or run-time M, 64x64
      for small ones or for f16 alignment < 8;
    * serial split-k for static dense problems where K >= 4*max(M,N) and the
      output covers fewer than 32 tiles.

    ``kernel``, a label of ``tuning.SM80_CANDIDATES`` (what ``tune-cutlass-kernels``
    measured fastest), replaces the tile, warps and stages of an f16 / bf16 multistage
    tensor-core GEMM (:func:`pin_config`).
    """
    if sm < 50:
        raise UnsupportedKernel(f"sm_{sm} is not supported")
    if f32_math not in F32_MATH:
        raise UnsupportedKernel(f"unknown f32 math '{f32_math}' (one of {', '.join(F32_MATH)})")
    dt = spec.dtype
    ext_a, ext_b, ext_c = spec.contiguous_extents
    # an extent known only at run time guarantees nothing: one element per access
    align_a = 1 if ext_a is None else _largest_alignment(dt, ext_a)
    align_b = 1 if ext_b is None else _largest_alignment(dt, ext_b)
    align_c = 1 if ext_c is None else _largest_alignment(dt, ext_c)
    align_ab = min(align_a, align_b)

    dyn = bool(spec.dynamic_dims)
    M, N, _ = spec.gemm_problem({d: 0 for d in ("M", "N", "batch")}) if not dyn else (None, None, None)
    if dyn:
        N = spec.N if spec.op != "conv2d" else spec.filter_shape[0]  # type: ignore[index]

    def size_class() -> str:
        if M is None or N is None:
            return "medium"
        if M >= 128 and N >= 128 and M * N >= 128 * 128 * 16:
            return "big"
        if M >= 64 and N >= 64 and M * N >= 64 * 64 * 16:
            return "medium"
        return "small"

    cls = size_class()
    if spec.is_fp8:
        if sm < 89:
            raise UnsupportedKernel(f"FP8 CUTLASS GEMMs need FP8 tensor cores (sm >= 89), not sm_{sm}")
        # K 64 (two m16n8k32 steps per warp tile), 3 stages, and warp tiles no wider than
        # 32x64: the staged accumulation holds two sets of accumulators, so the int8 GEMMs'
        # 64x64 warp tile spills (332 STL/LDL on sm_89). Hopper has no FP8 mma.sync (ptxas
        # converts to f16 for HMMA.16816, with more registers): 32x32 there (0 spills; 32x64
        # spills 10)
        wide = (128, 128, 64) if sm < 90 else (128, 64, 64)
        tb, warps = {"big": (wide, (4, 2, 1)), "medium": ((128, 64, 64), (4, 2, 1)),
                     "small": ((64, 64, 64), (2, 2, 1))}[cls]
        cfg = KernelConfig(opcode_class="tensorop", arch_tag=89, instruction_shape=(16, 8, 32), threadblock=tb,
                           warp_count=warps, stages=3, alignment_a=16, alignment_b=16, alignment_c=4,
                           split_k=1, swizzle=8, iterator_algorithm="", math="fp8")
        return KernelConfig(**{**cfg.__dict__, "name": procedural_name(spec, cfg)})
    if spec.is_int8:
        if sm < 80:
            raise UnsupportedKernel(f"int8 CUTLASS GEMMs need sm >= 80 (mma 16x8x32), not sm_{sm}")
        # CUTLASS's own Sm80 int8 tiles: K 64 (two mma 16x8x32 steps per warp tile), 3 stages;
        # a convolution with the optimized iterators (C % 16 == 0, KernelSpec checks it)
        conv = spec.op == "conv2d"
        tb = {"big": (128, 128, 64), "medium": (128, 64, 64), "small": (64, 64, 64)}[cls]
        cfg = KernelConfig(opcode_class="tensorop", arch_tag=80, instruction_shape=(16, 8, 32),
                           threadblock=tb, warp_count=(2, 2, 1), stages=3, alignment_a=16,
                           alignment_b=16, alignment_c=4, split_k=1, swizzle=4 if conv else 8,
                           iterator_algorithm="optimized" if conv else "", math="imma")
        return KernelConfig(**{**cfg.__dict__, "name": procedural_name(spec, cfg)})
    math_kind = "hfma" if dt == "float16" else "ffma"
    # TF32 takes any alignment: cp.async moves 4, 8 or 16 bytes, so even one f32 works.
    tf32_ok = align_ab == 4 or spec.op != "conv2d"
    if dt == "float32" and f32_math != "ffma" and sm >= 80 and tf32_ok:
        opclass, arch_tag, inst, math_kind = "tensorop", 80, (16, 8, 8), f32_math
        tb = {"big": (128, 128, 16), "medium": (128, 64, 16), "small": (64, 64, 16)}[cls]
        if f32_math == "3xtf32" and cls == "big":
            # 3xTF32 holds big and small parts of every fragment: a 64x64 warp tile needs
            # 255 registers and spills (227 STL); 64x32 (CUTLASS's own 3xTF32 example) fits
            tb = (128, 64, 16)
        warps = (2, 2, 1)
        stages = 3
        align_c = min(align_c, 4)
    elif dt in HALF_DTYPES and sm >= 80 and align_ab >= 2:
        opclass, arch_tag, inst, math_kind = "tensorop", 80, (16, 8, 16), "f16" if dt == "float16" else "bf16"
        if align_ab < 8:
            cls = "small"
        tb = {"big": (128, 128, 32), "medium": (128, 64, 32), "small": (64, 64, 32)}[cls]
        warps = (2, 2, 1)
        stages = 3
        if spec.op == "conv2d":
            # operand alignments must divide the per-thread access; keep the
            # output access no wider than the operand one for simplicity
            align_c = min(align_c, 8)
    elif dt in HALF_DTYPES and sm >= 80 and spec.op != "conv2d":
        # an odd or run-time contiguous extent: cp.async cannot move one 2-byte element,
        # so the 2-stage pipeline loads through registers (LDG) into the same HMMA path
        opclass, arch_tag, inst, math_kind = "tensorop", 80, (16, 8, 16), "f16" if dt == "float16" else "bf16"
        tb, warps, stages = (64, 64, 32), (2, 2, 1), 2
    elif dt == "bfloat16":
        raise UnsupportedKernel("bf16 CUTLASS convolutions need sm >= 80 and an even channel count")
    elif sm >= 80:
        opclass, arch_tag, inst = "simt", 80, (1, 1, 1)
        tb = {"big": (128, 128, 8), "medium": (128, 64, 8), "small": (64, 64, 8)}[cls]
        warps = {"big": (4, 2, 1), "medium": (4, 2, 1), "small": (2, 2, 1)}[cls]
        stages = 4 if dt == "float32" else 2
        if dt == "float16":
            arch_tag = 50  # cp.async cannot move a single 2-byte element
        align_ab = align_c = 1
    else:
        opclass, arch_tag, inst = "simt", 50, (1, 1, 1)
        tb = {"big": (128, 128, 8), "medium": (128, 64, 8), "small": (64, 64, 8)}[cls]
        warps = {"big": (4, 2, 1), "medium": (4, 2, 1), "small": (2, 2, 1)}[cls]
        stages = 2
        align_ab = align_c = 1

    split = _split_k(spec, tb)
    if split_k_slices > 1 and spec.op == "dense" and spec.M is not None:
        split = split_k_slices
    if spec.broadcast_epilogue:
        # serial split-k would add the bias once per K slice: the broadcast epilogue's later
        # slices read the partial sum as their source, with the bias vector still added
        split = 1
    cfg = KernelConfig(
        opcode_class=opclass, arch_tag=arch_tag, instruction_shape=inst,
        threadblock=tb, warp_count=warps, stages=stages,
        alignment_a=align_a if opclass == "tensorop" else align_ab,
        alignment_b=align_b if opclass == "tensorop" else align_ab, alignment_c=align_c,
        split_k=split, swizzle=4 if spec.op == "conv2d" else 8,
        iterator_algorithm="optimized" if spec.op == "conv2d" else "",
        math=math_kind,
    )
    if kernel:
        return pin_config(spec, cfg, sm, kernel)
    return KernelConfig(**{**cfg.__dict__, "name": procedural_name(spec, cfg)})


def tunable(spec: KernelSpec, cfg: KernelConfig) -> bool:
    """Whether ``cfg`` (``choose_config``'s for ``spec``) may take another tile of
    ``SM80_CANDIDATES``: an f16 / bf16 GEMM on the multistage tensor-core path with 16-byte
    operand accesses."""
    return (spec.op in ("dense", "batch_matmul") and cfg.opcode_class == "tensorop" and cfg.math in ("f16", "bf16")
            and cfg.stages >= 3 and min(cfg.alignment_a, cfg.alignment_b) == 8)


def splittable(spec: KernelSpec) -> bool:
    """Whether ``spec`` may run serial split-K (a static dense product whose epilogue each
    slice can apply to the partial sum: not a bias beside the residual)."""
    return spec.op == "dense" and spec.M is not None and not spec.broadcast_epilogue


def pin_config(spec: KernelSpec, cfg: KernelConfig, sm: int, kernel: str) -> KernelConfig:
    """``cfg`` with the threadblock tile, warps, stages and split-K slices of the label
    ``kernel`` (one of ``SM80_CANDIDATES``, split by one of ``SM80_SPLITS`` or not);
    :class:`UnsupportedKernel` saying why when ``cfg`` takes none, the label is not a
    candidate, its stages pass the shared memory of ``sm`` or ``spec`` cannot split."""
    if not tunable(spec, cfg):
        raise UnsupportedKernel(f"kernel '{kernel}' is pinned, but only f16 / bf16 tensor-core GEMMs with 16-byte "
                                "accesses take a pinned configuration")
    try:
        threadblock, warps, stages, split = parse_sm80_label(kernel)
    except ValueError as err:
        raise UnsupportedKernel(str(err)) from None
    if (threadblock, warps, stages) not in SM80_CANDIDATES or split not in (1, *SM80_SPLITS):
        known = ", ".join(sm80_label(*c) for c in SM80_CANDIDATES)
        raise UnsupportedKernel(f"kernel '{kernel}' is not an Sm80 configuration built here ({known}; split-K "
                                f"_k{', _k'.join(map(str, SM80_SPLITS))})")
    if split > 1 and not splittable(spec):
        raise UnsupportedKernel(f"kernel '{kernel}' splits K, which only a dense product of static M without a bias "
                                "beside the residual does")
    smem = (threadblock[0] + threadblock[1]) * threadblock[2] * 2 * stages
    if smem > max_dynamic_smem(sm):
        raise UnsupportedKernel(f"kernel '{kernel}' stages {smem} bytes of shared memory; sm_{sm} has "
                                f"{max_dynamic_smem(sm)}")
    cfg = dataclasses.replace(cfg, threadblock=threadblock, warp_count=warps, stages=stages, split_k=split)
    return dataclasses.replace(cfg, name=procedural_name(spec, cfg))


# -- naming --------------------------------------------------------------------

def _operation(spec: KernelSpec, cfg: KernelConfig):
    """The cutlass_library operation object describing (spec, cfg)."""
    elt = _CUTLASS_DTYPE[spec.dtype]
    opclass = OpcodeClass.TensorOp if cfg.opcode_class == "tensorop" else OpcodeClass.Simt
    if spec.is_int8 or spec.is_fp8:
        elt_b, out = _CUTLASS_DTYPE[spec.b_dtype], _CUTLASS_DTYPE[spec.out_dtype]
        mi = MathInstruction(list(cfg.instruction_shape), elt, elt_b, out, opclass,
                             MathOperation.multiply_add_saturate if spec.is_int8 else MathOperation.multiply_add)
        td = TileDescription(list(cfg.threadblock), cfg.stages, list(cfg.warp_count), mi, cfg.arch_tag, 1024)
        if spec.op == "conv2d":
            return Conv2dOperation(ConvKind.Fprop, IteratorAlgorithm.Optimized, cfg.arch_tag, td,
                                   TensorDescription(elt, LayoutType.TensorNHWC, cfg.alignment_a),
                                   TensorDescription(elt_b, LayoutType.TensorNHWC, cfg.alignment_b),
                                   TensorDescription(out, LayoutType.TensorNHWC, cfg.alignment_c), out,
                                   StrideSupport.Strided, EpilogueFunctor.LinearCombination)
        return GemmOperation(GemmKind.Gemm, cfg.arch_tag, td, TensorDescription(elt, LayoutType.RowMajor, cfg.alignment_a),
                             TensorDescription(elt_b, LayoutType.ColumnMajor, cfg.alignment_b),
                             TensorDescription(out, LayoutType.RowMajor, cfg.alignment_c), out)
    operand, op = elt, MathOperation.multiply_add
    if cfg.math == "tf32":
        operand = DataType.tf32
    elif cfg.math == "3xtf32":
        op = MathOperation.multiply_add_fast_f32
    mi = MathInstruction(list(cfg.instruction_shape), operand, operand, DataType.f32, opclass, op)
    td = TileDescription(list(cfg.threadblock), cfg.stages, list(cfg.warp_count), mi,
                         cfg.arch_tag, 1024)
    if spec.op == "conv2d":
        A = TensorDescription(elt, LayoutType.TensorNHWC, cfg.alignment_a)
        B = TensorDescription(elt, LayoutType.TensorNHWC, cfg.alignment_b)
        C = TensorDescription(elt, LayoutType.TensorNHWC, cfg.alignment_c)
        algo = {"optimized": IteratorAlgorithm.Optimized,
                "analytic": IteratorAlgorithm.Analytic}[cfg.iterator_algorithm]
        return Conv2dOperation(ConvKind.Fprop, algo, cfg.arch_tag, td, A, B, C, DataType.f32,
                               StrideSupport.Strided, EpilogueFunctor.LinearCombination)
    A = TensorDescription(elt, LayoutType.ColumnMajor if spec.transpose_a else LayoutType.RowMajor,
                          cfg.alignment_a)
    B = TensorDescription(elt, LayoutType.ColumnMajor if spec.transpose_b else LayoutType.RowMajor,
                          cfg.alignment_b)
    C = TensorDescription(elt, LayoutType.RowMajor, cfg.alignment_c)
    # 2.x naming is produced for arch < 90; the tag we tune for is Sm80/Sm50.
    return GemmOperation(GemmKind.Gemm, cfg.arch_tag, td, A, B, C, DataType.f32)


def procedural_name(spec: KernelSpec, cfg: KernelConfig) -> str:
    """CUTLASS-convention name, e.g. ``cutlass_tensorop_f16_s16816gemm_f16_128x128_32x3_tn_align8``.

    The library's own ``procedural_name()`` gives the base; the epilogue,
    batching and split-k are appended because they change the kernel type.
    """
    name = _operation(spec, cfg).procedural_name()
    if spec.op != "conv2d":  # the library spells the widest alignment; say A's, then B's if other
        name = re.sub(r"_align\d+$", f"_align{cfg.alignment_a}", name)
    elif spec.dtype_b:  # the library's convolution names spell A's type alone: u8 x s8 says both
        a, b = (DataTypeNames[_CUTLASS_DTYPE[t]] for t in (spec.dtype, spec.dtype_b))
        name = name.replace(f"_{a}_", f"_{a}_{b}_", 1)
    if spec.op == "batch_matmul":
        name = name.replace("gemm_", "gemm_batched_", 1)
    if spec.epilogue != "none":
        name += "_" + spec.epilogue
    if cfg.split_k > 1:
        name += "_splitk"
    if cfg.math == "3xtf32":
        name += "_3xtf32"
    if cfg.alignment_b != cfg.alignment_a:
        name += f"_b{cfg.alignment_b}"  # the library's name spells A's alignment only
    return name


def spec_fields(spec: KernelSpec) -> list[str]:
    """The spec fields a kernel record holds: ``dtype_b`` only where it is set, so float
    kernels' records read as they did before int8 GEMMs existed."""
    return [f.name for f in dataclasses.fields(spec) if f.name != "dtype_b" or spec.dtype_b]


def entry_contract(name: str, key: tuple, abi: Sequence[str]) -> bytes:
    """The launch contract of CUTLASS entry ``name`` (``partita.lowering.contracts``): its
    name, its kernel type key (what decides the instantiation: op, element types,
    epilogue, layouts and the configuration, a ``KernelConfig`` or a Hopper
    ``Sm90Config``; never a shape) and its ABI (each parameter's name, kind and element
    type, in order). The emitters put it in the cubin; the runtime checks the record it
    launches with against it at load."""
    return digest_fields({"entry": name, "kernel": list(key), "abi": list(abi)})


def by_kernel_type(kernels: list[tuple[str, KernelSpec, Any]], key: Callable[[KernelSpec, Any], tuple]
                   ) -> list[list[tuple[str, KernelSpec, Any]]]:
    """``(label, spec, config)`` entries grouped by the kernel type ``key`` gives them, in
    order of first use: the entries one translation unit holds."""
    groups: dict[tuple, list[tuple[str, KernelSpec, Any]]] = {}
    for label, spec, cfg in kernels:
        groups.setdefault(key(spec, cfg), []).append((label, spec, cfg))
    return list(groups.values())
