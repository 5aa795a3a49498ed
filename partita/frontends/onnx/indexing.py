"""ONNX converters: gather/scatter, slice, split, expand, tile, trilu, range, shape arithmetic."""

from __future__ import annotations
