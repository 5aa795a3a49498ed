"""Kernel records: plain values <-> attributes, for what a ``byoc.binary`` keeps.

A record must be readable without the IR that produced it (by the runtime, possibly in
another process, from text), so it holds plain values only: int -> i64, str -> string,
None -> ``none``, tuple/list -> array.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, NoneAttr, StringAttr, i64
from xdsl.ir import Attribute

T = TypeVar("T")


def to_attr(value: Any) -> Attribute:
    if value is None:
        return NoneAttr()
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
    if isinstance(attr, NoneAttr):
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
    return cls(**{k: from_attr(v) for k, v in attr.data.items() if k not in ignore})
