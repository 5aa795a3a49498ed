"""ONNX converters: reductions over axes, arg-reductions, top-k, cumulative sums."""

from __future__ import annotations
