"""CUDA C for fused injective functions: one ``extern "C" __global__`` kernel per function.

A fused function (``fuse-native-kernels``) computes one output tensor from its inputs with
element-wise, broadcasting and index-remapping ops. Its kernel runs one thread per output
element in a grid-stride loop and evaluates the body as an expression of that element's
index, walking back through the ops (TVM's ``compute_inline`` of injective stages):

* element-wise ops (NumPy broadcasting) read their operands at the broadcast index
  (``0`` on a broadcast axis; a run-time dim of 1 broadcasts too);
* ``nn.bias_add`` reads the bias at the index along its axis;
* ``nn.transpose`` permutes the index, ``nn.reshape`` keeps the linear index;
* ``nn.pad`` (constant) shifts the index and selects the pad value outside the input,
  ``nn.concatenate`` selects the input whose range along the axis holds the index; the
  inputs are read at the index clamped into their bounds (every load stays in bounds;
  the value read for a cell that is not selected is discarded);
* a function argument is a load at the row-major offset of its index.

Values are computed in ``float``; every op's result is rounded to the storage type
(``__half``/``__nv_bfloat16``), which is what the reference executor does, so a kernel
and the CPU emulation agree to the ulp of the math functions.

Static dims are literals; each ``?`` dim of an argument is an ``int`` parameter of the
kernel (argument order, then axis order), and the dims of inner values and of the output
are derived from those in the kernel, as the shape function derives them on the host.

A function may also hold one *anchor* op (TVM's ``kCommReduce`` / ``kOutEWiseFusable``)
whose operands are arguments, followed by an element-wise epilogue on its result (every
op depending on the anchor has the anchor's shape and is element-wise or ``bias_add``):

* ``kind = "rowwise"`` (``nn.softmax`` on the last axis, ``nn.layer_norm``): one thread
  block per row (grid-stride over rows); block-wide max / sum reductions with warp
  shuffles and a 32-float shared array; float accumulation; the epilogue runs per
  element of the row before the store. Reductions over the input's last axes
  (``@rowwise`` rules, ``nn.reduce_*`` / ``nn.argmax`` / ``nn.argmin``) are rowwise too:
  one block per output element, threads fold strided (coalesced) slices of its row in the
  compute type, ``partita_block_reduce`` / ``partita_block_arg`` combine them (xor
  shuffles, one value per warp through shared memory, every thread gets the result),
  thread 0 computes the value and runs the epilogue; the block is the row's length
  rounded up to a power of two, 32 to 256 threads (1024 for a few long rows);
* ``kind = "gemm"`` (``nn.dense``, ``nn.matmul`` with NumPy batch broadcasting,
  ``nn.batch_matmul`` with its transpose flags): 16x16 output tiles, one thread per
  output element, K in steps of 16 through two shared-memory tiles (loads coalesced
  along each operand's contiguous axis), float accumulation, the epilogue per output
  element before the store; grid ``(N tiles, M tiles, batch)``, grid-stride on y and z;
* ``kind = "window"`` (``nn.max_pool2d``, ``nn.avg_pool2d``, ``nn.global_avg_pool2d``,
  NCHW or NHWC, static spatial dims for the windowed pools): one thread per output
  element (grid-stride, like injective kernels) loops over its window, skipping cells
  in the padding, with float accumulation; ``max`` starts at ``-inf`` (cells of the
  padding are ``-inf`` in the reference, so skipping them is the same), ``avg`` divides by
  the cells in the input, or in input and declared padding with ``count_include_pad``
  (never the extra cells ``ceil_mode`` reads past the padding), as the reference does;
  the epilogue runs per output element before the store. (``fmaxf`` ignores a NaN where
  NumPy's max propagates it.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    TensorType,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from partita.dialects import nn
from partita.ir import op_error
from partita.lowering.cuda.row_stats import (
    ONE_PASS_HELPERS,
    RowElement,
    RowSchedule,
    fold_pass,
    row_schedule,
    softmax_stats,
    square_stats,
    welford_stats,
)
from partita.lowering.cuda.rules import INJECTIVE, ROWWISE, WINDOW, RowReduction, Rule

__all__ = [
    "ANCHOR_OPS",
    "BLOCK_SIZE",
    "GEMM_TILE",
    "CudaProgram",
    "FusedKernel",
    "emit_kernel",
    "emit_program",
    "epilogue_error",
    "is_anchor",
    "is_fusable",
    "kernel_function_error",
    "prologue_error",
]

BLOCK_SIZE = 256
"""Threads per block of every fused kernel."""

_SPELLED_OPS: tuple[type[Operation], ...] = (
    nn.AddOp, nn.SubtractOp, nn.MultiplyOp, nn.BiasAddOp, nn.TransposeOp, nn.ReshapeOp,
    nn.ConcatenateOp,
)
"""Injective ops ``_compute`` spells itself instead of through a registered rule (what a
kernel can compute; whether an op is element-wise or injective is its ``OpPattern``)."""

WINDOW_OPS: tuple[type[Operation], ...] = (nn.MaxPool2DOp, nn.AvgPool2DOp, nn.GlobalAvgPool2DOp)
"""Pools (``window`` kernels: one thread per output element loops over its window)."""
ANCHOR_OPS: tuple[type[Operation], ...] = (
    nn.SoftmaxOp, nn.LayerNormOp, nn.RMSNormOp, nn.DenseOp, nn.MatmulOp, nn.BatchMatmulOp, *WINDOW_OPS,
)
"""Reductions (``rowwise`` kernels), GEMMs (``gemm``) and pools (``window``) that anchor a
kernel."""
GEMM_TILE = 16
"""Output tile edge (and K step) of the SIMT GEMM kernels: 16x16 threads per block."""
MMA_TILE = 64
"""Output tile edge of the tensor-core GEMM kernels (f16 / bf16 operands): 4 warps, each
a 32x32 register tile of 2x4 ``mma.sync`` m16n8k16 products per K step of 16."""
MMA_THREADS = 128
MMA_DTYPES = ("f16", "bf16")

_C_TYPES = {
    "f32": "float", "f16": "__half", "bf16": "__nv_bfloat16", "f64": "double", "i1": "bool",
    "i8": "signed char", "i16": "short", "i32": "int", "i64": "long long",
    "ui8": "unsigned char", "ui16": "unsigned short", "ui32": "unsigned int",
    "ui64": "unsigned long long",
}
"""Storage type of each element type (its MLIR spelling) in kernel memory."""
_C_COMPUTE = {
    "f32": "float", "f16": "float", "bf16": "float", "f64": "double", "i1": "bool",
    "i8": "int", "i16": "int", "i32": "int", "i64": "long long",
    "ui8": "unsigned int", "ui16": "unsigned int", "ui32": "unsigned int",
    "ui64": "unsigned long long",
}
"""Type a kernel computes each element type in (f16/bf16 in float, rounded per op, as the
reference executor does; narrow integers promoted as C does and wrapped on store)."""
DTYPES = tuple(_C_TYPES)
"""Element types a kernel reads and writes."""
FLOAT_DTYPES = ("f32", "f16", "bf16")
"""Element types of the float-only schedules (row reductions, GEMMs, pools)."""
_HEADERS = {"f16": "cuda_fp16.h", "bf16": "cuda_bf16.h"}
_INT_MAX = 2**31 - 1

Dim = int | str
"""A dimension in a kernel: a literal, or a C expression over the ``int`` dim parameters."""


def _rules():
    """The registered lowering rules (importing the family modules registers them)."""
    import partita.lowering.cuda.ops  # noqa: F401

    return INJECTIVE, WINDOW, ROWWISE


def _rule_for(op: Operation, table: dict) -> Rule | None:
    """``op``'s rule in ``table`` if it applies: types, ``supports``, and dims (a dynamic
    result needs a ``dims`` rule)."""
    rule = table.get(type(op))
    if rule is None or not _typed(op) or not rule.accepts(op):
        return None
    if rule.dims is None and any(DYNAMIC_INDEX in _shape(r) for r in op.results):
        return None
    return rule


def is_fusable(op: Operation) -> bool:
    """Whether ``op`` is injective (by its ``OpPattern`` kind) and a kernel can compute it."""
    if nn.op_kind(op) > nn.OpKind.INJECTIVE:
        return False
    if isinstance(op, _SPELLED_OPS):
        return _typed(op)
    return len(op.results) == 1 and _rule_for(op, _rules()[0]) is not None


def _typed(op: Operation, dtypes: Sequence[str] = DTYPES) -> bool:
    return all(isinstance(v.type, TensorType) and str(v.type.element_type) in dtypes
               for v in (*op.operands, *op.results))


def is_anchor(op: Operation) -> bool:
    """Whether ``op`` can anchor a ``rowwise``, ``gemm`` or ``window`` kernel (softmax only
    along its last axis, windowed pools only with static spatial dims: others run on the
    host)."""
    if len(op.results) == 1 and (_rule_for(op, _rules()[2]) or _rule_for(op, _rules()[1])) is not None:
        return True
    if not isinstance(op, ANCHOR_OPS) or not _typed(op, FLOAT_DTYPES):
        return False
    if isinstance(op, nn.Pool2DOp):
        _, h, w = _SPATIAL[op.layout]
        shape = _shape(op.operands[0])
        return DYNAMIC_INDEX not in (shape[h], shape[w])
    if isinstance(op, nn.SoftmaxOp):
        rank = len(_shape(op.result))
        return rank >= 1 and op.axis % rank == rank - 1
    return True


def kernel_kind(op: Operation) -> str:
    if _rule_for(op, _rules()[2]) is not None:
        return "rowwise"
    if isinstance(op, WINDOW_OPS) or _rule_for(op, _rules()[1]) is not None:
        return "window"
    return "rowwise" if isinstance(op, nn.SoftmaxOp | nn.LayerNormOp | nn.RMSNormOp) else "gemm"


_SPATIAL = {"NCHW": (1, 2, 3), "NHWC": (3, 1, 2)}
"""(channel, height, width) axes of each activation layout."""


def epilogue_error(op: Operation, anchor: Operation, derived: set[SSAValue]) -> str | None:
    """Why ``op``, reading values ``derived`` from ``anchor``'s result, cannot be part of
    its epilogue (``None`` if it can): element-wise only, on and to the anchor's shape."""
    shape = _shape(anchor.results[0])
    rule = _rules()[0].get(type(op))
    if nn.op_kind(op) > nn.OpKind.BROADCAST or (rule is not None and not rule.elementwise):
        return f"'{op.name}' remaps indices"
    if _shape(op.results[0]) != shape:
        return f"'{op.name}' does not keep the shape of the '{anchor.name}' result"
    for operand in op.operands:
        if operand in derived and _shape(operand) != shape:
            return f"'{op.name}' broadcasts the '{anchor.name}' result"
    if isinstance(op, nn.BiasAddOp) and op.bias in derived:
        return "a bias derived from the anchor"
    return None


