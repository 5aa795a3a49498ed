"""Module verification with located errors, linear in the number of symbols.

xDSL verifies each ``func.call`` by scanning its module's top-level ops for the callee,
so a module of n functions costs O(n^2) to verify (~100 s at 10,000 functions). The module
verifier checks symbol users itself instead, resolving their symbols from an index of
each symbol table built once (:class:`SymbolIndex`); xDSL's own look-up is left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cache

from xdsl.dialects.builtin import ModuleOp, StringAttr, SymbolRefAttr
from xdsl.dialects.func import CallOp, FuncOp
from xdsl.ir import Block, Operation, OpResult, OpTraits, Region, SSAValue
from xdsl.irdl import IRDLOperation, OpDef
from xdsl.traits import IsTerminator, NoTerminator, SymbolOpInterface, SymbolTable, SymbolUserOpInterface
from xdsl.utils.exceptions import VerifyException

from partita.ir.diagnostics import op_error

#: Dialect namespace -> the check of a function's discardable attributes of that namespace
#: (MLIR's ``Dialect::verifyOperationAttribute``). xDSL has no such hook, and the
#: dialects sit above this module, so each dialect registers its check when imported.
_ATTRIBUTE_VERIFIERS: dict[str, Callable[[FuncOp], None]] = {}


def register_attribute_verifier(namespace: str, verifier: Callable[[FuncOp], None]) -> None:
    """``verify_module`` calls ``verifier`` on every function carrying an attribute
    ``<namespace>.*``; it raises ``VerifyException``."""
    _ATTRIBUTE_VERIFIERS[namespace] = verifier


def symbol_name(op: Operation) -> str | None:
    """The symbol an op defines (its ``sym_name``), if any."""
    interface = op.get_trait(SymbolOpInterface)
    if interface is None:
        return None
    attr = interface.get_sym_attr_name(op)
    return attr.data if attr is not None else None


class SymbolIndex:
    """The symbols of each symbol table by name, each table indexed on its first look-up
    (verification does not change the IR). Looks up as ``SymbolTable.lookup_symbol``."""

    def __init__(self) -> None:
        self._tables: dict[Operation, dict[str, Operation]] = {}

    def _names(self, table: Operation) -> dict[str, Operation]:
        names = self._tables.get(table)
        if names is None:
            names = {}
            for op in table.regions[0].block.ops:
                if (name := symbol_name(op)) is not None:
                    names.setdefault(name, op)
            self._tables[table] = names
        return names

    def lookup(self, op: Operation, name: str | StringAttr | SymbolRefAttr) -> Operation | None:
        ref = SymbolRefAttr(name) if isinstance(name, str | StringAttr) else name
        if ref.nested_references.data:  # rare: xDSL's walk through the nested tables
            return SymbolTable.lookup_symbol(op, ref)
        table: Operation | None = op
        while table is not None and not table.has_trait(SymbolTable):
            table = table.parent_op()
        return None if table is None else self._names(table).get(ref.root_reference.data)


SymbolCheck = Callable[[Operation, Callable[[Operation, SymbolRefAttr], Operation | None]], None]
"""Checks a symbol user, resolving its symbols with the look-up it is given."""


def check_call(call: Operation, lookup: Callable[[Operation, SymbolRefAttr], Operation | None]) -> None:
    """What xDSL's ``func.call`` verifier checks: the callee is a function of the call's
    arity and types."""
    assert isinstance(call, CallOp)
    callee = lookup(call, call.callee)
    if callee is None:
        raise VerifyException(f"'{call.callee}' could not be found in symbol table")
    if not isinstance(callee, FuncOp):
        raise VerifyException(f"'{call.callee}' does not reference a valid function")
    ins, outs = callee.function_type.inputs.data, callee.function_type.outputs.data
    if len(ins) != len(call.arguments):
        raise VerifyException("incorrect number of operands for callee")
    if len(outs) != len(call.result_types):
        raise VerifyException("incorrect number of results for callee")
    for i, (want, got) in enumerate(zip(ins, call.arguments.types)):
        if want != got:
            raise VerifyException(f"operand type mismatch: expected operand type {want}, "
                                  f"but provided {got} for operand number {i}")
    for i, (want, got) in enumerate(zip(outs, call.result_types)):
        if want != got:
            raise VerifyException(f"result type mismatch: expected result type {want}, "
                                  f"but provided {got} for result number {i}")


_SYMBOL_CHECKS: dict[type[Operation], SymbolCheck] = {CallOp: check_call}
"""The symbol users the module verifier checks itself (each op class's whole symbol check);
dialects above this module add theirs with :func:`register_symbol_check`."""

SYMBOL_CHECKS: Mapping[type[Operation], SymbolCheck] = _SYMBOL_CHECKS


def register_symbol_check(op_class: type[Operation], check: SymbolCheck) -> None:
    """``verify_module`` checks every ``op_class`` op's symbol uses with ``check``, resolving
    symbols from its index (instead of the op's ``SymbolUserOpInterface`` trait)."""
    _SYMBOL_CHECKS[op_class] = check


@cache
def _definition_without_symbol_uses(cls: type[IRDLOperation]) -> OpDef:
    """``cls``'s IRDL definition less its symbol-user traits (checked from the index)."""
    op_def = cls.get_irdl_definition()
    kept = tuple(t for t in op_def.traits if not isinstance(t, SymbolUserOpInterface))
    return replace(op_def, traits=OpTraits(lambda: kept))


def _verify_symbol_user(op: IRDLOperation, check: SymbolCheck, symbols: SymbolIndex) -> None:
    block = op.parent_block()
    if block is not None and block.last_op is op and not op.has_trait(IsTerminator):
        holder = block.parent_op()
        if holder is not None and not holder.has_trait(NoTerminator):
            raise VerifyException(f"Operation {op.name} terminates block in a region but is not a terminator")
    _definition_without_symbol_uses(type(op)).verify(op)
    check(op, symbols.lookup)


def _value_name(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else f"of type {value.type}"


def _successors(block: Block) -> list[Block]:
    """Successors of ``block`` within its own region (others are the op verifier's)."""
    last = block.last_op
    return [s for s in last.successors if s.parent is block.parent] if last is not None else []


def dominator_tree(region: Region) -> tuple[dict[Block, list[Block]], list[Block]]:
    """The dominator tree of ``region``'s CFG, as the children of each block reachable
    from the entry, and the blocks that are not reachable.

    Cooper, Harvey and Kennedy's iterative algorithm on the reverse post-order: linear in
    practice. (xDSL 0.74's ``irdl.dominance.DominanceInfo`` keeps the full dominator set of
    each block, quadratic in memory, and counts unreachable blocks as dominated by
    nothing else, where MLIR lets anything dominate them.)
    """
    entry = region.blocks.first
    if entry is None:
        return {}, []
    if entry.next_block is None:  # the common case: one block
        return {entry: []}, []
    post: list[Block] = []
    seen = {entry}
    stack = [(entry, iter(_successors(entry)))]
    while stack:  # iterative DFS: a CFG may be thousands of blocks deep
        block, successors = stack[-1]
        for succ in successors:
            if succ not in seen:
                seen.add(succ)
                stack.append((succ, iter(_successors(succ))))
                break
        else:
            post.append(block)
            stack.pop()
    order = post[::-1]
    index = {block: i for i, block in enumerate(order)}
    preds: dict[Block, list[Block]] = {block: [] for block in order}
    for block in order:
        for succ in _successors(block):
            preds[succ].append(block)
    idom: dict[Block, Block] = {entry: entry}

    def intersect(a: Block, b: Block) -> Block:
        while a is not b:
            while index[a] > index[b]:
                a = idom[a]
            while index[b] > index[a]:
                b = idom[b]
        return a

    changed = True
    while changed:
        changed = False
        for block in order[1:]:
            new: Block | None = None
            for pred in preds[block]:
                if pred in idom:
                    new = pred if new is None else intersect(pred, new)
            if new is not None and idom.get(block) is not new:
                idom[block] = new
                changed = True
    children: dict[Block, list[Block]] = {block: [] for block in order}
    for block in order[1:]:
        children[idom[block]].append(block)
    return children, [block for block in region.blocks if block not in index]


def verify_dominance(module: Operation) -> None:
    """Every operand must be defined where it dominates its use, as MLIR defines it:
    earlier in the same block; in a block that dominates the use's block in the region's
    CFG; or, for a use inside a nested region, by one of those rules at the op holding
    that region (xDSL 0.74 does not check this, and ``%0 = nn.relu %0`` would otherwise
    send later stages into endless recursion).

    Values in scope are kept in one set while walking each region's dominator tree, so
    the check is linear in the IR. As in MLIR, uses in a block the entry cannot reach
    are not checked against order (any value of the region dominates them).
    """
    visible: set[SSAValue] = set()

    def visit_region(region: Region) -> None:
        children, unreachable = dominator_tree(region)
        if region.blocks.first is not None:
            # Pre-order over the dominator tree: a block's values stay in scope while
            # the blocks it dominates are visited, then leave it.
            stack: list[tuple[Block, list[SSAValue] | None]] = [(region.blocks.first, None)]
            while stack:
                block, added = stack.pop()
                if added is not None:
                    visible.difference_update(added)
                    continue
                added = visit_block(block)
                stack.append((block, added))
                stack.extend((child, None) for child in reversed(children[block]))
        if unreachable:
            everything = [v for block in region.blocks for v in (*block.args, *(r for op in block.ops for r in op.results))]
            fresh = [v for v in everything if v not in visible]
            visible.update(fresh)
            for block in unreachable:
                visit_block(block, check=False)
            visible.difference_update(fresh)

    def visit_block(block: Block, check: bool = True) -> list[SSAValue]:
        """Checks ``block``'s ops, leaving its values in scope; returns them."""
        added: list[SSAValue] = list(block.args)
        visible.update(block.args)
        for op in block.ops:
            for index, operand in enumerate(op.operands):
                if check and operand not in visible:
                    later = isinstance(operand, OpResult) and operand.op.parent_block() is block
                    why = "is used before it is defined" if later else "does not dominate this use"
                    raise op_error(op, f"operand #{index} ({_value_name(operand)}) {why}")
            for region in op.regions:
                visit_region(region)
            visible.update(op.results)
            added.extend(op.results)
        return added

    for region in module.regions:
        visit_region(region)


def _verify_attributes(function: FuncOp) -> None:
    namespaces = {name.split(".", 1)[0] for name in function.attributes if "." in name}
    for namespace in sorted(namespaces & _ATTRIBUTE_VERIFIERS.keys()):
        _ATTRIBUTE_VERIFIERS[namespace](function)


def verify_module(module: ModuleOp) -> None:
    """Verifies SSA dominance and every op (and the ``byoc.*`` attributes of functions);
    the first failure is raised as a ``PartitaError`` located at the failing op."""
    verify_dominance(module)
    symbols = SymbolIndex()
    for op in module.walk():
        try:
            check = SYMBOL_CHECKS.get(type(op))
            if check is not None:
                _verify_symbol_user(op, check, symbols)  # type: ignore[arg-type]
            else:
                op.verify(verify_nested_ops=False)
            if isinstance(op, FuncOp):
                _verify_attributes(op)
        except VerifyException as err:
            message = str(err).removeprefix("Operation does not verify: ")
            raise op_error(op, message) from None
