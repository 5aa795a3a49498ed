"""CUDA lowering rules of the ``nn.reduction`` family ops beyond the built-in emitter."""

from __future__ import annotations