def prologue_error(op: Operation, anchor: Operation) -> str | None:
    """Why ``op`` cannot compute part of ``anchor``'s row input inside the anchor's kernel
    (``None`` if it can): rowwise anchors only (the row is computed where it is read, in
    both passes), element-wise ops only, to the input's shape (so every element is
    computed from the same element of its operands, vector loads included)."""
    if kernel_kind(anchor) != "rowwise":
        return f"'{anchor.name}' reads its operands from memory"
    if not is_fusable(op):
        return f"'{op.name}' is not an injective op a kernel computes"
    rule = _rules()[0].get(type(op))
    if nn.op_kind(op) > nn.OpKind.BROADCAST or (rule is not None and not rule.elementwise):
        return f"'{op.name}' remaps indices"
    if len(op.results) != 1 or _shape(op.results[0]) != _shape(anchor.operands[0]):
        return f"'{op.name}' does not have the shape of the '{anchor.name}' input"
    return None


def _producers(value: SSAValue) -> list[Operation]:
    """The ops of ``value``'s block that ``value`` is computed from (itself included)."""
    seen: list[Operation] = []
    pending = [value]
    while pending:
        v = pending.pop()
        if isinstance(v.owner, Operation) and v.owner not in seen:
            seen.append(v.owner)
            pending.extend(v.owner.operands)
    return seen


def _dtype(typ: Attribute) -> str:
    assert isinstance(typ, TensorType) and str(typ.element_type) in _C_TYPES
    return str(typ.element_type)


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
    return f"{_paren(a)} * {_paren(b)}"  # operands may be sums (dynamic pads, slices)


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


def _add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if a == 0:
        return b
    if b == 0:
        return a
    return f"{_paren(a)} + {_paren(b)}"


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
        if not isinstance(arg.type, TensorType) or str(arg.type.element_type) not in DTYPES:
            return f"takes a {arg.type}, not a tensor of {', '.join(DTYPES)}"
    anchors = [op for op in block.ops if is_anchor(op)]
    for op in block.ops:
        if op is not block.last_op and not is_fusable(op) and not is_anchor(op):
            return f"contains '{op.name}', which is not an injective op, a row reduction, a GEMM or a pool"
    result = block.last_op.arguments[0]
    if isinstance(result, BlockArgument):
        return "returns an argument: there is nothing to compute"
    if len(anchors) > 1:
        return f"contains several reductions, GEMMs or pools ('{anchors[0].name}', '{anchors[1].name}')"
    if anchors:
        (anchor,) = anchors
        if not all(isinstance(v, BlockArgument) for v in anchor.operands[1:]):
            return f"computes an operand of '{anchor.name}' (only its epilogue can be fused)"
        prologue = _producers(anchor.operands[0])
        for op in prologue:
            if (why := prologue_error(op, anchor)) is not None:
                return f"computes an operand of '{anchor.name}' it cannot fuse: {why}"
        derived: set[SSAValue] = {anchor.results[0]}
        for op in block.ops:
            if op is block.last_op or op is anchor or op in prologue or not any(v in derived for v in op.operands):
                continue  # the anchor's row input, or a side input of its epilogue
            if (why := epilogue_error(op, anchor, derived)) is not None:
                return f"has an epilogue it cannot fuse: {why}"
            derived.add(op.results[0])
        if result not in derived:
            return f"does not return a value computed from '{anchor.name}'"
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
    """Threads per block."""
    kind: str = "fused"
    """``fused`` (injective), ``rowwise`` (reduction per row), ``gemm`` or ``window`` (pool)."""
    anchor: str = ""
    """The reduction, GEMM or pool op of a ``rowwise`` / ``gemm`` / ``window`` kernel."""
    split: int = 0
    """Leading output axes that index the blocks: the rows of a ``rowwise`` kernel (the
    rest is one row), the batch of a ``gemm`` kernel (then M axes, then N)."""
    tile: int = 0
    """Output tile edge of a ``gemm`` kernel (threads ``tile x tile`` per block)."""
    rows_per_block: int = 1
    """Rows a block of a ``rowwise`` kernel takes at a time (a warp each when more than one:
    ``row_stats.RowSchedule``)."""
    schedule: str = ""
    """The named schedule of a ``rowwise`` kernel (``block-per-row``, ``warp-per-row``)."""

    @property
    def params(self) -> tuple[str, ...]:
        """``name:kind:size`` of each kernel parameter (as the CUTLASS records spell them)."""
        ptrs = [f"in{k}:ptr:8" for k in range(len(self.inputs))] + ["out:ptr:8"]
        return tuple(ptrs + [f"dim{k}:int:4" for k in range(len(self.dims))])


