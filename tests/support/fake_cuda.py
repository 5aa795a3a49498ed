"""A stand-in for ``partita.runtime.cuda.CudaDevice``: device memory lives in host arrays
and launches are recorded, so the launch path is tested without a GPU."""

from __future__ import annotations

import numpy as np


class FakeModule:
    def __init__(self, device: FakeDevice, cubin: bytes):
        self.device, self.cubin, self.launched, self.timed = device, cubin, [], []

    def global_int(self, name: str) -> int:  # pragma: no cover - records carry the size
        raise AssertionError("the shared-memory size comes from the kernel record")

    def launch(self, name, grid, block, args, smem):
        self.launched.append((name, tuple(grid), tuple(block), list(args), smem))
        # Stand in for the kernel: write a recognisable value into every buffer the host
        # did not upload (the output, and a split-k workspace if there is one).
        for kind, value in args:
            if kind == "ptr" and value not in self.device.uploaded:
                self.device.memory[value][:] = 7

    def time_launch(self, name, grid, block, args, smem=0, repeat=10, warmup=2):
        """Launches like ``CudaModule.time_launch`` and reports the device's fixed time
        for ``name`` (milliseconds per launch)."""
        for _ in range(warmup + repeat):
            self.launch(name, grid, block, args, smem)
        self.timed.append(name)
        return self.device.kernel_ms(name)


class FakeDevice:
    """The subset of ``CudaDevice`` the extern runtime uses."""

    name = "fake"
    arch = "sm_90"
    simulated = False

    def __init__(self, times=None) -> None:
        self.memory: dict[int, np.ndarray] = {}
        self.uploaded: set[int] = set()
        self.modules: list[FakeModule] = []
        self.freed = 0
        self.times = times  # kernel name -> ms per launch (a callable or a dict); default 1.0

    def kernel_ms(self, name: str) -> float:
        if callable(self.times):
            return float(self.times(name))
        return float((self.times or {}).get(name, 1.0))

    @property
    def launches(self) -> int:
        return sum(len(m.launched) for m in self.modules)

    def alloc(self, nbytes: int) -> int:
        ptr = 0x1000 * (len(self.memory) + 1)
        self.memory[ptr] = np.zeros(nbytes, np.uint8)
        return ptr

    def to_device(self, array: np.ndarray) -> int:
        ptr = self.alloc(array.nbytes)
        self.memory[ptr][:] = np.frombuffer(np.ascontiguousarray(array).tobytes(), np.uint8)
        self.uploaded.add(ptr)
        return ptr

    def memset0(self, ptr: int) -> None:
        self.memory[ptr][:] = 0

    def load_module(self, cubin: bytes) -> FakeModule:
        self.modules.append(FakeModule(self, cubin))
        return self.modules[-1]

    def synchronize(self) -> None:
        pass

    def copy_dtoh(self, array: np.ndarray, ptr: int) -> np.ndarray:
        array.view(np.uint8).reshape(-1)[:] = self.memory[ptr][: array.nbytes]
        return array

    def free(self, ptr: int) -> None:
        self.freed += 1
