"""Hardening: random nn graphs through the whole pipeline. Each either compiles and
computes what the reference executor computes on the original graph, or fails with a
PartitaError; any other exception is a bug."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import fuzz  # tests/support/fuzz.py
from xdsl.dialects.builtin import DYNAMIC_INDEX, Float16Type, Float32Type, FunctionType, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region, SSAValue

import partita
from partita.dialects import nn
from partita.ir import PartitaError, verify_module
from partita.runtime.reference import run

UNARY = {"relu": nn.ReluOp, "tanh": nn.TanhOp, "sigmoid": nn.SigmoidOp, "gelu": nn.GeluOp, "softmax": nn.SoftmaxOp}
BINARY = {"add": nn.AddOp, "multiply": nn.MultiplyOp, "subtract": nn.SubtractOp}


@st.composite
def graphs(draw: st.DrawFn) -> ModuleOp:
    element = draw(st.sampled_from([Float16Type(), Float32Type()]))
    width = draw(st.sampled_from([8, 16]))
    batch = draw(st.sampled_from([DYNAMIC_INDEX, 1, 4]))
    block = Block(arg_types=[TensorType(element, [batch, width])])
    values: list[SSAValue] = [block.args[0]]

    def argument(shape: list[int]) -> SSAValue:
        return block.insert_arg(TensorType(element, shape), len(block.args))

    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["dense", "dense_bias", *UNARY, *BINARY]))
        value = draw(st.sampled_from(values))
        k = value.type.get_shape()[-1]
        if kind.startswith("dense"):
            n = draw(st.sampled_from([8, 16]))
            op = nn.DenseOp(value, argument([n, k]))
            block.add_op(op)
            if kind == "dense_bias":
                op = nn.BiasAddOp(op.results[0], argument([n]))
                block.add_op(op)
        elif kind in UNARY:
            op = UNARY[kind](value)
            block.add_op(op)
        else:
            same = [v for v in values if v.type == value.type]
            op = BINARY[kind](value, draw(st.sampled_from(same)))
            block.add_op(op)
        values.append(op.results[0])
    result = values[-1]
    block.add_op(ReturnOp(result))
    function = FuncOp("main", FunctionType.from_lists(block.arg_types, [result.type]), Region(block))
    module = ModuleOp([function])
    verify_module(module)
    return module


def _inputs(module: ModuleOp, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    function = next(op for op in module.ops if isinstance(op, FuncOp))
    arrays = []
    for typ in function.function_type.inputs.data:
        shape = [3 if d < 0 else d for d in typ.get_shape()]
        arrays.append((rng.standard_normal(shape) * 0.5).astype(nn.numpy_dtype(typ.element_type)))
    return arrays


def check_pipeline(module: ModuleOp, targets: list[str], partitioner: str, cache: Path) -> None:
    try:
        # every pass's output verified: a random graph that breaks a pass names that pass's IR
        exe = partita.compile(module, targets, partitioner=partitioner, cache_dir=cache, verify_each=True)
    except PartitaError:
        return  # a clean, explained refusal is an allowed outcome
    args = _inputs(module, 0)
    want = run(module, *args)
    got = exe.run(*args)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        tolerance = 2e-2 if g.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=tolerance, atol=tolerance)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cubins")


# Library backends (emulated here) and native targets: no NVRTC, so many examples.
@settings(max_examples=fuzz.examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(module=graphs(), partitioner=st.sampled_from(["collage", "eager", "none"]))
def test_random_graphs_without_codegen(module: ModuleOp, partitioner: str, cache: Path) -> None:
    check_pipeline(module, ["cuda -arch=sm_80", "cublas", "cudnn", "llvm"], partitioner, cache)


# With CUTLASS every example compiles a kernel module with NVRTC (seconds each): few examples.
@settings(max_examples=fuzz.examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(module=graphs(), partitioner=st.sampled_from(["collage", "eager"]))
def test_random_graphs_through_cutlass_codegen(module: ModuleOp, partitioner: str, cache: Path) -> None:
    check_pipeline(module, ["cuda -arch=sm_80", "cutlass", "llvm"], partitioner, cache)