class KernelEmitter:
    """Builds one fused function's kernel. Lowering rules (``rules.py``) use its public
    methods: ``value`` (an operand at an index, inlined), ``load`` (a kernel argument at an
    index), ``ctype``, ``var``, ``dims``, ``out_index``, ``index_type`` and ``lines``."""

    def __init__(self, function: FuncOp, entry: str):
        self.function = function
        self.entry = entry
        self.block = function.body.block
        self.lines: list[str] = []
        self.prelude: list[str] = []  # device code a whole-kernel schedule calls (before the entry)
        self.memo: dict[tuple[SSAValue, tuple[str, ...]], str] = {}
        self.counters: dict[str, int] = {}
        self.linear_of: dict[tuple[tuple[Dim, ...], tuple[str, ...]], str] = {}
        self.dims: dict[SSAValue, list[Dim]] = {}
        self.runtime_dims: list[tuple[int, int]] = []
        self.uses_dtypes: set[str] = set()
        anchors = [op for op in self.block.ops if is_anchor(op)]
        self.anchor: Operation | None = anchors[0] if anchors else None
        self.derived: set[SSAValue] = set()
        if self.anchor is not None:
            self.derived.add(self.anchor.results[0])
            for op in self.block.ops:
                if op is not self.block.last_op and any(v in self.derived for v in op.operands):
                    self.derived.add(op.results[0])

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
            if op is not self.anchor and op.results[0] in self.derived:
                # The epilogue keeps the anchor's shape (kernel_function_error checked it).
                self.dims[op.results[0]] = list(self.dims[self.anchor.results[0]])  # type: ignore[union-attr]
                continue
            derived = self._rule(op) if DYNAMIC_INDEX in static else list(static)
            self.dims[op.results[0]] = [s if s != DYNAMIC_INDEX else d for s, d in zip(static, derived)]

    def _rule(self, op: Operation) -> list[Dim]:
        rule = _rules()[0].get(type(op)) or _rules()[1].get(type(op)) or _rules()[2].get(type(op))
        if rule is not None and rule.dims is not None:
            return rule.dims(self, op)
        if isinstance(op, nn.DenseOp):
            return self.dims[op.input][:-1] + [self.dims[op.weight][0]]
        if isinstance(op, nn.MatmulOp | nn.BatchMatmulOp):
            a, b = self.dims[op.lhs], self.dims[op.rhs]
            (m, _), (_, n) = self._gemm_axes(op)
            return self._broadcast_dims(a[:-2], b[:-2]) + [a[m], b[n]]
        if isinstance(op, nn.ElementwiseBinaryOp):
            return self._broadcast_dims(self.dims[op.lhs], self.dims[op.rhs])
        if isinstance(op, nn.TransposeOp):
            x = self.dims[op.input]
            return [x[p] for p in op.perm]
        if isinstance(op, nn.ConcatenateOp):
            axis = op.axis % len(_shape(op.result))
            out = list(self.dims[op.inputs[0]])
            out[axis] = " + ".join(_paren(self.dims[v][axis]) for v in op.inputs)
            return out
        if isinstance(op, nn.ReshapeOp):
            shape: list[Dim] = list(_shape(op.result))
            for ref, axis, target in zip(op.refs, op.ref_axes, op.targets):
                shape[target] = self.dims[ref][axis]  # a shape reference's dim
            known = _product([d for d in shape if d != DYNAMIC_INDEX])
            count = _product(self.dims[op.input])
            return [f"{_paren(count)} / {_paren(known)}" if d == DYNAMIC_INDEX else d for d in shape]
        return list(self.dims[op.operands[0]])

    @staticmethod
    def _broadcast_dims(x: list[Dim], y: list[Dim]) -> list[Dim]:
        rank = max(len(x), len(y))
        x = [1] * (rank - len(x)) + x
        y = [1] * (rank - len(y)) + y
        return [_broadcast(a, b) for a, b in zip(x, y)]

    @staticmethod
    def _gemm_axes(op: Operation) -> tuple[tuple[int, int], tuple[int, int]]:
        """The (M, K) axes of the lhs and the (K, N) axes of the rhs, from the end."""
        if isinstance(op, nn.DenseOp):
            return (-2, -1), (-1, -2)
        if isinstance(op, nn.BatchMatmulOp):
            return ((-1, -2) if op.transpose_a else (-2, -1)), ((-1, -2) if op.transpose_b else (-2, -1))
        return (-2, -1), (-2, -1)

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
        return self._broadcast_dims_index(self.dims[operand], self.dims[result], index)

    @staticmethod
    def _broadcast_dims_index(dims: Sequence[Dim], result: Sequence[Dim], index: Sequence[str]) -> list[str]:
        """The index into a tensor of ``dims`` broadcast to ``result`` at ``index``."""
        lead = len(index) - len(dims)
        out = []
        for d, r, ix in zip(dims, result[lead:], index[lead:]):
            if d == 1:
                out.append("0")
            elif isinstance(d, str) and d != r and ix != "0":
                out.append(f"({d} == 1 ? 0 : {ix})")
            else:
                out.append(ix)
        return out

    def _round(self, expr: str, dtype: str) -> str:
        return f"rn_{dtype}({expr})" if dtype in ("f16", "bf16") else expr

    # -- the interface of lowering rules --------------------------------------------------
    @staticmethod
    def ctype(v: SSAValue) -> str:
        """The C type ``v`` is computed in (``float`` for f16/bf16/f32)."""
        return _C_COMPUTE[_dtype(v.type)]

    def var(self, prefix: str) -> str:
        """A fresh C variable name."""
        return self._var(prefix)

    def load(self, arg: SSAValue, index: Sequence[str]) -> str:
        """The C expression loading kernel argument ``arg`` at ``index`` (compute type)."""
        assert isinstance(arg, BlockArgument)
        return self._load(f"in{arg.index}[{self._linear(self.dims[arg], index)}]", _dtype(arg.type))

    def broadcast_index(self, operand: SSAValue, result: SSAValue, index: Sequence[str]) -> list[str]:
        """The index into ``operand`` broadcast (NumPy rules) to ``result`` at ``index``."""
        return self._broadcast_index(operand, result, index)

    def value(self, v: SSAValue, index: Sequence[str]) -> str:
        """A float variable holding ``v`` at ``index`` (emitted once per distinct index)."""
        key = (v, tuple(index))
        if key in self.memo:
            return self.memo[key]
        dtype = _dtype(v.type)
        if self.anchor is not None and v is self.anchor.results[0]:
            raise AssertionError("the anchor's result is read at the output index only")
        if isinstance(v.owner, nn.TransposeOp | nn.ReshapeOp):
            # Index remapping only: the value is the input's, at another index.
            self.memo[key] = self._compute(v.owner, index)
            return self.memo[key]
        if isinstance(v, BlockArgument):
            expr = self.load(v, index)
        else:
            expr = self._round(self._compute(v.owner, index), dtype)  # type: ignore[arg-type]
        name = self._var("v")
        self.lines.append(f"    const {self.ctype(v)} {name} = {expr};")
        self.memo[key] = name
        return name

    def _chain_first(self, result: SSAValue) -> None:
        """Computes, in block order, every element-wise value ``result`` needs at the output
        index, so that computing ``result`` finds each operand memoized: the emission is a
        loop over the chain, not one recursion per fused op (a flat chain of 400
        element-wise ops overflowed Python's stack)."""
        needed: set[SSAValue] = set()
        pending = [result]
        while pending:
            v = pending.pop()
            if v not in needed:
                needed.add(v)
                if isinstance(v.owner, Operation):
                    pending.extend(v.owner.operands)
        for op in self.block.ops:
            if op is self.block.last_op:
                break
            if isinstance(op, nn.ElementwiseUnaryOp | nn.ElementwiseBinaryOp) and op.results[0] in needed \
                    and all(self.dims.get(v) == self.out_dims for v in (*op.operands, op.results[0])):
                self.value(op.results[0], self.out_index)

    def _compute(self, op: Operation, index: Sequence[str]) -> str:
        if (rule := _rules()[0].get(type(op))) is not None:
            return rule.emit(self, op, list(index))
        if isinstance(op, nn.ElementwiseBinaryOp):
            a = self.value(op.lhs, self._broadcast_index(op.lhs, op.result, index))
            b = self.value(op.rhs, self._broadcast_index(op.rhs, op.result, index))
            symbol = {nn.AddOp: "+", nn.SubtractOp: "-", nn.MultiplyOp: "*"}[type(op)]
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
        if isinstance(op, nn.ConcatenateOp):
            axis = op.axis % len(index)
            parts: list[tuple[str, str]] = []
            offset: Dim = 0
            for v in op.inputs:
                d = self.dims[v][axis]
                if d == 0:
                    continue
                inner = list(index)
                inner[axis], _ = self._clamped(index[axis], offset, d)
                parts.append((f"{index[axis]} < {_paren(_add(offset, d))}", self.value(v, inner)))
                offset = _add(offset, d)
            if not parts:  # every input empty along the axis: so is the result, never read
                return "0"
            expr = parts[-1][1]
            for cond, x in reversed(parts[:-1]):
                expr = f"{cond} ? {x} : ({expr})"
            return expr
        if isinstance(op, nn.ReshapeOp):
            linear = self._linear(self.dims[op.result], index)
            if linear not in ("i", "0") and not re.fullmatch(r"\w+", linear):
                t = self._var("t")
                self.lines.append(f"    const {self.index_type} {t} = {linear};")
                linear = t
            return self.value(op.input, self._decompose(linear, self.dims[op.input]))
        raise op_error(op, "has no CUDA lowering")  # pragma: no cover - checked by kernel_function_error

    def _clamped(self, ix: str, shift: Dim, size: Dim) -> tuple[str, str]:
        """The index ``ix - shift`` clamped into ``[0, size)``, and the C condition that it
        needed no clamping (declares both as variables)."""
        T = self.index_type
        s = self._var("s")
        self.lines.append(f"    const {T} {s} = {ix if shift == 0 else f'{ix} - {_paren(shift)}'};")
        c = self._var("c")
        self.lines.append(f"    const {T} {c} = {s} < 0 ? 0 : ({s} < {_paren(size)} ? {s} : {_paren(size)} - 1);")
        return c, f"{s} == {c}"

    def _axis_lines(self, var: str, axes: Sequence[int], used: str, indent: str) -> list[str]:
        """Declarations of the output index axes ``axes`` (consecutive) that ``used``
        reads, from ``var``, their row-major linear index."""
        lines = []
        stride: Dim = 1
        for pos in range(len(axes) - 1, -1, -1):
            axis = axes[pos]
            d = self.out_dims[axis]
            if d != 1 and re.search(rf"\bo{axis}\b", used):
                quotient = var if stride == 1 else f"{var} / {_paren(stride)}"
                expr = quotient if pos == 0 else f"{_paren(quotient)} % {_paren(d)}"
                lines.append(f"{indent}const {self.index_type} o{axis} = {expr};")
            stride = _mul(stride, d)
        return list(reversed(lines))

    def _load(self, pointer: str, dtype: str) -> str:
        return f"ld_{dtype}({pointer})" if dtype in ("f16", "bf16") else pointer

    def _arg(self, value: SSAValue) -> BlockArgument:
        assert isinstance(value, BlockArgument)
        return value

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
        if self.anchor is not None:
            # The anchor's value at the output index is "y", computed by the schedule.
            self.memo[(self.anchor.results[0], tuple(self.out_index))] = "y"
        else:
            self._chain_first(result)
        out = self.value(result, self.out_index)
        out_dtype = _dtype(result.type)
        used = "\n".join(self.lines)
        arg_types = [_dtype(a.type) for a in self.block.args]
        self.uses_dtypes |= {*arg_types, out_dtype}
        params = [f"const {_C_TYPES[t]}* __restrict__ in{k}" for k, t in enumerate(arg_types)]
        params.append(f"{_C_TYPES[out_dtype]}* __restrict__ out")
        params += [f"int dim{k}" for k in range(len(self.runtime_dims))]
        store = f"    out[i] = {f'st_{out_dtype}({out})' if out_dtype in ('f16', 'bf16') else out};"
        ops = [op.name for op in self.block.ops if op is not self.block.last_op]
        T = self.index_type
        head = [
            f"// @{self.function.sym_name.data}: {', '.join(ops)}",
            f'extern "C" __global__ void __launch_bounds__({BLOCK_SIZE})',
            f"{self.entry}({', '.join(params)}) {{",
            *(f"  const {T} d{k} = dim{k};" for k in range(len(self.runtime_dims))),
        ]
        extra: dict = {}
        rank = len(self.out_dims)
        if self.anchor is None:
            body = [
                f"  const {T} n = {numel};",
                f"  for ({T} i = ({T})blockIdx.x * blockDim.x + threadIdx.x; i < n; i += ({T})gridDim.x * blockDim.x) {{",
                *self._axis_lines("i", range(rank), used, "    "),
                *self.lines,
                store,
                "  }",
            ]
        elif (whole := self._whole_kernel(result)) is not None:
            body, block = whole
            extra = {"kind": "window", "block": block}
        elif kernel_kind(self.anchor) == "window":
            window = self._window()
            body = [
                f"  const {T} n = {numel};",
                f"  for ({T} i = ({T})blockIdx.x * blockDim.x + threadIdx.x; i < n; i += ({T})gridDim.x * blockDim.x) {{",
                *self._axis_lines("i", range(rank), used + "\n".join(window), "    "),
                *window,
                *self.lines,
                store,
                "  }",
            ]
            extra = {"kind": "window"}
        elif (rule := _rule_for(self.anchor, _rules()[2])) is not None:
            reduction: RowReduction = rule.emit(self, self.anchor)
            split = len(self.dims[reduction.input]) - len(reduction.axes)
            cols = _product([self.dims[reduction.input][a] for a in reduction.axes])
            body, sched = self._row_reduction(reduction, split, cols, used, store)
            extra = {"kind": "rowwise", "split": split, "block": sched.threads,
                     "rows_per_block": sched.rows_per_block, "schedule": sched.name}
        elif kernel_kind(self.anchor) == "rowwise":
            split = self.anchor.axis % rank if isinstance(self.anchor, nn.LayerNormOp | nn.RMSNormOp) else rank - 1
            body, sched = self._rowwise(split, used, store)
            extra = {"kind": "rowwise", "split": split, "block": sched.threads,
                     "rows_per_block": sched.rows_per_block, "schedule": sched.name}
        else:
            split = 0 if isinstance(self.anchor, nn.DenseOp) else rank - 2
            mma = self._mma_dtype()
            if mma is not None:
                body = self._gemm_mma(split, used, store, mma)
                extra = {"kind": "gemm", "split": split, "tile": MMA_TILE, "block": MMA_THREADS}
            else:
                body = self._gemm(split, used, store)
                extra = {"kind": "gemm", "split": split, "tile": GEMM_TILE, "block": GEMM_TILE * GEMM_TILE}
        if self.anchor is not None:
            extra["anchor"] = self.anchor.name
        head[1] = f'extern "C" __global__ void __launch_bounds__({extra.get("block", BLOCK_SIZE)})'
        return FusedKernel(
            function=self.function.sym_name.data,
            entry=self.entry,
            inputs=tuple(_record_shape(a) for a in self.block.args),
            dtypes=tuple(arg_types),
            output=_record_shape(result),
            output_dtype=out_dtype,
            dims=tuple(self.runtime_dims),
            ops=tuple(ops),
            code="\n".join([*self.prelude, *head, *body, "}"]) + "\n",
            **extra,
        )

    def _epilogue(self, indent: str, store: str) -> list[str]:
        return [indent + line[4:] for line in [*self.lines, store]]

    def _row_element(self, x: SSAValue, cols: Dim, vector: bool = True) -> RowElement:
        """``x`` (the anchor's row input) at element ``j`` of row ``r``: a load of the row
        ``xr`` (an argument), or the expression of its fused element-wise producers at the
        element's linear index ``xi`` (their operands of ``x``'s shape read from memory at
        ``xi``). With ``vector``, rows of a multiple of 16 bytes are read as 16-byte
        vectors: ``xr``'s, or those of the producers' operands that have ``x``'s shape."""
        T = self.index_type
        if isinstance(x, BlockArgument):
            xt = _dtype(x.type)
            if vector and (width := _vector_width(xt, cols)):
                return RowElement(width, self._load("e[u]", xt), vector=(
                    "const partita_v16 w = ((const partita_v16*)xr)[jv];",
                    f"const {_C_TYPES[xt]}* e = (const {_C_TYPES[xt]}*)&w;"))
            return RowElement(0, self._load("xr[j]", xt))
        saved = self.lines, self.memo
        self.lines, self.memo = [], {}  # the producers' lines go into the row pass, not the epilogue
        try:
            expr = self.value(x, self._decompose("xi", self.dims[x]))
            body = [line.strip() for line in self.lines]
        finally:
            self.lines, self.memo = saved
        lines = [f"const {T} xi = r * cols + j;", *body]
        text = "\n".join(body)
        rows = [a for a in self.block.args if self.dims[a] == self.dims[x] and f"in{a.index}[xi]" in text]
        width = _vector_width(_dtype(rows[0].type), cols) if vector and rows else 0
        if not width:
            return RowElement(0, expr, tuple(lines))
        loads: list[str] = []
        for a in rows:
            if _vector_width(_dtype(a.type), cols) == width:
                ct = _C_TYPES[_dtype(a.type)]
                loads += [f"const partita_v16 w{a.index} = ((const partita_v16*)(in{a.index} + r * cols))[jv];",
                          f"const {ct}* e{a.index} = (const {ct}*)&w{a.index};"]
                lines = [line.replace(f"in{a.index}[xi]", f"e{a.index}[u]") for line in lines]
        return RowElement(width, expr, tuple(lines), tuple(loads))

    def _row_pointer(self, x: SSAValue) -> list[str]:
        """The declaration of ``xr``, row ``r`` of ``x`` when it is an argument."""
        if not isinstance(x, BlockArgument):
            return []
        return [f"    const {_C_TYPES[_dtype(x.type)]}* xr = in{x.index} + r * cols;"]

    def _schedule(self, x: SSAValue, rows: Dim, cols: Dim) -> tuple[RowSchedule, RowElement]:
        """The row schedule (``row_stats.row_schedule``) and the statistics pass's element."""
        element = self._row_element(x, cols)
        return row_schedule(rows, cols, element.width, _row_block(rows, cols)), element

    def _rowwise(self, split: int, used: str, store: str) -> tuple[list[str], RowSchedule]:
        """Rows by the schedule (a block or a warp each, grid-stride), threads stride along
        the row: one pass over the row for its statistics (``row_stats``), one for the
        output."""
        anchor = self.anchor
        assert anchor is not None
        T = self.index_type
        x = anchor.operands[0]
        rows, cols = _product(self.out_dims[:split]), _product(self.out_dims[split:])
        stats_of = (softmax_stats if isinstance(anchor, nn.SoftmaxOp)
                    else square_stats if isinstance(anchor, nn.RMSNormOp) else welford_stats)
        sched, element = self._schedule(x, rows, cols)
        lines = [
            f"  const {T} rows = {rows};",
            f"  const {T} cols = {cols};",
            *([] if sched.warp else ["  __shared__ float red[32];"]),
            *sched.row_loop(T),
            *self._row_pointer(x),
            *stats_of(T, element, sched),
        ]
        element = self._row_element(x, cols, vector=False)
        xj = element.expr
        if isinstance(anchor, nn.SoftmaxOp):
            y = f"expf({xj} - mx) / sum"
        elif isinstance(anchor, nn.RMSNormOp):
            s = self._arg(anchor.scale)
            tail = self.out_dims[split:]
            at = self._linear(self.dims[s], self._broadcast_dims_index(self.dims[s], tail, self._decompose("j", tail)))
            lines.append(f"    const float rs = sqrtf(ms + {_c_float(float(anchor.epsilon))});")
            y = f"{xj} / rs * {self._load(f'in{s.index}[{at}]', _dtype(s.type))}"
        else:
            assert isinstance(anchor, nn.LayerNormOp)
            g, b = self._arg(anchor.gamma), self._arg(anchor.beta)
            lines.append(f"    const float sd = sqrtf(var + {_c_float(float(anchor.epsilon))});")
            gj = self._load(f"in{g.index}[j]", _dtype(g.type))
            bj = self._load(f"in{b.index}[j]", _dtype(b.type))
            y = f"({xj} - mean) / sd * {gj} + {bj}"
        lines += [
            f"    for ({T} j = {sched.lane}; {sched.live}j < cols; j += {sched.stride}) {{",
            *(f"      {line}" for line in element.lines),
            f"      const {T} i = r * cols + j;",
            *self._axis_lines("r", range(split), used, "      "),
            *self._axis_lines("j", range(split, len(self.out_dims)), used, "      "),
            f"      const float y = {self._round(y, _dtype(anchor.results[0].type))};",
            *self._epilogue("      ", store),
            "    }",
            "  }",
        ]
        return lines, sched

    def _row_reduction(self, red: RowReduction, split: int, cols: Dim, used: str,
                       store: str) -> tuple[list[str], RowSchedule]:
        """One block per row (grid-stride over rows): each fold runs over the row with the
        threads striding along it (coalesced), then combines across the block; thread 0
        computes ``y`` and runs the epilogue. A row is the input's trailing ``cols``
        elements, whose output element's linear index is the row's."""
        T = self.index_type
        x = red.input
        rows = _product(self.out_dims[:split])
        sched, element = self._schedule(x, rows, cols)
        lines = [
            f"  const {T} rows = {rows};",
            f"  const {T} cols = {cols};",
            *(f"  __shared__ {f.ctype} red_{f.acc}[32];" for f in red.folds if not sched.warp),
            *(f"  __shared__ long long red_{f.acc}_at[32];" for f in red.folds if f.is_arg and not sched.warp),
            *sched.row_loop(T),
            *self._row_pointer(x),
        ]
        for f in red.folds:
            lines.append(f"    {f.ctype} {f.acc} = {f.init};")
            if f.is_arg:
                lines.append(f"    long long {f.acc}_at = -1;")
            lines += fold_pass(T, element, f.step("j"), _C_COMPUTE[_dtype(x.type)], sched)
            if f.is_arg:
                better = (f"[](const {f.ctype} t, const long long k, const {f.ctype} b, const long long j) "
                          f"{{ return {f.better('t', 'k', 'b', 'j')}; }}")
                lines.append(f"    {sched.reduce('arg', f.acc, f'{f.acc}_at', better, shared=(f'red_{f.acc}', f'red_{f.acc}_at'))};"
                             if sched.warp else
                             f"    partita_block_arg({f.acc}, {f.acc}_at, red_{f.acc}, red_{f.acc}_at, {better});")
            else:
                op = f"partita_{ {'+': 'add', '*': 'mul', 'max': 'max', 'min': 'min'}[f.combine]}()"
                call = (f"partita_warp_reduce({f.acc}, {op})" if sched.warp
                        else f"partita_block_reduce({f.acc}, ({f.ctype})({f.init}), red_{f.acc}, {op})")
                lines.append(f"    {f.acc} = {call};")
            lines += [f"    {line}" for line in f.then]
        result = _dtype(self.anchor.results[0].type)  # type: ignore[union-attr]
        lines += [
            f"    if ({'live && lane' if sched.warp else 'threadIdx.x'} == 0) {{",
            f"      const {T} i = r;",
            *self._axis_lines("r", range(split), used, "      "),
            f"      const {_C_COMPUTE[result]} y = {self._round(red.y, result)};",
            *self._epilogue("      ", store),
            "    }",
            "  }",
        ]
        return lines, sched

    def _whole_kernel(self, result: SSAValue) -> tuple[list[str], int] | None:
        """A window rule's whole-kernel schedule, when the kernel is its anchor alone."""
        if self.anchor is None or result is not self.anchor.results[0]:
            return None
        rule = _rule_for(self.anchor, _rules()[1])
        return rule.kernel(self, self.anchor) if rule is not None and rule.kernel is not None else None

    def _window(self) -> list[str]:
        """The anchor's value ``y`` at the output index: a loop over its window."""
        anchor = self.anchor
        assert anchor is not None
        if (rule := _rule_for(anchor, _rules()[1])) is not None:
            return rule.emit(self, anchor)
        T = self.index_type
        x = self._arg(anchor.operands[0])
        xt, xd = _dtype(x.type), self.dims[x]
        c_ax, h_ax, w_ax = _SPATIAL[anchor.layout]
        o = self.out_index
        lines = []
        at = ["0"] * 4
        at[0], at[c_ax], at[h_ax], at[w_ax] = o[0], o[c_ax], "ih", "iw"
        load = self._load(f"in{x.index}[{self._linear(xd, at)}]", xt)
        # Windowed pools go through the conv family's rule above; the global pool is left.
        assert isinstance(anchor, nn.GlobalAvgPool2DOp)
        lines += [
            "    float acc = 0.0f;",
            f"    for ({T} ih = 0; ih < {xd[h_ax]}; ++ih)",
            f"      for ({T} iw = 0; iw < {xd[w_ax]}; ++iw) acc += {load};",
            f"    const float y = {self._round(f'acc / (float)({_product([xd[h_ax], xd[w_ax]])})', _dtype(anchor.result.type))};",
        ]
        return lines

    def _gemm_problem(self, split: int) -> tuple:
        """What both GEMM schedules share: the operands, whether each is stored with its
        GEMM rows contiguous-last (``a[m, k]``, ``b[k, n]``), the problem dims M, N, K, the
        batch dims (the output's first ``split``), and each operand's pointer at batch
        ``bz`` (broadcast operands repeat their batch)."""
        anchor = self.anchor
        assert anchor is not None
        a, b = self._arg(anchor.operands[0]), self._arg(anchor.operands[1])
        ad, bd = self.dims[a], self.dims[b]
        (am, ak), (bk, bn) = self._gemm_axes(anchor)
        if isinstance(anchor, nn.DenseOp):
            m: Dim = _product(ad[:-1])
            a_batch: list[Dim] = []
            b_batch: list[Dim] = []
        else:
            m, a_batch, b_batch = ad[am], ad[:-2], bd[:-2]
        n, k = bd[bn], ad[ak]
        batch_dims = self.out_dims[:split]
        batch_index = self._decompose("bz", batch_dims)

        def pointer(value, dims: list[Dim], size: Dim) -> str:
            linear = self._linear(dims, self._broadcast_dims_index(dims, batch_dims, batch_index))
            return f"in{value.index}" + ("" if linear == "0" else f" + {_paren(linear)} * {_paren(size)}")

        return (a, b, (am, ak) == (-2, -1), (bk, bn) == (-2, -1), m, n, k, batch_dims,
                pointer(a, a_batch, _mul(m, k)), pointer(b, b_batch, _mul(k, n)))

    def _gemm(self, split: int, used: str, store: str) -> list[str]:
        """16x16 output tiles, K in steps of 16 through shared memory."""
        anchor = self.anchor
        assert anchor is not None
        T, tile = self.index_type, GEMM_TILE
        a, b, a_rows, b_rows, m, n, k, batch_dims, a_ptr, b_ptr = self._gemm_problem(split)
        a_at = "a[mm * K + kk]" if a_rows else "a[kk * M + mm]"
        b_at = "b[kk * N + nn]" if b_rows else "b[nn * K + kk]"
        # Each load walks the operand's contiguous axis with threadIdx.x.
        a_load = ("m0 + ty", "k0 + tx", "As[ty][tx]") if a_rows else ("m0 + tx", "k0 + ty", "As[tx][ty]")
        b_load = ("k0 + ty", "n0 + tx", "Bs[ty][tx]") if b_rows else ("k0 + tx", "n0 + ty", "Bs[tx][ty]")
        at, bt = _dtype(a.type), _dtype(b.type)
        return [
            f"  const {T} M = {m};",
            f"  const {T} N = {n};",
            f"  const {T} K = {k};",
            f"  const {T} batch = {_product(batch_dims)};",
            f"  const {T} mtiles = (M + {tile - 1}) / {tile};",
            f"  __shared__ float As[{tile}][{tile + 1}];",
            f"  __shared__ float Bs[{tile}][{tile + 1}];",
            "  const int tx = threadIdx.x, ty = threadIdx.y;",
            f"  for ({T} bz = blockIdx.z; bz < batch; bz += gridDim.z) {{",
            f"    const {_C_TYPES[at]}* a = {a_ptr};",
            f"    const {_C_TYPES[bt]}* b = {b_ptr};",
            f"    for ({T} mt = blockIdx.y; mt < mtiles; mt += gridDim.y) {{",
            f"      const {T} m0 = mt * {tile}, n0 = ({T})blockIdx.x * {tile};",
            "      float acc = 0.0f;",
            f"      for ({T} k0 = 0; k0 < K; k0 += {tile}) {{",
            f"        {{ const {T} mm = {a_load[0]}, kk = {a_load[1]}; {a_load[2]} = mm < M && kk < K ? {self._load(a_at, at)} : 0.0f; }}",
            f"        {{ const {T} kk = {b_load[0]}, nn = {b_load[1]}; {b_load[2]} = kk < K && nn < N ? {self._load(b_at, bt)} : 0.0f; }}",
            "        __syncthreads();",
            f"        for (int q = 0; q < {tile}; ++q) acc += As[ty][q] * Bs[q][tx];",
            "        __syncthreads();",
            "      }",
            f"      const {T} m = m0 + ty, n = n0 + tx;",
            "      if (m < M && n < N) {",
            f"        const {T} i = (bz * M + m) * N + n;",
            *self._axis_lines("bz", range(split), used, "        "),
            *self._axis_lines("m", range(split, len(self.out_dims) - 1), used, "        "),
            *self._axis_lines("n", [len(self.out_dims) - 1], used, "        "),
            f"        const float y = {self._round('acc', _dtype(anchor.results[0].type))};",
            *self._epilogue("        ", store),
            "      }",
            "    }",
            "  }",
        ]


    def _mma_dtype(self) -> str | None:
        """The operand type of a tensor-core GEMM (both operands f16, or both bf16)."""
        anchor = self.anchor
        assert anchor is not None
        a, b = (_dtype(v.type) for v in anchor.operands[:2])
        return a if a == b and a in MMA_DTYPES else None

    def _gemm_mma(self, split: int, used: str, store: str, dtype: str) -> list[str]:
        """64x64 output tiles on tensor cores: K in steps of 16 through shared memory (each
        operand loaded along its contiguous axis, bounds-checked, so any alignment and
        layout), then per warp 2x4 ``mma.sync`` m16n8k16 with f32 accumulators in registers
        (``partita_mma_<dtype>``: fragments in PTX's m16n8k16 layout)."""
        anchor = self.anchor
        assert anchor is not None
        T, tile = self.index_type, MMA_TILE
        a, b, a_rows, b_rows, m, n, k, batch_dims, a_ptr, b_ptr = self._gemm_problem(split)
        a_at = "a[mm * K + kk]" if a_rows else "a[kk * M + mm]"
        b_at = "b[kk * N + nn]" if b_rows else "b[nn * K + kk]"
        # consecutive threads take consecutive addresses of the operand's contiguous axis
        a_rc = ("q >> 4", "q & 15") if a_rows else (f"q & {tile - 1}", "q >> 6")
        b_rc = ("q >> 6", f"q & {tile - 1}") if b_rows else ("q & 15", "q >> 4")
        ct = _C_TYPES[dtype]
        return [
            f"  const {T} M = {m};",
            f"  const {T} N = {n};",
            f"  const {T} K = {k};",
            f"  const {T} batch = {_product(batch_dims)};",
            f"  const {T} mtiles = (M + {tile - 1}) / {tile};",
            f"  __shared__ float As[{tile}][17];",
            f"  __shared__ float Bs[16][{tile + 1}];",
            "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;",
            "  const int g = lane >> 2, t4 = lane & 3;",
            "  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;",
            f"  for ({T} bz = blockIdx.z; bz < batch; bz += gridDim.z) {{",
            f"    const {ct}* a = {a_ptr};",
            f"    const {ct}* b = {b_ptr};",
            f"    for ({T} mt = blockIdx.y; mt < mtiles; mt += gridDim.y) {{",
            f"      const {T} m0 = mt * {tile}, n0 = ({T})blockIdx.x * {tile};",
            "      float acc[2][4][4];",
            "      #pragma unroll",
            "      for (int e = 0; e < 32; ++e) acc[e >> 4][(e >> 2) & 3][e & 3] = 0.0f;",
            f"      for ({T} k0 = 0; k0 < K; k0 += 16) {{",
            f"        for (int q = tid; q < {tile * 16}; q += {MMA_THREADS}) {{",
            f"          {{ const int r = {a_rc[0]}, c = {a_rc[1]}; const {T} mm = m0 + r, kk = k0 + c;",
            f"            As[r][c] = mm < M && kk < K ? {self._load(a_at, dtype)} : 0.0f; }}",
            f"          {{ const int r = {b_rc[0]}, c = {b_rc[1]}; const {T} kk = k0 + r, nn = n0 + c;",
            f"            Bs[r][c] = kk < K && nn < N ? {self._load(b_at, dtype)} : 0.0f; }}",
            "        }",
            "        __syncthreads();",
            "        float af[2][8], bf[4][4];",
            "        #pragma unroll",
            "        for (int mi = 0; mi < 2; ++mi)",
            "          #pragma unroll",
            "          for (int j = 0; j < 8; ++j)",
            "            af[mi][j] = As[wm + mi * 16 + g + ((j >> 1) & 1) * 8][t4 * 2 + (j & 1) + (j >> 2) * 8];",
            "        #pragma unroll",
            "        for (int ni = 0; ni < 4; ++ni)",
            "          #pragma unroll",
            "          for (int j = 0; j < 4; ++j)",
            "            bf[ni][j] = Bs[t4 * 2 + (j & 1) + (j >> 1) * 8][wn + ni * 8 + g];",
            "        #pragma unroll",
            "        for (int mi = 0; mi < 2; ++mi)",
            "          #pragma unroll",
            "          for (int ni = 0; ni < 4; ++ni) partita_mma_" + dtype + "(acc[mi][ni], af[mi], bf[ni]);",
            "        __syncthreads();",
            "      }",
            "      #pragma unroll",  # register accumulators: every index must be static
            "      for (int e = 0; e < 32; ++e) {",
            "        const int mi = e >> 4, ni = (e >> 2) & 3, ce = e & 3;",
            f"        const {T} m = m0 + wm + mi * 16 + g + (ce >> 1) * 8, n = n0 + wn + ni * 8 + t4 * 2 + (ce & 1);",
            "        if (m < M && n < N) {",
            f"          const {T} i = (bz * M + m) * N + n;",
            *self._axis_lines("bz", range(split), used, "          "),
            *self._axis_lines("m", range(split, len(self.out_dims) - 1), used, "          "),
            *self._axis_lines("n", [len(self.out_dims) - 1], used, "          "),
            f"          const float y = {self._round('acc[mi][ni][ce]', _dtype(anchor.results[0].type))};",
            *self._epilogue("          ", store),
            "        }",
            "      }",
            "    }",
            "  }",
        ]


