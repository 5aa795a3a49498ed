"""Targets: a target kind plus option values (and optionally a host target).

Mirrors TVM's ``Target``: immutable, hashable, printable in the canonical
``kind -opt=value ...`` form and parseable back from it.  Options set explicitly are
kept apart from the kind's defaults, so ``Target("cutlass").options == {}`` while
``Target("cutlass").get("sm") == 80``: printing and equality only involve what the
user chose, so a config string survives a print/parse round trip unchanged.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from partita.target.kind import (
    DeviceType,
    TargetError,
    TargetKind,
    check_option_value,
    get_target_kind,
    parse_option_text,
)

__all__ = ["Target", "as_target"]

_UNSET: Any = object()


def _split_text(text: str) -> tuple[str, dict[str, str]]:
    """Split ``"kind -a=1 --b=x -flag"`` into the kind name and raw option texts."""
    try:
        tokens = shlex.split(text)
    except ValueError as err:
        raise TargetError(f"cannot parse target string {text!r}: {err}") from None
    if not tokens:
        raise TargetError("empty target string")
    kind, *rest = tokens
    if kind.startswith("-"):
        raise TargetError(f"target string {text!r} must start with a target kind name")
    raw: dict[str, str | None] = {}
    for token in rest:
        if not token.startswith("-") or token.lstrip("-") == "":
            raise TargetError(
                f"cannot parse {token!r} in target string {text!r}: expected -key=value"
            )
        body = token[2:] if token.startswith("--") else token[1:]
        key, eq, value = body.partition("=")
        if key in raw:
            raise TargetError(f"option '{key}' given twice in target string {text!r}")
        raw[key] = value if eq else None
    return kind, raw  # type: ignore[return-value]


def _quote(text: str) -> str:
    """Quote ``text`` for ``shlex.split`` only when needed, so common targets print as
    TVM prints them.  A ',' is always quoted so that the value survives the
    comma-separated form used by ``CompilationConfig``."""
    if text and "," not in text and shlex.quote(text) == text:
        return text
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return _quote(",".join(value)) if value else ""
    if isinstance(value, float):
        return repr(value)
    return _quote(str(value))


class Target:
    """A target kind with option values and an optional host target.

    ``Target(kind, options=None, host=None)`` where ``kind`` is a kind name, a
    ``TargetKind``, or a TVM-style string such as ``"cuda -arch=sm_90"`` (options in the
    string are parsed from text, options in ``options`` must already be typed).
    Equality and hashing use the kind, the explicitly set options and the host.
    """

    __slots__ = ("_kind", "_options", "_host", "_hash")

    _kind: TargetKind
    _options: Mapping[str, Any]
    _host: Target | None
    _hash: int

    def __init__(
        self,
        kind: str | TargetKind,
        options: Mapping[str, Any] | None = None,
        host: Target | str | None = None,
    ) -> None:
        values: dict[str, Any] = {}
        if isinstance(kind, TargetKind):
            kind_obj = kind
        elif isinstance(kind, str):
            name, raw = _split_text(kind)
            kind_obj = get_target_kind(name)
            for key, text in raw.items():
                opt = kind_obj.option(key)
                if text is None:
                    if opt.type is not bool:
                        raise TargetError(
                            f"option '{key}' of target kind '{kind_obj.name}' needs a value "
                            f"(-{key}=...)"
                        )
                    values[key] = True
                else:
                    values[key] = parse_option_text(kind_obj.name, key, opt.type, text)
        else:
            raise TargetError(f"expected a target kind name or TargetKind, got {kind!r}")
        for key, value in (options or {}).items():
            opt = kind_obj.option(key)
            value = check_option_value(kind_obj.name, key, opt.type, value)
            if key in values and values[key] != value:
                raise TargetError(
                    f"option '{key}' of target '{kind_obj.name}' given twice with different "
                    f"values: {values[key]!r} and {value!r}"
                )
            values[key] = value
        host_obj = as_target(host) if host is not None else None
        if host_obj is not None:
            if host_obj.host is not None:
                raise TargetError(f"host target '{host_obj}' must not have a host itself")
            if not host_obj.kind.host_capable:
                raise TargetError(
                    f"target kind '{host_obj.kind.name}' cannot be a host target "
                    "(it is not host-capable)"
                )
        object.__setattr__(self, "_kind", kind_obj)
        object.__setattr__(self, "_options", MappingProxyType(dict(sorted(values.items()))))
        object.__setattr__(self, "_host", host_obj)
        object.__setattr__(
            self, "_hash", hash((kind_obj.name, tuple(self._options.items()), host_obj))
        )

    # -- construction helpers -------------------------------------------------------

    @classmethod
    def parse(cls, text: str, host: Target | str | None = None) -> Target:
        """Parse a TVM-style target string (``"cutlass -sm=90 -use_fast_math=1"``)."""
        if not isinstance(text, str):
            raise TargetError(f"expected a target string, got {text!r}")
        return cls(text, host=host)

    @classmethod
    def from_dict(
        cls,
        kind: str,
        options: Mapping[str, Any] | None = None,
        host: Target | Mapping[str, Any] | str | None = None,
    ) -> Target:
        """Inverse of ``to_dict``: ``Target.from_dict(**t.to_dict()) == t``.

        ``kind`` is a bare kind name here (no options in text form); ``host`` may be a
        ``Target``, a kind string or a nested ``to_dict()`` mapping.
        """
        if not isinstance(kind, str):
            raise TargetError(f"expected a target kind name, got {kind!r}")
        kind_obj = get_target_kind(kind)
        if isinstance(host, Mapping):
            host = cls.from_dict(**host)
        return cls(kind_obj, options, host)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: ``{"kind": str, "options": {name: typed value}, "host": dict | None}``.

        Only explicitly set options appear; ``list[str]`` values are returned as lists.
        """
        return {
            "kind": self._kind.name,
            "options": {
                k: list(v) if isinstance(v, tuple) else v for k, v in self._options.items()
            },
            "host": self._host.to_dict() if self._host is not None else None,
        }

    def with_host(self, host: Target | str | None) -> Target:
        """This target with ``host`` as its host (``None`` removes the host)."""
        return Target(self._kind, self._options, host)

    def without_host(self) -> Target:
        return self if self._host is None else Target(self._kind, self._options)

    def with_options(self, **options: Any) -> Target:
        """A copy with some options (typed values) set or replaced."""
        merged = dict(self._options)
        merged.update(options)
        return Target(self._kind, merged, self._host)

    # -- accessors -------------------------------------------------------------------

    @property
    def kind(self) -> TargetKind:
        return self._kind

    @property
    def kind_name(self) -> str:
        return self._kind.name

    @property
    def device_type(self) -> DeviceType:
        return self._kind.device_type

    @property
    def is_external_codegen(self) -> bool:
        return self._kind.is_external_codegen

    @property
    def host(self) -> Target | None:
        return self._host

    @property
    def options(self) -> Mapping[str, Any]:
        """The explicitly set options only (read-only, sorted by name)."""
        return self._options

    @property
    def attrs(self) -> dict[str, Any]:
        """Effective option values: kind defaults overridden by explicit options."""
        result = self._kind.defaults()
        result.update(self._options)
        return dict(sorted(result.items()))

    def get(self, name: str, default: Any = _UNSET) -> Any:
        """The effective value of option ``name`` (explicit, else the kind's default).

        An option unknown to the kind is an error; a known option with neither value
        nor default returns ``default`` (``None`` if not given).
        """
        opt = self._kind.option(name)
        if name in self._options:
            return self._options[name]
        if opt.default is not None:
            return opt.default
        return None if default is _UNSET else default

    def same_as(self, other: Target) -> bool:
        """Equal kind and explicit options, ignoring hosts."""
        return self._kind is other._kind and self._options == other._options

    # -- printing, equality ----------------------------------------------------------

    def __str__(self) -> str:
        parts = [self._kind.name]
        parts += [f"-{k}={_format_value(v)}" for k, v in self._options.items()]
        return " ".join(parts)

    def __repr__(self) -> str:
        if self._host is None:
            return f"Target({str(self)!r})"
        return f"Target({str(self)!r}, host={self._host!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Target):
            return NotImplemented
        return (
            self._kind is other._kind
            and self._options == other._options
            and self._host == other._host
        )

    def __hash__(self) -> int:
        return self._hash

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Target is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Target is immutable")

    def __iter__(self) -> Iterator[str]:  # pragma: no cover - guard against misuse
        raise TypeError("Target is not iterable; use .options or .attrs")

    def __reduce__(self) -> Any:
        return (Target.from_dict, (self._kind.name, dict(self._options), self._host))


def as_target(value: Target | str) -> Target:
    """Coerce a ``Target`` or a target string to a ``Target``."""
    if isinstance(value, Target):
        return value
    if isinstance(value, str):
        return Target(value)
    raise TargetError(f"expected a Target or a target string, got {value!r}")
