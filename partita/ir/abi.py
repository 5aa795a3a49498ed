"""Names of an entry function's arguments and results, as the user's model calls them.

Importers record each source name as the ``onnx.name`` attribute of the argument or result
(``func.func @main(%gpu_0_data_0: tensor<...> {onnx.name = "gpu_0/data_0"})``), since SSA
name hints must be sanitized. Binding inputs and naming outputs go through these helpers, so
a user passes ``{"gpu_0/data_0": ...}`` and gets outputs under the model's own names.

An ONNX sequence input or output (a list of tensors) of length ``n`` is ``n`` arguments or
results of its own, named ``seq[0]`` ... ``seq[n-1]``; the function's ``onnx.sequence_inputs``
/ ``onnx.sequence_outputs`` attributes group them again (``[{name = "seq", position = 1,
length = 2}]``: arguments 1 and 2), an empty sequence included, so the driver takes and
returns a Python list there (``flatten`` / ``regroup``) and a saved model keeps the grouping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.dialects.func import FuncOp

NAME_ATTR = "onnx.name"
SEQUENCE_INPUTS_ATTR = "onnx.sequence_inputs"
SEQUENCE_OUTPUTS_ATTR = "onnx.sequence_outputs"


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


def element_name(sequence: str, index: int) -> str:
    """The name of element ``index`` of sequence ``sequence`` as an argument or result."""
    return f"{sequence}[{index}]"


@dataclass(frozen=True)
class SequenceSpan:
    """The arguments (or results) ``position`` .. ``position + length - 1`` that hold the
    elements of the source's sequence ``name``, in order."""

    name: str
    position: int
    length: int

    def to_attr(self) -> DictionaryAttr:
        return DictionaryAttr({"name": StringAttr(self.name), "position": IntegerAttr(self.position, i64),
                               "length": IntegerAttr(self.length, i64)})


def set_sequence_spans(fn: FuncOp, inputs: Sequence[SequenceSpan], outputs: Sequence[SequenceSpan]) -> None:
    """Records ``fn``'s sequence arguments and results (none: no attribute)."""
    for key, spans in ((SEQUENCE_INPUTS_ATTR, inputs), (SEQUENCE_OUTPUTS_ATTR, outputs)):
        if spans:
            fn.attributes[key] = ArrayAttr([span.to_attr() for span in spans])


def sequence_spans(fn: FuncOp, which: str) -> list[SequenceSpan]:
    """``fn``'s sequence ``"inputs"`` or ``"outputs"``, by position (a malformed entry is
    ignored: the values are then taken one by one)."""
    attr = fn.attributes.get(SEQUENCE_INPUTS_ATTR if which == "inputs" else SEQUENCE_OUTPUTS_ATTR)
    spans = []
    for entry in attr.data if isinstance(attr, ArrayAttr) else ():
        fields = entry.data if isinstance(entry, DictionaryAttr) else {}
        name, position, length = (fields.get(k) for k in ("name", "position", "length"))
        if isinstance(name, StringAttr) and isinstance(position, IntegerAttr) and isinstance(length, IntegerAttr):
            spans.append(SequenceSpan(name.data, position.value.data, length.value.data))
    return sorted(spans, key=lambda span: span.position)


def _slots(spans: Sequence[SequenceSpan], count: int) -> list[int | SequenceSpan]:
    """The source's values in order over ``count`` flat ones: a flat position, or a span."""
    out: list[int | SequenceSpan] = []
    pending = list(spans)
    position = 0
    while position < count or pending:
        if pending and pending[0].position <= position:
            span = pending.pop(0)
            out.append(span)
            position = max(position, span.position + span.length)
        elif position < count:
            out.append(position)
            position += 1
        else:  # a span past the end (malformed): its elements are what there is
            pending.pop(0)
    return out


def regroup(values: Sequence[Any], spans: Sequence[SequenceSpan]) -> list[Any]:
    """Flat values (a function's results) as the source's: a list per sequence."""
    return [list(values[s.position:s.position + s.length]) if isinstance(s, SequenceSpan) else values[s]
            for s in _slots(spans, len(values))]


def grouped_names(names: Sequence[str], spans: Sequence[SequenceSpan]) -> list[str]:
    """The source's names of flat ``names`` (a sequence's, once)."""
    return [s.name if isinstance(s, SequenceSpan) else names[s] for s in _slots(spans, len(names))]


def flatten(args: Sequence[Any], named: dict[str, Any], spans: Sequence[SequenceSpan], count: int,
            what: str) -> tuple[list[Any], dict[str, Any]]:
    """The source's inputs (a list or tuple for each sequence, positional or by name) as
    ``count`` flat arguments: each element positional, or named ``seq[k]``. A sequence of
    another length than its span's, or not a list, is a ``ValueError`` naming it (``what``
    says whose input)."""
    if not spans:
        return list(args), named
    if len(args) == 1 and isinstance(args[0], dict):  # run({"x": ...}), as the binding takes it
        named, args = {**args[0], **named}, []

    def elements(span: SequenceSpan, value: Any) -> list[Any]:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{what} input '{span.name}' is a sequence: pass a list of {span.length} arrays, "
                             f"not a {type(value).__name__}")
        if len(value) != span.length:
            raise ValueError(f"{what} input '{span.name}' was compiled for a sequence of {span.length} tensors, "
                             f"got {len(value)} (compile again with sequence_lengths={{'{span.name}': {len(value)}}})")
        return list(value)

    flat: list[Any] = []
    slots = _slots(spans, count)
    for slot, value in zip(slots, args):
        flat += elements(slot, value) if isinstance(slot, SequenceSpan) else [value]
    if len(args) > len(slots):
        flat += args[len(slots):]  # too many: the binding says so
    named = dict(named)
    for span in spans:
        if span.name in named:
            for k, value in enumerate(elements(span, named.pop(span.name))):
                named[element_name(span.name, k)] = value
    return flat, named
