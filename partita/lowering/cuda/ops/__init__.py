"""CUDA lowering rules of nn ops, one module per operator family (as in
``partita.dialects.nn``); importing this package registers them all."""

from partita.lowering.cuda.ops import (  # noqa: F401
    attention,
    conv,
    elementwise,
    image,
    indexing,
    linalg,
    normalization,
    random,
    reduction,
    transform,
)
