"""When ``partita.compile`` verifies the module: after each of its two pass pipelines by
default, after every pass with ``verify_each`` (or ``$PARTITA_VERIFY_EACH``), as
``mlir-opt --verify-each`` does."""

from __future__ import annotations

import pytest

import partita
import partita.driver

MODEL = """
func.func @main(%x: tensor<?x16xf32>, %w: tensor<8x16xf32>, %b: tensor<8xf32>) -> tensor<?x8xf32> {
  %0 = nn.dense %x, %w : (tensor<?x16xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
  %1 = nn.bias_add %0, %b : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %2 = nn.relu %1 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return %2 : tensor<?x8xf32>
}
"""


@pytest.fixture
def verified(monkeypatch) -> list[int]:
    """How many times the driver verified the module (counted, then verified)."""
    calls: list[int] = []
    verify = partita.driver.verify_module

    def counting(module) -> None:
        calls.append(1)
        verify(module)

    monkeypatch.setattr(partita.driver, "verify_module", counting)
    return calls


@pytest.mark.parametrize(("verify_each", "env"), [(None, None), (False, "1"), (True, None), (None, "1")])
def test_the_module_is_verified_per_pipeline_or_per_pass(verified, monkeypatch, verify_each, env) -> None:
    if env is None:
        monkeypatch.delenv("PARTITA_VERIFY_EACH", raising=False)
    else:
        monkeypatch.setenv("PARTITA_VERIFY_EACH", env)
    exe = partita.compile(MODEL, ["cuda -arch=sm_80", "llvm"], verify_each=verify_each)
    each = verify_each if verify_each is not None else env == "1"
    assert len(verified) == (len(exe.pass_times) if each else 2), (exe.pipeline, len(verified))
    assert len(exe.pass_times) > 2  # every pass is still timed
