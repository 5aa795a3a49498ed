"""Shape functions: the dynamic result dims of a partition, computed from its input dims.

TVM's TECompiler pairs each dynamically shaped primitive function with a shape function
run on the host before the call, so the outputs can be allocated. Here the shape function
is derived from the partition body (kept in its ``@<name>_reference`` sibling) by
propagating symbolic dimensions through the ``nn`` ops: each dim is an ``int`` when known
at compile time, else an ``index`` SSA value computed with ``arith`` ops.

``derive_shape_function(reference, name)`` returns::

    func.func private @<name>(index, ...) -> (index, ...)

taking the dynamic dims of the inputs (in argument order, then dim order) and returning
the dynamic dims of the results (same order). A dynamic result dim that no rule can
express is an error naming the op (e.g. a ``nn.reshape`` of a dynamic tensor to a
shape without ``?`` is fine, but an unknown op with a ``?`` result is not).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import DYNAMIC_INDEX, IndexType, IntegerAttr, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue

from partita.dialects import nn
from partita.ir import op_error

__all__ = ["Dim", "ShapeBuilder", "derive_shape_function", "dynamic_dims"]

Dim = int | SSAValue
"""A dimension: static (``int``) or an ``index`` value of the shape function."""


def dynamic_dims(types: Sequence) -> list[tuple[int, int]]:
    """``(value index, axis)`` of every ``?`` dim in a list of (tensor) types."""
    return [
        (i, axis)
        for i, typ in enumerate(types)
        if isinstance(typ, TensorType)
        for axis, d in enumerate(typ.get_shape())
        if d == DYNAMIC_INDEX
    ]


class ShapeBuilder:
    """Appends ``arith`` index computations to a block, folding static operands."""

    def __init__(self, block: Block):
        self.block = block
        self._constants: dict[int, SSAValue] = {}

    def _emit(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def value(self, d: Dim) -> SSAValue:
        if isinstance(d, SSAValue):
            return d
        if d not in self._constants:
            self._constants[d] = self._emit(arith.ConstantOp(IntegerAttr(d, IndexType())))
        return self._constants[d]

    def _binary(self, a: Dim, b: Dim, fold: Callable[[int, int], int], op: type) -> Dim:
        if isinstance(a, int) and isinstance(b, int):
            return fold(a, b)
        return self._emit(op(self.value(a), self.value(b)))

    def add(self, a: Dim, b: Dim) -> Dim:
        if isinstance(a, int) and not isinstance(b, int):
            a, b = b, a
        if b == 0 and isinstance(b, int):
            return a
        return self._binary(a, b, lambda x, y: x + y, arith.AddiOp)

    def sub(self, a: Dim, b: Dim) -> Dim:
        if b == 0 and isinstance(b, int):
            return a
        return self._binary(a, b, lambda x, y: x - y, arith.SubiOp)

    def mul(self, a: Dim, b: Dim) -> Dim:
        if isinstance(a, int) and not isinstance(b, int):
            a, b = b, a
        if b == 1 and isinstance(b, int):
            return a
        return self._binary(a, b, lambda x, y: x * y, arith.MuliOp)

    def floordiv(self, a: Dim, b: Dim) -> Dim:
        if b == 1 and isinstance(b, int):
            return a
        return self._binary(a, b, lambda x, y: x // y, arith.FloorDivSIOp)

    def select_ge(self, a: Dim, b: Dim, then: Dim, other: Dim) -> Dim:
        """``then if a >= b else other``."""
        if isinstance(a, int) and isinstance(b, int):
            return then if a >= b else other
        cond = self._emit(arith.CmpiOp(self.value(a), self.value(b), "sge"))
        return self._emit(arith.SelectOp(cond, self.value(then), self.value(other)))

    def broadcast(self, a: Dim, b: Dim) -> Dim:
        """NumPy broadcasting of two dims: the non-1 one, or either when equal."""
        if isinstance(a, int) and a == 1:
            return b
        if isinstance(b, int) and b == 1:
            return a
        if isinstance(a, int):
            return a
        if isinstance(b, int) or a is b:
            return b
        cond = self._emit(arith.CmpiOp(a, self.value(1), "eq"))
        return self._emit(arith.SelectOp(cond, b, a))

    def broadcast_shapes(self, x: Sequence[Dim], y: Sequence[Dim]) -> list[Dim]:
        rank = max(len(x), len(y))
        x = [1] * (rank - len(x)) + list(x)
        y = [1] * (rank - len(y)) + list(y)
        return [self.broadcast(a, b) for a, b in zip(x, y)]

    def window(self, size: Dim, kernel: Dim, stride: int, lo: int, hi: int, dilation: int,
               ceil_mode: bool, op: Operation) -> Dim:
        """Output extent of a sliding window (``nn.conv_output_dim``, symbolically)."""
        if not isinstance(kernel, int):
            raise op_error(op, "has a dynamic window size: its output size cannot be derived")
        return nn.window_extent(self, size, kernel, stride, lo, hi, dilation, ceil_mode)


def _layout_axes(layout: str) -> tuple[int, int, int]:
    return (1, 2, 3) if layout == "NCHW" else (3, 1, 2)


def result_dims(op: Operation, dims: Callable[[SSAValue], list[Dim]], b: ShapeBuilder) -> list[Dim]:
    """Symbolic result dims of a single-result nn op."""
    if callable(rule := getattr(op, "result_dims", None)):  # ops that carry their own rule
        return rule(dims, b)
    if isinstance(op, nn.ElementwiseBinaryOp):
        return b.broadcast_shapes(dims(op.lhs), dims(op.rhs))
    if isinstance(op, nn.WhereOp):
        return b.broadcast_shapes(b.broadcast_shapes(dims(op.condition), dims(op.on_true)),
                                  dims(op.on_false))
    if isinstance(op, nn.QuantizationOp):
        return list(dims(op.input))
    if isinstance(op, nn.DenseOp):
        return [*dims(op.input)[:-1], dims(op.weight)[0]]
    if isinstance(op, nn.MatmulOp):
        x, y = dims(op.lhs), dims(op.rhs)
        return [*b.broadcast_shapes(x[:-2], y[:-2]), x[-2], y[-1]]
    if isinstance(op, nn.BatchMatmulOp):
        x, y = dims(op.lhs), dims(op.rhs)
        m = x[2] if op.transpose_a else x[1]
        n = y[1] if op.transpose_b else y[2]
        return [b.broadcast(x[0], y[0]), m, n]
    if isinstance(op, nn.GlobalAvgPool2DOp):
        out = list(dims(op.input))
        _, h_ax, w_ax = _layout_axes(op.layout)
        out[h_ax] = out[w_ax] = 1
        return out
    if isinstance(op, nn.PadOp):
        return [b.add(d, lo + hi) for d, lo, hi in zip(dims(op.input), op.pad_before, op.pad_after)]
    if isinstance(op, nn.TransposeOp):
        x = dims(op.input)
        return [x[p] for p in op.perm]
    if isinstance(op, nn.ConcatenateOp):
        shapes = [dims(v) for v in op.inputs]
        axis = op.axis % len(shapes[0])
        out = list(shapes[0])
        for s in shapes[1:]:
            for i, d in enumerate(s):
                if i == axis:
                    out[i] = b.add(out[i], d)
                elif not isinstance(out[i], int):
                    out[i] = d if isinstance(d, int) else out[i]
        return out
    if isinstance(op, nn.BiasAddOp | nn.LayerNormOp | nn.BatchNormOp | nn.UnaryOp):
        return list(dims(op.operands[0]))
    raise op_error(op, "has dynamic result dimensions and no shape rule: cannot derive a shape function")


def derive_shape_function(reference: func.FuncOp, name: str) -> func.FuncOp:
    """The shape function of ``reference`` (a function body over nn ops), named ``name``."""
    if len(reference.body.blocks) != 1:
        raise op_error(reference, "must have a single block to derive a shape function")
    source = reference.body.block
    in_dyn = dynamic_dims(source.arg_types)
    block = Block(arg_types=[IndexType()] * len(in_dyn))
    builder = ShapeBuilder(block)
    symbolic: dict[SSAValue, list[Dim]] = {}
    args = iter(block.args)
    for arg in source.args:
        if isinstance(arg.type, TensorType):
            symbolic[arg] = [next(args) if d == DYNAMIC_INDEX else d for d in arg.type.get_shape()]

    def dims(value: SSAValue) -> list[Dim]:
        return symbolic[value]

    terminator = source.last_op
    for op in source.ops:
        if op is terminator:
            break
        static = [r.type.get_shape() if isinstance(r.type, TensorType) else () for r in op.results]
        if all(DYNAMIC_INDEX not in s for s in static):
            for result, shape in zip(op.results, static):
                symbolic[result] = list(shape)
            continue
        if len(op.results) != 1 or op.regions:
            raise op_error(op, "has dynamic result dimensions and no shape rule: cannot derive a shape function")
        derived = result_dims(op, dims, builder)
        if len(derived) != len(static[0]):
            raise op_error(op, "shape rule gave the wrong rank: cannot derive a shape function")
        # Static dims of the declared type win; the rules fill in the '?'.
        symbolic[op.results[0]] = [d if d != DYNAMIC_INDEX else s for d, s in zip(static[0], derived)]
    if not isinstance(terminator, func.ReturnOp):
        raise op_error(reference, "must end with 'func.return' to derive a shape function")
    outputs = [builder.value(symbolic[terminator.arguments[i]][axis])
               for i, axis in dynamic_dims(terminator.arguments.types)]
    block.add_op(func.ReturnOp(*outputs))
    return func.FuncOp(name, ([IndexType()] * len(in_dyn), [IndexType()] * len(outputs)),
                       Region(block), "private")
