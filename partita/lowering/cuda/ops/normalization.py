"""CUDA lowering rules of the ``nn.normalization`` family ops beyond the built-in emitter."""

from __future__ import annotations
