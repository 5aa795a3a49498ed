"""Kernel argument buffers in the C ABI of ``cuLaunchKernel``'s ``kernelParams``.

Each argument sits at the next offset aligned to its size (pointers and 64-bit values 8,
32-bit values 4), and the buffer is padded to a multiple of its widest argument. An
``ArgumentLayout`` is that layout for one list of parameter kinds, worked out once:
offsets, size and one ``struct.Struct`` whose pad bytes are explicit. Packing a launch is
then one ``pack_into`` of its values. A launch plan keeps one layout per kind list
(``ArgumentLayouts``, all built when the plan is loaded), so binding a shape signature
only fills values; a run rewrites single pointers in place (``set_pointer``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KINDS", "ArgumentLayout", "ArgumentLayouts", "pack_kernel_args"]

KINDS: dict[str, tuple[str, int]] = {
    "ptr": ("Q", 8),
    "int": ("i", 4),
    "i32": ("i", 4),
    "u32": ("I", 4),
    "i64": ("q", 8),
    "u64": ("Q", 8),
    "f32": ("f", 4),
    "f64": ("d", 8),
}
"""The ``struct`` code (little-endian) and size of each parameter kind; every kind is
aligned to its size."""


@dataclass(frozen=True)
class ArgumentLayout:
    """Where each argument of one parameter-kind list goes in the packed buffer."""

    kinds: tuple[str, ...]
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    size: int
    """Bytes of the packed buffer (padding included)."""
    packer: struct.Struct = field(repr=False, compare=False)
    unsigned: tuple[int, ...] = field(repr=False, compare=False)
    """Positions of the pointer / ``u64`` arguments (a negative value is refused)."""

    @property
    def by_value(self) -> bool:
        """Whether these are the pieces of ONE struct passed by value (a Hopper kernel's
        ``Params``: ``bytes<n>`` slices, ``tensormap`` descriptors, pointers in between)."""
        return bool(self.kinds) and (self.kinds[0].startswith("bytes") or self.kinds[0] == "tensormap")

    @classmethod
    def of(cls, kinds: Iterable[str]) -> ArgumentLayout:
        kinds = tuple(kinds)
        fmt, offsets, sizes, at, widest = ["<"], [], [], 0, 1
        for kind in kinds:
            code, size, align = _kind(kind)
            pad = (-at) % align
            if pad:
                fmt.append(f"{pad}x")
            offsets.append(at + pad)
            sizes.append(size)
            fmt.append(code)
            at += pad + size
            widest = max(widest, align)
        tail = (-at) % widest
        if tail:
            fmt.append(f"{tail}x")
        packer = struct.Struct("".join(fmt))
        unsigned = tuple(i for i, kind in enumerate(kinds) if kind in ("ptr", "u64"))
        return cls(kinds, tuple(offsets), tuple(sizes), packer.size, packer, unsigned)

    def pack(self, values: Sequence[Any]) -> bytearray:
        """The buffer holding ``values`` (one per kind, in order)."""
        if len(values) != len(self.kinds):
            raise ValueError(f"{len(values)} argument values for {len(self.kinds)} parameters")
        for i in self.unsigned:
            if int(values[i]) < 0:
                raise ValueError("negative pointer")
        values = [_raw(kind, value, size) if kind == "tensormap" or kind.startswith("bytes") else value
                  for kind, value, size in zip(self.kinds, values, self.sizes)]
        buffer = bytearray(self.size)
        self.packer.pack_into(buffer, 0, *values)
        return buffer


def _kind(kind: str) -> tuple[str, int, int]:
    """(struct code, size, alignment) of a parameter kind: the scalar ``KINDS``, ``bytes<n>``
    (n raw bytes of a by-value struct, unaligned) and ``tensormap`` (a CUtensorMap: 128
    bytes, 64-byte aligned)."""
    if kind == "tensormap":
        return "128s", 128, 64
    if kind.startswith("bytes") and kind[5:].isdigit() and int(kind[5:]) > 0:
        return f"{int(kind[5:])}s", int(kind[5:]), 1
    try:
        code, size = KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown kernel argument kind {kind!r}") from None
    return code, size, size


def _raw(kind: str, value: Any, size: int) -> bytes:
    raw = bytes(value.raw) if kind == "tensormap" else bytes(value)
    if len(raw) != size:
        raise ValueError(f"a {kind} argument holds {size} bytes, not {len(raw)}")
    return raw


class ArgumentLayouts:
    """The layouts one launch plan packs with: each kind list's layout built once, when
    the plan is loaded (``add``), and only looked up (``[kinds]``) when a shape signature
    is bound, by every launch with those kinds."""

    def __init__(self) -> None:
        self._by_kinds: dict[tuple[str, ...], ArgumentLayout] = {}

    def add(self, kinds: Iterable[str]) -> ArgumentLayout:
        """The layout of ``kinds``, built on its first ``add``."""
        kinds = tuple(kinds)
        layout = self._by_kinds.get(kinds)
        if layout is None:
            layout = self._by_kinds[kinds] = ArgumentLayout.of(kinds)
        return layout

    def __getitem__(self, kinds: Iterable[str]) -> ArgumentLayout:
        kinds = tuple(kinds)
        layout = self._by_kinds.get(kinds)
        # every call of a plan reports its kinds at load: a kind list met first at bind
        # is a bug in a handle, not in the file
        assert layout is not None, f"no argument layout for {kinds} was built at load"
        return layout

    def __len__(self) -> int:
        return len(self._by_kinds)


def pack_kernel_args(params: Iterable[tuple[str, object]]) -> tuple[bytes, list[int]]:
    """``[(kind, value)]`` packed in one go: the buffer and the argument offsets (for a
    one-off launch; a plan keeps the layout instead)."""
    params = list(params)
    layout = ArgumentLayout.of(kind for kind, _ in params)
    return bytes(layout.pack([value for _, value in params])), list(layout.offsets)
