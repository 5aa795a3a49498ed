"""NumPy reference of ``nn.tfidf_vectorizer``: per n-gram length, every window of the
rows at every skip is gathered at once and matched exactly against the pool's n-grams of
that length (``np.unique`` over the int64 tokens, no hashing that could collide), then
counted per row with one scatter."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import nn

__all__ = ["match_ngrams", "ngram_counts"]


def match_ngrams(grams: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """For each row of ``windows`` (``[W, n]``), the number of the equal row of ``grams``
    (``[P, n]``, distinct rows), or -1 where none is equal."""
    both = np.concatenate([grams, windows])
    _, inverse = np.unique(both, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)  # NumPy 2.0 and 2.1 return it with the input's rank
    lookup = np.full(int(inverse.max()) + 1, -1, dtype=np.int64)
    lookup[inverse[:len(grams)]] = np.arange(len(grams))
    return lookup[inverse[len(grams):]]


def ngram_counts(op: nn.TfIdfVectorizerOp, tokens: np.ndarray) -> np.ndarray:
    """``[B, P]`` int64: how often each of the ``P`` pool n-grams occurs in each row of
    ``tokens`` (``[B, C]``), over every start and every skip up to ``max_skip_count``."""
    rows, width = tokens.shape
    counts = np.zeros((rows, len(op.ngram_indexes)), dtype=np.int64)
    tokens = tokens.astype(np.int64)  # exact: a pool value no i32 holds matches nothing
    for section in op.sections()[op.min_gram_length - 1:op.max_gram_length]:
        n = section.length
        # One row of token positions per (skip, start) whose n-gram fits in a row; a
        # 1-gram is the same at every skip, so it is taken once.
        last = min(op.max_skip_count + 1, (width - 1) // (n - 1)) if n > 1 else min(1, width)
        if not len(section.grams) or last < 1:
            continue
        steps = range(1, last + 1)  # a step of k + 1 skips k tokens
        positions = np.concatenate([np.arange(width - (n - 1) * step)[:, None] + step * np.arange(n)
                                    for step in steps])
        windows = tokens[:, positions]  # [B, windows, n]
        found = match_ngrams(section.grams, windows.reshape(-1, n)).reshape(rows, len(positions))
        row, hit = np.nonzero(found >= 0)
        np.add.at(counts, (row, section.first + found[row, hit]), 1)
    return counts


@register_impls
class TextFunctions(InterpreterFunctions):
    """Reference semantics of the text-feature ops."""

    @impl(nn.TfIdfVectorizerOp)
    def run_tfidf_vectorizer(self, interpreter: Interpreter, op: nn.TfIdfVectorizerOp, args: tuple[Any, ...]):
        (x,) = args
        tokens = x if x.ndim == 2 else x[None]
        counts = ngram_counts(op, tokens)
        if op.mode == "IDF":
            counts = np.minimum(counts, 1)
        values = counts.astype(np.float32)
        if op.mode != "TF" and op.weights:  # TF ignores the weights, as onnxruntime does
            values *= np.asarray(op.weights, dtype=np.float32)
        out = np.zeros((len(tokens), op.width), dtype=np.float32)
        # Coordinates shared by several n-grams add up (np.add.at accumulates repeats).
        np.add.at(out, (slice(None), np.asarray(op.ngram_indexes)), values)
        return (out.reshape(*x.shape[:-1], op.width),)
