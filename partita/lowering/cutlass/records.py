"""Kernel records: what a ``byoc.binary`` keeps about each CUTLASS entry.

A record holds the kernel's spec and configuration, so a runtime reading the module
(possibly in another process, from text) rebuilds exactly the ``EntryInfo`` the emitter
produced (launch geometry, parameter list, shared-memory symbol) without re-choosing
anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DictionaryAttr, StringAttr
from xdsl.ir import Attribute

from partita.lowering.cutlass.emitter import EntryInfo, emit_module
from partita.lowering.cutlass.kernels import KernelConfig, KernelSpec
from partita.lowering.records import dataclass_from, fields_attr, from_attr, to_attr


def entry_record(entry: EntryInfo, inputs: Sequence[str], smem_bytes: int | None = None) -> DictionaryAttr:
    """The record of one entry. ``inputs`` names the entry role of each function argument
    in argument order (e.g. ``("x", "w", "bias")``)."""
    record: dict[str, Attribute] = {
        "entry": StringAttr(entry.name),
        "kernel": StringAttr(entry.config.name),
        "inputs": to_attr(tuple(inputs)),
        "block": to_attr(entry.block),
        "params": to_attr(tuple(f"{p.name}:{p.kind}:{p.size}" for p in entry.params)),
        "spec": fields_attr(entry.spec),
        "config": fields_attr(entry.config),
    }
    if smem_bytes is not None:
        record["smem"] = to_attr(smem_bytes)
    return DictionaryAttr(record)


def entry_from_record(record: DictionaryAttr) -> tuple[EntryInfo, tuple[str, ...]]:
    """Rebuilds the emitter's ``EntryInfo`` and the argument roles from a record."""
    data = record.data
    name = from_attr(data["entry"])
    spec_record = data["spec"]
    if isinstance(spec_record, DictionaryAttr) and "layout" not in spec_record.data:
        # records written before GEMM layouts were recorded: the one layout there was
        spec_record = DictionaryAttr({**spec_record.data, "layout": StringAttr("tn"), "broadcast": StringAttr("")})
    spec = dataclass_from(KernelSpec, spec_record)
    config = dataclass_from(KernelConfig, data["config"])
    entry = emit_module([(name, spec, config)]).entries[name]
    return entry, from_attr(data["inputs"])
