"""Parsing that records where every operation came from.

xDSL's parser only keeps explicit ``loc(...)`` annotations; Partita reports verifier and
pass errors at ``file:line:col`` like MLIR, so each parsed op gets a ``FileLineColLoc``.
Line numbers come from a table of line starts (bisect), keeping the parse linear.
"""

from __future__ import annotations

import dataclasses
import re
from bisect import bisect_right
from math import prod

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    FileLineColLoc,
    Float16Type,
    Float32Type,
    Float64Type,
    IntAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    UnknownLoc,
)
from xdsl.ir import Operation, TypeAttribute
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

from partita.ir.constants import splat_attr, storage_dtype
from partita.ir.diagnostics import PartitaError, format_location
from partita.ir.verifier import verify_module

MAX_NESTING = 64
"""Regions nested deeper than this are rejected while parsing: real models nest a few
levels, and xDSL's recursive parser, verifier and printer would overflow the Python stack
a few hundred levels down."""

# Builtin tensor types without encoding: their meaning depends only on their spelling.
_SIMPLE_TENSOR_TYPE = re.compile(r"tensor<(?:(?:\d+|\?)x)*(?:bf16|f16|f32|f64|i1|i8|i16|i32|i64|index)>")

# The body of a dense literal of one element (a splat): a number, a boolean or a hex string.
_SPLAT_BODY = re.compile(r'<\s*(?:[-+]?[0-9][0-9A-Za-z.+-]*|true|false|"0x[0-9A-Fa-f]*")\s*>')


# xDSL 0.74 lexes string literals with ``"(?:[^"...]+|\\..)*"``: a nested quantifier that
# backtracks exponentially on an unterminated string (found by tests/tools/test_fuzz_opt.py:
# a 1.8 KB mutant never finished). One character per repetition matches the same
# language in linear time. Installed on the lexer class, so that every parser in the
# process (attribute parsers, pass options) gets it, from the first token on.
_STRING_LITERAL = re.compile(r'"(?:[^"\\\n\v\f]|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*"')
MLIRLexer._unescaped_characters_regex = _STRING_LITERAL  # type: ignore[attr-defined]


class _BitPattern(Parser._TensorLiteralElement):
    def to_type(self, parser, type):
        if isinstance(type, Float16Type | BFloat16Type | Float32Type | Float64Type):
            if self.is_negative:
                parser.raise_error("a hex float literal (a bit pattern) cannot be negative", at_position=self.span)
            width = type.compile_time_size
            if self.value >= 1 << (8 * width):
                parser.raise_error(f"hex float literal {self.span.text} does not fit {type}", at_position=self.span)
            return float(np.frombuffer(self.value.to_bytes(width, "little"), storage_dtype(type))[0])
        return super().to_type(parser, type)


