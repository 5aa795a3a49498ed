"""Unit tests of the pattern language (partita.backends.pattern)."""

from __future__ import annotations

import pytest

from partita.backends.pattern import is_constant, is_op, wildcard
from partita.dialects import make_context
from partita.ir import parse_module

T = "tensor<4x4xf32>"


def _ops(body: str, args: str = f"%x: {T}, %y: {T}", results: str = T):
    text = f"func.func @f({args}) -> ({results}) {{\n{body}\n}}"
    module = parse_module(text, make_context(), "test")
    func = next(iter(module.ops))
    return {op.results[0].name_hint: op for op in func.body.block.ops if op.results}


def test_op_pattern_with_wildcards_reports_ops_inputs_and_root():
    ops = _ops(f"""
  %d = nn.dense %x, %y : ({T}, {T}) -> {T}
  %r = nn.relu %d : ({T}) -> {T}
  func.return %r : {T}""")
    x = wildcard()
    m = is_op("nn.relu")(is_op("nn.dense")(x, wildcard())).match(ops["r"])
    assert m is not None
    assert [op.name for op in m.ops] == ["nn.dense", "nn.relu"]
    assert [v.name_hint for v in m.inputs] == ["x", "y"]
    assert m.root is ops["r"] and m.outputs == (ops["r"].results[0],)
    assert m.value(x).name_hint == "x"
    # Rooted: the same pattern does not match at the dense.
    assert is_op("nn.relu")(is_op("nn.dense")(wildcard(), wildcard())).match(ops["d"]) is None


def test_alternatives_and_applied_alternatives():
    ops = _ops(f"""
  %a = nn.add %x, %y : ({T}, {T}) -> {T}
  %s = nn.subtract %a, %y : ({T}, {T}) -> {T}
  func.return %s : {T}""")
    either = (is_op("nn.add") | is_op("nn.subtract"))(wildcard(), wildcard())
    assert either.match(ops["a"]).root is ops["a"]
    assert either.match(ops["s"]).ops == (ops["s"],)
    assert is_op("nn.multiply")(wildcard(), wildcard()).match(ops["a"]) is None


def test_optional_prefers_the_longer_match():
    ops = _ops(f"""
  %d = nn.dense %x, %y : ({T}, {T}) -> {T}
  %r = nn.relu %d : ({T}) -> {T}
  func.return %r : {T}""")
    p = is_op("nn.dense")(wildcard(), wildcard()).optional(lambda q: is_op("nn.relu")(q))
    assert [op.name for op in p.match(ops["r"]).ops] == ["nn.dense", "nn.relu"]
    assert [op.name for op in p.match(ops["d"]).ops] == ["nn.dense"]


def test_escaping_intermediate_is_rejected():
    ops = _ops(f"""
  %d = nn.dense %x, %y : ({T}, {T}) -> {T}
  %r = nn.relu %d : ({T}) -> {T}
  func.return %r, %d : {T}, {T}""", results=f"{T}, {T}")
    p = is_op("nn.relu")(is_op("nn.dense")(wildcard(), wildcard()))
    assert p.match(ops["r"]) is None
    # The dense alone is fine: a root's result may escape.
    assert is_op("nn.dense")(wildcard(), wildcard()).match(ops["d"]) is not None


def test_shared_subpattern_must_bind_one_value():
    ops = _ops(f"""
  %s = nn.add %x, %x : ({T}, {T}) -> {T}
  %t = nn.add %x, %y : ({T}, {T}) -> {T}
  func.return %t : {T}""")
    v = wildcard()
    p = is_op("nn.add")(v, v)
    assert p.match(ops["s"]) is not None
    assert p.match(ops["t"]) is None


def test_constants_attributes_dtype_and_shape():
    ops = _ops(f"""
  %c = nn.constant dense<1.0> : {T}
  %d = nn.dense %x, %c : ({T}, {T}) -> {T}
  %e = nn.dense %x, %y : ({T}, {T}) -> {T}
  %b = nn.bias_add %e, %v {{axis = 0 : i64}} : ({T}, tensor<4xf32>) -> {T}
  func.return %d : {T}""", args=f"%x: {T}, %y: {T}, %v: tensor<4xf32>")
    p = is_op("nn.dense")(wildcard(), is_constant())
    m = p.match(ops["d"])
    assert m is not None and [v.name_hint for v in m.constants] == ["c"]
    assert m.ops == (ops["d"],)  # the constant is an input, not a matched op
    assert p.match(ops["e"]) is None
    assert is_op("nn.dense")(wildcard(), wildcard()).has_dtype("f32").match(ops["e"]) is not None
    assert is_op("nn.dense")(wildcard(), wildcard()).has_dtype("f16").match(ops["e"]) is None
    assert is_op("nn.dense")(wildcard(), wildcard()).has_shape((4, 4)).match(ops["e"]) is not None
    assert is_op("nn.dense")(wildcard(), wildcard()).has_shape((4, 5)).match(ops["e"]) is None
    assert is_op("nn.bias_add", axis=0)(wildcard(), wildcard()).match(ops["b"]) is not None
    assert is_op("nn.bias_add", axis=-1)(wildcard(), wildcard()).match(ops["b"]) is None


def test_operand_count_must_agree_and_pattern_applies_once():
    ops = _ops(f"""
  %r = nn.relu %x : ({T}) -> {T}
  func.return %r : {T}""")
    assert is_op("nn.relu")(wildcard(), wildcard()).match(ops["r"]) is None
    assert is_op("nn.relu").match(ops["r"]) is not None  # unapplied: any operands
    with pytest.raises(TypeError):
        is_op("nn.relu")(wildcard())(wildcard())
