"""The target passes through their Python API: option parsing, idempotence, semantics."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.passes import PassPipeline
from xdsl.utils.arg_spec import parse_pipeline

from partita.dialects import make_context
from partita.dialects.byoc import TARGET, TargetAttr
from partita.ir import PartitaError, parse_module, verify_module
from partita.runtime.reference import run
from partita.target import Target
from partita.transforms import get_all_passes
from partita.transforms.bind_target import BindTarget
from partita.transforms.split_host_device import SplitHostDevice
from partita.transforms.target_utils import config_from_options
from partita.transforms.verify_targets import VerifyTargets

CTX = make_context()

MODULE = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @dev(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @part(%0) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
func.func private @dev(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
func.func private @part(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.compiler = "cutlass"} {
  func.return %x : tensor<4xf32>
}
"""


def parse(text: str) -> ModuleOp:
    return parse_module(text, CTX, "test.mlir")


def targets_of(module: ModuleOp) -> dict[str, Target]:
    return {
        op.sym_name.data: op.attributes[TARGET].to_target()
        for op in module.ops
        if isinstance(op, FuncOp) and isinstance(op.attributes.get(TARGET), TargetAttr)
    }


def from_spec(spec: str):
    """Build the passes exactly as ``partita-opt -p spec`` does."""
    passes = get_all_passes()
    return [passes[s.name]().from_pass_spec(s) for s in parse_pipeline(spec)]


LLVM = Target("llvm")
SM90 = Target("cuda -arch=sm_90")


@pytest.mark.parametrize(
    "spec",
    [
        'bind-target{targets="cuda -arch=sm_90,cutlass,llvm"}',  # one string
        'bind-target{targets="cuda -arch=sm_90",cutlass,llvm}',  # a tuple of strings
    ],
)
def test_targets_option_string_and_tuple(spec: str) -> None:
    (bind,) = from_spec(spec)
    assert isinstance(bind, BindTarget)
    module = parse(MODULE)
    bind.apply(CTX, module)
    assert targets_of(module) == {
        "main": SM90.with_host(LLVM),
        "dev": SM90,
        "part": Target("cutlass"),
    }


def test_option_forms_give_the_same_config() -> None:
    as_string = config_from_options("p", targets="cuda -arch=sm_90,cutlass,llvm")
    as_tuple = config_from_options("p", targets=("cuda -arch=sm_90", "cutlass", "llvm"))
    assert as_string == as_tuple
    config, default = as_string
    assert default == SM90.with_host(LLVM) and config.host_target == LLVM
    # target + host, and host applied to a target list
    config, default = config_from_options("p", target="cuda -arch=sm_90", host="c")
    assert default == SM90.with_host(Target("c")) and config.host_target == Target("c")
    config, default = config_from_options("p", targets=("metal", "cuda"), host="c", target="cuda")
    assert default == Target("cuda", host=Target("c"))


def test_target_and_host_options_bind() -> None:
    (bind,) = from_spec('bind-target{target="cuda -arch=sm_90" host=llvm}')
    module = parse(MODULE.replace(' attributes {byoc.compiler = "cutlass"}', ""))
    bind.apply(CTX, module)
    assert targets_of(module) == {"main": SM90.with_host(LLVM), "dev": SM90, "part": SM90}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "bind-target: needs a 'targets' list or a 'target' option"),
        ({"targets": "nope"}, "unknown target kind 'nope'"),
        ({"targets": "cuda,llvm", "target": "metal"}, "target 'metal' is not in the compilation config"),
        ({"target": ("cuda", "metal")}, "option 'target' names 2 targets"),
    ],
)
def test_bad_options_are_located_errors_not_tracebacks(options, message) -> None:
    with pytest.raises(PartitaError, match=message):
        BindTarget(**options).apply(CTX, parse(MODULE))


