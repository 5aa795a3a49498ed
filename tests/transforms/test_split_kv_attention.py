"""``split-kv-attention`` and the ops it writes: the reference of ``nn.attention_partial``
followed by ``nn.attention_combine`` is ``nn.attention``'s (random data, f16 / bf16 / f32,
GQA, BSHD, boolean and additive masks with fully masked rows, NaN keys, splits with no
key, a dynamic KV length); a last-key mask is the position mask it replaces; the split
choice; and decode models through ``partita.compile`` on the simulated device: two
kernels, the NumPy result (a static cache read at a position: onnxruntime's), while a
prefill (two query rows) keeps its one attention kernel."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import TensorType, f32
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.test_value import create_ssa_value

from partita.dialects import make_context, nn
from partita.ir import parse_module
from partita.runtime.reference import run
from partita.runtime.reference.nn.attention import attention, attention_combine, attention_partial
from partita.transforms import get_all_passes
from partita.transforms.split_kv_attention import MAX_SPLITS, choose_splits

DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
TOLERANCE = {"f16": 2e-3, "bf16": 1.6e-2, "f32": 1e-5}


def _ty(shape, dtype) -> str:
    return f"tensor<{'x'.join('?' if d is None else str(d) for d in shape)}x{dtype}>"


def _attention_module(q, k, v, dtype, attrs, mask=None, kv_axis=None) -> str:
    """``@main`` with one ``nn.attention``; ``kv_axis``: the KV length axis made ``?``."""
    def dyn(shape):
        return tuple(None if a == kv_axis else d for a, d in enumerate(shape))

    qt, kt, vt = _ty(q, dtype), _ty(dyn(k), dtype), _ty(dyn(v), dtype)
    heads_axis = 2 if "BSHD" in attrs else 1
    out = list(q)
    out[3] = v[3]
    ot = _ty(out, dtype)
    args, operands, types = f"%q: {qt}, %k: {kt}, %v: {vt}", "%q, %k, %v", f"{qt}, {kt}, {vt}"
    if mask is not None:
        shape, kind = mask
        mt = _ty(shape, "i1" if kind == "boolean" else dtype)
        args, operands, types = f"{args}, %m: {mt}", f"{operands}, %m", f"{types}, {mt}"
    assert q[heads_axis] % k[heads_axis] == 0
    return f"""
