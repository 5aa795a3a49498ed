"""``fuse-native-kernels``: group the injective ops left on a native target into kernels.

TVM's ``FuseOps`` for what Collage leaves on the native ``cuda`` target, simplified to
injective ops: element-wise ``nn.add/subtract/multiply/divide`` (broadcasting),
``nn.relu/sigmoid/tanh/gelu/clip``, ``nn.bias_add``, ``nn.transpose``, ``nn.reshape``,
``nn.pad`` and ``nn.concatenate``.
In program order, an injective op joins the groups of the injective ops producing its
operands when every value of those groups is used only inside the merged group, so a
group has exactly one result leaving it (its last op's) and is convex: nothing can leave
it and come back. A value also used outside (by a ``nn.conv2d``, a ``func.return``, an op
that did not join) ends its group.

Row reductions (``nn.softmax`` on the last axis, ``nn.layer_norm``, ``nn.rms_norm``,
``reduce_*`` over trailing axes), GEMMs (``nn.dense``, ``nn.matmul``, ``nn.batch_matmul``)
and ops with a ``window`` lowering rule (convolutions, pools, LRN, resize, reductions, ...;
``partita.lowering.cuda.ops``) anchor a group of their own (TVM's ``kCommReduce`` /
``kOutEWiseFusable``). A row anchor takes in the element-wise group computing its row
input (its *prologue*: RMSNorm's ``x * x`` before its mean, a residual add before a
norm) when every value of that group is used only there, so the kernel computes the row
where it reads it; other operands stay kernel arguments. An anchor whose rule reads through
index views (``nn.attention``, ``nn.rotary_embedding``) takes in the groups of views
(``nn.reshape``, ``nn.transpose``, ``nn.strided_slice``) computing any of its operands under
the same rule: Q, K and V, head splits of one packed projection, are read where they lie.
Injective consumers join an anchor as an epilogue under the same single-output rule, when the consumer is
element-wise (or ``bias_add``) on the anchor's shape. A group holds one anchor at most (of two, the earlier is kept), and an
injective group computing an operand of the anchor never joins it. Other non-injective
ops (those without a lowering rule, or whose rule does not accept them, e.g. a windowed
op with dynamic spatial dims) stay where they are and run on the host.

Structurally equal groups (same body, types and target) share one function, as TVM's
compiler cache shares lowered functions, so N equal layers compile each kernel once.
Each group becomes a private ``func.func @<caller>_fused_<k>`` (``k`` counts in program
order; taken names are skipped) with the caller's target without its host and
``byoc.primitive``, called with ``func.call``; values from outside (arguments,
``nn.constant``s, results of other ops) become its arguments. Every group becomes a kernel,
single ops included (each would otherwise be a NumPy op on the host), except groups of
``nn.reshape`` only: a reshape is a change of metadata, not worth a launch (TVM's graph
executor makes such functions ``__nop``).

Functions in scope: those with a body whose ``byoc.target`` kind is ``target``, and public
functions without a target; partition (``byoc.compiler``), primitive and reference
functions are left alone, so running the pass twice changes nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType, UnitAttr
from xdsl.dialects.func import CallOp, FuncOp, ReturnOp
from xdsl.ir import Block, Operation, OpResult, Region, SSAValue, Use
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from partita.dialects import nn
from partita.dialects.byoc import (
    PRIMITIVE,
    TARGET,
    TargetAttr,
)
from partita.ir import symbol_name
from partita.ir.structural import structural_hash, structurally_equal
from partita.lowering.cuda.fusion import (
    computed_operands,
    epilogue_error,
    is_anchor,
    is_fusable,
    is_view,
    prologue_error,
    reads_views,
)
from partita.transforms.target_utils import func_target_attr, lowers_on_target

__all__ = ["MAX_CLONED", "FuseNativeKernels", "clone_computed_operands", "fuse_groups"]

MAX_CLONED = 32
"""The most injective ops ``clone_computed_operands`` copies for one operand of one anchor."""


def _anchor_of(group: list[Operation]) -> Operation | None:
    return next((o for o in group if is_anchor(o)), None)


def _derived(group: list[Operation], anchor: Operation) -> set[SSAValue]:
    """The values of ``group`` computed from ``anchor``'s result (its epilogue's)."""
    derived: set[SSAValue] = {anchor.results[0]}
    for o in group:
        if o is not anchor and any(v in derived for v in o.operands):
            derived.add(o.results[0])
    return derived


def _admissible(op: Operation, candidates: list[list[Operation]]) -> list[list[Operation]]:
    """``candidates`` minus the groups ``op`` cannot join: anchored groups after the first,
    an anchored group ``op`` is no epilogue of, injective groups feeding the anchor."""
    anchored = [g for g in candidates if _anchor_of(g) is not None]
    if not anchored:
        return candidates
    first = anchored[0]
    anchor = _anchor_of(first)
    assert anchor is not None
    if epilogue_error(op, anchor, _derived(first, anchor)) is not None:
        return [g for g in candidates if _anchor_of(g) is None]
    feeding = {v.op for v in anchor.operands if isinstance(v, OpResult)}
    return [g for g in candidates if g is first or (_anchor_of(g) is None and not feeding.intersection(g))]


def _prologue(anchor: Operation, group_of: dict[Operation, list[Operation]],
              position: dict[Operation, int]) -> list[Operation]:
    """The injective group computing ``anchor``'s row input, if the anchor's kernel can
    compute it instead (TVM fuses a reduction's element-wise producers the same way):
    a row anchor, element-wise ops and index views (``prologue_error``), every value used
    only inside the group or by the anchor as its row input. Else ``[]``.

    The row input may also size later ops (a ``refs`` operand: BERT's head-split reshapes
    read the batch and sequence from the embedding sum): such a reference reads dims, not
    data, and moves to the anchor's result, of the same dims (a row op keeps its input's
    shape), when it comes after the anchor."""
    x = anchor.operands[0] if anchor.operands else None
    group = group_of.get(x.op) if isinstance(x, OpResult) else None
    if group is None or _anchor_of(group) is not None or any(prologue_error(o, anchor) for o in group):
        return []
    members = {anchor, *group}
    result = anchor.results[0]
    same_dims = isinstance(x.type, TensorType) and isinstance(result.type, TensorType) \
        and x.type.get_shape() == result.type.get_shape()
    references = []
    for o in group:
        for r in o.results:
            for use in r.uses:
                if use.operation in members and not (use.operation is anchor and use.index != 0):
                    continue
                if r is x and same_dims and _sizes_only(use) and position.get(use.operation, -1) > position[anchor]:
                    references.append(use)
                    continue
                return []
    for use in references:
        use.operation.operands[use.index] = result
    return group


def _sizes_only(use: Use) -> bool:
    """Whether ``use`` reads only its value's dims: one of ``refs``, the operands giving an
    op's run-time sizes (``nn.reshape``, ``nn.arange``, ``nn.broadcast_to``: the last
    operands)."""
    refs = getattr(use.operation, "refs", None)
    if not isinstance(refs, tuple | list) or not refs:
        return False
    return use.index >= len(use.operation.operands) - len(refs)


def _views(anchor: Operation, group_of: dict[Operation, list[Operation]]) -> list[Operation]:
    """The groups of index views computing ``anchor``'s operands, when its kernel reads
    through them (``reads_views``: attention reading Q, K and V as head splits of a packed
    projection, FlashAttention's ``qkvpacked`` form), and the injective groups computing the
    operands its rule computes where it reads them (``computed_operands``: a rotary
    embedding's cos / sin): every value used only inside the group or by the anchor.
    Else ``[]``."""
    if not reads_views(anchor):
        return []
    computed = computed_operands(anchor)
    taken: list[Operation] = []
    for k, v in enumerate(anchor.operands):
        group = group_of.get(v.op) if isinstance(v, OpResult) else None
        joins = is_fusable if k in computed else is_view
        if group is None or group[0] in taken or _anchor_of(group) is not None or not all(joins(o) for o in group):
            continue
        if all(use.operation is anchor or use.operation in group for o in group for r in o.results for use in r.uses):
            taken += group
    return taken


def _injective_slice(value: SSAValue, position: dict[Operation, int]) -> list[Operation]:
    """The injective ops a kernel can compute that ``value`` is made from, back to the
    first value something else makes (an argument, a constant, another kernel's result),
    in program order."""
    ops: list[Operation] = []
    pending = [value]
    while pending:
        v = pending.pop()
        op = v.owner
        if isinstance(op, Operation) and op not in ops and is_fusable(op) and not is_anchor(op) \
                and not isinstance(op, nn.ConstantOp):
            ops.append(op)
            pending.extend(op.operands)
    return sorted(ops, key=position.__getitem__)


def clone_computed_operands(block: Block) -> None:
    """Gives each anchor whose kernel computes some operands where it reads them
    (``computed_operands``) a copy of its own of the injective ops making them, as MLIR's
    element-wise fusion duplicates a producer into each consumer: the rotary tables every
    layer reads are recomputed per element in each layer's rotary kernel instead of being
    kernels and tables in memory. Slices of more than ``MAX_CLONED`` ops are left shared;
    originals nothing reads any more are erased."""
    cloned: list[Operation] = []
    position = {op: k for k, op in enumerate(block.ops)}
    for anchor, operands in [(op, computed) for op in block.ops if (computed := computed_operands(op))]:
        for k in operands:
            value = anchor.operands[k]
            ops = _injective_slice(value, position)
            if not ops or len(ops) > MAX_CLONED:
                continue
            members = {anchor, *ops}
            if all(use.operation in members for o in ops for r in o.results for use in r.uses) \
                    and sum(use.operation is anchor for use in value.uses) == 1:
                continue  # already this operand's alone
            mapping: dict[SSAValue, SSAValue] = {}
            for op in ops:
                copy = op.clone(value_mapper=mapping)
                Rewriter.insert_op(copy, InsertPoint.before(anchor))
            anchor.operands[k] = mapping[value]
            cloned += ops
    for op in sorted(set(cloned), key=position.__getitem__, reverse=True):
        if all(not r.uses for r in op.results):
            Rewriter.erase_op(op)


def fuse_groups(block: Block) -> list[list[Operation]]:
    """The fused groups of ``block``'s injective ops, reductions and GEMMs, each in
    program order, groups in the order of their last op."""
    group_of: dict[Operation, list[Operation]] = {}
    position = {op: k for k, op in enumerate(block.ops)}
    for op in block.ops:
        if is_anchor(op):
            group = sorted({*_views(op, group_of), *_prologue(op, group_of, position), op}, key=position.__getitem__)
            for member in group:
                group_of[member] = group
            continue
        if not is_fusable(op):
            continue
        candidates: list[list[Operation]] = []
        for operand in op.operands:
            group = group_of.get(operand.op) if isinstance(operand, OpResult) else None
            if group is not None and not any(group is c for c in candidates):
                candidates.append(group)
        # Drop groups op cannot join and producer groups with a value used outside the
        # merge, until none is left.
        while True:
            keep = _admissible(op, candidates)
            members = {op, *(o for g in keep for o in g)}
            keep = [g for g in keep if all(use.operation in members for o in g for r in o.results for use in r.uses)]
            if len(keep) == len(candidates):
                break
            candidates = keep
        group = sorted({op, *(o for g in candidates for o in g)}, key=position.__getitem__)
        for member in group:
            group_of[member] = group
    groups: dict[int, list[Operation]] = {id(g): g for g in group_of.values()}
    return sorted(groups.values(), key=lambda g: position[g[-1]])


def _outline(group: list[Operation], target: TargetAttr) -> tuple[FuncOp, list[SSAValue]]:
    """The group as a (not yet named or inserted) primitive function, and its operands."""
    members = set(group)
    inputs: list[SSAValue] = []
    for op in group:
        for operand in op.operands:
            if (not isinstance(operand, OpResult) or operand.op not in members) and operand not in inputs:
                inputs.append(operand)
    output = group[-1].results[0]
    body = Block(arg_types=[v.type for v in inputs])
    mapping: dict[SSAValue, SSAValue] = dict(zip(inputs, body.args))
    for op in group:
        body.add_op(op.clone(value_mapper=mapping))
    body.add_op(ReturnOp(mapping[output]))
    function = FuncOp("fused", ([v.type for v in inputs], [output.type]), Region(body), "private")
    function.attributes[TARGET] = target
    function.attributes[PRIMITIVE] = UnitAttr()
    function.location = group[-1].location
    return function, inputs


class _LoweredFunctions:
    """TVM's TE compiler cache: structurally equal primitive functions (same body, type
    and target) are one function, so a model of N equal layers compiles each kernel once."""

    def __init__(self) -> None:
        self.buckets: dict[int, list[FuncOp]] = {}

    def find(self, function: FuncOp) -> FuncOp | None:
        for other in self.buckets.get(structural_hash(function.body), []):
            if (
                other.function_type == function.function_type
                and other.attributes[TARGET] == function.attributes[TARGET]
                and structurally_equal(other.body, function.body)
            ):
                return other
        return None

    def add(self, function: FuncOp) -> None:
        self.buckets.setdefault(structural_hash(function.body), []).append(function)


@dataclass(frozen=True)
class FuseNativeKernels(ModulePass):
    """Outline maximal convex groups of injective ops, alone or as the epilogue of one
    reduction, GEMM or pool, on ``target`` into primitive functions, one future kernel each."""

    name = "fuse-native-kernels"

    target: str = "cuda"
    """Kind name of the native target whose functions are fused."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        taken = {name for o in op.ops if (name := symbol_name(o)) is not None}
        lowered = _LoweredFunctions()
        for function in [f for f in op.ops if isinstance(f, FuncOp) and lowers_on_target(f, self.target)]:
            attr = func_target_attr(function)
            target = attr.without_host() if attr is not None else TargetAttr(self.target)
            k = 0
            for block in function.body.blocks:
                clone_computed_operands(block)
                for group in fuse_groups(block):
                    if all(isinstance(o, nn.ReshapeOp) for o in group):
                        continue
                    outlined, inputs = _outline(group, target)
                    shared = lowered.find(outlined)
                    if shared is None:
                        while (name := f"{function.sym_name.data}_fused_{k}") in taken:
                            k += 1
                        taken.add(name)
                        outlined.sym_name = StringAttr(name)
                        Rewriter.insert_op(outlined, InsertPoint.before(function))
                        lowered.add(outlined)
                        shared = outlined
                    result = group[-1].results[0]
                    call = CallOp(shared.sym_name.data, inputs, [result.type])
                    call.location = group[-1].location
                    Rewriter.insert_op(call, InsertPoint.before(group[-1]))
                    result.replace_all_uses_with(call.res[0])
                    for member in reversed(group):
                        Rewriter.erase_op(member)
