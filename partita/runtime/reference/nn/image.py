"""NumPy references of the ``nn`` ops: resize, depth/space rearrangement and other image ops."""

from __future__ import annotations
