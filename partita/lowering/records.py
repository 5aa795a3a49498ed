"""Kernel records: plain values <-> attributes, for what a ``byoc.binary`` keeps.

A record must be readable without the IR that produced it (by the runtime, possibly in
another process, from text), so it holds plain values only: int -> i64, str -> string,
None -> ``none``, tuple/list -> array. ``none`` is the builtin ``NoneType``, the attribute
that text ``none`` parses back to, so records round-trip through printed IR.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, NoneAttr, NoneType, StringAttr, i64
from xdsl.ir import Attribute

from partita.dialects.byoc import register_record_check

T = TypeVar("T")


def to_attr(value: Any) -> Attribute:
    if value is None:
        return NoneType()
    if isinstance(value, bool):
        raise TypeError("kernel records hold no booleans")
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, tuple | list):
        return ArrayAttr([to_attr(v) for v in value])
    raise TypeError(f"cannot record {value!r}")


def from_attr(attr: Attribute) -> Any:
    if isinstance(attr, NoneAttr | NoneType):
        return None
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, ArrayAttr):
        return tuple(from_attr(a) for a in attr.data)
    raise ValueError(f"unexpected attribute {attr} in a kernel record")


def fields_attr(obj: Any, names: Any = None, **extra: Any) -> DictionaryAttr:
    """A record of ``obj``'s dataclass fields (or of ``names``), after ``extra``."""
    names = [f.name for f in dataclasses.fields(obj)] if names is None else names
    return DictionaryAttr({**{k: to_attr(v) for k, v in extra.items()}, **{n: to_attr(getattr(obj, n)) for n in names}})


def dataclass_from(cls: type[T], attr: Attribute, *, ignore: tuple[str, ...] = ()) -> T:
    """The dataclass ``cls`` rebuilt from a record (keys in ``ignore`` are skipped)."""
    if not isinstance(attr, DictionaryAttr):
        raise ValueError(f"a {cls.__name__} record must be a dictionary")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    given = {k for k in attr.data if k not in ignore}
    if given - names or names - given:
        unknown, missing = sorted(given - names), sorted(names - given)
        raise ValueError(
            f"a {cls.__name__} record" + (f" lacks {', '.join(missing)}" if missing else "")
            + (" and" if missing and unknown else "") + (f" has unknown {', '.join(unknown)}" if unknown else "")
        )
    return cls(**{k: from_attr(v) for k, v in attr.data.items() if k not in ignore})


#: Record kind -> (decoder raising on a malformed record, whether it is a library call's
#: descriptors rather than a kernel's). Each lowering registers the kinds it writes.
RECORD_KINDS: dict[str, tuple[Callable[[Any], Any], bool]] = {}


def register_record_kind(kind: str, decode: Callable[[Any], Any], *, library: bool = False) -> None:
    """``check_kernel_record`` decodes records of ``kind`` with ``decode``; a library
    record has no kernel ``entry``."""
    RECORD_KINDS[kind] = (decode, library)


def check_kernel_record(record: Attribute) -> None:
    """Raises ValueError saying why ``record`` (one entry of a ``byoc.binary``'s
    ``kernels``) cannot be decoded. Kinds this module does not know (records of other
    backends) are checked for the common ``entry`` only; their runtime decodes the rest."""
    if not isinstance(record, DictionaryAttr):
        raise ValueError(f"a kernel record must be a dictionary, got {record}")
    kind = record.data.get("kind", StringAttr("cutlass"))
    if not isinstance(kind, StringAttr):
        raise ValueError(f"'kind' must be a string, got {kind}")
    decode, library = RECORD_KINDS.get(kind.data, (None, False))
    if decode is not None and library:  # a library call's descriptors: no kernel entry
        try:
            decode(record)
        except (KeyError, TypeError, AttributeError, AssertionError, ValueError) as err:
            raise ValueError(f"malformed {kind.data} record ({type(err).__name__}: {err})") from None
        return
    entry = record.data.get("entry")
    if not isinstance(entry, StringAttr) or not entry.data:
        raise ValueError("a kernel record needs a string 'entry' (the kernel's symbol in the binary)")
    try:
        if decode is not None:
            decode(record)
    except (KeyError, TypeError, AttributeError, AssertionError) as err:
        raise ValueError(f"malformed {kind.data} kernel record ({type(err).__name__}: {err})") from None


register_record_check(check_kernel_record)