ROW_BLOCK_FEW = 1024
"""Threads per block of a row reduction with few long rows (a block per row cannot fill
the device, so each block takes as many threads as it may)."""


def _vector_width(dtype: str, cols: Dim) -> int:
    """Elements per 128-bit load of a row of ``cols`` elements (0: scalar loads). Rows
    start 16-byte aligned when their length is a multiple of the width (buffers are
    256-byte aligned by plan-memory and the allocator)."""
    width = {"f16": 8, "bf16": 8, "f32": 4}.get(dtype, 0)
    return width if width and isinstance(cols, int) and cols % width == 0 else 0


def _row_block(rows: Dim, cols: Dim) -> int:
    """Threads per block of a row reduction: the row's length rounded up to a power of
    two, 32 (a warp) to ``BLOCK_SIZE``; ``ROW_BLOCK_FEW`` for at most 16 rows of 8192
    elements or more; ``BLOCK_SIZE`` when the length is known at run time only."""
    if isinstance(cols, str):
        return BLOCK_SIZE
    if isinstance(rows, int) and rows <= 16 and cols >= 8192:
        return ROW_BLOCK_FEW
    return min(BLOCK_SIZE, max(32, 1 << (cols - 1).bit_length()))


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
    return KernelEmitter(function, entry or _entry_name(function.sym_name.data, set())).emit()


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


