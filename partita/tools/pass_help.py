"""Pass and target options as the user spells them (``bind-constants``, not ``bind_constants``).

``partita-opt --list-passes`` prints each of Partita's passes with a one-line description
and its options (type, default), as ``mlir-opt --help`` lists a pass's options. Option
errors (an unknown name, a value of the wrong type) are checked here before xDSL builds
the pass, so that they name the option the user wrote and say what it takes.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from xdsl.utils.arg_spec import ArgSpec

from partita.ir.diagnostics import PartitaError

__all__ = ["OptionInfo", "check_spec", "describe", "list_passes", "option_infos"]


@dataclasses.dataclass(frozen=True)
class OptionInfo:
    name: str  # as written on the command line
    field: str  # the dataclass field
    type_name: str
    default: str | None  # None: required


def _type_name(hint: Any) -> str:
    """``str | tuple[str, ...] | None`` -> ``string or list of string, optional``."""
    if hint is type(None):
        return "none"
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        text = " or ".join(_type_name(a) for a in members)
        return f"{text}, optional" if len(members) < len(typing.get_args(hint)) else text
    if origin is tuple:
        return f"list of {_type_name(typing.get_args(hint)[0])}"
    return {bool: "bool", int: "int", float: "float", str: "string"}.get(hint, getattr(hint, "__name__", str(hint)))


def _default_text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(_default_text(v) for v in value) or '""'
    if isinstance(value, str):
        return value or '""'
    return str(value)


def option_infos(cls: type) -> list[OptionInfo]:
    """The options of a pass or target class (an xDSL ``ArgSpecConvertible`` dataclass)."""
    hints = typing.get_type_hints(cls)
    infos = []
    for field in dataclasses.fields(cls):
        if field.name == "name" or not field.init:
            continue
        if field.default is not dataclasses.MISSING:
            default = _default_text(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = _default_text(field.default_factory())
        else:
            default = None
        infos.append(OptionInfo(field.name.replace("_", "-"), field.name, _type_name(hints[field.name]), default))
    return infos


def describe(cls: type) -> str:
    """A one-line description: the class docstring's first sentence, else the module's
    (a dataclass without a docstring gets a generated ``Name(field=...)`` one)."""
    doc = (cls.__doc__ or "").strip()
    if not doc or doc.startswith(f"{cls.__name__}("):
        doc = (sys.modules[cls.__module__].__doc__ or "").strip()
        head, sep, rest = doc.partition(": ")
        if sep and head.strip("`").split("{")[0] == getattr(cls, "name", None):
            doc = rest
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    sentence = paragraph.split(". ", 1)[0].rstrip(".")
    return sentence.replace("``", "")


def list_passes(passes: Mapping[str, Callable[[], type]]) -> str:
    """The text of ``--list-passes``."""
    lines = ["Partita's passes (run with -p 'name{option=value ...}' or --pass-pipeline):", ""]
    for name in sorted(passes):
        cls = passes[name]()
        lines.append(f"  {name}")
        lines.append(f"      {describe(cls)}")
        for info in option_infos(cls):
            default = "required" if info.default is None else f"default: {info.default}"
            lines.append(f"      --{info.name}=<{info.type_name}>  ({default})")
    return "\n".join(lines) + "\n"


def _article(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def check_spec(kind: str, cls: type, spec: ArgSpec) -> None:
    """Raises a ``PartitaError`` naming the option as written when ``spec`` does not fit
    ``cls`` (``kind`` is ``pass`` or ``target``); builds nothing."""
    from xdsl.utils.arg_spec import (
        _convert_arg_to_type,  # xDSL's own conversion, so both agree
    )

    infos = {info.name: info for info in option_infos(cls)}
    hints = typing.get_type_hints(cls)
    for written, value in spec.parameters.items():
        info = infos.get(written.replace("_", "-"))
        if info is None:
            known = ", ".join(infos) if infos else "none"
            raise PartitaError(f"{kind} '{spec.name}' has no option '{written}' (its options: {known})")
        try:
            _convert_arg_to_type(value, hints[info.field])
        except ValueError:
            given = ",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in value) or "nothing"
            raise PartitaError(f"option '{info.name}' of {kind} '{spec.name}' takes {_article(info.type_name)}, not '{given}'") from None
    for info in infos.values():
        if info.default is None and info.name not in {w.replace("_", "-") for w in spec.parameters}:
            raise PartitaError(f"{kind} '{spec.name}' needs option '{info.name}' ({_article(info.type_name)})")
