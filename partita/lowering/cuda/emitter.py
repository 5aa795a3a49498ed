"""CUDA C for fused injective functions: one ``extern "C" __global__`` kernel per function.

A fused function (``fuse-native-kernels``) computes one output tensor from its inputs with
element-wise, broadcasting and index-remapping ops. Its kernel runs one thread per output
element in a grid-stride loop and evaluates the body as an expression of that element's
index, walking back through the ops (TVM's ``compute_inline`` of injective stages):

* element-wise ops (NumPy broadcasting) read their operands at the broadcast index
  (``0`` on a broadcast axis; a run-time dim of 1 broadcasts too);
* ``nn.bias_add`` reads the bias at the index along its axis;
* ``nn.transpose`` permutes the index, ``nn.reshape`` keeps the linear index;
* a function argument is a load at the row-major offset of its index.

Values are computed in ``float``; every op's result is rounded to the storage type
(``__half``/``__nv_bfloat16``), which is what the reference executor does, so a kernel
and the CPU emulation agree to the ulp of the math functions.

Static dims are literals; each ``?`` dim of an argument is an ``int`` parameter of the
kernel (argument order, then axis order), and the dims of inner values and of the output
are derived from those in the kernel, as the shape function derives them on the host.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BFloat16Type,
    Float16Type,
    Float32Type,
    TensorType,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from partita.dialects import nn
from partita.ir import op_error

__all__ = [
    "BLOCK_SIZE",
    "FUSABLE_OPS",
    "CudaProgram",
    "FusedKernel",
    "emit_kernel",
    "emit_program",
    "is_fusable",
    "kernel_function_error",
]

BLOCK_SIZE = 256
"""Threads per block of every fused kernel."""

FUSABLE_OPS: tuple[type[Operation], ...] = (
    nn.AddOp, nn.SubtractOp, nn.MultiplyOp, nn.DivideOp,
    nn.ReluOp, nn.SigmoidOp, nn.TanhOp, nn.GeluOp, nn.ClipOp,
    nn.BiasAddOp, nn.TransposeOp, nn.ReshapeOp,
)
"""The injective ops (TVM's ``kElemWise``/``kBroadcast``/``kInjective``) a kernel can compute."""

DTYPES = {Float32Type: "f32", Float16Type: "f16", BFloat16Type: "bf16"}
_C_TYPES = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16"}
_HEADERS = {"f16": "cuda_fp16.h", "bf16": "cuda_bf16.h"}
_INT_MAX = 2**31 - 1

Dim = int | str
"""A dimension in a kernel: a literal, or a C expression over the ``int`` dim parameters."""


def is_fusable(op: Operation) -> bool:
    return isinstance(op, FUSABLE_OPS)


def _dtype(typ: Attribute) -> str:
    assert isinstance(typ, TensorType)
    return DTYPES[type(typ.element_type)]


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def _record_shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(-1 if d == DYNAMIC_INDEX else d for d in _shape(value))


def _c_float(value: float) -> str:
    if math.isnan(value):
        return "__int_as_float(0x7fc00000)"
    if math.isinf(value):
        return "__int_as_float(0x7f800000)" if value > 0 else "__int_as_float(0xff800000)"
    text = repr(float(value))
    return f"{text}f" if any(c in text for c in ".e") else f"{text}.0f"


def _mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 1:
        return b
    if b == 1:
        return a
    return f"{a} * {b}"


def _product(dims: Sequence[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = _mul(out, d)
    return out


def _paren(d: Dim) -> str:
    if isinstance(d, int) or re.fullmatch(r"\w+", d):
        return str(d)
    if d.startswith("("):  # already parenthesized if its first "(" closes at the end
        depth = 0
        for k, c in enumerate(d):
            depth += {"(": 1, ")": -1}.get(c, 0)
            if depth == 0:
                if k == len(d) - 1:
                    return d
                break
    return f"({d})"


def _broadcast(a: Dim, b: Dim) -> Dim:
    if a == 1:
        return b
    if b == 1 or a == b:
        return a
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return f"({a} == 1 ? {b} : {a})"


def kernel_function_error(function: FuncOp) -> str | None:
    """Why ``function`` cannot become a fused kernel (``None`` if it can)."""
    if len(function.body.blocks) != 1:
        return "has several blocks"
    block = function.body.block
    if not isinstance(block.last_op, ReturnOp) or len(block.last_op.arguments) != 1:
        return "must return exactly one tensor"
    for arg in block.args:
        if not isinstance(arg.type, TensorType) or type(arg.type.element_type) not in DTYPES:
            return f"takes a {arg.type}, not a tensor of f32, f16 or bf16"
    for op in block.ops:
        if op is not block.last_op and not is_fusable(op):
            return f"contains '{op.name}', which is not an injective op"
    result = block.last_op.arguments[0]
    if isinstance(result, BlockArgument):
        return "returns an argument: there is nothing to compute"
    return None


@dataclass(frozen=True)
class FusedKernel:
    """One fused function's kernel: its launch interface and its CUDA C text."""

    function: str
    entry: str
    inputs: tuple[tuple[int, ...], ...]
    """Shape of each argument (``-1`` for ``?``)."""
    dtypes: tuple[str, ...]
    output: tuple[int, ...]
    output_dtype: str
    dims: tuple[tuple[int, int], ...]
    """The ``(argument, axis)`` of each run-time dim parameter, in parameter order."""
    ops: tuple[str, ...]
    code: str = field(repr=False)
    block: int = BLOCK_SIZE

    @property
    def params(self) -> tuple[str, ...]:
        """``name:kind:size`` of each kernel parameter (as the CUTLASS records spell them)."""
        ptrs = [f"in{k}:ptr:8" for k in range(len(self.inputs))] + ["out:ptr:8"]
        return tuple(ptrs + [f"dim{k}:int:4" for k in range(len(self.dims))])


class _KernelEmitter:
    def __init__(self, function: FuncOp, entry: str):
        self.function = function
        self.entry = entry
        self.block = function.body.block
        self.lines: list[str] = []
        self.memo: dict[tuple[SSAValue, tuple[str, ...]], str] = {}
        self.counters: dict[str, int] = {}
        self.linear_of: dict[tuple[tuple[Dim, ...], tuple[str, ...]], str] = {}
        self.dims: dict[SSAValue, list[Dim]] = {}
        self.runtime_dims: list[tuple[int, int]] = []
        self.uses_dtypes: set[str] = set()

    # -- shapes --------------------------------------------------------------------------
    def _derive_dims(self) -> None:
        for arg in self.block.args:
            dims: list[Dim] = []
            for axis, d in enumerate(_shape(arg)):
                if d == DYNAMIC_INDEX:
                    dims.append(f"d{len(self.runtime_dims)}")  # index_type copy of parameter dim<k>
                    self.runtime_dims.append((arg.index, axis))
                else:
                    dims.append(d)
            self.dims[arg] = dims
        for op in self.block.ops:
            if op is self.block.last_op:
                break
            static = _shape(op.results[0])
            derived = self._rule(op) if DYNAMIC_INDEX in static else list(static)
            self.dims[op.results[0]] = [s if s != DYNAMIC_INDEX else d for s, d in zip(static, derived)]

    def _rule(self, op: Operation) -> list[Dim]:
        if isinstance(op, nn.ElementwiseBinaryOp):
            x, y = self.dims[op.lhs], self.dims[op.rhs]
            rank = max(len(x), len(y))
            x = [1] * (rank - len(x)) + x
            y = [1] * (rank - len(y)) + y
            return [_broadcast(a, b) for a, b in zip(x, y)]
        if isinstance(op, nn.TransposeOp):
            x = self.dims[op.input]
            return [x[p] for p in op.perm]
        if isinstance(op, nn.ReshapeOp):
            shape = _shape(op.result)
            known = math.prod(d for d in shape if d != DYNAMIC_INDEX)
            count = _product(self.dims[op.input])
            return [f"{_paren(count)} / {known}" if d == DYNAMIC_INDEX else d for d in shape]
        return list(self.dims[op.operands[0]])

    # -- code ----------------------------------------------------------------------------
    def _var(self, prefix: str) -> str:
        k = self.counters.get(prefix, 0)
        self.counters[prefix] = k + 1
        return f"{prefix}{k}"

    def _linear(self, dims: Sequence[Dim], index: Sequence[str]) -> str:
        if list(dims) == self.out_dims and list(index) == self.out_index:
            return "i"
        if (known := self.linear_of.get((tuple(dims), tuple(index)))) is not None:
            return known
        terms = []
        stride: Dim = 1
        for d, ix in reversed(list(zip(dims, index))):
            if ix != "0":
                terms.append(ix if stride == 1 else f"{ix} * {_paren(stride)}")
            stride = _mul(stride, d)
        return " + ".join(reversed(terms)) or "0"

    def _decompose(self, linear: str, dims: Sequence[Dim]) -> list[str]:
        """The row-major index of the element at ``linear`` in a tensor of ``dims``."""
        if not dims:
            return []
        if list(dims) == self.out_dims and linear == "i":
            return list(self.out_index)
        index: list[str] = []
        stride: Dim = 1
        for axis in range(len(dims) - 1, -1, -1):
            d = dims[axis]
            if d == 1:
                index.append("0")
            else:
                quotient = linear if stride == 1 else f"{linear} / {_paren(stride)}"
                index.append(quotient if axis == 0 else f"{_paren(quotient)} % {_paren(d)}")
            stride = _mul(stride, d)
        index.reverse()
        self.linear_of[(tuple(dims), tuple(index))] = linear
        return index

    def _broadcast_index(self, operand: SSAValue, result: SSAValue, index: Sequence[str]) -> list[str]:
        dims = self.dims[operand]
        lead = len(index) - len(dims)
        out = []
        for d, r, ix in zip(dims, self.dims[result][lead:], index[lead:]):
            if d == 1:
                out.append("0")
            elif isinstance(d, str) and d != r and ix != "0":
                out.append(f"({d} == 1 ? 0 : {ix})")
            else:
                out.append(ix)
        return out

    def _round(self, expr: str, dtype: str) -> str:
        return expr if dtype == "f32" else f"rn_{dtype}({expr})"

    def value(self, v: SSAValue, index: Sequence[str]) -> str:
        """A float variable holding ``v`` at ``index`` (emitted once per distinct index)."""
        key = (v, tuple(index))
        if key in self.memo:
            return self.memo[key]
        dtype = _dtype(v.type)
        if isinstance(v.owner, nn.TransposeOp | nn.ReshapeOp):
            # Index remapping only: the value is the input's, at another index.
            self.memo[key] = self._compute(v.owner, index)
            return self.memo[key]
        if isinstance(v, BlockArgument):
            load = f"in{v.index}[{self._linear(self.dims[v], index)}]"
            expr = load if dtype == "f32" else f"ld_{dtype}({load})"
        else:
            expr = self._round(self._compute(v.owner, index), dtype)  # type: ignore[arg-type]
        name = self._var("v")
        self.lines.append(f"    const float {name} = {expr};")
        self.memo[key] = name
        return name

    def _compute(self, op: Operation, index: Sequence[str]) -> str:
        if isinstance(op, nn.ElementwiseBinaryOp):
            a = self.value(op.lhs, self._broadcast_index(op.lhs, op.result, index))
            b = self.value(op.rhs, self._broadcast_index(op.rhs, op.result, index))
            symbol = {nn.AddOp: "+", nn.SubtractOp: "-", nn.MultiplyOp: "*", nn.DivideOp: "/"}[type(op)]
            return f"{a} {symbol} {b}"
        if isinstance(op, nn.BiasAddOp):
            axis = op.axis % len(index)
            x = self.value(op.input, index)
            bias = self.value(op.bias, [index[axis]])
            return f"{x} + {bias}"
        if isinstance(op, nn.TransposeOp):
            inner = ["0"] * len(index)
            for k, p in enumerate(op.perm):
                inner[p] = index[k]
            return self.value(op.input, inner)
        if isinstance(op, nn.ReshapeOp):
            linear = self._linear(self.dims[op.result], index)
            if linear not in ("i", "0") and not re.fullmatch(r"\w+", linear):
                t = self._var("t")
                self.lines.append(f"    const {self.index_type} {t} = {linear};")
                linear = t
            return self.value(op.input, self._decompose(linear, self.dims[op.input]))
        x = self.value(op.operands[0], index)
        if isinstance(op, nn.ReluOp):
            return f"fmaxf({x}, 0.0f)"
        if isinstance(op, nn.SigmoidOp):
            return f"1.0f / (1.0f + expf(-{x}))"
        if isinstance(op, nn.TanhOp):
            return f"tanhf({x})"
        if isinstance(op, nn.GeluOp):
            if op.approximate == "tanh":
                return f"0.5f * {x} * (1.0f + tanhf(0.7978845608f * ({x} + 0.044715f * {x} * {x} * {x})))"
            return f"0.5f * {x} * (1.0f + erff({x} * 0.70710678f))"
        if isinstance(op, nn.ClipOp):
            return f"fminf(fmaxf({x}, {_c_float(op.min)}), {_c_float(op.max)})"
        raise op_error(op, "has no CUDA lowering")  # pragma: no cover - checked by kernel_function_error

    def emit(self) -> FusedKernel:
        self._derive_dims()
        result = self.block.last_op.operands[0]  # type: ignore[union-attr]
        self.out_dims = self.dims[result]
        numel = _product(self.out_dims)
        dynamic = isinstance(numel, str) or any(
            isinstance(p, str) or p > _INT_MAX for a in self.block.args for p in [_product(self.dims[a])]
        )
        self.index_type = "long long" if dynamic or numel > _INT_MAX else "int"  # type: ignore[operator]
        self.out_index = ["0" if d == 1 else f"o{axis}" for axis, d in enumerate(self.out_dims)]
        out = self.value(result, self.out_index)
        out_dtype = _dtype(result.type)
        # The output index from the linear thread index, for the axes the body reads.
        used = "\n".join(self.lines)
        index_lines = []
        stride: Dim = 1
        for axis in range(len(self.out_dims) - 1, -1, -1):
            d = self.out_dims[axis]
            if d != 1 and re.search(rf"\bo{axis}\b", used):
                quotient = "i" if stride == 1 else f"i / {_paren(stride)}"
                expr = quotient if axis == 0 else f"{_paren(quotient)} % {_paren(d)}"
                index_lines.append(f"    const {self.index_type} o{axis} = {expr};")
            stride = _mul(stride, d)
        body = list(reversed(index_lines)) + self.lines
        arg_types = [_dtype(a.type) for a in self.block.args]
        self.uses_dtypes |= {*arg_types, out_dtype}
        params = [f"const {_C_TYPES[t]}* __restrict__ in{k}" for k, t in enumerate(arg_types)]
        params.append(f"{_C_TYPES[out_dtype]}* __restrict__ out")
        params += [f"int dim{k}" for k in range(len(self.runtime_dims))]
        store = out if out_dtype == "f32" else f"st_{out_dtype}({out})"
        ops = [op.name for op in self.block.ops if op is not self.block.last_op]
        lines = [
            f"// @{self.function.sym_name.data}: {', '.join(ops)}",
            f'extern "C" __global__ void __launch_bounds__({BLOCK_SIZE})',
            f"{self.entry}({', '.join(params)}) {{",
            *(f"  const {self.index_type} d{k} = dim{k};" for k in range(len(self.runtime_dims))),
            f"  const {self.index_type} n = {numel};",
            (f"  for ({self.index_type} i = ({self.index_type})blockIdx.x * blockDim.x + threadIdx.x; i < n;"
             f" i += ({self.index_type})gridDim.x * blockDim.x) {{"),
            *body,
            f"    out[i] = {store};",
            "  }",
            "}",
        ]
        return FusedKernel(
            function=self.function.sym_name.data,
            entry=self.entry,
            inputs=tuple(_record_shape(a) for a in self.block.args),
            dtypes=tuple(arg_types),
            output=_record_shape(result),
            output_dtype=out_dtype,
            dims=tuple(self.runtime_dims),
            ops=tuple(ops),
            code="\n".join(lines) + "\n",
        )


def _entry_name(name: str, taken: set[str]) -> str:
    entry = re.sub(r"\W", "_", name)
    if not re.match(r"[A-Za-z_]", entry):
        entry = "k_" + entry
    base, k = entry, 0
    while entry in taken:
        k += 1
        entry = f"{base}_{k}"
    taken.add(entry)
    return entry


def emit_kernel(function: FuncOp, entry: str | None = None) -> FusedKernel:
    """The kernel of one fused function (located error if its body cannot be one)."""
    if (why := kernel_function_error(function)) is not None:
        raise op_error(function, f"cannot become a CUDA kernel: it {why}")
    return _KernelEmitter(function, entry or _entry_name(function.sym_name.data, set())).emit()


_HELPERS = {
    "f16": (
        "static __device__ __forceinline__ float ld_f16(__half x) { return __half2float(x); }\n"
        "static __device__ __forceinline__ __half st_f16(float x) { return __float2half_rn(x); }\n"
        "static __device__ __forceinline__ float rn_f16(float x) { return __half2float(__float2half_rn(x)); }\n"
    ),
    "bf16": (
        "static __device__ __forceinline__ float ld_bf16(__nv_bfloat16 x) { return __bfloat162float(x); }\n"
        "static __device__ __forceinline__ __nv_bfloat16 st_bf16(float x) { return __float2bfloat16_rn(x); }\n"
        "static __device__ __forceinline__ float rn_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }\n"
    ),
}


@dataclass(frozen=True)
class CudaProgram:
    """The CUDA C of several kernels, in one NVRTC program."""

    code: str
    kernels: dict[str, FusedKernel]
    """By function name, in module order."""
    lines: dict[str, tuple[int, int]]
    """By function name: the first and last line (1-based) of its kernel in ``code``."""

    def entries_at_line(self, line: int) -> list[str]:
        """Functions whose kernel spans ``line`` (NVRTC errors name them)."""
        return [name for name, (lo, hi) in self.lines.items() if lo <= line <= hi]


def emit_program(functions: Sequence[FuncOp]) -> CudaProgram:
    """One translation unit with the kernel of every function, entries named after them."""
    taken: set[str] = set()
    kernels = {f.sym_name.data: emit_kernel(f, _entry_name(f.sym_name.data, taken)) for f in functions}
    dtypes = {k.output_dtype for k in kernels.values()} | {t for k in kernels.values() for t in k.dtypes}
    head = "// Fused injective kernels generated by Partita (cuda-codegen)\n"
    head += "".join(f"#include <{_HEADERS[t]}>\n" for t in ("f16", "bf16") if t in dtypes)
    head += "".join(_HELPERS[t] for t in ("f16", "bf16") if t in dtypes)
    parts = [head]
    lines: dict[str, tuple[int, int]] = {}
    line = head.count("\n") + 1
    for name, kernel in kernels.items():
        parts.append("\n" + kernel.code)
        first = line + 1
        line += 1 + kernel.code.count("\n")
        lines[name] = (first, line - 1)
    return CudaProgram("".join(parts), kernels, lines)
