"""``cublas-codegen``: every ``cublas`` partition becomes a cuBLASLt matmul record.

A partition is ``dense`` / ``matmul`` / ``batch_matmul`` with an optional epilogue: a
per-output-channel bias, then ReLU or GELU (cuBLASLt's GELU is the tanh approximation,
so only ``nn.gelu {approximate = "tanh"}`` maps to it). The record
(:class:`GemmRecord`) holds the row-major problem and the cuBLASLt view of it: cuBLASLt
is column-major, so ``D = A·B`` row-major is computed as ``Dᵀ = Bᵀ·Aᵀ``: Lt's "A" is our
right operand and Lt's "B" our left one, each read in place with a transpose flag
(:meth:`GemmRecord.layouts` gives rows, columns and leading dimensions for a run-time M).

An FP8 partition is ``nn.matmul_float8`` (8-bit float operands, a ``[N, K]`` weight, or
two activations batched alike, the right one ``[..., N, K]``) and the multiply by its
one-element f32 dequantize scale: cuBLASLt's FP8 matmul on Ada and
Hopper, which reads the scale through its ``A_SCALE_POINTER`` (``D = scale_A · A·B``,
f32 accumulation) and takes the "TN" form only (Lt's A transposed, its B not: our
``[N, K]`` weight and row-major activations).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import ClassVar

from xdsl.dialects.builtin import DictionaryAttr
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import BlockArgument, Operation, SSAValue

from partita.dialects import nn
from partita.ir import op_error
from partita.lowering.library import LibraryCodegen, element_type, static_shape
from partita.lowering.records import dataclass_from, fields_attr, register_record_kind

KIND = "cublaslt"
DTYPES = ("f16", "bf16", "f32")
#: Element type -> (cudaDataType name, cublasComputeType name). f32 GEMMs compute in
#: TF32 (as PyTorch's ``allow_tf32`` and TVM's cuBLAS do by default); f16/bf16
#: accumulate in f32.
TYPES = {
    "f16": ("CUDA_R_16F", "COMPUTE_32F"),
    "bf16": ("CUDA_R_16BF", "COMPUTE_32F"),
    "f32": ("CUDA_R_32F", "COMPUTE_32F_FAST_TF32"),
}
ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f8E4M3FN": 1, "f8E5M2": 1}
FP8_TYPES = {"f8E4M3FN": "CUDA_R_8F_E4M3", "f8E5M2": "CUDA_R_8F_E5M2"}
"""FP8 operand types -> cudaDataType names; cuBLASLt multiplies E4M3 by E4M3 or E5M2 (in
either order), never E5M2 by E5M2."""
WORKSPACE_BYTES = 32 * 1024 * 1024
"""cuBLASLt workspace: 32 MiB, NVIDIA's recommendation for Hopper (4 MiB suffices before)."""


@dataclass(frozen=True)
class Layout:
    """A cuBLASLt matrix layout (column-major): ``rows x cols``, leading dim ``ld``,
    ``batch`` matrices ``stride`` elements apart."""

    rows: int
    cols: int
    ld: int
    batch: int
    stride: int


@dataclass(frozen=True)
class GemmRecord:
    """What the runtime needs to drive cuBLASLt for one partition (plain values)."""

    kind: str
    op: str
    m: int  # -1: run time (rows of the left operand, all leading dims folded)
    n: int
    k: int
    batch: int  # -1: run time; 1 for dense / 2-D matmul
    trans_lhs: int  # the left operand is stored transposed (batch_matmul transpose_a)
    trans_rhs: int  # the right operand is stored [N, K] (dense, transpose_b)
    dtype: str
    data_type: str  # of D (and C), and of A and B unless a_type / b_type say otherwise
    a_type: str  # Lt's A (our right operand)
    b_type: str  # Lt's B (our left operand)
    compute_type: str
    scale_type: str
    epilogue: str  # cublasLtEpilogue_t name: DEFAULT, BIAS, RELU_BIAS, GELU_BIAS, RELU, GELU
    roles: tuple[str, ...]  # role of each function argument: lhs, rhs, bias, scale (FP8's A_SCALE_POINTER)
    workspace: int
    alignment: int  # bytes every leading dim is a multiple of (16 lets cuBLASLt use TMA)

    @property
    def transa(self) -> str:
        """Lt's op on its A (our right operand): T when it is stored [N, K]."""
        return "T" if self.trans_rhs else "N"

    @property
    def transb(self) -> str:
        """Lt's op on its B (our left operand): T when it is stored [K, M]."""
        return "T" if self.trans_lhs else "N"

    def layouts(self, m: int, batch: int) -> tuple[Layout, Layout, Layout]:
        """Layouts of Lt's A (our rhs), B (our lhs) and C = D (our output)."""
        n, k = self.n, self.k
        a = Layout(k, n, k, batch, n * k) if self.trans_rhs else Layout(n, k, n, batch, n * k)
        b = Layout(m, k, m, batch, m * k) if self.trans_lhs else Layout(k, m, k, batch, m * k)
        d = Layout(n, m, n, batch, m * n)
        return a, b, d

    def runtime_dims(self, shapes: Sequence[tuple[int, ...]]) -> tuple[int, int]:
        """``(m, batch)`` read off the left operand's shape."""
        lhs = shapes[self.roles.index("lhs")]
        if self.op == "batch_matmul" or (self.op == "matmul" and self.batch != 1):
            batch = prod(lhs[:-2])
            m = lhs[-1] if self.trans_lhs else lhs[-2]
        else:
            batch, m = 1, prod(lhs[:-1])
        return m, batch

    def to_attr(self) -> DictionaryAttr:
        return fields_attr(self)

    @classmethod
    def from_attr(cls, attr: DictionaryAttr) -> GemmRecord:
        return dataclass_from(cls, attr)


