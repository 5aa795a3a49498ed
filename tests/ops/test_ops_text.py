"""``nn.tfidf_vectorizer`` (ONNX TfIdfVectorizer over integer tokens) against onnxruntime:
1-D and 2-D rows of i32 and i64 tokens, uni- to tri-grams at every skip, the three modes
with and without weights, tokens and n-grams outside the pool, empty rows, a run-time batch
and a random sweep; the op as a host step under both partitioners; the verifier's and the
importer's errors, each located at its node."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import partita
from partita.ir import PartitaError

ONNX_OPS = ("TfIdfVectorizer",)
"""The op types these tests convert (``tests/frontends/test_onnx_import.py`` counts them)."""

POOL = dict(ngram_counts=[0, 4], ngram_indexes=list(range(7)), pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])
"""The node suite's pool: unigrams 2, 3, 5, 4; bigrams (5, 6), (7, 8), (6, 7)."""
TRI = dict(ngram_counts=[0, 2, 6], ngram_indexes=[4, 0, 5, 2, 1, 3],
           pool_int64s=[1, 3, 1, 2, 2, 1, 1, 2, 3, 3, 1, 1])
"""Unigrams 1, 3; bigrams (1, 2), (2, 1); trigrams (1, 2, 3), (3, 1, 1); coordinates shuffled."""
TOKENS = np.array([1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8])
ROWS = np.array([[1, 2, 3, 1, 1, 2, 1, 3], [3, 1, 1, 2, 2, 1, 2, 3], [9, 9, 9, 9, 9, 9, 9, 9]])


def _model(attrs: dict, shape, elem: int = TensorProto.INT64, name: str = "tfidf") -> onnx.ModelProto:
    node = helper.make_node("TfIdfVectorizer", ["X"], ["Y"], name=name, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", elem, shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _elem(x: np.ndarray) -> int:
    return TensorProto.INT32 if x.dtype == np.int32 else TensorProto.INT64


def _onnxruntime(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})[0]


def _attrs(mode: str, lo: int, hi: int, skip: int, pool: dict, **more) -> dict:
    return dict(mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip, **pool, **more)


CASES = {
    # the node suite's forms: i32 tokens, bigrams or uni- and bigrams, skips 0 and 5
    "bigrams_skip0_1d_i32": (_attrs("TF", 2, 2, 0, POOL), TOKENS.astype(np.int32)),
    "bigrams_skip5_2d_i32": (_attrs("TF", 2, 2, 5, POOL), TOKENS.reshape(2, 6).astype(np.int32)),
    "uni_and_bigrams_skip5_1d_i64": (_attrs("TF", 1, 2, 5, POOL), TOKENS),
    # an empty unigram section: its bigrams still count
    "level_empty": (_attrs("TF", 2, 2, 0, dict(ngram_counts=[0, 0], ngram_indexes=[0, 1, 2],
                                                 pool_int64s=[5, 6, 7, 8, 6, 7])), TOKENS.astype(np.int32)),
    # trigrams, at every skip up to 2, with the lengths below min_gram_length left out
    "trigrams_skip2": (_attrs("TF", 3, 3, 2, TRI), ROWS),
    "uni_to_trigrams_skip1_i32": (_attrs("TF", 1, 3, 1, TRI), ROWS.astype(np.int32)),
    "bi_and_trigrams_skip3": (_attrs("TF", 2, 3, 3, TRI), ROWS),
    # modes: IDF clips each count to 1, then both weigh by n-gram (coordinates shuffled)
    "idf": (_attrs("IDF", 1, 3, 1, TRI), ROWS),
    "idf_weights": (_attrs("IDF", 1, 3, 1, TRI, weights=[0.5, 2.0, 3.0, 0.25, 1.5, 4.0]), ROWS),
    "tfidf": (_attrs("TFIDF", 1, 3, 1, TRI), ROWS),
    "tfidf_weights": (_attrs("TFIDF", 1, 3, 2, TRI, weights=[0.5, 2.0, 3.0, 0.25, 1.5, 4.0]), ROWS),
    "tf_ignores_weights": (_attrs("TF", 1, 3, 2, TRI, weights=[0.5, 2.0, 3.0, 0.25, 1.5, 4.0]), ROWS),
    # nothing of the pool in the rows; coordinates past the pool's stay 0
    "no_pool_ngram": (_attrs("TFIDF", 1, 2, 3, dict(ngram_counts=[0, 1], ngram_indexes=[2, 6],
                                                   pool_int64s=[42, 42, 43])), ROWS),
    # a pool value no i32 holds never matches the i32 token its low bits spell
    "i32_against_wide_pool": (_attrs("TF", 1, 2, 0, dict(ngram_counts=[0, 2], ngram_indexes=[0, 1, 2],
                                                        pool_int64s=[2**32 + 1, 2, 2, 2**32 + 1])),
                              np.array([1, 2, 1, 2, 1], np.int32)),
    # n-grams sharing a coordinate add up (modes TF and TFIDF)
    "shared_coordinates_tfidf": (_attrs("TFIDF", 1, 2, 1, dict(ngram_counts=[0, 2], ngram_indexes=[1, 1, 0],
                                                              pool_int64s=[1, 3, 1, 2]), weights=[2.0, 0.5, 4.0]),
                                 ROWS),
    # empty rows: zeros of the pool's width
    "empty_1d": (_attrs("TF", 1, 3, 2, TRI), np.zeros([0], np.int64)),
    "empty_rows": (_attrs("TFIDF", 1, 3, 2, TRI, weights=[1.0] * 6), np.zeros([2, 0], np.int32)),
    "rows_shorter_than_ngrams": (_attrs("TF", 1, 3, 4, TRI), np.array([[3, 1], [1, 2]])),
}


