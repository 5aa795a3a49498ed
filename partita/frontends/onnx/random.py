"""ONNX converters of the random generators: RandomUniform, RandomNormal and their
``Like`` forms, each one ``nn.random``; Bernoulli a uniform draw below its probability.

ONNX leaves the draws to the runtime (onnxruntime seeds an unseeded node from the clock);
Partita's are reproducible: a node's ``seed`` (its float32 bits) is the generator's key,
and a node without one is keyed by its first output's name, so two unseeded nodes draw
independent values, and every run of the model draws the same ones.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

from partita.dialects import nn
from partita.frontends.onnx.elementwise import _cast_to
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.values import ONNX_DTYPES, fail, is_const, shape_of


def _seed(cx, attrs) -> int:
    """The generator's key: the seed's float32 bits, else a hash of the node's output."""
    if "seed" in attrs:
        return struct.unpack("<I", struct.pack("<f", float(attrs["seed"])))[0]
    digest = hashlib.sha256(cx.node.output[0].encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _dtype(attrs, default: np.dtype) -> np.dtype:
    dtype = ONNX_DTYPES.get(attrs["dtype"]) if "dtype" in attrs else default
    if dtype is None or nn.element_type_of(dtype) not in nn.RandomOp.ALLOWED_TYPES:
        fail(f"random draws are float16, bfloat16, float or double, not {dtype}")
    return dtype


def _draw(cx, attrs, distribution: str, like=None):
    if distribution == "uniform":
        low, high = float(attrs.get("low", 0.0)), float(attrs.get("high", 1.0))
        loc, scale = low, high - low
    else:
        loc, scale = float(attrs.get("mean", 0.0)), float(attrs.get("scale", 1.0))
    if like is None:
        if "shape" not in attrs:
            fail("the shape attribute is required")
        shape, refs = [int(d) for d in attrs["shape"]], []
        if any(d < 0 for d in shape):
            fail(f"shape {shape} has a negative dim")
        dtype = _dtype(attrs, np.dtype(np.float32))
    else:
        shape = list(shape_of(like))
        default = np.asarray(like).dtype if is_const(like) else nn.numpy_dtype(like.type.element_type)
        dtype = _dtype(attrs, default)
        refs = [] if is_const(like) else [(like, k, k) for k, d in enumerate(shape) if d == nn.DYN]
    return cx.emit(nn.RandomOp(distribution, shape, nn.element_type_of(dtype), loc=loc, scale=scale,
                               seed=_seed(cx, attrs), refs=refs))


@converter("RandomUniform")
def _random_uniform(cx, ins, attrs):
    return _draw(cx, attrs, "uniform")


@converter("RandomNormal")
def _random_normal(cx, ins, attrs):
    return _draw(cx, attrs, "normal")


@converter("RandomUniformLike")
def _random_uniform_like(cx, ins, attrs):
    return _draw(cx, attrs, "uniform", ins[0])


@converter("RandomNormalLike")
def _random_normal_like(cx, ins, attrs):
    return _draw(cx, attrs, "normal", ins[0])


@converter("Bernoulli")
def _bernoulli(cx, ins, attrs):
    """1 with probability ``p``: a uniform draw in [0, 1) below ``p`` (so 0 never, 1
    always), as the operator's definition and onnxruntime say. (ONNX's function body
    compares the other way, ``Greater(draw, p)``: 1 with probability ``1 - p``.)"""
    p = cx.tensor(ins[0])
    draw = _draw(cx, {k: v for k, v in attrs.items() if k == "seed"}, "uniform", p)
    dtype = ONNX_DTYPES.get(attrs["dtype"]) if "dtype" in attrs else nn.numpy_dtype(p.type.element_type)
    if dtype is None:
        fail(f"dtype {attrs['dtype']} is not supported")
    return _cast_to(cx, cx.emit(nn.LessOp(draw, p)), dtype)