def decode_record(attr: DictionaryAttr) -> GemmRecord:
    return GemmRecord.from_attr(attr)


def _epilogue(ops: Sequence[Operation], n: int) -> tuple[str, SSAValue | None]:
    """``[bias_add | add(bias)] [relu | gelu(tanh)]`` after the GEMM."""
    rest = list(ops)
    bias = None
    if rest and isinstance(rest[0], nn.BiasAddOp | nn.AddOp):
        op = rest.pop(0)
        shape = static_shape(op.operands[1])
        rank = len(static_shape(op.operands[0]))
        if isinstance(op, nn.BiasAddOp) and op.axis % rank != rank - 1:
            raise op_error(op, "the cuBLASLt bias epilogue adds along the output columns only")
        if not shape or shape[-1] != n or any(d != 1 for d in shape[:-1]):
            raise op_error(op, f"the cuBLASLt bias epilogue takes a bias of shape [{n}]")
        bias = op.operands[1]
    activation = ""
    if rest and isinstance(rest[0], nn.ReluOp | nn.GeluOp):
        op = rest.pop(0)
        if isinstance(op, nn.GeluOp) and op.approximate != "tanh":
            raise op_error(op, "cuBLASLt's GELU epilogue is the tanh approximation, not the erf form")
        activation = "RELU" if isinstance(op, nn.ReluOp) else "GELU"
    if rest:
        raise op_error(rest[0], "is not part of a cuBLASLt epilogue")
    if bias is None:
        return activation or "DEFAULT", None
    return f"{activation}_BIAS" if activation else "BIAS", bias


def _float8_record(function: FuncOp, main: nn.MatmulFloat8Op, rest: Sequence[Operation]) -> GemmRecord:
    """cuBLASLt's FP8 matmul of ``nn.matmul_float8 {transpose_b}`` with a 2-D ``[N, K]``
    weight, or strided-batched over equal batch dims (two activations, ``[..., N, K]`` on
    the right), then at most the multiply by its one-element f32 scale."""
    lhs, rhs = static_shape(main.lhs), static_shape(main.rhs)
    types = (element_type(main.lhs), element_type(main.rhs))
    if not main.transpose_b:
        raise op_error(main, "cuBLASLt's FP8 matmul takes the \"TN\" form only: a right operand stored [..., N, K] "
                             "(transpose_b)")
    if len(rhs) > 2 and (len(lhs) != len(rhs) or lhs[:-2] != rhs[:-2]):
        raise op_error(main, "cuBLASLt's batched FP8 matmul needs equal batch dims (no broadcasting)")
    if any(t not in FP8_TYPES for t in types) or types == ("f8E5M2", "f8E5M2"):
        raise op_error(main, f"cuBLASLt's FP8 matmul multiplies E4M3 by E4M3 or E5M2, not {types[0]} by {types[1]}")
    n, k = rhs[-2:]
    if n % 16 or k % 16:
        raise op_error(main, f"cuBLASLt's FP8 matmul needs N and K multiples of 16 (16-byte rows), got N={n}, K={k}")
    roles: dict[SSAValue, str] = {main.lhs: "lhs", main.rhs: "rhs"}
    for op in rest:
        scale = op.operands[1] if isinstance(op, nn.MultiplyOp) and op.operands[0] is main.result else None
        if scale is None or "scale" in roles.values() or element_type(scale) != "f32" or prod(static_shape(scale)) != 1:
            raise op_error(op, "is not part of a cuBLASLt FP8 matmul (its one-element f32 scale is)")
        roles[scale] = "scale"
    _check_arguments(function, main, roles)
    if len(rhs) == 2:
        op, batch, m = "dense", 1, -1 if any(d < 0 for d in lhs[:-1]) else prod(lhs[:-1])
    else:
        op, batch, m = "matmul", -1 if any(d < 0 for d in lhs[:-2]) else prod(lhs[:-2]), lhs[-2]
    return GemmRecord(
        KIND, op, m, n, k, batch, 0, 1, "f32", "CUDA_R_32F", FP8_TYPES[types[1]], FP8_TYPES[types[0]],
        "COMPUTE_32F", "CUDA_R_32F", "DEFAULT", tuple(roles[a] for a in function.body.block.args), WORKSPACE_BYTES, 16,
    )


