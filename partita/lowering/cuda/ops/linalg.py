"""CUDA lowering rules of the ``nn.linalg`` family ops beyond the built-in emitter."""

from __future__ import annotations
