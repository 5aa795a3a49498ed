"""PyTorch in: partita.compile on nn.Modules through torch.export, torch.compile with
backend="partita", torch tensors in and out; each checked against torch's own outputs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import partita  # noqa: E402
from partita.ir import PartitaError  # noqa: E402
from partita.tools.dynamo import PartitaGraph, partita_backend  # noqa: E402

HOST = {"partitioner": "none", "fallback_device": "cpu"}  # reference semantics, no NVRTC


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return torch.softmax(self.l2(torch.nn.functional.gelu(self.l1(x))), -1)


class CNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.fc = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


class Attention(torch.nn.Module):
    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.causal = causal
        self.qkv, self.out, self.norm = torch.nn.Linear(16, 48), torch.nn.Linear(16, 16), torch.nn.LayerNorm(16)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, n, 3, 2, 8).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return x + self.out(y.transpose(1, 2).reshape(b, n, 16))


def fresh(model: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    model = model.eval()
    with torch.no_grad():  # non-trivial batch-norm statistics
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize(
    "model, shape",
    [(MLP(), (2, 16)), (CNN(), (2, 3, 8, 8)), (Attention(), (2, 5, 16)), (Attention(causal=True), (1, 6, 16))],
    ids=["mlp", "cnn", "attention", "causal-attention"],
)
def test_compiled_module_matches_torch(model: torch.nn.Module, shape: tuple[int, ...]) -> None:
    model = fresh(model)
    x = torch.randn(shape)
    exe = partita.compile(model, example_inputs=(x,), **HOST)
    (got,) = exe.run(x)
    assert isinstance(got, torch.Tensor)  # torch tensors in, torch tensors out
    torch.testing.assert_close(got, model(x).detach(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(exe.run(x.numpy())[0], got.numpy(), rtol=0, atol=0)  # NumPy in, NumPy out
    assert any(op.name.startswith("nn.") for op in exe.module.walk())


def test_export_dim_becomes_a_dynamic_dimension() -> None:
    model = fresh(MLP())
    batch = torch.export.Dim("batch", min=1, max=64)
    exe = partita.compile(model, example_inputs=(torch.randn(2, 16),), dynamic_shapes={"x": {0: batch}}, **HOST)
    assert str(exe.entry_function().function_type) == "(tensor<?x16xf32>) -> tensor<?x8xf32>"
    for n in (1, 7):
        x = torch.randn(n, 16)
        np.testing.assert_allclose(exe.run(x)[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_tensors_that_require_grad_are_detached() -> None:
    model = fresh(MLP())
    exe = partita.compile(model, example_inputs=(torch.randn(2, 16, requires_grad=True),), **HOST)
    x = torch.randn(2, 16, requires_grad=True)
    np.testing.assert_allclose(exe.run(x)[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_an_aten_op_without_conversion_is_a_located_error() -> None:
    class Erfinv(torch.nn.Module):
        def forward(self, x):
            return torch.erfinv(x)

    with pytest.raises(PartitaError) as caught:
        partita.compile(Erfinv(), example_inputs=(torch.randn(3),), **HOST)
    assert "torch.export(Erfinv): aten.erfinv.default @ erfinv: error: ATen op 'aten.erfinv.default' has no conversion" in str(caught.value)


def test_a_module_needs_example_inputs() -> None:
    with pytest.raises(PartitaError, match="needs example_inputs"):
        partita.compile(MLP(), **HOST)


def test_torch_compile_backend_matches_eager() -> None:
    model = fresh(MLP())
    compiled = torch.compile(model, backend="partita", options=HOST)
    x = torch.randn(3, 16)
    out = compiled(x)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-6)


def test_graph_breaks_and_unconvertible_graphs_run_eagerly() -> None:
    class Breaky(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.l(x)
            if y.sum() > 0:  # data-dependent control flow: a graph break
                y = y * 2
            return torch.relu(torch.cumsum(y, 0))

    model = fresh(Breaky())
    compiled = torch.compile(model, backend="partita", options=HOST)
    for _ in range(2):
        x = torch.randn(3, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)


def test_compiled_graphs_are_cached_per_input_signature() -> None:
    model = fresh(MLP())
    graph = torch.fx.symbolic_trace(model)
    backend = partita_backend(graph, [torch.randn(2, 16)], options=HOST)
    assert isinstance(backend, PartitaGraph)
    for n in (2, 2, 5, 2):
        x = torch.randn(n, 16)
        torch.testing.assert_close(backend(x), model(x), rtol=1e-5, atol=1e-6)
    assert sorted(k[0][0] for k in backend.executables) == [(2, 16), (5, 16)]


@pytest.mark.gpu
def test_torch_compile_keeps_cuda_tensors_on_the_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device and a CUDA build of torch")
    model = fresh(MLP()).cuda()
    compiled = torch.compile(model, backend="partita")
    x = torch.randn(4, 16, device="cuda")
    out = compiled(x)
    assert out.device.type == "cuda"
    torch.testing.assert_close(out, model(x), rtol=2e-3, atol=2e-3)  # TF32 / f16 kernels
    exe = partita.compile(model, example_inputs=(x,))
    (direct,) = exe.run(x)  # partita.compile's executable: the result stays on the GPU too
    assert isinstance(direct, torch.Tensor) and direct.device.type == "cuda"
    torch.testing.assert_close(direct, model(x), rtol=2e-3, atol=2e-3)


ENTRY_POINT_SCRIPT = """
import importlib.metadata as md, sys, tomllib
value = tomllib.load(open(sys.argv[1], "rb"))["project"]["entry-points"]["torch_dynamo_backends"]["partita"]
real = md.entry_points
def entry_points(**kw):  # what an installed Partita adds to the environment
    if kw.get("group") == "torch_dynamo_backends":
        return md.EntryPoints([md.EntryPoint(name="partita", value=value, group="torch_dynamo_backends")])
    return real(**kw)
md.entry_points = entry_points
import torch
assert "partita" not in sys.modules
m = torch.nn.Linear(4, 3).eval()
c = torch.compile(m, backend="partita", options={"partitioner": "none", "fallback_device": "cpu"})
x = torch.randn(2, 4)
torch.testing.assert_close(c(x), m(x))
assert "partita.tools.dynamo" in sys.modules
print("ok")
"""


def test_the_entry_point_finds_the_backend_without_importing_partita() -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", ENTRY_POINT_SCRIPT, str(root / "pyproject.toml")],
                          check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
