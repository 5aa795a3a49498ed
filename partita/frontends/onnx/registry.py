"""The ONNX converter registry: one converter per op type, ``(importer, inputs,
attributes) -> output value(s)``, registered by the family modules beside this one with
``@converter``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from partita.frontends.onnx.values import Value

if TYPE_CHECKING:  # pragma: no cover
    from partita.frontends.onnx.importer import Importer

Converter = Callable[["Importer", list[Value], dict[str, Any]], Any]
CONVERTERS: dict[str, Converter] = {}
DOMAIN_CONVERTERS: dict[tuple[str, str], Converter] = {}
"""Converters of ops outside the default domain, by ``(domain, op type)``: onnxruntime's
contrib ops (``com.microsoft``) that its own tools write, such as MatMulNBits."""
SYMBOLIC_CONVERTERS: set[str] = set()
"""Op types whose converters take shape inputs holding ``SymDim``s (they emit ops with
dynamic dims instead of folding)."""


def converter(*op_types: str, symbolic: bool = False, domain: str = ""):
    """Register ``fn`` for ``op_types`` of the default domain (or of ``domain``)."""
    def register(fn: Converter) -> Converter:
        for t in op_types:
            if domain:
                DOMAIN_CONVERTERS[domain, t] = fn
                continue
            CONVERTERS[t] = fn
            if symbolic:
                SYMBOLIC_CONVERTERS.add(t)
        return fn

    return register




UNCONVERTED: dict[str, str] = {
    "ImageDecoder": "it decodes image files (JPEG, PNG, BMP, TIFF, WebP) from their bytes, which belongs to the "
                    "input pipeline (nvJPEG, DALI, PIL) that gives the compiled model a tensor",
    "StringNormalizer": "it works on strings, which no Partita backend holds",
    "RegexFullMatch": "it works on strings, which no Partita backend holds",
    "StringConcat": "it works on strings, which no Partita backend holds",
    "StringSplit": "it works on strings, which no Partita backend holds",
}
"""Op types of the default domain deliberately left without a converter, with the reason an
import gives for each (every other op without one is just not built yet)."""