@pytest.mark.parametrize("case", CASES)
def test_matches_onnxruntime(case: str) -> None:
    attrs, x = CASES[case]
    model = _model(attrs, list(x.shape), _elem(x))
    want = _onnxruntime(model, x)
    (got,) = partita.compile(model).run(x)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_a_random_sweep_matches_onnxruntime() -> None:
    """Random pools (up to trigrams, sections possibly empty, coordinates spread past the
    pool's) over random rows of few distinct tokens, so n-grams recur at many skips."""
    rng = np.random.default_rng(7)
    tried = 0
    while tried < 40:
        counts, pool = [], []
        for n in range(1, int(rng.integers(1, 4)) + 1):
            counts.append(len(pool))
            for gram in sorted({tuple(int(t) for t in rng.integers(0, 3, n)) for _ in range(int(rng.integers(0, 4)))}):
                pool.extend(gram)
        total = sum((end - start) // n for n, (start, end) in enumerate(zip(counts, [*counts[1:], len(pool)]), 1))
        if total == 0:
            continue
        lo = int(rng.integers(1, len(counts) + 1))
        hi = int(rng.integers(lo, len(counts) + 1))
        mode = ("TF", "IDF", "TFIDF")[tried % 3]
        weights = {"weights": [float(w) for w in rng.integers(1, 9, total) / 4]} if rng.random() < 0.5 else {}
        attrs = _attrs(mode, lo, hi, int(rng.integers(0, 6)),
                       dict(ngram_counts=counts, ngram_indexes=[int(i) for i in rng.permutation(total + 2)[:total]],
                            pool_int64s=pool), **weights)
        shape = [int(rng.integers(1, 12))] if rng.random() < 0.5 else [int(rng.integers(1, 4)), int(rng.integers(0, 12))]
        x = rng.integers(0, 3, shape).astype(np.int32 if rng.random() < 0.5 else np.int64)
        model = _model(attrs, shape, _elem(x))
        (got,) = partita.compile(model).run(x)
        np.testing.assert_array_equal(got, _onnxruntime(model, x), err_msg=str(attrs))
        tried += 1


def test_idf_with_shared_coordinates_adds_the_weights() -> None:
    """Two n-grams at one coordinate in mode IDF: their clipped, weighted counts add up, as
    in the other modes (onnxruntime keeps the weight of the n-gram its scan found last)."""
    attrs = _attrs("IDF", 1, 1, 0, dict(ngram_counts=[0], ngram_indexes=[1, 1, 0], pool_int64s=[5, 6, 7]),
                   weights=[10.0, 100.0, 1000.0])
    (got,) = partita.compile(_model(attrs, [2, 5])).run(np.array([[5, 5, 6, 6, 6], [6, 7, 7, 0, 0]]))
    np.testing.assert_array_equal(got, [[0.0, 110.0], [1000.0, 100.0]])


def test_a_run_time_batch_and_zero_rows() -> None:
    """One compiled model for any number of rows, none included (onnxruntime refuses a
    batch of 0; the result is then ``[0, width]``)."""
    attrs = _attrs("TFIDF", 1, 3, 2, TRI, weights=[0.5, 2.0, 3.0, 0.25, 1.5, 4.0])
    model = _model(attrs, ["n", 8])
    exe = partita.compile(model)
    for rows in (ROWS, ROWS[:1], np.repeat(ROWS, 5, axis=0)):
        np.testing.assert_array_equal(exe.run(rows)[0], _onnxruntime(model, rows))
    (none,) = exe.run(np.zeros((0, 8), np.int64))
    assert none.shape == (0, 6) and none.dtype == np.float32


@pytest.mark.parametrize("partitioner", ["collage", "eager"])
def test_it_runs_as_a_host_step_between_kernels(partitioner: str) -> None:
    """No kernel computes it: both partitioners leave it to the host, verify-targets accepts
    it there, and the launch plan runs it as a host step between the device's kernels."""
    nodes = [helper.make_node("Add", ["X", "one"], ["shifted"]),
             helper.make_node("TfIdfVectorizer", ["shifted"], ["features"], name="tfidf",
                              **_attrs("TFIDF", 1, 2, 1, POOL, weights=[1.0, 0.5, 2.0, 1.0, 3.0, 1.0, 0.25])),
             helper.make_node("Relu", ["features"], ["Y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.INT64, [2, 6])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("one", TensorProto.INT64, [], [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    exe = partita.compile(model, partitioner=partitioner)
    assert "verify-targets" in exe.pipeline
    host = exe.runtime.plan.host_ops
    assert any(step.startswith("nn.tfidf_vectorizer") for step in host), host
    x = TOKENS.reshape(2, 6) - 1
    np.testing.assert_array_equal(exe.run(x)[0], _onnxruntime(model, x))


BAD = {
    "mode": (dict(mode="BM25"), "mode must be one of TF, IDF, TFIDF, got 'BM25'"),
    "min_gram_length": (dict(min_gram_length=0), r"1 <= min_gram_length <= max_gram_length, got 0 and 2"),
    "gram_order": (dict(min_gram_length=2, max_gram_length=1), r"got 2 and 1"),
    "max_gram_length": (dict(max_gram_length=3), "max_gram_length 3 exceeds the 2 n-gram lengths"),
    "skip": (dict(max_skip_count=-1), "max_skip_count must be >= 0, got -1"),
    "counts_order": (dict(ngram_counts=[4, 0]), r"ngram_counts \[4, 0\] must be non-decreasing starts"),
    "counts_past_pool": (dict(ngram_counts=[0, 11]), "non-decreasing starts in the pool of 10 values"),
    "ragged_section": (dict(ngram_counts=[0, 3]), r"2-gram section \[3, 10\) holds 7 values, not a multiple of 2"),
    "indexes_count": (dict(ngram_indexes=[0, 1, 2]), r"one coordinate per pool n-gram \(7\), got 3"),
    "negative_index": (dict(ngram_indexes=[0, 1, 2, -3, 4, 5, 6]), "ngram_indexes must be >= 0, got -3"),
    "weights_count": (dict(weights=[1.0, 2.0]), r"one weight per pool n-gram \(7\), got 2"),
    "duplicate_ngram": (dict(pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 5, 6]), r"n-gram \(5, 6\) appears more than once"),
    "missing": (dict(pool_int64s=None), "the attribute pool_int64s is required"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_attributes_are_errors_at_the_node(case: str) -> None:
    change, message = BAD[case]
    attrs = {k: v for k, v in {**_attrs("TF", 1, 2, 0, POOL), **change}.items() if v is not None}
    with pytest.raises(PartitaError, match=r"node 0 'tfidf' \(TfIdfVectorizer\): .*" + message):
        partita.compile(_model(attrs, [12]))


def test_float_tokens_and_rank_3_are_errors_at_the_node() -> None:
    with pytest.raises(PartitaError, match=r"'tfidf'.*input element type must be one of i32, i64, got f32"):
        partita.compile(_model(_attrs("TF", 1, 2, 0, POOL), [12], TensorProto.FLOAT))
    with pytest.raises(PartitaError, match=r"'tfidf'.*input must have rank 1 or 2, got rank 3"):
        partita.compile(_model(_attrs("TF", 1, 2, 0, POOL), [2, 2, 3]))


def test_a_string_pool_is_an_error_at_the_node() -> None:
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=1, max_skip_count=0, ngram_counts=[0],
                 ngram_indexes=[0, 1], pool_strings=["the", "cat"])
    with pytest.raises(PartitaError, match=r"node 0 'tfidf' \(TfIdfVectorizer\): a pool of strings \(pool_strings\) "
                                           "is not supported"):
        partita.compile(_model(attrs, [3]))
    with pytest.raises(PartitaError, match="graph input 'X' has unsupported element type STRING"):
        partita.compile(_model(attrs, [3], TensorProto.STRING))
