"""Unquoted pass-option values, as ``mlir-opt`` takes them.

xDSL's pipeline lexer only takes identifiers, numbers and quoted strings as option
values, so ``cutlass-codegen{cache-dir=/tmp/x}`` fails with "Unknown token". MLIR takes
a value up to a space or ``}``. :func:`quote_option_values` rewrites a pipeline string so
that every unquoted value (each comma-separated item of it) that is not a bare
identifier or number is quoted; quoted values and everything outside ``{...}`` are left
as they are.
"""

from __future__ import annotations

import re

__all__ = ["quote_option_values"]

_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*|[-+]?\d+(\.\d+)?([eE][-+]?\d+)?")


def _quote(item: str) -> str:
    if not item or _BARE.fullmatch(item):
        return item
    return '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'


def quote_option_values(spec: str) -> str:
    out: list[str] = []
    i, n = 0, len(spec)
    depth = 0
    while i < n:
        c = spec[i]
        if c == '"':  # a quoted string, anywhere: copy it whole
            j = i + 1
            while j < n and spec[j] != '"':
                j += 2 if spec[j] == "\\" else 1
            out.append(spec[i:j + 1])
            i = j + 1
            continue
        out.append(c)
        i += 1
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(depth - 1, 0)
        elif c == "=" and depth > 0 and i < n and spec[i] != '"':
            j = i
            while j < n and spec[j] not in " }\t\n":
                if spec[j] == '"':  # a quoted item inside a list: leave the value as is
                    j = -1
                    break
                j += 1
            if j == -1:
                continue
            out.append(",".join(_quote(item) for item in spec[i:j].split(",")))
            i = j
    return "".join(out)