func.func @main({args}) -> {ot} {{
  %0 = nn.attention {operands} {attrs} : ({types}) -> {ot}
  func.return %0 : {ot}
}}"""


def _split(text: str, options: str = "sms=1000 min-kv-len=1"):
    ctx = make_context()
    module = parse_module(text, ctx, "decode.mlir")
    PassPipeline.parse_spec(get_all_passes(), f"split-kv-attention{{{options}}}").apply(ctx, module)
    module.verify()
    return module, [op.name for op in module.walk() if op.name.startswith("nn.")]


# -- the reference composition ---------------------------------------------------------------

CASES = {
    # name: (q, k, v, attrs, mask (shape, kind) or None, KV axis made dynamic or None)
    "gqa": ((2, 4, 1, 16), (2, 2, 77, 16), (2, 2, 77, 16), "{scale = 0.25 : f64}", None, 2),
    "mqa_causal_static": ((1, 3, 1, 8), (1, 1, 300, 8), (1, 1, 300, 8), "{scale = 0.3 : f64, causal = true}",
                          None, None),
    "boolean_fully_masked": ((2, 2, 1, 16), (2, 2, 40, 16), (2, 2, 40, 16),
                             "{scale = 0.25 : f64, zero_undefined_rows = true}", ((2, 1, 1, 40), "boolean"), 2),
    "boolean_nan_rows": ((2, 2, 1, 16), (2, 2, 40, 16), (2, 2, 40, 16), "{scale = 0.25 : f64}",
                         ((2, 1, 1, 40), "boolean"), 2),
    "additive_broadcast": ((2, 2, 1, 8), (2, 2, 33, 8), (2, 2, 33, 8), "{scale = 0.5 : f64}",
                           ((1, 1, 1, 33), "additive"), 2),
    "bshd_gqa_masked": ((2, 1, 4, 16), (2, 50, 2, 16), (2, 50, 2, 16),
                        '{scale = 0.25 : f64, zero_undefined_rows = true, layout = "BSHD"}',
                        ((2, 1, 1, 50), "boolean"), 1),
}


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_partial_then_combine_is_attention(case, dtype):
    """The rewritten module computes what ``nn.attention`` does, on random data with a
    NaN in one key of batch 0 (the rows of its query heads undefined: NaN or zeros) and,
    with a boolean mask, a batch row whose every key is masked; a dynamic KV length takes
    64 splits, more than the keys (splits with none)."""
    q, k, v, attrs, mask, kv_axis = CASES[case]
    text = _attention_module(q, k, v, dtype, attrs, mask, kv_axis)
    before = parse_module(text, make_context(), "a.mlir")
    module, ops = _split(text)
    assert ops == ["nn.attention_partial", "nn.attention_combine"]
    splits = next(op for op in module.walk() if isinstance(op, nn.AttentionPartialOp)).splits
    assert splits == (MAX_SPLITS if kv_axis is not None else 3)  # 300 static keys: 3 splits
    bshd = "BSHD" in attrs
    batch, heads, kv_heads = q[0], q[2 if bshd else 1], k[2 if bshd else 1]
    rng = np.random.default_rng(sorted(CASES).index(case))
    t = DTYPES[dtype]
    inputs = [rng.standard_normal(s).astype(t) for s in (q, k, v)]
    if batch > 1:  # a NaN in key 5 of batch 0, KV head 0: the rows of its query heads are undefined
        inputs[1][(0, 5, 0, 1) if bshd else (0, 0, 5, 1)] = np.nan
    if mask is not None:
        shape, kind = mask
        if kind == "boolean":
            m = rng.integers(0, 2, shape).astype(bool)
            m[0, ..., 5] = True
            m[-1] = False  # the last batch row: every key masked
        else:
            m = np.where(rng.integers(0, 3, shape) == 0, -np.inf, rng.standard_normal(shape)).astype(t)
        inputs.append(m)
    (want,) = run(before, *inputs)
    (got,) = run(module, *inputs)
    got, want = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isfinite(got).any()
    group = heads // kv_heads
    undefined = [got[0, :, :group] if bshd else got[0, :group]] if batch > 1 else []
    if mask is not None and mask[1] == "boolean":
        undefined.append(got[-1])
    for rows in undefined:
        assert (rows == 0).all() if "zero_undefined_rows" in attrs else np.isnan(rows).all()


def test_partial_reference_statistics():
    """Per split: ``m`` the maximum score, ``l`` the sum of ``exp(x - m)``, ``o`` the
    unnormalized output; a split past the keys has m = -inf, l = 0, o = 0; one with a NaN
    score is NaN throughout, the others are not touched."""
    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 1, 1, 4), (1, 1, 5, 4), (1, 1, 5, 3)))
    part = attention_partial(q, k, v, None, scale=0.5, splits=4)  # splits of 2 keys: 2, 2, 1, 0
    x = (q[0, 0, 0] @ k[0, 0].T) * 0.5
    for s, (lo, hi) in enumerate([(0, 2), (2, 4), (4, 5)]):
        m = x[lo:hi].max()
        p = np.exp(x[lo:hi] - m)
        np.testing.assert_allclose(part[0, 0, s], [*(p @ v[0, 0, lo:hi]), m, p.sum()], rtol=1e-6)
    np.testing.assert_array_equal(part[0, 0, 3], [0, 0, 0, -np.inf, 0])
    k[0, 0, 3, 0] = np.nan
    part = attention_partial(q, k, v, None, scale=0.5, splits=4)
    assert np.isnan(part[0, 0, 1]).all() and np.isfinite(part[0, 0, 0]).all()
    assert np.isnan(attention_combine(part, zero_undefined_rows=False)).all()
    assert (attention_combine(part, zero_undefined_rows=True) == 0).all()


def test_verifiers():
    def t(shape):
        return create_ssa_value(TensorType(f32, shape))

    op = nn.AttentionPartialOp(t([2, 8, 1, 16]), t([2, 2, 9, 16]), t([2, 2, 9, 32]), scale=0.25, splits=3)
    op.verify()
    assert op.result.type.get_shape() == (2, 8, 3, 34) and op.groups == 4 and op.mask_kind == "none"
    combine = nn.AttentionCombineOp(op, result_type=t([2, 8, 1, 32]).type)
    combine.verify()
    assert combine.value_dim == 32
    with pytest.raises(VerifyException, match="one query row"):
        nn.AttentionPartialOp(t([2, 8, 2, 16]), t([2, 2, 9, 16]), t([2, 2, 9, 16]), scale=0.25, splits=3).verify()
    with pytest.raises(VerifyException, match="at least one split"):
        nn.AttentionPartialOp(t([2, 8, 1, 16]), t([2, 2, 9, 16]), t([2, 2, 9, 16]), scale=0.25, splits=0).verify()
    with pytest.raises(VerifyException, match="partials"):
        nn.AttentionCombineOp(t([2, 8, 3]), result_type=t([2, 8, 1, 1]).type).verify()
    # a last-key mask: int64, one per batch row or one for all
    last = create_ssa_value(TensorType(nn.LAST_KEY_TYPE, [2]))
    op = nn.AttentionPartialOp(t([2, 8, 1, 16]), t([2, 2, 9, 16]), t([2, 2, 9, 16]), last, scale=0.25, splits=3)
    op.verify()
    assert op.mask_kind == "last_key"
    with pytest.raises(VerifyException, match=r"last-key mask must be \[2\] \(one per batch row\) or \[1\], got \[3\]"):
        nn.AttentionPartialOp(t([2, 8, 1, 16]), t([2, 2, 9, 16]), t([2, 2, 9, 16]),
                              create_ssa_value(TensorType(nn.LAST_KEY_TYPE, [3])), scale=0.25, splits=3).verify()


def test_last_key_partials_are_the_position_mask():
    """The last-key mask's partials, combined, are ``nn.attention`` with the boolean mask
    ``arange(Skv) <= position`` and a fill of finfo.min, for positions in a split, at its
    end, past the cache and negative (every key hidden: the values averaged); the splits
    after the position are empty (m = -inf, l = 0) and a NaN value past it is not read."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((4, 2, 1, 8), (4, 1, 40, 8), (4, 1, 40, 8)))
    positions = np.array([5, 9, 70, -2], np.int64)
    fill = float(np.finfo(np.float32).min)
    part = attention_partial(q, k, v, positions, scale=0.5, splits=4, mask_fill=fill)
    assert (part[0, :, 1:, -2] == -np.inf).all() and (part[0, :, 1:, -1] == 0).all()  # 10 keys a split
    keep = (np.arange(40)[None, :] <= positions[:, None])[:, None, None, :]
    want = attention(q, k, v, keep, scale=0.5, causal=False, zero_undefined_rows=False, mask_fill=fill)
    np.testing.assert_allclose(attention_combine(part, zero_undefined_rows=False), want, rtol=1e-5, atol=1e-6)
    v[0, :, 6:] = np.nan
    got = attention_combine(attention_partial(q, k, v, positions, scale=0.5, splits=4, mask_fill=fill),
                            zero_undefined_rows=False)
    assert np.isfinite(got).all()


