"""Kernel records: what a ``byoc.binary`` keeps about each partition it implements.

A record names the entry the partition launches (one per kernel type, shared by every
partition of that configuration) and holds the partition's spec (its static dims: the
data packed as the entry's dim arguments) and configuration, so a runtime reading the
module (possibly in another process, from text) rebuilds exactly the ``EntryInfo`` the
emitter produced (entry, launch geometry, parameter list, shared-memory symbol) without
re-choosing anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DictionaryAttr, StringAttr
from xdsl.ir import Attribute

from partita.lowering.cutlass.emitter import EntryInfo, entry_info
from partita.lowering.cutlass.kernels import KernelConfig, KernelSpec, spec_fields
from partita.lowering.records import dataclass_from, fields_attr, from_attr, register_record_kind, to_attr


def entry_record(entry: EntryInfo, inputs: Sequence[str], smem_bytes: int | None = None) -> DictionaryAttr:
    """The record of one partition's launch of ``entry``. ``inputs`` names the entry role
    of each function argument in argument order (e.g. ``("x", "w", "bias")``)."""
    record: dict[str, Attribute] = {
        "entry": StringAttr(entry.name),
        "kernel": StringAttr(entry.config.name),
        "inputs": to_attr(tuple(inputs)),
        "block": to_attr(entry.block),
        "params": to_attr(tuple(f"{p.name}:{p.kind}:{p.size}" for p in entry.params)),
        "spec": fields_attr(entry.spec, spec_fields(entry.spec)),
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
    if isinstance(spec_record, DictionaryAttr) and "dtype_b" not in spec_record.data:
        spec_record = DictionaryAttr({**spec_record.data, "dtype_b": StringAttr("")})  # one operand type
    spec = dataclass_from(KernelSpec, spec_record)
    if not (isinstance(spec.layout, str) and len(spec.layout) == 2 and set(spec.layout) <= {"t", "n"}):
        raise ValueError(f"spec 'layout' = {spec.layout!r} is not two of 't' / 'n'")
    if spec.broadcast not in ("", "a", "b"):
        raise ValueError(f"spec 'broadcast' = {spec.broadcast!r} is not '', 'a' or 'b'")
    config = dataclass_from(KernelConfig, data["config"])
    # Read back from untrusted text: every tile, warp and stage count is a positive size
    # (the launch geometry divides by them), and the block the record states is the one
    # its configuration makes.
    for field in ("threadblock", "warp_count", "instruction_shape"):
        value = getattr(config, field)
        if not isinstance(value, tuple) or not all(isinstance(v, int) and 1 <= v <= 1024 for v in value):
            raise ValueError(f"config '{field}' = {value} is not a shape of positive sizes")
    for field in ("stages", "split_k", "swizzle", "alignment_a", "alignment_b", "alignment_c"):
        value = getattr(config, field)
        if not isinstance(value, int) or not 1 <= value <= 1024:
            raise ValueError(f"config '{field}' = {value} is not a positive count")
    entry = entry_info(spec, config)
    if name != entry.name:  # an entry of one partition (records before per-configuration units), or edited
        raise ValueError(f"'entry' = {name!r} is not {entry.name!r}, the entry of its kernel type; "
                         "compile the model again")
    if "block" in data and tuple(from_attr(data["block"])) != tuple(entry.block):
        raise ValueError(f"'block' = {from_attr(data['block'])} is not the {tuple(entry.block)} its config launches")
    params = tuple(f"{p.name}:{p.kind}:{p.size}" for p in entry.params)
    if "params" in data and from_attr(data["params"]) != params:
        raise ValueError(f"'params' = {from_attr(data['params'])} are not the {params} its spec takes")
    roles = from_attr(data["inputs"])
    names = {p.name for p in entry.params}
    if not isinstance(roles, tuple) or not all(isinstance(r, str) and r in names and r != "out" for r in roles) \
            or len(set(roles)) != len(roles):
        raise ValueError(f"'inputs' = {roles} are not distinct input parameters of the kernel ({sorted(names)})")
    return entry, roles


register_record_kind("cutlass", entry_from_record)
