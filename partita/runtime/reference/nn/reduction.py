"""NumPy references of the ``nn`` ops: reductions over axes, arg-reductions, top-k, cumulative sums."""

from __future__ import annotations
