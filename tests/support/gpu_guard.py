"""A pytest plugin: a ``gpu`` test must run on the GPU. A ``gpu`` test whose code falls
back to the simulated device (kernels compiled for another arch, a device that failed to
open, ``device="auto"`` on a machine without one) would otherwise pass while proving
nothing; here it fails, naming the fallback. ``tests/conftest.py`` loads it for the suite;
``partita-doctor --validate`` relies on it."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def gpu_tests_run_on_the_gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    from partita.runtime.device import SimulatedDevice

    original = SimulatedDevice.__init__

    def refuse(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        # Failed is a BaseException: no `except Exception` in the runtime swallows it.
        pytest.fail("a gpu test fell back to the simulated device (it must run on the GPU)", pytrace=False)

    monkeypatch.setattr(SimulatedDevice, "__init__", refuse)
    yield
