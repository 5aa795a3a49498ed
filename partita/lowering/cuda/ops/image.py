"""CUDA lowering rules of the ``nn.image`` family ops beyond the built-in emitter."""

from __future__ import annotations
