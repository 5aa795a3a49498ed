"""A recording stand-in for ``cuda.bindings.driver``: the calls ``CudaDevice`` makes, with
the same return conventions (``(CUresult, value...)``), counted one by one.

Device memory is real host memory (its addresses are the "device pointers"), so copies
move real bytes; kernels do not run (their outputs keep what the memory held), launches
are recorded with their stream and argument-buffer address. Stream capture records
launches into a graph instead of running them; ``cuGraphLaunch`` replays the record.
``fail`` makes the named call return an error (``{"cuLaunchKernel": 719}``).
"""

from __future__ import annotations

import ctypes
import threading
from collections import Counter
from types import SimpleNamespace

import numpy as np

SUCCESS = 0


class CUresult(int):
    CUDA_SUCCESS = SUCCESS


_ERRORS = {1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS",
           719: "CUDA_ERROR_LAUNCH_FAILED", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU"}


class RecordingDriver:
    """Counts every call in ``calls``; see the module docstring."""

    CUresult = CUresult
    CUdevice_attribute = SimpleNamespace(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR=75,
                                         CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR=76)
    CUfunction_attribute = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)
    CUstreamCaptureMode = SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)

    def __init__(self, *, version: int = 13000, arch: tuple[int, int] = (9, 0), devices: int = 1, fail=None):
        self.version, self.arch, self.devices = version, arch, devices
        self.calls: Counter[str] = Counter()
        self.images: list[bytes] = []
        self.fail = dict(fail or {})
        self.memory: dict[int, np.ndarray] = {}
        self.launches: list[dict] = []  # executed (eagerly or by a graph)
        self.func_attributes: dict[tuple[str, int], int] = {}
        self.current: dict[int, object] = {}  # thread id -> context
        self.streams: set[int] = set()
        self._capturing: dict[int, list] = {}
        self._graphs: dict[int, list] = {}
        self._next = 1

    # -- bookkeeping -------------------------------------------------------------
    def _handle(self) -> int:
        self._next += 1
        return self._next

    def _call(self, name: str, *values):
        self.calls[name] += 1
        if name in self.fail:
            return (self.fail[name], *([None] * len(values))) if values else (self.fail[name],)
        return (SUCCESS, *values)

    def read(self, ptr: int, nbytes: int) -> bytes:
        """The bytes at a device pointer."""
        return ctypes.string_at(int(ptr), int(nbytes))

    def reset(self) -> None:
        self.calls.clear()
        self.launches.clear()

    # -- errors, init, devices, contexts -----------------------------------------
    def cuGetErrorName(self, err):
        return SUCCESS, _ERRORS.get(int(err), f"CUDA_ERROR_{int(err)}").encode()

    def cuGetErrorString(self, err):
        return SUCCESS, b"recorded failure"

    def cuInit(self, flags):
        return self._call("cuInit")

    def cuDriverGetVersion(self):
        return self._call("cuDriverGetVersion", self.version)

    def cuDeviceGetCount(self):
        return self._call("cuDeviceGetCount", self.devices)

    def cuDeviceGet(self, ordinal):
        return self._call("cuDeviceGet", 100 + ordinal)

    def cuDevicePrimaryCtxRetain(self, device):
        return self._call("cuDevicePrimaryCtxRetain", "ctx")

    def cuDevicePrimaryCtxRelease(self, device):
        return self._call("cuDevicePrimaryCtxRelease")

    def cuCtxSetCurrent(self, ctx):
        self.current[threading.get_ident()] = ctx
        return self._call("cuCtxSetCurrent")

    def cuCtxSynchronize(self):
        return self._call("cuCtxSynchronize")

    def cuDeviceGetAttribute(self, attribute, device):
        major = attribute == self.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        return self._call("cuDeviceGetAttribute", self.arch[0] if major else self.arch[1])

    def cuDeviceGetName(self, length, device):
        return self._call("cuDeviceGetName", b"Recording GPU\0")

    # -- memory ------------------------------------------------------------------------
    def cuMemAlloc(self, nbytes):
        block = np.zeros(int(nbytes), np.uint8)
        ptr = block.ctypes.data
        self.memory[ptr] = block
        return self._call("cuMemAlloc", ptr)

    def cuMemFree(self, ptr):
        result = self._call("cuMemFree")
        if result[0] == SUCCESS:
            del self.memory[int(ptr)]
        return result

    def _copy(self, name: str, dst: int, src: int, nbytes: int):
        result = self._call(name)
        if result[0] == SUCCESS:
            ctypes.memmove(int(dst), int(src), int(nbytes))
            self.calls[name + ":bytes"] += int(nbytes)
        return result

    def cuMemcpyHtoD(self, dst, src, nbytes):
        return self._copy("cuMemcpyHtoD", dst, src, nbytes)

    def cuMemcpyDtoH(self, dst, src, nbytes):
        return self._copy("cuMemcpyDtoH", dst, src, nbytes)

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        return self._copy("cuMemcpyHtoDAsync", dst, src, nbytes)

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):
        return self._copy("cuMemcpyDtoHAsync", dst, src, nbytes)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        return self._copy("cuMemcpyDtoDAsync", dst, src, nbytes)

    def cuMemsetD8(self, ptr, value, nbytes):
        ctypes.memset(int(ptr), value, int(nbytes))
        return self._call("cuMemsetD8")

    def cuMemsetD8Async(self, ptr, value, nbytes, stream):
        ctypes.memset(int(ptr), value, int(nbytes))
        return self._call("cuMemsetD8Async")

    # -- streams, modules, launches, graphs ----------------------------------------
    def cuStreamCreate(self, flags):
        stream = self._handle()
        self.streams.add(stream)
        return self._call("cuStreamCreate", stream)

    def cuStreamDestroy(self, stream):
        self.streams.discard(stream)
        return self._call("cuStreamDestroy")

    def cuStreamSynchronize(self, stream):
        return self._call("cuStreamSynchronize")

    def cuModuleLoadData(self, image):
        self.images.append(bytes(image))  # what reached the driver
        return self._call("cuModuleLoadData", ("module", len(image)))

    def cuModuleUnload(self, module):
        return self._call("cuModuleUnload")

    def cuModuleGetFunction(self, module, name):
        return self._call("cuModuleGetFunction", ("function", name.decode()))

    def cuFuncSetAttribute(self, function, attribute, value):
        self.func_attributes[(function[1], attribute)] = value
        return self._call("cuFuncSetAttribute")

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        record = {"name": f[1], "grid": (gx, gy, gz), "block": (bx, by, bz), "smem": smem,
                  "stream": stream, "params": params}
        result = self._call("cuLaunchKernel")
        if result[0] == SUCCESS:
            if stream in self._capturing:
                self._capturing[stream].append(record)
            else:
                self.launches.append(record)
        return result

    def enqueue(self, stream, name: str, work) -> None:
        """Library work on ``stream`` (what cuBLASLt, cuDNN or TensorRT enqueue): done now
        and recorded as a launch, or recorded into the capture and done at each replay."""
        record = {"name": name, "stream": stream, "library": True, "work": work}
        if stream in self._capturing:
            self._capturing[stream].append(record)
        else:
            self.launches.append(record)
            work()

    def cuStreamBeginCapture(self, stream, mode):
        self._capturing[stream] = []
        return self._call("cuStreamBeginCapture")

    def cuStreamEndCapture(self, stream):
        graph = self._handle()
        self._graphs[graph] = self._capturing.pop(stream)
        return self._call("cuStreamEndCapture", graph)

    def cuGraphInstantiate(self, graph, flags):
        return self._call("cuGraphInstantiate", ("exec", graph))

    def cuGraphLaunch(self, executable, stream):
        for record in self._graphs[executable[1]]:
            self.launches.append({**record, "stream": stream, "graph": True})
            if "work" in record:
                record["work"]()
        return self._call("cuGraphLaunch")

    def cuGraphExecDestroy(self, executable):
        return self._call("cuGraphExecDestroy")

    def cuGraphDestroy(self, graph):
        return self._call("cuGraphDestroy")

    def cuEventCreate(self, flags):
        return self._call("cuEventCreate", self._handle())

    def cuEventRecord(self, event, stream):
        return self._call("cuEventRecord")

    def cuEventSynchronize(self, event):
        return self._call("cuEventSynchronize")

    def cuEventElapsedTime(self, start, stop):
        return self._call("cuEventElapsedTime", 1.0)

    def cuEventDestroy(self, event):
        return self._call("cuEventDestroy")


def recorded_run(module, entry: str, args, arch: tuple[int, int] = (9, 0)):
    """Runs ``entry`` once through the launch plan on a recording CUDA device (eager
    launches). Returns the driver, ``{kernel: (grid, block, packed args, smem)}`` of the
    launches in plan order, and the outputs."""
    from partita.runtime.cuda import CudaDevice
    from partita.runtime.plan import Runtime

    drv = RecordingDriver(arch=arch)
    runtime = Runtime(module, CudaDevice(driver=drv), entry=entry, graphs=False)
    outs = runtime.run(*args)
    (bound,) = runtime._bound.values()
    launched = {s.function.name: (s.grid, s.block, list(s.args), s.smem) for s in bound.steps}
    drv.runtime = runtime  # its memory stays allocated (readable with drv.read) while drv lives
    return drv, launched, outs
