"""ONNX converter of the text features: ``TfIdfVectorizer`` over integer tokens, one
``nn.tfidf_vectorizer``. Its string form (``pool_strings``, a string input) is a located
error: no nn element type holds strings."""

from __future__ import annotations

from xdsl.utils.exceptions import VerifyException

from partita.dialects import nn
from partita.frontends.onnx.elementwise import _text
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.values import fail

REQUIRED = ("mode", "min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts", "ngram_indexes")
"""The attributes the operator requires, besides its pool."""


@converter("TfIdfVectorizer")
def _tfidf_vectorizer(cx, ins, attrs):
    if "pool_strings" in attrs:
        fail("a pool of strings (pool_strings) is not supported: no Partita backend holds strings; "
             "map the tokens to integer ids and give pool_int64s")
    missing = [name for name in (*REQUIRED, "pool_int64s") if name not in attrs]
    if missing:
        fail(f"the attribute{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
             f"{'are' if len(missing) > 1 else 'is'} required")
    op = nn.TfIdfVectorizerOp(cx.tensor(ins[0]), mode=_text(attrs["mode"]),
                              min_gram_length=attrs["min_gram_length"], max_gram_length=attrs["max_gram_length"],
                              max_skip_count=attrs["max_skip_count"], pool=attrs["pool_int64s"],
                              ngram_counts=attrs["ngram_counts"], ngram_indexes=attrs["ngram_indexes"],
                              weights=attrs.get("weights", ()))
    try:
        op.verify()  # bad attributes: an error located at this node, not at the module's verification
    except VerifyException:
        op.drop_all_references()  # leave the input without a use by an op that is never emitted
        raise
    return cx.emit(op)