def _mma_helper(dtype: str) -> str:
    """``partita_mma_<dtype>(c, a, b)``: ``c += A·B`` for one warp's m16n8k16 tile, the
    fragments in PTX's layout (lane = 4 * group + t: a[0..7] = A[g][2t..2t+1],
    A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]; b[0..3] = B[2t..2t+1][g], B[2t+8..][g];
    c[0..3] = C[g][2t..2t+1], C[g+8][2t..]), operands as floats already rounded to the
    type. sm_80 and later: one ``mma.sync`` (HMMA); elsewhere (and in host builds) the
    same product from warp shuffles, with f32 accumulation."""
    ptx, pack = {"f16": ("f16", "__floats2half2_rn"), "bf16": ("bf16", "__floats2bfloat162_rn")}[dtype]
    return (
        f"static __device__ __forceinline__ void partita_mma_{dtype}(float* c, const float* a, const float* b) {{\n"
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
        "  unsigned r[6];\n"
        "  #pragma unroll\n"
        "  for (int j = 0; j < 6; ++j) {\n"
        "    const float* p = j < 4 ? a + 2 * j : b + 2 * (j - 4);\n"
        f"    const auto h = {pack}(p[0], p[1]);  // the lower half holds the lower index\n"
        "    r[j] = *reinterpret_cast<const unsigned*>(&h);\n"
        "  }\n"
        f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 "\n'
        '               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\\n"\n'
        '               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])\n'
        '               : "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]));\n'
        "#else\n"
        "  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;\n"
        "  for (int k = 0; k < 16; ++k) {\n"
        "    const int src = (k & 7) >> 1, ia = (k & 1) + (k >> 3) * 4, ib = (k & 1) + (k >> 3) * 2;\n"
        "    // every lane shuffles the same registers: A[g][k], A[g+8][k], B[k][2t], B[k][2t+1]\n"
        "    const float a0 = __shfl_xor_sync(0xffffffffu, a[ia], (g * 4 + src) ^ lane);\n"
        "    const float a1 = __shfl_xor_sync(0xffffffffu, a[ia + 2], (g * 4 + src) ^ lane);\n"
        "    const float b0 = __shfl_xor_sync(0xffffffffu, b[ib], ((2 * t) * 4 + src) ^ lane);\n"
        "    const float b1 = __shfl_xor_sync(0xffffffffu, b[ib], ((2 * t + 1) * 4 + src) ^ lane);\n"
        "    c[0] += a0 * b0; c[1] += a0 * b1; c[2] += a1 * b0; c[3] += a1 * b1;\n"
        "  }\n"
        "#endif\n"
        "}\n"
    )


