"""The module verifier checks symbol users (``func.call``, ``byoc.call_extern``) from an
index of each symbol table, without replacing xDSL's ``SymbolTable.lookup_symbol``."""

from __future__ import annotations

import pytest
from xdsl.traits import SymbolTable

from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.ir.verifier import SymbolIndex


def _calls(n: int, call: str = "%r = func.call @f{i}(%x) : (tensor<4xf32>) -> tensor<4xf32>") -> str:
    lines = []
    for i in range(n):
        lines += [f"func.func private @f{i}(%a: tensor<4xf32>) -> tensor<4xf32> {{",
                  "  func.return %a : tensor<4xf32>", "}"]
    lines.append("func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {")
    lines += ["  " + call.format(i=i).replace("%r", f"%r{i}") for i in range(n)]
    lines += ["  func.return %x : tensor<4xf32>", "}", ""]
    return "\n".join(lines)


def test_calls_verify_from_the_index_and_xdsl_is_left_alone(monkeypatch) -> None:
    original = SymbolTable.lookup_symbol
    scans = []

    def counting(op, name):
        scans.append(name)
        return original(op, name)

    monkeypatch.setattr(SymbolTable, "lookup_symbol", staticmethod(counting))
    module = parse_module(_calls(300), make_context())
    assert scans == []  # no call was resolved by a scan of the module
    assert sum(op.name == "func.call" for op in module.walk()) == 300
    monkeypatch.undo()
    assert SymbolTable.lookup_symbol is original


@pytest.mark.parametrize(("call", "message"), [
    ("%r = func.call @nowhere(%x) : (tensor<4xf32>) -> tensor<4xf32>",
     "'@nowhere' could not be found in symbol table"),
    ("%r = func.call @f{i}(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>",
     "incorrect number of operands for callee"),
    ("%r = func.call @f{i}(%x) : (tensor<4xf32>) -> tensor<4xf16>",
     "result type mismatch: expected result type tensor<4xf32>"),
])
def test_a_bad_call_is_a_located_error(call: str, message: str) -> None:
    with pytest.raises(PartitaError) as err:
        parse_module(_calls(3, call), make_context(), "calls.mlir")
    assert message in str(err.value)
    assert "calls.mlir:" in str(err.value)


def test_a_call_extern_needs_an_extern_callee() -> None:
    text = """
func.func private @k(tensor<4xf32>) -> tensor<4xf32>
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %o = byoc.alloc_tensor() : tensor<4xf32>
  %r = byoc.call_extern @k(%x) outs(%o) : (tensor<4xf32>) -> tensor<4xf32>, tensor<4xf32>
  func.return %r : tensor<4xf32>
}
"""
    with pytest.raises(PartitaError, match="'@k' is not marked 'byoc.extern'"):
        parse_module(text, make_context(), "extern.mlir")
    parse_module(text.replace("-> tensor<4xf32>\n", "-> tensor<4xf32> attributes {byoc.extern}\n", 1),
                 make_context())


def test_the_index_sees_each_table_once() -> None:
    module = parse_module(_calls(5), make_context())
    main = next(op for op in module.walk() if getattr(op, "sym_name", None) and op.sym_name.data == "main")
    index = SymbolIndex()
    call = next(op for op in main.walk() if op.name == "func.call")
    assert index.lookup(call, "f3").sym_name.data == "f3"
    assert index.lookup(call, "missing") is None
    assert index.lookup(module, "f0") is index.lookup(call, "f0")
