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

A function whose result is tied to an argument (``byoc.tied_operand``, set by
``tie-in-place-updates`` on a KV cache's TensorScatter) is a ``scatter`` kernel instead: one
thread per element of the update (its producers computed there), stored where the op's
``InPlace`` rule says it lands; the output is the argument's buffer, never read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.dialects.func import FuncOp
from xdsl.ir import BlockArgument, Operation, SSAValue

from partita.dialects import byoc, nn
from partita.ir import op_error
from partita.lowering.cuda.cexpr import (
    _C_TYPES,
    _INT_MAX,
    CONVERTED,
    Dim,
    _add,
    _dtype,
    _mul,
    _paren,
    _product,
    _record_shape,
    _shape,
    broadcast_dims,
    ctype,
)
from partita.lowering.cuda.fusion import (
    _rule_for,
    _rules,
    in_place_update,
    is_anchor,
    is_view,
    kernel_function_error,
    kernel_kind,
)
from partita.lowering.cuda.rules import RowReduction
from partita.lowering.cuda.schedules import (
    BLOCK_SIZE,
    WARP_WINDOW_BLOCK,
    ScheduleMixin,
)

__all__ = ["FusedKernel", "KernelEmitter", "emit_kernel"]


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
    """``fused`` (injective), ``rowwise`` (reduction per row), ``gemm``, ``window`` (pool) or
    ``scatter`` (an in-place update: the source's elements stored into the tied argument)."""
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
    source: tuple[int, ...] = ()
    """Shape of what a ``scatter`` kernel stores (``-1`` for ``?``): one thread each."""
    threads_per_output: int = 1
    """Threads a ``window`` kernel gives each output element (32: the warp-per-output
    schedule of a GEMV); the grid is sized by their count."""
    block_rows: tuple[int, ...] = ()
    """``(axis, rows)`` of a ``window`` kernel whose whole-kernel schedule gives each block
    ``rows`` output rows along ``axis`` at every index of the axes before the last
    (attention's query tiles of one batch and head): the grid is sized by those tiles
    instead of by output elements. Empty for every other kernel."""
    smem: int = 0
    """Bytes of dynamic shared memory a block of a ``window`` kernel's whole-kernel schedule
    takes (``WholeKernel.smem``: the flash attention's Q and K / V tiles past 48 KiB); 0 for
    every other kernel."""
    gemv_rows: int = 0
    """Rows (M) up to which a ``gemm`` kernel runs its warp-per-output schedule instead of
    its tiles (``schedules.GEMV_ROWS``; 0: tiles only); the grid follows the choice."""
    split_k: int = 0
    """K slices at most a ``gemm`` kernel's tensor-core tiles take (``schedules.SPLIT_K_MAX``;
    0: none): its last two parameters are then the slices' workspace and ``k_slices``."""
    k_source: tuple[int, ...] = ()
    """Where a split-K ``gemm`` kernel's K is read at launch: ``(input, axis)``, or ``(-1,
    K)`` when static."""

    @property
    def params(self) -> tuple[str, ...]:
        """``name:kind:size`` of each kernel parameter (as the CUTLASS records spell them)."""
        ptrs = [f"in{k}:ptr:8" for k in range(len(self.inputs))] + ["out:ptr:8"]
        split = ["ws:ptr:8", "k_slices:int:4"] if self.split_k else []
        return tuple(ptrs + [f"dim{k}:int:4" for k in range(len(self.dims))] + split)


class KernelEmitter(ScheduleMixin):
    """Builds one fused function's kernel. Lowering rules (``rules.py``) use its public
    methods: ``value`` (an operand at an index, inlined), ``load`` (a kernel argument, or an
    index view of one, at an index), ``stored`` (a value as its storage type holds it),
    ``ctype``, ``var``, ``dims``, ``out_index``, ``index_type`` and ``lines``."""

    def __init__(self, function: FuncOp, entry: str, arch: str = ""):
        self.function = function
        self.entry = entry
        self.arch = arch or function_arch(function)
        """The arch the kernel is compiled for (``sm_90a``): a rule may build for it (wgmma)."""
        self.block = function.body.block
        self.lines: list[str] = []
        self.prelude: list[str] = []  # device code a whole-kernel schedule calls (before the entry)
        self.memo: dict[tuple[SSAValue, tuple[str, ...]], str] = {}
        self.counters: dict[str, int] = {}
        self.linear_of: dict[tuple[tuple[Dim, ...], tuple[str, ...]], str] = {}
        self.dims: dict[SSAValue, list[Dim]] = {}
        self.runtime_dims: list[tuple[int, int]] = []
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
        if isinstance(op, nn.MatmulOp | nn.BatchMatmulOp | nn.MatmulFloat8Op | nn.MatmulIntegerOp):
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

    _broadcast_dims = staticmethod(broadcast_dims)

    @staticmethod
    def _gemm_axes(op: Operation) -> tuple[tuple[int, int], tuple[int, int]]:
        """The (M, K) axes of the lhs and the (K, N) axes of the rhs, from the end."""
        if isinstance(op, nn.DenseOp):
            return (-2, -1), (-1, -2)
        if isinstance(op, nn.BatchMatmulOp):
            return ((-1, -2) if op.transpose_a else (-2, -1)), ((-1, -2) if op.transpose_b else (-2, -1))
        if isinstance(op, nn.MatmulFloat8Op | nn.MatmulIntegerOp):
            return (-2, -1), ((-1, -2) if op.transpose_b else (-2, -1))
        return (-2, -1), (-2, -1)

    # -- code ----------------------------------------------------------------------------
    def _var(self, prefix: str) -> str:
        k = self.counters.get(prefix, 0)
        self.counters[prefix] = k + 1
        return f"{prefix}{k}"

    def _linear(self, dims: Sequence[Dim], index: Sequence[str]) -> str:
        if all(ix == "0" for ix in index):
            # the first element: "0" in any scope (a one-element tensor's index is all "0" in
            # a reduction's loop and its epilogue alike, where "i" and "xi" differ)
            return "0"
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
        return f"rn_{dtype}({expr})" if dtype in CONVERTED else expr

    # -- the interface of lowering rules --------------------------------------------------
    ctype = staticmethod(ctype)
    """The C type a value is computed in (``float`` for f16/bf16/f32)."""

    def var(self, prefix: str) -> str:
        """A fresh C variable name."""
        return self._var(prefix)

    def load(self, arg: SSAValue, index: Sequence[str]) -> str:
        """The C expression loading ``arg`` at ``index`` (compute type): a kernel argument,
        or an index view of one (``fusion.is_view``: reshapes, transposes, strided slices),
        read through its index arithmetic alone (no lines: loads sit inside loops)."""
        arg, index = self.viewed(arg, index)
        return self._load(f"in{arg.index}[{self._linear(self.dims[arg], index)}]", _dtype(arg.type))

    @staticmethod
    def stored(expr: str, dtype: str) -> str:
        """``expr`` (compute type) as the storage type ``dtype`` holds it."""
        return f"st_{dtype}({expr})" if dtype in CONVERTED else expr

    def is_argument(self, value: SSAValue) -> bool:
        """Whether ``value`` is a kernel argument or an index view of one: ``load`` reads it
        with no lines, so a rule may put that read under a condition."""
        while not isinstance(value, BlockArgument):
            op = value.owner
            if not (isinstance(op, Operation) and is_view(op)):
                return False
            value = op.operands[0]
        return True

    def viewed(self, value: SSAValue, index: Sequence[str]) -> tuple[BlockArgument, list[str]]:
        """The kernel argument that ``value`` (itself, or a chain of index views of it) reads
        at ``index``, and the index there."""
        index = list(index)
        while not isinstance(value, BlockArgument):
            op = value.owner
            assert isinstance(op, Operation) and is_view(op), f"{value} is no view of a kernel argument"
            if isinstance(op, nn.TransposeOp):
                index = _transposed_from(op, index)
            elif isinstance(op, nn.ReshapeOp):
                linear = self._linear(self.dims[op.result], index)
                index = self._decompose(_paren(linear), self.dims[op.input])
            else:
                index = _rules()[0][type(op)].view(self, op, index)
            value = op.operands[0]
        return value, index

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

    def computed(self, v: SSAValue, index: Sequence[str]) -> tuple[list[str], str]:
        """``v`` at ``index`` for a rule that places the computation itself
        (``Rule.computes``): the C lines computing it (its producers in this kernel, or a
        load of an argument) and the variable holding it. The lines are the rule's to
        place, under its own conditions and after the declarations ``index`` uses; nothing
        here is memoized past them. An argument, or a view of one, is its load alone."""
        if self.is_argument(v):
            return [], self.load(v, index)
        mark, known = len(self.lines), set(self.memo)
        name = self.value(v, index)
        lines = self.lines[mark:]
        del self.lines[mark:]
        for key in set(self.memo) - known:
            del self.memo[key]
        return lines, name

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
            return self.value(op.input, _transposed_from(op, index))
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
        return f"ld_{dtype}({pointer})" if dtype in CONVERTED else pointer

    def _params(self, result: SSAValue, shared: int | None = None) -> list[str]:
        """The entry's parameters: each argument (``in<k>``), the output, each run-time dim;
        argument ``shared`` is the output's own buffer (never read), so not ``__restrict__``."""
        params = [f"const {_C_TYPES[_dtype(a.type)]}*{'' if a.index == shared else ' __restrict__'} in{a.index}"
                  for a in self.block.args]
        params.append(f"{_C_TYPES[_dtype(result.type)]}* __restrict__ out")
        return params + [f"int dim{k}" for k in range(len(self.runtime_dims))]

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
        if (tied := byoc.tied_operand(self.function)) is not None:
            return self._emit_in_place(tied, result)
        if self.anchor is not None:
            # The anchor's value at the output index is "y", computed by the schedule.
            self.memo[(self.anchor.results[0], tuple(self.out_index))] = "y"
        else:
            self._chain_first(result)
        out = self.value(result, self.out_index)
        out_dtype = _dtype(result.type)
        used = "\n".join(self.lines)
        params = self._params(result)
        store = f"    out[i] = {self.stored(out, out_dtype)};"
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
            vectors, first = self._injective_vectors(used, store, out_dtype)
            start = f"{first} + " if first != "0" else ""
            body = [
                f"  const {T} n = {numel};",
                *vectors,
                f"  for ({T} i = {start}({T})blockIdx.x * blockDim.x + threadIdx.x; i < n; i += ({T})gridDim.x * blockDim.x) {{",
                *self._axis_lines("i", range(rank), used, "    "),
                *self.lines,
                store,
                "  }",
            ]
        elif (whole := self._whole_kernel(result)) is not None:
            body = whole.lines
            extra = {"kind": "window", "block": whole.block, "block_rows": whole.block_rows, "smem": whole.smem}
        elif kernel_kind(self.anchor) == "window" and (tiled := self._tiled_window(numel, used, store)) is not None:
            body, extra = tiled
        elif kernel_kind(self.anchor) == "window" and (warp := self._warp_window(numel, used, store)) is not None:
            body = warp
            extra = {"kind": "window", "block": WARP_WINDOW_BLOCK, "threads_per_output": 32}
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
            body, sched = self._rowwise(split, used, store, out_dtype)
            extra = {"kind": "rowwise", "split": split, "block": sched.threads,
                     "rows_per_block": sched.rows_per_block, "schedule": sched.name}
        else:
            body, extra = self._gemm(0 if isinstance(self.anchor, nn.DenseOp) else rank - 2, used, store)
        if self.anchor is not None:
            extra["anchor"] = self.anchor.name
        bounds = (extra.get("block", BLOCK_SIZE), extra.pop("min_blocks", None))  # threads, blocks per SM
        head[1] = f'extern "C" __global__ void __launch_bounds__({", ".join(str(b) for b in bounds if b is not None)})'
        if extra.get("split_k"):  # the K slices' workspace and which pass this launch is
            head[2] = f"{self.entry}({', '.join([*params, 'void* __restrict__ ws', 'int k_slices'])}) {{"
        return self._kernel(result, [*head, *body, "}"], **extra)

    def _kernel(self, result: SSAValue, code: list[str], **extra) -> FusedKernel:
        """The kernel whose entry is ``code`` (after the prelude), with this function's
        launch interface."""
        return FusedKernel(
            function=self.function.sym_name.data,
            entry=self.entry,
            inputs=tuple(_record_shape(a) for a in self.block.args),
            dtypes=tuple(_dtype(a.type) for a in self.block.args),
            output=_record_shape(result),
            output_dtype=_dtype(result.type),
            dims=tuple(self.runtime_dims),
            ops=tuple(op.name for op in self.block.ops if op is not self.block.last_op),
            code="\n".join([*self.prelude, *code]) + "\n",
            **extra,
        )

    def _emit_in_place(self, tied: int, result: SSAValue) -> FusedKernel:
        """A ``scatter`` kernel: the result is tied to argument ``tied`` (its buffer is the
        output's), so only the source's elements are stored, where they land (one thread
        each, grid-stride); the rest of the buffer is left as it is and never read."""
        update = in_place_update(self.function)
        if update is None or update[2] != tied:
            raise op_error(self.function, f"its result is tied to operand #{tied}, which it does not update in "
                                          "place (only an in-place update, TensorScatter or ScatterND, of an argument "
                                          "nothing else reads is)")
        op, form, _ = update
        source = form.source(op)
        dims = self.dims[source]
        T = self.index_type
        self.out_index = []  # no output index: ``_linear`` must not take the injective loop's shortcut
        index = ["0" if d == 1 else f"s{axis}" for axis, d in enumerate(dims)]
        decls = [f"    const {T} {name} = {expr};" for name, expr in zip(index, self._decompose("j", dims))
                 if name != "0"]
        at, condition = form.store(self, op, index)
        value = self.value(source, index)
        stored = self.stored(value, _dtype(result.type))
        params = self._params(result, shared=tied)
        ops = [o.name for o in self.block.ops if o is not self.block.last_op]
        code = [
            f"// @{self.function.sym_name.data}: {', '.join(ops)} (in place into argument {tied})",
            f'extern "C" __global__ void __launch_bounds__({BLOCK_SIZE})',
            f"{self.entry}({', '.join(params)}) {{",
            *(f"  const {T} d{k} = dim{k};" for k in range(len(self.runtime_dims))),
            f"  const {T} n = {_product(dims)};",
            f"  for ({T} j = ({T})blockIdx.x * blockDim.x + threadIdx.x; j < n; j += ({T})gridDim.x * blockDim.x) {{",
            *decls,
            *self.lines,
            f"    if ({condition}) out[{self._linear(self.out_dims, at)}] = {stored};",
            "  }",
            "}",
        ]
        return self._kernel(result, code, kind="scatter", source=_record_shape(source))

def _transposed_from(op: nn.TransposeOp, index: Sequence[str]) -> list[str]:
    """The index into ``op``'s input of its result's element at ``index``."""
    inner = ["0"] * len(index)
    for k, p in enumerate(op.perm):
        inner[p] = index[k]
    return inner


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


def emit_kernel(function: FuncOp, entry: str | None = None, arch: str = "") -> FusedKernel:
    """The kernel of one fused function (located error if its body cannot be one), for
    ``arch`` (default: the function's cuda target's)."""
    if (why := kernel_function_error(function)) is not None:
        raise op_error(function, f"cannot become a CUDA kernel: it {why}")
    return KernelEmitter(function, entry or _entry_name(function.sym_name.data, set()), arch).emit()


def function_arch(function: FuncOp) -> str:
    """The arch of the function's cuda target (``""`` without one)."""
    attr = function.attributes.get(byoc.TARGET)
    return str(attr.to_target().get("arch")) if isinstance(attr, byoc.TargetAttr) else ""