def test_choose_splits():
    """Two waves of 132 SMs over the (batch x head) rows, capped by the keys (128 a split)
    or, for a dynamic length, by MAX_SPLITS; at least one."""
    assert choose_splits(32, None, 132) == 9  # B = 1, H = 32: 288 blocks
    assert choose_splits(32, 4096, 132) == 9 and choose_splits(32, 1000, 132) == 8
    assert choose_splits(1, None, 132) == MAX_SPLITS and choose_splits(512, None, 132) == 1
    assert choose_splits(4, 100, 132) == 1


# -- end to end --------------------------------------------------------------------------------

DECODE = _attention_module((1, 8, 1, 64), (1, 2, 512, 64), (1, 2, 512, 64), "f16",
                           "{scale = 0.125 : f64, causal = true}", None, 2)


def test_compile_splits_decode_on_the_cuda_target(tmp_path):
    """A decode step with a growing KV cache: the plan has the two split-KV kernels
    (the pass 1 kernel is the decode schedule) and matches NumPy at two cache lengths."""
    import partita

    exe = partita.compile(DECODE, ["cuda -arch=sm_90", "llvm"], cache_dir=tmp_path)
    assert "split-kv-attention{target=cuda}" in exe.pipeline
    rows = exe.report().rows
    assert [row.ops for row in rows] == [("nn.attention_partial",), ("nn.attention_combine",)]
    handles = exe.runtime.handles
    assert [handles[row.symbol].kind for row in rows] == ["window", "window"]
    rng = np.random.default_rng(10)
    for kv_len in (300, 1001):
        q = rng.standard_normal((1, 8, 1, 64)).astype(np.float16)
        k, v = (rng.standard_normal((1, 2, kv_len, 64)).astype(np.float16) for _ in range(2))
        (got,) = exe.run(q, k, v)
        want = attention(*(x.astype(np.float32) for x in (q, k, v)), None, scale=0.125, causal=True,
                         zero_undefined_rows=False)
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=4e-3, atol=4e-3)


