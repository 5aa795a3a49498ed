"""What a native CUDA kernel can fuse: injective ops (by their ``OpPattern`` kind and a
lowering rule), the anchors of ``rowwise`` / ``gemm`` / ``window`` kernels, their
element-wise epilogues, and whether a whole fused function can become one kernel.
``fuse-native-kernels`` and Collage's native rules ask these; the kernel emitter checks
them again. Importing this module registers the lowering rules (``partita.lowering.cuda.ops``)."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import BlockArgument, Operation, SSAValue

import partita.lowering.cuda.ops  # noqa: F401  (registers the lowering rules)
from partita.dialects import nn
from partita.ir.slices import producers
from partita.lowering.cuda.cexpr import DTYPES, FLOAT_DTYPES, _shape
from partita.lowering.cuda.rules import INJECTIVE, ROWWISE, WINDOW, InPlace, Rule

__all__ = ["ANCHOR_OPS", "WINDOW_OPS", "computed_operands", "epilogue_error", "has_in_place_form", "in_place_update", "is_anchor",
           "is_fusable", "is_view", "kernel_function_error", "kernel_kind", "prologue_error", "reads_views"]

_SPELLED_OPS: tuple[type[Operation], ...] = (
    nn.AddOp, nn.SubtractOp, nn.MultiplyOp, nn.BiasAddOp, nn.TransposeOp, nn.ReshapeOp,
    nn.ConcatenateOp,
)
"""Injective ops ``_compute`` spells itself instead of through a registered rule (what a
kernel can compute; whether an op is element-wise or injective is its ``OpPattern``)."""

WINDOW_OPS: tuple[type[Operation], ...] = (nn.MaxPool2DOp, nn.AvgPool2DOp, nn.GlobalAvgPool2DOp)
"""Pools (``window`` kernels: one thread per output element loops over its window)."""
ANCHOR_OPS: tuple[type[Operation], ...] = (
    nn.SoftmaxOp, nn.LayerNormOp, nn.RMSNormOp, nn.DenseOp, nn.MatmulOp, nn.BatchMatmulOp, nn.MatmulFloat8Op,
    nn.MatmulIntegerOp, *WINDOW_OPS,
)
"""Reductions (``rowwise`` kernels), GEMMs (``gemm``) and pools (``window``) that anchor a
kernel."""


def _rules():
    """The registered lowering rules (this module's import of the family modules registered them)."""
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


def is_view(op: Operation) -> bool:
    """Whether ``op`` only remaps the indices of its first operand (``nn.reshape``,
    ``nn.transpose``, an injective rule with a ``view`` index map such as
    ``nn.strided_slice``, or ``nn.take`` reading its indices; other operands give shapes):
    a kernel reads through it with index arithmetic, no pass over memory of its own."""
    if not is_fusable(op) or len(op.results) != 1:
        return False
    if isinstance(op, nn.ReshapeOp | nn.TransposeOp):
        return True
    rule = _rule_for(op, _rules()[0])
    return rule is not None and rule.view is not None


def reads_views(anchor: Operation) -> bool:
    """Whether ``anchor``'s window rule reads its operands through index views
    (``Rule.reads_views``), so views computing them join its kernel."""
    rule = _rule_for(anchor, _rules()[1])
    return rule is not None and rule.reads_views and _rule_for(anchor, _rules()[2]) is None


def computed_operands(anchor: Operation) -> tuple[int, ...]:
    """The operands (by index) that ``anchor``'s kernel computes where it reads them
    (``Rule.computes``), so the injective ops producing them join its kernel."""
    rule = _rule_for(anchor, _rules()[1]) if reads_views(anchor) else None
    return rule.computes if rule is not None else ()


def _typed(op: Operation, dtypes: Sequence[str] = DTYPES) -> bool:
    return all(isinstance(v.type, TensorType) and nn.type_name(v.type.element_type) in dtypes
               for v in (*op.operands, *op.results))


def is_anchor(op: Operation) -> bool:
    """Whether ``op`` can anchor a ``rowwise``, ``gemm`` or ``window`` kernel (softmax only
    along its last axis, windowed pools only with static spatial dims: others run on the
    host)."""
    if len(op.results) == 1 and (_rule_for(op, _rules()[2]) or _rule_for(op, _rules()[1])) is not None:
        return True
    if isinstance(op, nn.MatmulFloat8Op | nn.MatmulIntegerOp):  # 8-bit operands, an f32 / i32 result
        return _typed(op)
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
    both passes), element-wise ops, and index views that read a row contiguously
    (``_reads_rows``: BERT's embeddings, ``take``s of table rows), each computed at the
    index its consumer reads. Operands of the input's shape read at the row element are
    loaded as 16-byte vectors, the others one element at a time at their own index."""
    if kernel_kind(anchor) != "rowwise":
        return f"'{anchor.name}' reads its operands from memory"
    if not is_fusable(op):
        return f"'{op.name}' is not an injective op a kernel computes"
    if len(op.results) != 1:
        return f"'{op.name}' has several results"
    if is_view(op):
        return None if _reads_rows(op) else f"'{op.name}' remaps indices across the row"
    rule = _rules()[0].get(type(op))
    if nn.op_kind(op) > nn.OpKind.BROADCAST or (rule is not None and not rule.elementwise):
        return f"'{op.name}' remaps indices"
    return None


def _reads_rows(view: Operation) -> bool:
    """Whether a row of ``view``'s result is a contiguous run of its input (so a row
    kernel reading through it still reads memory in order): a ``take`` of whole rows
    (not along the last axis), a unit-stride slice, a reshape (it keeps the element
    order), a transpose that keeps the last axis last, a broadcast (a row read in order,
    or one element repeated)."""
    if isinstance(view, nn.TakeOp):
        rank = len(_shape(view.data))
        return view.axis % rank != rank - 1
    if isinstance(view, nn.StridedSliceOp):
        return view.strides[-1] == 1
    if isinstance(view, nn.TransposeOp):
        return view.perm[-1] == len(view.perm) - 1
    return isinstance(view, nn.ReshapeOp | nn.BroadcastToOp)


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
        if reads_views(anchor):
            # Every operand a kernel argument or an index view of one, but those the rule
            # computes where it reads them (any injective op).
            computed = computed_operands(anchor)
            prologue = []
            for k, v in enumerate(anchor.operands):
                ops = producers(v)
                allowed = is_fusable if k in computed else is_view
                if (bad := next((op for op in ops if not allowed(op) or is_anchor(op)), None)) is not None:
                    what = "injective ops" if k in computed else "index views"
                    return f"computes an operand of '{anchor.name}' with '{bad.name}' (only {what} can be fused there)"
                prologue += ops
        else:
            if not all(isinstance(v, BlockArgument) for v in anchor.operands[1:]):
                return f"computes an operand of '{anchor.name}' (only its epilogue can be fused)"
            prologue = producers(anchor.operands[0])
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


def has_in_place_form(op: Operation) -> bool:
    """Whether ``op``'s lowering rule has an in-place form (``InPlace``)."""
    rule = INJECTIVE.get(type(op)) or WINDOW.get(type(op))
    return rule is not None and rule.in_place is not None


def in_place_update(function: FuncOp) -> tuple[Operation, InPlace, int] | None:
    """The op, in-place form and argument index when ``function``'s result replaces part
    of one of its arguments and may be written into that argument's buffer
    (``byoc.tied_operand``): the function returns an op with an ``InPlace`` form
    (TensorScatter, ScatterND, ScatterElements) whose destination is an argument nothing else in the body
    reads. ``None`` otherwise."""
    if kernel_function_error(function) is not None:
        return None
    block = function.body.block
    op = block.last_op.arguments[0].owner  # type: ignore[union-attr]
    if not isinstance(op, Operation):
        return None
    # An injective op, with nothing anchored; or a window anchor returned as it is.
    rule = _rule_for(op, WINDOW) if is_anchor(op) else _rule_for(op, INJECTIVE)
    if rule is None or rule.in_place is None or not rule.in_place.accepts(op) or \
            any(is_anchor(o) for o in block.ops if o is not op):
        return None
    destination = rule.in_place.destination(op)
    if not isinstance(destination, BlockArgument) or not destination.has_one_use() or \
            destination.type != op.results[0].type:
        return None
    return op, rule.in_place, destination.index
