"""Names of an entry function's arguments and results, as the user's model calls them.

Importers record each source name as the ``onnx.name`` attribute of the argument or result
(``func.func @main(%gpu_0_data_0: tensor<...> {onnx.name = "gpu_0/data_0"})``), since SSA
name hints must be sanitized. Binding inputs and naming outputs go through these helpers, so
a user passes ``{"gpu_0/data_0": ...}`` and gets outputs under the model's own names.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, StringAttr
from xdsl.dialects.func import FuncOp

NAME_ATTR = "onnx.name"


def name_attrs(names: Sequence[str]) -> ArrayAttr[DictionaryAttr]:
    """``arg_attrs`` / ``res_attrs`` carrying ``names``."""
    return ArrayAttr([DictionaryAttr({NAME_ATTR: StringAttr(n)}) for n in names])


def _recorded(attrs: ArrayAttr | None, count: int) -> list[str | None]:
    out: list[str | None] = [None] * count
    if attrs is not None:
        for i, d in enumerate(attrs.data[:count]):
            name = d.data.get(NAME_ATTR) if isinstance(d, DictionaryAttr) else None
            if isinstance(name, StringAttr):
                out[i] = name.data
    return out


def argument_names(fn: FuncOp) -> list[str | None]:
    """Per argument: the recorded source name, else the SSA name hint, else ``None``."""
    count = len(fn.function_type.inputs.data)
    names = _recorded(fn.arg_attrs, count)
    hints = [a.name_hint for a in fn.body.block.args] if fn.body.blocks else []
    return [n if n is not None else (hints[i] if i < len(hints) else None)
            for i, n in enumerate(names)]


def result_names(fn: FuncOp) -> list[str]:
    """Per result: the recorded source name, else ``output<i>``."""
    count = len(fn.function_type.outputs.data)
    return [n if n is not None else f"output{i}"
            for i, n in enumerate(_recorded(fn.res_attrs, count))]
