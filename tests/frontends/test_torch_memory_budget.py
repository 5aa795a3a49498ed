"""The torch frontend charges the constants it materializes (weights, buffers, the
constants a conversion adds) to the model's memory budget, like the ONNX import's folds:
over the budget is an error located at the weight or node, before the module is built."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import partita  # noqa: E402
from partita.frontends.torch import export_module  # noqa: E402
from partita.ir import PartitaError  # noqa: E402
from partita.ir.budget import MemoryBudget  # noqa: E402

HOST = {"partitioner": "none", "fallback_device": "cpu"}
MIB = 1 << 20


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU())  # a 4 MiB weight


def test_the_weights_are_charged_and_located_at_the_weight(tmp_path) -> None:
    x = torch.randn(2, 1024)
    with pytest.raises(PartitaError, match=r"^torch.export\(Sequential\): 0.weight: error: materializing it as a "
                                           r"constant at import needs 4.0 MiB, over the memory budget: 0 B "
                                           r"of 2.0 MiB already spent"):
        partita.compile(_model(), example_inputs=(x,), cache_dir=tmp_path, memory_budget="2M", **HOST)
    exe = partita.compile(_model(), example_inputs=(x,), cache_dir=tmp_path, memory_budget="64M", **HOST)
    assert exe.budget.spent >= 4 * MIB + 4096  # the weight and the bias, at least
    np.testing.assert_allclose(exe.run(x.numpy())[0], _model()(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_the_import_charges_exactly_the_constants_it_builds() -> None:
    budget = MemoryBudget(64 * MIB)
    with budget.active():
        module = export_module(_model(), (torch.randn(2, 1024),))
    constants = [op for op in module.walk() if op.name == "nn.constant"]
    assert budget.spent == sum(op.to_numpy().nbytes for op in constants) == (1024 * 1024 + 1024) * 4
    # Outside partita.compile / load / the tools no budget is active: nothing is charged.
    export_module(_model(), (torch.randn(2, 1024),))
    assert budget.spent == (1024 * 1024 + 1024) * 4
