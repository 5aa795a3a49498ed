"""Module verification with located errors, linear in the number of symbols.

xDSL verifies each ``func.call`` by scanning its module's top-level ops for the callee,
so a module of n functions costs O(n^2) to verify (~100 s at 10,000 functions). While
verifying, Partita answers those look-ups from a per-table index built once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from xdsl.dialects.builtin import ModuleOp, StringAttr, SymbolRefAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation, OpResult, Region, SSAValue
from xdsl.traits import SymbolOpInterface, SymbolTable
from xdsl.utils.exceptions import VerifyException

from partita.dialects.byoc import verify_function_attributes
from partita.ir.diagnostics import op_error

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


def verify_dominance(module: Operation) -> None:
    """Every operand must be defined before its use: earlier in the same block, or in an
    enclosing block before the op that holds the use (xDSL 0.74 does not check this,
    and ``%0 = nn.relu %0`` would otherwise send later stages into endless recursion).

    Linear in the IR. Inside a region of several blocks (a CFG) values of any block of
    that region are accepted: only straight-line order is checked there.
    """
    visible: set[SSAValue] = set()

    def visit_region(region: Region) -> None:
        shared: list[SSAValue] = []
        if len(region.blocks) > 1:
            for block in region.blocks:
                shared.extend(block.args)
                for op in block.ops:
                    shared.extend(op.results)
            visible.update(shared)
        for block in region.blocks:
            visit_block(block)
        visible.difference_update(shared)

    def visit_block(block: Block) -> None:
        added: list[SSAValue] = list(block.args)
        visible.update(block.args)
        for op in block.ops:
            for index, operand in enumerate(op.operands):
                if operand not in visible:
                    later = isinstance(operand, OpResult) and operand.op.parent_block() is block
                    why = "is used before it is defined" if later else "does not dominate this use"
                    raise op_error(op, f"operand #{index} ({_value_name(operand)}) {why}")
            for region in op.regions:
                visit_region(region)
            visible.update(op.results)
            added.extend(op.results)
        visible.difference_update(added)

    for region in module.regions:
        visit_region(region)


def verify_module(module: ModuleOp) -> None:
    """Verifies SSA dominance and every op (and the ``byoc.*`` attributes of functions);
    the first failure is raised as a ``PartitaError`` located at the failing op."""
    verify_dominance(module)
    with indexed_symbol_lookup():
        for op in module.walk():
            try:
                op.verify(verify_nested_ops=False)
                if isinstance(op, FuncOp):
                    verify_function_attributes(op)
            except VerifyException as err:
                message = str(err).removeprefix("Operation does not verify: ")
                raise op_error(op, message) from None
