"""Kernel records: what a ``byoc.binary`` keeps about each CUTLASS entry.

A record holds the kernel's spec and configuration, so a runtime reading the module
(possibly in another process, from text) rebuilds exactly the ``EntryInfo`` the emitter
produced (launch geometry, parameter list, shared-memory symbol) without re-choosing
anything. Values map one to one: int -> i64, str -> string, None -> ``none``,
tuple -> array.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, NoneAttr, StringAttr, i64
from xdsl.ir import Attribute

from partita.lowering.cutlass.emitter import EntryInfo, emit_module
from partita.lowering.cutlass.kernels import KernelConfig, KernelSpec


def _to_attr(value: Any) -> Attribute:
    if value is None:
        return NoneAttr()
    if isinstance(value, bool):
        raise TypeError("kernel records hold no booleans")
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, tuple | list):
        return ArrayAttr([_to_attr(v) for v in value])
    raise TypeError(f"cannot record {value!r}")


def _from_attr(attr: Attribute) -> Any:
    if isinstance(attr, NoneAttr):
        return None
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, ArrayAttr):
        return tuple(_from_attr(a) for a in attr.data)
    raise ValueError(f"unexpected attribute {attr} in a kernel record")


def _dataclass_attr(obj: Any) -> DictionaryAttr:
    return DictionaryAttr({f.name: _to_attr(getattr(obj, f.name)) for f in dataclasses.fields(obj)})


def _dataclass_from(cls: type, attr: Attribute) -> Any:
    if not isinstance(attr, DictionaryAttr):
        raise ValueError(f"a kernel record's {cls.__name__} must be a dictionary")
    return cls(**{k: _from_attr(v) for k, v in attr.data.items()})


def entry_record(entry: EntryInfo, inputs: Sequence[str], smem_bytes: int | None = None) -> DictionaryAttr:
    """The record of one entry. ``inputs`` names the entry role of each function argument
    in argument order (e.g. ``("x", "w", "bias")``)."""
    record: dict[str, Attribute] = {
        "entry": StringAttr(entry.name),
        "kernel": StringAttr(entry.config.name),
        "inputs": _to_attr(tuple(inputs)),
        "block": _to_attr(entry.block),
        "params": _to_attr(tuple(f"{p.name}:{p.kind}:{p.size}" for p in entry.params)),
        "spec": _dataclass_attr(entry.spec),
        "config": _dataclass_attr(entry.config),
    }
    if smem_bytes is not None:
        record["smem"] = _to_attr(smem_bytes)
    return DictionaryAttr(record)


def entry_from_record(record: DictionaryAttr) -> tuple[EntryInfo, tuple[str, ...]]:
    """Rebuilds the emitter's ``EntryInfo`` and the argument roles from a record."""
    data = record.data
    name = _from_attr(data["entry"])
    spec = _dataclass_from(KernelSpec, data["spec"])
    config = _dataclass_from(KernelConfig, data["config"])
    entry = emit_module([(name, spec, config)]).entries[name]
    return entry, _from_attr(data["inputs"])