_REDUCE_HELPERS = (
    "// 16 bytes of a row, read with one 128-bit load (LDG.E.128) where the row allows it.\n"
    "struct alignas(16) partita_v16 { unsigned w[4]; };\n"
    "// Block-wide reductions: warp shuffles, then one value per warp through red[32];\n"
    "// every thread gets the result (blockDim.x a multiple of 32, at most 1024).\n"
    "static __device__ __forceinline__ float partita_warp_sum(float v) {\n"
    "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "  return v;\n"
    "}\n"
    "static __device__ __forceinline__ float partita_warp_max(float v) {\n"
    "  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
    "  return v;\n"
    "}\n"
    "static __device__ __forceinline__ float partita_block_sum(float v, float* red) {\n"
    "  const int lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;\n"
    "  v = partita_warp_sum(v);\n"
    "  if (lane == 0) red[threadIdx.x >> 5] = v;\n"
    "  __syncthreads();\n"
    "  v = partita_warp_sum(lane < warps ? red[lane] : 0.0f);\n"
    "  __syncthreads();\n"
    "  return v;\n"
    "}\n"
    "static __device__ __forceinline__ float partita_block_max(float v, float* red) {\n"
    "  const int lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;\n"
    "  v = partita_warp_max(v);\n"
    "  if (lane == 0) red[threadIdx.x >> 5] = v;\n"
    "  __syncthreads();\n"
    "  v = partita_warp_max(lane < warps ? red[lane] : __int_as_float(0xff800000));\n"
    "  __syncthreads();\n"
    "  return v;\n"
    "}\n"
    "// The same for any compute type and combine (reduce_* / argmax / argmin rows).\n"
    "template <class T> static __device__ __forceinline__ T partita_shfl_xor(T v, int o) {\n"
    "  return __shfl_xor_sync(0xffffffffu, v, o);\n"
    "}\n"
    "static __device__ __forceinline__ bool partita_shfl_xor(bool v, int o) {\n"
    "  return __shfl_xor_sync(0xffffffffu, (int)v, o) != 0;\n"
    "}\n"
    "struct partita_add { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };\n"
    "struct partita_mul { template <class T> __device__ T operator()(T a, T b) const { return a * b; } };\n"
    "// max / min propagate a NaN from either side (a != a only for a float NaN).\n"
    "struct partita_max { template <class T> __device__ T operator()(T a, T b) const { return (b > a || b != b) ? b : a; } };\n"
    "struct partita_min { template <class T> __device__ T operator()(T a, T b) const { return (b < a || b != b) ? b : a; } };\n"
    "template <class T, class Op>\n"
    "static __device__ __forceinline__ T partita_block_reduce(T v, T identity, T* red, Op op) {\n"
    "  const int lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;\n"
    "  for (int o = 16; o > 0; o >>= 1) v = op(v, partita_shfl_xor(v, o));\n"
    "  if (lane == 0) red[threadIdx.x >> 5] = v;\n"
    "  __syncthreads();\n"
    "  v = lane < warps ? red[lane] : identity;\n"
    "  for (int o = 16; o > 0; o >>= 1) v = op(v, partita_shfl_xor(v, o));\n"
    "  __syncthreads();\n"
    "  return v;\n"
    "}\n"
    "// (value, index) pairs; better(t, k, b, j): t at k beats b at j (an index < 0 is none).\n"
    "template <class T, class Better>\n"
    "static __device__ __forceinline__ void partita_block_arg(T& v, long long& at, T* red, long long* red_at, Better better) {\n"
    "  const int lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const T w = partita_shfl_xor(v, o);\n"
    "    const long long k = partita_shfl_xor(at, o);\n"
    "    if (better(w, k, v, at)) { v = w; at = k; }\n"
    "  }\n"
    "  if (lane == 0) { red[threadIdx.x >> 5] = v; red_at[threadIdx.x >> 5] = at; }\n"
    "  __syncthreads();\n"
    "  if (lane < warps) { v = red[lane]; at = red_at[lane]; } else { at = -1; }\n"
    "  for (int o = 16; o > 0; o >>= 1) {\n"
    "    const T w = partita_shfl_xor(v, o);\n"
    "    const long long k = partita_shfl_xor(at, o);\n"
    "    if (better(w, k, v, at)) { v = w; at = k; }\n"
    "  }\n"
    "  __syncthreads();\n"
    "}\n"
)


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
    head = "// Fused kernels generated by Partita (cuda-codegen)\n"
    head += "".join(f"#include <{_HEADERS[t]}>\n" for t in ("f16", "bf16") if t in dtypes)
    head += "".join(_HELPERS[t] for t in ("f16", "bf16") if t in dtypes)
    head += "".join(_mma_helper(t) for t in MMA_DTYPES if any(f"partita_mma_{t}(" in k.code for k in kernels.values()))
    if any(k.kind == "rowwise" for k in kernels.values()):
        head += _REDUCE_HELPERS + ONE_PASS_HELPERS
    parts = [head]
    lines: dict[str, tuple[int, int]] = {}
    line = head.count("\n") + 1
    for name, kernel in kernels.items():
        parts.append("\n" + kernel.code)
        first = line + 1
        line += 1 + kernel.code.count("\n")
        lines[name] = (first, line - 1)
    return CudaProgram("".join(parts), kernels, lines)