def test_bind_target_is_idempotent() -> None:
    once = parse(MODULE)
    BindTarget(targets="cuda -arch=sm_90,cutlass,llvm").apply(CTX, once)
    twice = once.clone()
    BindTarget(targets="cuda -arch=sm_90,cutlass,llvm").apply(CTX, twice)
    assert str(once) == str(twice)
    assert once.is_structurally_equivalent(twice)
    VerifyTargets().apply(CTX, twice)  # the result passes the verifier


def test_bind_target_never_overwrites() -> None:
    module = parse(MODULE.replace("@dev(%x: tensor<4xf32>) -> tensor<4xf32> {",
                                  '@dev(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"llvm">} {'))
    BindTarget(targets="cuda -arch=sm_90,cutlass,llvm").apply(CTX, module)
    assert targets_of(module)["dev"] == LLVM


GRAPH = """
func.func @main(%x: tensor<2x8xf32>, %w: tensor<4x8xf32>, %b: tensor<4xf32>) -> tensor<2x4xf32> attributes {byoc.target = CALLER} {
  %r = nn.relu %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %0 = byoc.on_target #byoc.target<"cuda"> -> tensor<2x4xf32> {
    %1 = nn.dense %r, %w : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
    %2 = nn.bias_add %1, %b {axis = 1 : i64} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    byoc.yield %2 : tensor<2x4xf32>
  }
  %3 = byoc.on_target #byoc.target<"cuda"> -> tensor<2x4xf32> {
    %4 = nn.tanh %0 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    byoc.yield %4 : tensor<2x4xf32>
  }
  %5 = nn.add %3, %0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return %5 : tensor<2x4xf32>
}
"""


def test_split_host_device_keeps_semantics() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    expected = np.maximum(x, 0) @ w.T + b
    expected = np.tanh(expected) + expected

    outlined = parse(GRAPH.replace("CALLER", '#byoc.target<"llvm">'))
    SplitHostDevice().apply(CTX, outlined)
    verify_module(outlined)
    names = [op.sym_name.data for op in outlined.ops if isinstance(op, FuncOp)]
    assert names == ["main", "main_kernel", "main_kernel_0"]
    VerifyTargets().apply(CTX, outlined)

    inlined = parse(GRAPH.replace("CALLER", '#byoc.target<"cuda", host = #byoc.target<"llvm">>'))
    SplitHostDevice().apply(CTX, inlined)
    assert [op.sym_name.data for op in inlined.ops] == ["main"]

    (got_outlined,) = run(outlined, x, w, b)
    (got_inlined,) = run(inlined, x, w, b)
    np.testing.assert_allclose(got_outlined, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got_outlined, got_inlined)


def test_pipeline_through_partita_opt_passes() -> None:
    """bind-target then verify-targets as one pipeline; verify-targets rejects an
    unbound module."""
    module = parse(MODULE)
    with pytest.raises(PartitaError, match="has no target"):
        VerifyTargets().apply(CTX, module)
    PassPipeline(tuple(from_spec('bind-target{targets="cuda -arch=sm_90,cutlass,llvm"},verify-targets'))).apply(CTX, module)
    assert set(targets_of(module)) == {"main", "dev", "part"}


DYNAMIC_MLP = """
func.func @main(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>, %b: tensor<32xf32>) -> tensor<?x32xf32> {
  %0 = nn.dense %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %1 = nn.bias_add %0, %b : (tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  func.return %1 : tensor<?x32xf32>
}
"""


def test_shape_functions_run_on_the_host_and_pass_verify_targets() -> None:
    module = parse(DYNAMIC_MLP)
    spec = ('partition-eager{backends=cutlass},outline-compiler-functions,'
            'bind-target{targets="cuda,cutlass,llvm"},mark-compiler-functions-as-extern,lower-extern-calls,'
            'verify-targets,bind-target{targets="cuda,cutlass,llvm"}')
    PassPipeline(tuple(from_spec(spec))).apply(CTX, module)
    targets = targets_of(module)
    shape_funcs = [name for name in targets if name.endswith("_shape_func")]
    assert shape_funcs and all(targets[name] == Target("llvm") for name in shape_funcs)
