"""CUDA lowering rules of the ``nn.indexing`` family ops beyond the built-in emitter."""

from __future__ import annotations
