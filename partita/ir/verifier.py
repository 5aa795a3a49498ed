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
from xdsl.ir import Operation
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


def verify_module(module: ModuleOp) -> None:
    """Verifies every op (and the ``byoc.*`` attributes of functions); the first failure
    is raised as a ``PartitaError`` located at the failing op."""
    with indexed_symbol_lookup():
        for op in module.walk():
            try:
                op.verify(verify_nested_ops=False)
                if isinstance(op, FuncOp):
                    verify_function_attributes(op)
            except VerifyException as err:
                message = str(err).removeprefix("Operation does not verify: ")
                raise op_error(op, message) from None