def _check_arguments(function: FuncOp, main: Operation, roles: dict[SSAValue, str]) -> None:
    args = function.body.block.args
    if any(not isinstance(v, BlockArgument) for v in roles) or len(roles) != len(args):
        raise op_error(main, "the operands of a cuBLAS GEMM must be the partition's arguments, each used once")


def gemm_record(function: FuncOp) -> GemmRecord:
    """The cuBLASLt matmul a cublas partition function describes (located error if none)."""
    ops = [op for op in function.body.block.ops if not isinstance(op, ReturnOp | nn.ConstantOp)]
    if not ops:
        raise op_error(function, "has no operation for cuBLAS to implement")
    main = ops[0]
    if isinstance(main, nn.MatmulFloat8Op):
        return _float8_record(function, main, ops[1:])
    if not isinstance(main, nn.DenseOp | nn.MatmulOp | nn.BatchMatmulOp):
        raise op_error(main, "has no cuBLAS implementation (dense, matmul, batch_matmul and matmul_float8 do)")
    dtype = element_type(main.results[0])
    if dtype not in DTYPES or any(element_type(v) != dtype for v in main.operands):
        raise op_error(main, f"cuBLASLt GEMMs here take f16, bf16 or f32 operands of one type, not {dtype}")
    lhs, rhs = static_shape(main.operands[0]), static_shape(main.operands[1])
    trans_lhs = trans_rhs = 0
    if isinstance(main, nn.DenseOp):
        op, (n, k), trans_rhs, batch = "dense", rhs, 1, 1
    elif isinstance(main, nn.BatchMatmulOp):
        op, trans_lhs, trans_rhs = "batch_matmul", int(main.transpose_a), int(main.transpose_b)
        n, k = (rhs[1], rhs[2]) if trans_rhs else (rhs[2], rhs[1])
        batch = lhs[0]
    else:
        op = "matmul"
        k, n = rhs[-2], rhs[-1]
        if len(rhs) == 2:
            batch = 1
        elif len(lhs) == len(rhs) and all(a == b for a, b in zip(lhs[:-2], rhs[:-2])):
            batch = -1 if any(d < 0 for d in lhs[:-2]) else prod(lhs[:-2])
        else:
            raise op_error(main, "cuBLASLt matmul needs a 2-D right operand or equal batch dims")
    if n < 0 or k < 0:
        raise op_error(main, "cuBLASLt GEMMs here need static N and K")
    if op == "matmul" and batch != 1:
        m = lhs[-2]
    elif op == "batch_matmul":
        m = lhs[2] if trans_lhs else lhs[1]
    else:
        m = -1 if any(d < 0 for d in lhs[:-1]) else prod(lhs[:-1])
    epilogue, bias = _epilogue(ops[1:], n)
    roles: dict[SSAValue, str] = {main.operands[0]: "lhs", main.operands[1]: "rhs"}
    if bias is not None:
        roles[bias] = "bias"
    _check_arguments(function, main, roles)
    args = function.body.block.args
    data_type, compute_type = TYPES[dtype]
    size = ELEMENT_BYTES[dtype]
    lds = [k, n] + ([m] if m > 0 else [])
    alignment = min(16, *(((ld * size) & -(ld * size)) for ld in lds))
    return GemmRecord(
        KIND, op, m, n, k, batch, trans_lhs, trans_rhs, dtype, data_type, data_type, data_type, compute_type,
        "CUDA_R_32F", epilogue,
        tuple(roles[a] for a in args), WORKSPACE_BYTES, alignment,
    )


def describe(record: GemmRecord) -> str:
    a, b, d = record.layouts(max(0, record.m), max(0, record.batch))
    dim = lambda v: "?" if v <= 0 else str(v)  # noqa: E731
    lay = lambda x: f"{dim(x.rows)}x{dim(x.cols)} ld={dim(x.ld)}"  # noqa: E731
    return (f"cublasLtMatmul {record.op} m={dim(record.m)} n={record.n} k={record.k} batch={dim(record.batch)} "
            f"{record.data_type} compute={record.compute_type} epilogue={record.epilogue} "
            + (f"A={record.a_type} B={record.b_type} scale=A_SCALE_POINTER " if "scale" in record.roles else "")
            + f"A({record.transa})={lay(a)} B({record.transb})={lay(b)} D={lay(d)} "
            f"workspace={record.workspace} align={record.alignment} args=({', '.join(record.roles)})")


@dataclass(frozen=True)
class CublasCodegen(LibraryCodegen):
    """Turn every cublas partition function into a cuBLASLt matmul record."""

    name = "cublas-codegen"
    compiler: ClassVar[str] = "cublas"

    def record(self, function: FuncOp) -> DictionaryAttr:
        return gemm_record(function).to_attr()


register_record_kind("cublaslt", decode_record, library=True)
