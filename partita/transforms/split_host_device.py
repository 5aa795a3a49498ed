"""split-host-device: outline ``byoc.on_target`` regions into device functions.

TVM's ``SplitHostDevice`` for ``T.target()`` delegation.  Each ``byoc.on_target``
region becomes a private ``func.func`` carrying the region's target, named
``<caller>_kernel`` (or ``<caller>_kernel_0``, ``_1``, ... when that name is taken),
placed after its caller; the values the region uses but does not define become its
parameters, in order of first use; the region is replaced by a ``func.call``.

A region whose target is the caller's own (same kind and options; hosts ignored) is
redundant: its body is inlined into the caller, the results replaced by the yielded
values.  Nested regions are handled inside the function their parent became.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import CallOp, FuncOp, ReturnOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import SymbolOpInterface

from partita.dialects.byoc import OnTargetOp, YieldOp
from partita.transforms.target_utils import func_target, set_func_target, target_of


def _free_values(region_op: Operation) -> list[SSAValue]:
    """Values used inside ``region_op`` but defined outside it, in first-use order."""
    seen: dict[SSAValue, None] = {}
    for inner in region_op.walk():
        if inner is region_op:
            continue
        for value in inner.operands:
            if value in seen:
                continue
            owner = value.owner
            if not region_op.is_ancestor(owner):
                seen[value] = None
    return list(seen)


def _top_level_regions(func: FuncOp) -> list[OnTargetOp]:
    """``byoc.on_target`` ops of ``func`` not nested in another one, in walk order."""
    found: list[OnTargetOp] = []
    for op in func.walk():
        if isinstance(op, OnTargetOp) and not any(outer.is_ancestor(op) for outer in found[-1:]):
            found.append(op)
    return found


class _Namer:
    """Unique, deterministic kernel names that never clash with module symbols."""

    def __init__(self, module: ModuleOp):
        self.taken: set[str] = set()
        for op in module.ops:
            interface = op.get_trait(SymbolOpInterface)
            if interface is not None and (name := interface.get_sym_attr_name(op)) is not None:
                self.taken.add(name.data)

    def fresh(self, base: str) -> str:
        name, index = base, 0
        while name in self.taken:
            name = f"{base}_{index}"
            index += 1
        self.taken.add(name)
        return name


def _inline_region(op: OnTargetOp) -> None:
    block = op.body.block
    terminator = block.last_op
    assert isinstance(terminator, YieldOp)
    values = list(terminator.values)
    Rewriter.erase_op(terminator)
    Rewriter.inline_block(block, InsertPoint.before(op))
    Rewriter.replace_op(op, [], values)


def _outline_region(op: OnTargetOp, name: str) -> tuple[FuncOp, CallOp]:
    free = _free_values(op)
    body = Rewriter.move_region_contents_to_new_regions(op.body)
    block: Block = body.block
    for index, value in enumerate(free):
        arg = block.insert_arg(value.type, index)
        arg.name_hint = value.name_hint
        for use in list(value.uses):
            if block.is_ancestor(use.operation):
                use.operation.operands[use.index] = arg
    terminator = block.last_op
    assert isinstance(terminator, YieldOp)
    Rewriter.replace_op(terminator, ReturnOp(*terminator.values))
    kernel = FuncOp(
        name, ([v.type for v in free], list(op.outputs.types)), body, visibility="private"
    )
    kernel.location = op.location
    set_func_target(kernel, op.target)
    call = CallOp(name, free, list(op.outputs.types))
    call.location = op.location
    Rewriter.replace_op(op, call)
    return kernel, call


@dataclass(frozen=True)
class SplitHostDevice(ModulePass):
    name = "split-host-device"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        namer = _Namer(op)
        worklist = [f for f in op.ops if isinstance(f, FuncOp)]
        while worklist:
            func = worklist.pop(0)
            caller_target = func_target(func)
            insert_after: Operation = func
            # Inlining a region can expose regions nested in it: scan until none is left.
            while regions := _top_level_regions(func):
                for region_op in regions:
                    target = target_of(region_op.target, region_op)
                    if caller_target is not None and caller_target.same_as(target):
                        _inline_region(region_op)
                        continue
                    name = namer.fresh(f"{func.sym_name.data}_kernel")
                    kernel, _ = _outline_region(region_op, name)
                    Rewriter.insert_op(kernel, InsertPoint.after(insert_after))
                    insert_after = kernel
                    worklist.append(kernel)
