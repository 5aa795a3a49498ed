"""CUDA driver-API runtime (``cuda.bindings.driver``) for NVRTC cubins.

* :func:`cuda_available` -- never raises; False without a driver or a device.
* :class:`CudaDevice` -- primary context of one device, memory, events.
* :class:`CudaModule` -- a loaded cubin; :meth:`CudaModule.launch` launches an
  entry from a C-ABI packed argument buffer (``kernelParams`` points into it).
* :func:`pack_kernel_args` -- pure C-ABI packing of ``[(kind, value)]``,
  testable without a GPU against ``partita.lowering.cubin.kernel_params``.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

#: kind -> (struct format, size, alignment)
_KINDS = {
    "ptr": ("<Q", 8, 8),
    "int": ("<i", 4, 4),
    "i32": ("<i", 4, 4),
    "u32": ("<I", 4, 4),
    "i64": ("<q", 8, 8),
    "u64": ("<Q", 8, 8),
    "f32": ("<f", 4, 4),
    "f64": ("<d", 8, 8),
}


class CudaError(RuntimeError):
    pass


def pack_kernel_args(params: Iterable[tuple[str, object]]) -> tuple[bytes, list[int]]:
    """Pack kernel arguments following the C ABI.

    ``params`` is ``[(kind, value)]`` with kind in ``ptr``/``int``/``i32``/
    ``u32``/``i64``/``u64``/``f32``/``f64``; each argument is placed at the next
    offset aligned to its size (pointers 8, ints 4).  Returns the buffer (padded
    to a multiple of 8 when it holds any 8-byte argument) and the offsets.
    """
    buf = bytearray()
    offsets: list[int] = []
    max_align = 1
    for kind, value in params:
        try:
            fmt, size, align = _KINDS[kind]
        except KeyError:
            raise ValueError(f"unknown kernel argument kind {kind!r}") from None
        max_align = max(max_align, align)
        pad = (-len(buf)) % align
        buf += bytes(pad)
        offsets.append(len(buf))
        if kind in ("ptr", "u64") and int(value) < 0:  # type: ignore[call-overload]
            raise ValueError("negative pointer")
        buf += struct.pack(fmt, value)
    buf += bytes((-len(buf)) % max_align)
    return bytes(buf), offsets


def _driver():
    from cuda.bindings import driver

    return driver


def _check(result, what: str = "CUDA call"):
    """Unpack a cuda.bindings result tuple, raising CudaError on failure."""
    drv = _driver()
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        _, msg = drv.cuGetErrorString(err)
        dec = lambda b: b.decode() if isinstance(b, bytes) else str(b)  # noqa: E731
        raise CudaError(f"{what} failed: {dec(name)}: {dec(msg)}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


_available: bool | None = None


def cuda_available() -> bool:
    """True when the CUDA driver initialises and reports at least one device."""
    global _available
    if _available is None:
        try:
            drv = _driver()
            (err,) = drv.cuInit(0)
            if err != drv.CUresult.CUDA_SUCCESS:
                _available = False
            else:
                err, n = drv.cuDeviceGetCount()
                _available = err == drv.CUresult.CUDA_SUCCESS and n > 0
        except Exception:  # no driver library, wrong driver version, ...
            _available = False
    return _available


@dataclass
class DeviceBuffer:
    ptr: int
    nbytes: int
    device: "CudaDevice"

    def __int__(self) -> int:
        return self.ptr

    def free(self) -> None:
        if self.ptr:
            self.device.free(self)


class CudaDevice:
    """One CUDA device used through its primary context."""

    def __init__(self, ordinal: int = 0):
        if not cuda_available():
            raise CudaError("no CUDA device available")
        drv = _driver()
        self.ordinal = ordinal
        self.device = _check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        self.context = _check(drv.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self._released = False
        self.make_current()

    # -- context -----------------------------------------------------------
    def make_current(self) -> None:
        _check(_driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def close(self) -> None:
        if not self._released:
            self._released = True
            _check(_driver().cuDevicePrimaryCtxRelease(self.device), "cuDevicePrimaryCtxRelease")

    def __enter__(self) -> "CudaDevice":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def compute_capability(self) -> tuple[int, int]:
        drv = _driver()
        a = drv.CUdevice_attribute
        major = _check(drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device))
        minor = _check(drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device))
        return int(major), int(minor)

    @property
    def arch(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def name(self) -> str:
        raw = _check(_driver().cuDeviceGetName(256, self.device), "cuDeviceGetName")
        return raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)

    def synchronize(self) -> None:
        _check(_driver().cuCtxSynchronize(), "cuCtxSynchronize")

    # -- memory ------------------------------------------------------------
    def alloc(self, nbytes: int) -> DeviceBuffer:
        ptr = _check(_driver().cuMemAlloc(max(1, int(nbytes))), "cuMemAlloc")
        return DeviceBuffer(int(ptr), int(nbytes), self)

    def free(self, buf: DeviceBuffer) -> None:
        _check(_driver().cuMemFree(buf.ptr), "cuMemFree")
        buf.ptr = 0

    def memset0(self, buf: DeviceBuffer) -> None:
        _check(_driver().cuMemsetD8(buf.ptr, 0, buf.nbytes), "cuMemsetD8")

    def to_device(self, array: np.ndarray) -> DeviceBuffer:
        arr = np.ascontiguousarray(array)
        buf = self.alloc(arr.nbytes)
        self.copy_htod(buf, arr)
        return buf

    def copy_htod(self, buf: DeviceBuffer, array: np.ndarray) -> None:
        arr = np.ascontiguousarray(array)
        if arr.nbytes > buf.nbytes:
            raise ValueError("host array larger than device buffer")
        _check(_driver().cuMemcpyHtoD(buf.ptr, arr.ctypes.data, arr.nbytes), "cuMemcpyHtoD")

    def copy_dtoh(self, array: np.ndarray, buf: DeviceBuffer) -> np.ndarray:
        if not array.flags.c_contiguous:
            raise ValueError("destination must be C-contiguous")
        _check(_driver().cuMemcpyDtoH(array.ctypes.data, buf.ptr, array.nbytes), "cuMemcpyDtoH")
        return array

    def from_device(self, buf: DeviceBuffer, shape, dtype) -> np.ndarray:
        return self.copy_dtoh(np.empty(shape, dtype=dtype), buf)

    # -- modules and events ------------------------------------------------
    def load_module(self, cubin: bytes) -> "CudaModule":
        return CudaModule(self, cubin)

    def event(self) -> int:
        return _check(_driver().cuEventCreate(0), "cuEventCreate")


class CudaModule:
    """A cubin loaded with ``cuModuleLoadData``."""

    def __init__(self, device: CudaDevice, cubin: bytes):
        self.device = device
        self._image = bytes(cubin)  # keep alive while loading
        device.make_current()
        self.module = _check(_driver().cuModuleLoadData(self._image), "cuModuleLoadData")
        self._functions: dict[str, object] = {}
        self._smem_opt_in: dict[str, int] = {}

    def function(self, name: str):
        fn = self._functions.get(name)
        if fn is None:
            fn = _check(_driver().cuModuleGetFunction(self.module, name.encode()),
                        f"cuModuleGetFunction({name})")
            self._functions[name] = fn
        return fn

    def global_int(self, name: str) -> int:
        """Read a ``__device__ int`` (e.g. ``<entry>_smem_bytes``)."""
        ptr, size = _check(_driver().cuModuleGetGlobal(self.module, name.encode()),
                           f"cuModuleGetGlobal({name})")
        out = np.zeros(1, dtype=np.int32)
        _check(_driver().cuMemcpyDtoH(out.ctypes.data, ptr, 4), "cuMemcpyDtoH")
        return int(out[0])

    def _ensure_smem(self, name: str, fn, smem: int) -> None:
        if smem <= 48 * 1024 or self._smem_opt_in.get(name, 0) >= smem:
            return
        drv = _driver()
        _check(drv.cuFuncSetAttribute(
            fn, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
            f"cuFuncSetAttribute({name}, MAX_DYNAMIC_SHARED_SIZE_BYTES={smem})")
        self._smem_opt_in[name] = smem

    def launch(self, name: str, grid: Sequence[int], block: Sequence[int],
               args: Sequence[tuple[str, object]], smem: int = 0, stream=0) -> None:
        """Launch ``name`` with C-ABI-packed ``args`` (see :func:`pack_kernel_args`)."""
        drv = _driver()
        fn = self.function(name)
        self._ensure_smem(name, fn, int(smem))
        payload, offsets = pack_kernel_args(args)
        # the packed C-ABI buffer, and kernelParams[i] pointing at argument i in it
        buf = ctypes.create_string_buffer(payload, max(8, len(payload)))
        base = ctypes.addressof(buf)
        kparams = (ctypes.c_void_p * max(1, len(offsets)))(*[base + o for o in offsets])
        g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
        b = tuple(int(x) for x in block) + (1,) * (3 - len(block))
        _check(drv.cuLaunchKernel(fn, *g, *b, int(smem), stream,
                                  ctypes.addressof(kparams), 0),
               f"cuLaunchKernel({name})")

    def time_launch(self, name: str, grid, block, args, smem: int = 0,
                    repeat: int = 10, warmup: int = 2) -> float:
        """Mean milliseconds per launch, measured with CUDA events."""
        drv = _driver()
        for _ in range(warmup):
            self.launch(name, grid, block, args, smem)
        start, stop = self.device.event(), self.device.event()
        try:
            _check(drv.cuEventRecord(start, 0), "cuEventRecord")
            for _ in range(repeat):
                self.launch(name, grid, block, args, smem)
            _check(drv.cuEventRecord(stop, 0), "cuEventRecord")
            _check(drv.cuEventSynchronize(stop), "cuEventSynchronize")
            ms = _check(drv.cuEventElapsedTime(start, stop), "cuEventElapsedTime")
        finally:
            drv.cuEventDestroy(start)
            drv.cuEventDestroy(stop)
        return float(ms) / repeat

    def unload(self) -> None:
        if self.module is not None:
            _check(_driver().cuModuleUnload(self.module), "cuModuleUnload")
            self.module = None


def launch_entry(module: CudaModule, entry, pointers: dict[str, int],
                 dims: dict[str, int] | None = None, smem: int | None = None) -> None:
    """Launch a CUTLASS entry (an ``EntryInfo`` from the emitter) with its geometry."""
    if smem is None:
        smem = module.global_int(entry.smem_symbol)
    module.launch(entry.name, entry.grid(dims), entry.block, entry.args(pointers, dims), smem)
