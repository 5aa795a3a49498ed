"""CUDA lowering rules of the element-wise nn ops registered beyond the built-in set."""

from __future__ import annotations