def test_compile_keeps_prefill_whole(tmp_path):
    import partita

    text = _attention_module((1, 8, 4, 64), (1, 2, 512, 64), (1, 2, 512, 64), "f16",
                             "{scale = 0.125 : f64, causal = true}", None, 2)
    exe = partita.compile(text, ["cuda -arch=sm_90", "llvm"], cache_dir=tmp_path)
    assert [row.ops for row in exe.report().rows] == [("nn.attention",)]


def test_a_static_cache_step_reads_the_cache_up_to_the_position(tmp_path):
    """A static KV cache of 512 keys read at a run-time position, as the TorchScript exporter
    writes Hugging Face's StaticCache attention (``Where(Greater(arange, position), finfo.min,
    scores)`` before the softmax): the mask becomes the partial's last-key mask, so the plan
    is the two split-KV kernels (no kernel computes the mask) and the decode kernel reads
    the keys up to the position; equal to onnxruntime for positions at the start, inside,
    at the end and past the cache, and negative."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    import partita

    length, heads, dim = 512, 4, 16
    nodes = [helper.make_node("Transpose", ["key_cache"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s"]),
             helper.make_node("Greater", ["iota", "position"], ["hidden"]),
             helper.make_node("Where", ["hidden", "fill", "s"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "value_cache"], ["out"])]
    inits = [numpy_helper.from_array(np.array(0.25, np.float32), "scale"),
             numpy_helper.from_array(np.arange(length, dtype=np.int64), "iota"),
             numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "fill")]
    cache = [1, heads, length, dim]
    graph = helper.make_graph(nodes, "static_cache", [
        helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, heads, 1, dim]),
        helper.make_tensor_value_info("key_cache", TensorProto.FLOAT, cache),
        helper.make_tensor_value_info("value_cache", TensorProto.FLOAT, cache),
        helper.make_tensor_value_info("position", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, heads, 1, dim])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    exe = partita.compile(model, ["cuda -arch=sm_90", "llvm"], cache_dir=tmp_path)
    assert [row.ops for row in exe.report().rows] == [("nn.attention_partial",), ("nn.attention_combine",)]
    (partial,) = [op for op in exe.module.walk() if isinstance(op, nn.AttentionPartialOp)]
    assert partial.mask_kind == "last_key"
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    for position in (0, 200, 511, 700, -1):
        feeds = {"q": rng.standard_normal((1, heads, 1, dim)).astype(np.float32),
                 "key_cache": rng.standard_normal(cache).astype(np.float32),
                 "value_cache": rng.standard_normal(cache).astype(np.float32),
                 "position": np.array([position], np.int64)}
        (want,) = session.run(None, feeds)
        np.testing.assert_allclose(exe.run(**feeds)[0], want, rtol=1e-5, atol=1e-6, err_msg=f"position {position}")
