"""SSA dominance in regions of many blocks (issue 14): the verifier walks each region's
dominator tree (see also tests/filecheck/ir/verify-dominance.mlir)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.ir.verifier import dominator_tree


def _chain(blocks: int, use: str) -> str:
    """An entry block defining %v, then ``blocks`` blocks each branching to the next; the
    last one returns ``use``."""
    lines = ["func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {",
             "  %v = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>", "  cf.br ^b0"]
    for i in range(blocks):
        lines += [f"^b{i}:", f"  %t{i} = nn.tanh %x : (tensor<4xf32>) -> tensor<4xf32>"]
        lines.append(f"  cf.br ^b{i + 1}" if i + 1 < blocks else f"  func.return {use} : tensor<4xf32>")
    return "\n".join([*lines, "}", ""])


def test_a_deep_cfg_verifies_without_recursion() -> None:
    """2,000 blocks in a line: deeper than Python's recursion limit, and each block's
    immediate dominator is the one before it."""
    module = parse_module(_chain(2000, "%v"), make_context())
    region = next(op for op in module.walk() if op.name == "func.func").regions[0]
    children, unreachable = dominator_tree(region)
    blocks = list(region.blocks)
    assert not unreachable
    assert all(children[a] == [b] for a, b in pairwise(blocks))
    assert children[blocks[-1]] == []
    # A value of the second-to-last block dominates the last one, too.
    parse_module(_chain(2000, "%t1998"), make_context())


def test_a_value_of_a_later_block_in_a_chain_is_rejected() -> None:
    # ^b5 defines %t5 and ^b3 uses it... through a back edge only: ^b5 does not dominate ^b3.
    text = _chain(8, "%v").replace("^b3:\n", "^b3:\n  %u = nn.add %t5, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n")
    with pytest.raises(PartitaError, match=r"m\.mlir:\d+:3: error: 'nn.add' op operand #0 \(%t5\) does not dominate this use"):
        parse_module(text, make_context(), "m.mlir")


def test_diamond_dominators_and_unreachable_blocks() -> None:
    text = """func.func @main(%x: tensor<4xf32>, %c: i1) -> tensor<4xf32> {
  cf.cond_br %c, ^a, ^b
^a:
  cf.br ^join
^b:
  cf.br ^join
^join:
  func.return %x : tensor<4xf32>
^dead:
  cf.br ^join
}
"""
    module = parse_module(text, make_context())
    region = next(op for op in module.walk() if op.name == "func.func").regions[0]
    entry, a, b, join, dead = region.blocks
    children, unreachable = dominator_tree(region)
    assert set(children[entry]) == {a, b, join} and children[a] == children[b] == []
    assert unreachable == [dead]
