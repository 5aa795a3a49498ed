"""ONNX converters: resize, depth/space rearrangement and other image ops."""

from __future__ import annotations