class LocatingParser(Parser):
    def __init__(self, ctx: Context, text: str, name: str = "<stdin>", line_offset: int = 0):
        super().__init__(ctx, text, name)
        self._text = text
        # Graph IR repeats a handful of tensor types thousands of times and xDSL spends
        # ~0.1 ms parsing each; attributes are immutable, so a parsed type is reused.
        self._tensor_types: dict[str, TypeAttribute] = {}
        self._file = StringAttr(name)
        self._line_offset = line_offset
        starts = [0]
        find = text.find
        pos = find("\n")
        while pos >= 0:
            starts.append(pos + 1)
            pos = find("\n", pos + 1)
        self._line_starts = starts

    def parse_optional_type(self) -> TypeAttribute | None:
        token = self._current_token
        if token.kind is not MLIRTokenKind.BARE_IDENT or token.text != "tensor":
            return super().parse_optional_type()
        match = _SIMPLE_TENSOR_TYPE.match(self._text, token.span.start)
        if match is None:
            return super().parse_optional_type()
        cached = self._tensor_types.get(match.group())
        if cached is None:
            cached = self._tensor_types[match.group()] = super().parse_optional_type()
        else:
            self._resume_from(match.end())
        return cached

    def _parse_tensor_literal_element(self):  # type: ignore[override]
        """A hex integer literal in a float tensor is the element's bit pattern, as in MLIR
        (the printer writes NaN and infinities that way): ``0xFF800000`` is -inf in f32."""
        element = super()._parse_tensor_literal_element()
        if isinstance(element.value, int) and not isinstance(element.value, bool) and \
                element.span.text.lstrip("-").lower().startswith("0x"):
            return _BitPattern(element.is_negative, element.value, element.span)
        return element

    def parse_dense_int_or_fp_elements_attr(self, type):  # type: ignore[override]
        """``dense<v> : tensor<...>`` becomes a splat of one element of payload (see
        ``partita.ir.constants``) instead of xDSL's list of every element."""
        start = self._current_token.span.start
        if _SPLAT_BODY.match(self._text, start) is None:
            try:
                return super().parse_dense_int_or_fp_elements_attr(type)
            except ValueError as err:  # xDSL packs out-of-range integers with a ValueError
                self.raise_error(str(err), start, self.pos)
        self.parse_punctuation("<", " in dense attribute")
        hex_string = self.parse_optional_str_literal()
        element = self._parse_tensor_literal_element() if hex_string is None else None
        self.parse_punctuation(">", " in dense attribute")
        if type is None:
            self.parse_punctuation(":", " in dense attribute")
            type = self._parse_dense_literal_type()
        element_type = type.get_element_type()
        if hex_string is not None:
            try:
                payload = bytes.fromhex(hex_string[2:])
            except ValueError:
                self.raise_error("Hex string in denseAttr is invalid")
            if len(payload) != element_type.compile_time_size:
                attr = DenseIntOrFPElementsAttr(type, BytesAttr(payload))
                if len(attr) != prod(type.get_shape()):
                    self.raise_error(f"Shape mismatch in dense literal. Expected {prod(type.get_shape())} "
                                     f"elements from the type, but got {len(attr)} elements.")
                return attr
        else:
            value = element.to_type(self, element_type)
            if isinstance(element_type, IntegerType):
                try:
                    value = element_type.get_normalized_value(value)
                except ValueError as err:
                    self.raise_error(str(err), element.span)
            try:
                payload = element_type.pack([value])
            except OverflowError:  # struct refuses a float beyond the type's range
                self.raise_error(f"{value} is out of range for {element_type}", element.span)
        return splat_attr(type, payload)

    _depth = 0

    def parse_optional_region(self, arguments=None):  # type: ignore[override]
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                self.raise_error(f"nesting too deep: regions nest more than {MAX_NESTING} levels")
            return super().parse_optional_region(arguments)
        finally:
            self._depth -= 1

    def _location(self, offset: int) -> FileLineColLoc:
        line = bisect_right(self._line_starts, offset)
        column = offset - self._line_starts[line - 1] + 1
        return FileLineColLoc(self._file, IntAttr(line + self._line_offset), IntAttr(column))

    def parse_operation(self) -> Operation:
        start = self._current_token.span.start
        try:
            op = super().parse_operation()
        except VerifyException as err:
            # An attribute failed its own verifier while being built (e.g. an unknown
            # target option): report it at the operation that spells it.
            raise PartitaError(str(err), format_location(self._location(start))) from None
        if isinstance(op.location, UnknownLoc):
            op.location = self._location(start)
        return op


def parse_located(parser: LocatingParser) -> ModuleOp:
    """``parser.parse_module()``; running out of stack (attributes or types nested a
    thousand levels deep) is a ``ParseError`` at the token being parsed."""
    try:
        return parser.parse_module()
    except RecursionError:
        token = parser._current_token
        raise ParseError(token.span, "nesting too deep: attributes or types nest beyond what the parser handles") from None


def format_parse_error(err: ParseError) -> str:
    """``file:line:col: error: message`` followed by the offending line, MLIR style."""
    # print_with_context gives: location, the source line(s), carets, the message.
    lines = err.span.print_with_context(err.msg).rstrip("\n").split("\n")
    context = "\n".join(lines[1:-1])
    return f"{err.span.get_location()}: error: {err.msg}\n{context}"


def parse_module(
    text: str, ctx: Context, name: str = "<stdin>", *, line_offset: int = 0, verify: bool = True
) -> ModuleOp:
    """Parses (and by default verifies) a module; errors are ``PartitaError``s."""
    parser = LocatingParser(ctx, text, name, line_offset)
    try:
        module = parse_located(parser)
    except ParseError as err:
        err.span = dataclasses.replace(err.span, line_offset=line_offset)
        raise parse_error_diagnostic(err) from None
    if verify:
        verify_module(module)
    return module


def parse_error_diagnostic(err: ParseError) -> PartitaError:
    """A located ``PartitaError`` whose message keeps the offending line for context."""
    location, _, message = format_parse_error(err).partition(": error: ")
    return PartitaError(message, location)
