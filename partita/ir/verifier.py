"""Module verification with located errors, linear in the number of symbols.

xDSL verifies each ``func.call`` by scanning its module's top-level ops for the callee,
so a module of n functions costs O(n^2) to verify (~100 s at 10,000 functions). While
verifying, Partita answers those look-ups from a per-table index built once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from xdsl.dialects.builtin import ModuleOp, StringAttr, SymbolRefAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation, OpResult, Region, SSAValue
from xdsl.traits import SymbolOpInterface, SymbolTable
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

_original_lookup = SymbolTable.lookup_symbol


def symbol_name(op: Operation) -> str | None:
    """The symbol an op defines (its ``sym_name``), if any."""
    interface = op.get_trait(SymbolOpInterface)
    if interface is None:
        return None
    attr = interface.get_sym_attr_name(op)
    return attr.data if attr is not None else None


@contextmanager
def indexed_symbol_lookup() -> Iterator[None]:
    """Within the block, ``SymbolTable.lookup_symbol`` uses an index per symbol table.

    The index is checked on every hit (the op must still be in that table under that
    name) and rebuilt on a miss, so IR changes made inside the block stay correct.
    """
    index: dict[int, tuple[Operation, dict[str, Operation]]] = {}

    def build(table: Operation) -> dict[str, Operation]:
        names = {}
        for op in table.regions[0].block.ops:
            if (name := symbol_name(op)) is not None:
                names.setdefault(name, op)
        index[id(table)] = (table, names)
        return names

    def lookup(op: Operation, name: str | StringAttr | SymbolRefAttr) -> Operation | None:
        ref = SymbolRefAttr(name) if isinstance(name, str | StringAttr) else name
        if ref.nested_references.data:
            return _original_lookup(op, ref)
        table: Operation | None = op
        while table is not None and not table.has_trait(SymbolTable):
            table = table.parent_op()
        if table is None:
            return _original_lookup(op, ref)
        root = ref.root_reference.data
        entry = index.get(id(table))
        names = entry[1] if entry is not None and entry[0] is table else build(table)
        found = names.get(root)
        if found is not None and found.parent_op() is table and symbol_name(found) == root:
            return found
        return build(table).get(root)

    SymbolTable.lookup_symbol = staticmethod(lookup)  # type: ignore[method-assign]
    try:
        yield
    finally:
        SymbolTable.lookup_symbol = staticmethod(_original_lookup)  # type: ignore[method-assign]


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
    with indexed_symbol_lookup():
        for op in module.walk():
            try:
                op.verify(verify_nested_ops=False)
                if isinstance(op, FuncOp):
                    _verify_attributes(op)
            except VerifyException as err:
                message = str(err).removeprefix("Operation does not verify: ")
                raise op_error(op, message) from None
