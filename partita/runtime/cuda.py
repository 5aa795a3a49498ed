"""CUDA driver-API device (``cuda.bindings.driver``) for NVRTC cubins.

* :func:`cuda_status` / :func:`cuda_available` -- never raise: no driver, a driver older
  than the 13.0 these bindings need, or no device, each said plainly.
* :func:`parse_arch` / :func:`arch_runs_on` -- ``sm_90a``-style arch strings, and whether
  a cubin's SASS runs on a device (checked before a cubin is loaded).
* :class:`CudaDevice` -- the primary context of one device (made current by the thread
  that runs), memory, one stream with asynchronous copies, pre-packed launches
  (:class:`CudaLaunch`: one ``cuLaunchKernel`` per call) and graph capture
  (:class:`CudaGraph`: one ``cuGraphLaunch`` per replay). ``driver`` can be a stand-in
  with the same calls (tests use a recording one).
* :class:`CudaModule` -- a loaded cubin; ``kernel`` opts in to large dynamic shared memory
  at ``>= 48 KiB``. Events time steps (``create_event``... used by
  ``partita.runtime.profile``).
* Launch arguments are packed by ``partita.runtime.arguments`` (C ABI, one layout per
  parameter-kind list, testable without a GPU against ``partita.lowering.cubin.kernel_params``).
"""

from __future__ import annotations

import ctypes
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from partita.runtime.arguments import ArgumentLayout
from partita.runtime.tma import DATA_TYPES, L2_PROMOTION_128B, SWIZZLES, TensorMap


class CudaError(RuntimeError):
    pass


CUDA_ERROR_OUT_OF_MEMORY = 2


def _driver():
    from cuda.bindings import driver

    return driver


def _check(result, what: str = "CUDA call", drv=None):
    """Unpack a cuda.bindings result tuple, raising CudaError on failure."""
    drv = drv if drv is not None else _driver()
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        _, msg = drv.cuGetErrorString(err)
        def dec(b: object) -> str:
            return b.decode() if isinstance(b, bytes) else str(b)

        raise CudaError(f"{what} failed: {dec(name)}: {dec(msg)}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


MIN_DRIVER_VERSION = 13000
"""The cuda-bindings 13 wheels call driver entry points of CUDA 13.0: an older driver
fails at the first such call, so it is refused up front with a message."""

LARGE_SMEM = 48 * 1024
"""Dynamic shared memory at or above this needs the function's opt-in attribute (CUTLASS's
launcher uses ``>=``: the f16 128x128x32x3 configuration needs exactly 49,152 bytes)."""


def cuda_status(drv=None) -> str | None:
    """Why no CUDA device can be used (``None`` when one can); never raises."""
    try:
        drv = drv if drv is not None else _driver()
        (err,) = drv.cuInit(0)
        if err != drv.CUresult.CUDA_SUCCESS:
            return "the CUDA driver did not initialise (no GPU or no driver)"
        err, version = drv.cuDriverGetVersion()
        if err != drv.CUresult.CUDA_SUCCESS or int(version) < MIN_DRIVER_VERSION:
            found = f"{int(version) // 1000}.{int(version) % 1000 // 10}" if err == drv.CUresult.CUDA_SUCCESS else "unknown"
            return f"the CUDA driver is version {found}; these CUDA 13 bindings need a driver >= 13.0"
        err, n = drv.cuDeviceGetCount()
        if err != drv.CUresult.CUDA_SUCCESS or n <= 0:
            return "the CUDA driver reports no device"
    except Exception as err:  # no driver library, a broken install, ...
        return f"the CUDA driver cannot be loaded ({type(err).__name__}: {err})"
    return None


def _capability(drv, device) -> tuple[int, int]:
    """A ``CUdevice``'s compute capability (context-free queries)."""
    a = drv.CUdevice_attribute
    major = _check(drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
                   "cuDeviceGetAttribute", drv)
    minor = _check(drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
                   "cuDeviceGetAttribute", drv)
    return int(major), int(minor)


def _name(drv, device) -> str:
    """A ``CUdevice``'s name (a context-free query)."""
    raw = _check(drv.cuDeviceGetName(256, device), "cuDeviceGetName", drv)
    return raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)


def present_device(ordinal: int = 0, drv=None) -> tuple[str, str] | None:
    """``(arch, name)`` of device ``ordinal`` (``("sm_90", "NVIDIA H100 80GB HBM3")``), asked
    of the driver without a context; None when no CUDA device can be used."""
    if cuda_status(drv) is not None:
        return None
    drv = drv if drv is not None else _driver()
    try:
        device = _check(drv.cuDeviceGet(ordinal), "cuDeviceGet", drv)
        major, minor = _capability(drv, device)
        return f"sm_{major}{minor}", _name(drv, device)
    except CudaError:  # no such ordinal
        return None


def build_arch(device_arch: str) -> str:
    """The arch to build for a ``device_arch`` device: Hopper's arch-specific ``sm_90a``
    (its CUTLASS 3 TMA + wgmma kernels need it; such cubins run on nothing else), else the
    device's own."""
    return "sm_90a" if device_arch == "sm_90" else device_arch


_available: bool | None = None


def cuda_available() -> bool:
    """True when the CUDA driver initialises, is recent enough and reports a device."""
    global _available
    if _available is None:
        _available = cuda_status() is None
    return _available


_ARCH = re.compile(r"^sm_(\d+)([a-z]?)$")


def parse_arch(arch: str | int) -> tuple[int, str]:
    """``"sm_90a"`` -> ``(90, "a")``, ``"sm_80"`` / ``80`` -> ``(80, "")``."""
    if isinstance(arch, int):
        return arch, ""
    text = str(arch).strip()
    if text.isdigit():
        return int(text), ""
    m = _ARCH.match(text)
    if m is None:
        raise ValueError(f"'{arch}' is not a CUDA arch (sm_80, sm_90, sm_90a, ...)")
    return int(m.group(1)), m.group(2)


def arch_runs_on(cubin_arch: str, device_arch: str) -> bool:
    """Whether SASS built for ``cubin_arch`` runs on a ``device_arch`` device: same major
    version and a minor no newer than the device's; arch-specific (``a``) cubins only on
    exactly their arch."""
    built, suffix = parse_arch(cubin_arch)
    device, _ = parse_arch(device_arch)
    if suffix:
        return built == device
    return built // 10 == device // 10 and built % 10 <= device % 10


@dataclass
class DeviceBuffer:
    ptr: int
    nbytes: int
    device: CudaDevice

    def __int__(self) -> int:
        return self.ptr

    def free(self) -> None:
        if self.ptr:
            self.device.free(self)


class CudaDevice:
    """One CUDA device through its primary context, with one stream the runtime creates.

    ``driver`` is the driver API (``cuda.bindings.driver``); tests pass a recording
    stand-in with the same calls. The context is made current in whatever thread calls
    ``make_current`` (the runtime does at the start of every run)."""

    simulated = False

    def __init__(self, ordinal: int = 0, driver=None):
        self.drv = driver if driver is not None else _driver()
        why = cuda_status(self.drv)
        if why is not None:
            raise CudaError(f"no usable CUDA device: {why}")
        drv = self.drv
        self.ordinal = ordinal
        self.device = self._call(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        self.context = self._call(drv.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self._released = False
        self.make_current()

    def _call(self, result, what: str):
        return _check(result, what, self.drv)

    # -- context -----------------------------------------------------------
    def make_current(self) -> None:
        self._call(self.drv.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def close(self) -> None:
        if not self._released:
            self._released = True
            self._call(self.drv.cuDevicePrimaryCtxRelease(self.device), "cuDevicePrimaryCtxRelease")

    def __enter__(self) -> CudaDevice:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def compute_capability(self) -> tuple[int, int]:
        return _capability(self.drv, self.device)

    @property
    def multiprocessor_count(self) -> int:
        """SMs of the device (a persistent kernel's grid is sized by it)."""
        drv = self.drv
        attribute = drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        return int(_check(drv.cuDeviceGetAttribute(attribute, self.device), "cuDeviceGetAttribute", drv))

    @property
    def arch(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def name(self) -> str:
        return _name(self.drv, self.device)

    def synchronize(self, stream=None) -> None:
        if stream is None:
            self._call(self.drv.cuCtxSynchronize(), "cuCtxSynchronize")
        else:
            self._call(self.drv.cuStreamSynchronize(stream), "cuStreamSynchronize")

    # -- memory ------------------------------------------------------------
    def alloc(self, nbytes: int) -> DeviceBuffer:
        result = self.drv.cuMemAlloc(max(1, int(nbytes)))
        if result[0] == CUDA_ERROR_OUT_OF_MEMORY:  # the model's size, not a fault: as the simulated device says it
            raise MemoryError(f"out of device memory: cannot allocate {int(nbytes)} bytes")
        ptr = self._call(result, "cuMemAlloc")
        return DeviceBuffer(int(ptr), int(nbytes), self)

    def free(self, buf: DeviceBuffer | int) -> None:
        ptr = int(buf)
        if isinstance(buf, DeviceBuffer):
            buf.ptr = 0
        self._call(self.drv.cuMemFree(ptr), "cuMemFree")

    def memset0(self, buf: DeviceBuffer) -> None:
        self._call(self.drv.cuMemsetD8(buf.ptr, 0, buf.nbytes), "cuMemsetD8")

    def to_device(self, array: np.ndarray) -> DeviceBuffer:
        arr = np.ascontiguousarray(array)
        buf = self.alloc(arr.nbytes)
        try:
            self.copy_htod(buf, arr)
        except BaseException:
            _free_quietly(buf)
            raise
        return buf

    def copy_htod(self, buf: DeviceBuffer, array: np.ndarray) -> None:
        arr = np.ascontiguousarray(array)
        if arr.nbytes > buf.nbytes:
            raise ValueError("host array larger than device buffer")
        self._call(self.drv.cuMemcpyHtoD(buf.ptr, arr.ctypes.data, arr.nbytes), "cuMemcpyHtoD")

    def copy_dtoh(self, array: np.ndarray, buf: DeviceBuffer) -> np.ndarray:
        if not array.flags.c_contiguous:
            raise ValueError("destination must be C-contiguous")
        self._call(self.drv.cuMemcpyDtoH(array.ctypes.data, int(buf), array.nbytes), "cuMemcpyDtoH")
        return array

    def from_device(self, buf: DeviceBuffer, shape, dtype) -> np.ndarray:
        return self.copy_dtoh(np.empty(shape, dtype=dtype), buf)

    # -- the runtime's stream: asynchronous copies and launches --------------
    def create_stream(self):
        return self._call(self.drv.cuStreamCreate(1), "cuStreamCreate")  # CU_STREAM_NON_BLOCKING

    def destroy_stream(self, stream) -> None:
        self._call(self.drv.cuStreamDestroy(stream), "cuStreamDestroy")

    def upload(self, ptr: int, array: np.ndarray, stream) -> None:
        """Host to device on ``stream``; ``array`` must stay alive until the stream syncs."""
        self._call(self.drv.cuMemcpyHtoDAsync(ptr, array.ctypes.data, array.nbytes, stream), "cuMemcpyHtoDAsync")

    def pinned_staging(self, chunk_bytes: int) -> PinnedStaging:
        """Page-locked buffers to upload weights through (see ``PinnedStaging``)."""
        return PinnedStaging(self, chunk_bytes)

    def download(self, array: np.ndarray, ptr: int, stream) -> None:
        self._call(self.drv.cuMemcpyDtoHAsync(array.ctypes.data, ptr, array.nbytes, stream), "cuMemcpyDtoHAsync")

    def host_view(self, ptr: int, shape, dtype) -> None:
        """None: device memory is not the host's, a host step downloads its operands."""
        return None

    def copy(self, dst: int, src: int, nbytes: int, stream) -> None:
        self._call(self.drv.cuMemcpyDtoDAsync(dst, src, nbytes, stream), "cuMemcpyDtoDAsync")

    def memset(self, ptr: int, nbytes: int, stream) -> None:
        self._call(self.drv.cuMemsetD8Async(ptr, 0, nbytes, stream), "cuMemsetD8Async")

    def fill(self, ptr: int, element: np.ndarray, count: int, stream) -> None:
        """``count`` copies of the 0-d ``element`` at ``ptr`` with the driver's memsets (a
        splat constant never exists on the host). Elements of 8 bytes are two 32-bit 2D
        memsets, one per word, with the element size as pitch."""
        raw = np.ascontiguousarray(element).tobytes()
        if len(raw) == 1:
            self._call(self.drv.cuMemsetD8Async(ptr, raw[0], count, stream), "cuMemsetD8Async")
        elif len(raw) == 2:
            self._call(self.drv.cuMemsetD16Async(ptr, int.from_bytes(raw, "little"), count, stream), "cuMemsetD16Async")
        elif len(raw) == 4:
            self._call(self.drv.cuMemsetD32Async(ptr, int.from_bytes(raw, "little"), count, stream), "cuMemsetD32Async")
        elif len(raw) % 4 == 0:
            for k in range(0, len(raw), 4):
                word = int.from_bytes(raw[k:k + 4], "little")
                self._call(self.drv.cuMemsetD2D32Async(ptr + k, len(raw), word, 1, count, stream), "cuMemsetD2D32Async")
        else:
            raise ValueError(f"no device fill for elements of {len(raw)} bytes")

    def prepare_launch(self, function: CudaFunction, grid, block, smem: int, args, operands=(),
                       layout: ArgumentLayout | None = None, cluster=None) -> CudaLaunch:
        """A launch packed once (with ``layout``, the plan's layout of these argument kinds,
        when given); ``operands`` (which argument is which tensor) let the plan patch a
        zero-copy input's pointer into it. With ``cluster`` (CTAs per thread-block cluster)
        it is a ``cuLaunchKernelEx`` with the cluster-dimension attribute."""
        launch = CudaLaunch(self, function, _dim3(grid), _dim3(block), int(smem), *_packed(args, layout))
        launch.args, launch.operands = tuple(args), tuple(operands)
        if cluster is not None:
            launch.with_cluster(_dim3(cluster))
        return launch

    def encode_tensor_map(self, request):
        """``cuTensorMapEncodeTiled`` of a ``partita.runtime.tma.TensorMapRequest``."""
        drv = self.drv
        # Explicit cuuint32_t / cuuint64_t: cuda-bindings before 13.4 refuses plain ints here
        u32, u64 = drv.cuuint32_t, drv.cuuint64_t
        encoded = self._call(drv.cuTensorMapEncodeTiled(
            drv.CUtensorMapDataType(DATA_TYPES[request.dtype]), u32(request.rank), request.address,
            [u64(d) for d in request.dims], [u64(s) for s in request.strides], [u32(b) for b in request.box],
            [u32(e) for e in request.element_strides or (1,) * request.rank],
            drv.CUtensorMapInterleave(0), drv.CUtensorMapSwizzle(SWIZZLES[request.swizzle]),
            drv.CUtensorMapL2promotion(L2_PROMOTION_128B), drv.CUtensorMapFloatOOBfill(0)),
            f"cuTensorMapEncodeTiled(dims {request.dims}, box {request.box})")
        return TensorMap(request, struct.pack("<16Q", *(int(w) for w in encoded.opaque)))

    # -- CUDA graphs ------------------------------------------------------------
    def _record(self, stream, steps: Sequence) -> tuple[object, list]:
        """The graph (not instantiated) of what ``steps`` enqueue on ``stream``, and per
        step the kernel node it added when it is a plain kernel launch (``CudaLaunch``
        without a cluster: the one node the stream then depends on), else None."""
        drv = self.drv
        mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        self._call(drv.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")
        nodes: list = []
        try:
            for step in steps:
                step(stream)
                nodes.append(self._captured_node(stream) if _plain_kernel(step) else None)
        except BaseException:
            # Leave the stream usable (out of capture mode); the first error wins, and a
            # graph the driver still made is destroyed.
            ended = drv.cuStreamEndCapture(stream)
            if isinstance(ended, tuple) and len(ended) > 1 and ended[0] == drv.CUresult.CUDA_SUCCESS and ended[1]:
                drv.cuGraphDestroy(ended[1])
            raise
        return self._call(drv.cuStreamEndCapture(stream), "cuStreamEndCapture"), nodes

    def _captured_node(self, stream):
        """The node the capture of ``stream`` added last (what its next work would depend
        on), when that is exactly one node; None otherwise (no per-node update for it)."""
        drv = self.drv
        # (result, status, id, graph, dependencies, [edge data,] count)
        info = drv.cuStreamGetCaptureInfo(stream)
        if info[0] != drv.CUresult.CUDA_SUCCESS or \
                info[1] != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE or info[-1] != 1:
            return None
        return info[4][0]

    def capture(self, stream, steps: Sequence) -> CudaGraph:
        """Captures what ``steps`` enqueue on ``stream`` into an instantiated graph."""
        drv = self.drv
        graph, nodes = self._record(stream, steps)
        try:
            executable = self._call(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        except BaseException:
            drv.cuGraphDestroy(graph)
            raise
        return CudaGraph(self, graph, executable, list(steps), nodes)

    def update_graph(self, graph: CudaGraph, stream, steps: Sequence) -> str:
        """Points ``graph``'s executable at what ``steps`` enqueue now, the cheapest way
        that is exact:

        * ``"nodes"``: every step but plain kernel launches is the work the executable
          holds, so only the launches whose function, geometry or packed arguments
          changed are set (``cuGraphExecKernelNodeSetParams``; a decode step whose past
          length grew changes the few kernels that read the cache);
        * ``"graph"``: a capture (no instantiation) applied with ``cuGraphExecUpdate``,
          which keeps the executable when the topology is the same;
        * ``"instantiated"``: the driver refused the update (a library chose another
          plan) and the capture was instantiated again."""
        if graph.set_launches(steps):
            return "nodes"
        drv = self.drv
        fresh, nodes = self._record(stream, steps)
        result = drv.cuGraphExecUpdate(graph.executable, fresh)
        err = result[0] if isinstance(result, tuple) else result
        if err == drv.CUresult.CUDA_SUCCESS:
            # The executable's nodes are still named by the graph it was instantiated
            # from, which stays; the capture only carried the new parameters.
            drv.cuGraphDestroy(fresh)
            graph.holds(steps)
            return "graph"
        try:  # another topology (a library chose another plan): instantiated again
            executable = self._call(drv.cuGraphInstantiate(fresh, 0), "cuGraphInstantiate")
        except BaseException:
            drv.cuGraphDestroy(fresh)
            raise
        graph.destroy()
        graph.graph, graph.executable = fresh, executable
        graph.instantiated(list(steps), nodes)
        return "instantiated"

    # -- modules and events ------------------------------------------------
    def load_module(self, cubin: bytes) -> CudaModule:
        return CudaModule(self, cubin)

    def create_event(self):
        """An event that can time (``partita.runtime.profile``)."""
        return self._call(self.drv.cuEventCreate(0), "cuEventCreate")

    def record_event(self, event, stream) -> None:
        self._call(self.drv.cuEventRecord(event, stream), "cuEventRecord")

    def elapsed_ms(self, start, stop) -> float:
        """Milliseconds between two recorded events, once ``stop`` has completed."""
        self._call(self.drv.cuEventSynchronize(stop), "cuEventSynchronize")
        return float(self._call(self.drv.cuEventElapsedTime(start, stop), "cuEventElapsedTime"))

    def destroy_event(self, event) -> None:
        self._call(self.drv.cuEventDestroy(event), "cuEventDestroy")

    def wait_for(self, producer, stream) -> None:
        """Orders ``stream`` after what ``producer`` (a stream handle, ``1``/``2`` the legacy
        and per-thread default streams) has enqueued so far: an event recorded there and
        waited for here, without blocking the host (the CUDA array interface's ``stream``)."""
        drv = self.drv
        event = self._call(drv.cuEventCreate(2), "cuEventCreate")  # CU_EVENT_DISABLE_TIMING
        try:
            self._call(drv.cuEventRecord(event, producer), "cuEventRecord (on the input's stream)")
            self._call(drv.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")
        finally:
            drv.cuEventDestroy(event)  # released once the wait is done


class PinnedStaging:
    """Two page-locked host buffers of ``chunk_bytes`` that weights go up through, in
    chunks, on the plan's stream: a weight read from a mapped file is copied into one
    buffer while the other's copy to the device runs, so host memory for the upload is
    two chunks whatever the model's size (and the copy is a real asynchronous DMA, which
    pageable memory is not). An event per buffer says when the device is done with it."""

    def __init__(self, device: CudaDevice, chunk_bytes: int, buffers: int = 2):
        self.device, self.chunk = device, max(1, int(chunk_bytes))
        self.hosts: list[int] = []
        self.events: list[int] = []
        self.pending = [False] * buffers
        self.next = 0
        try:
            for _ in range(buffers):
                self.hosts.append(int(device._call(device.drv.cuMemHostAlloc(self.chunk, 0), "cuMemHostAlloc")))
                self.events.append(device._call(device.drv.cuEventCreate(2), "cuEventCreate"))  # no timing
        except BaseException:
            self.close()
            raise

    def upload(self, ptr: int, array: np.ndarray, stream, dtype: np.dtype | None = None) -> None:
        """``array`` to device address ``ptr`` on ``stream``, chunk by chunk, as ``dtype``
        (converted into the staging buffer: a weight stored at another type than it is
        computed in). A strided array (a permuted weight viewed in its file) is laid out
        whole rows at a time into the staging buffer, never as a whole copy."""
        dtype = array.dtype if dtype is None else np.dtype(dtype)
        source = array.reshape(1) if array.ndim == 0 else array
        row = source[0].size * dtype.itemsize  # device bytes of one row
        if source.flags.c_contiguous or row > self.chunk:
            source = np.ascontiguousarray(source).reshape(-1)  # no copy when contiguous
            row, step = dtype.itemsize, max(1, self.chunk // dtype.itemsize)
        else:
            step = self.chunk // row
        drv = self.device.drv
        for at in range(0, source.shape[0], step):
            piece = source[at : at + step]
            nbytes = piece.size * dtype.itemsize
            k, self.next = self.next, (self.next + 1) % len(self.hosts)
            if self.pending[k]:  # the device may still be reading this buffer
                self.device._call(drv.cuEventSynchronize(self.events[k]), "cuEventSynchronize")
            staged = (ctypes.c_uint8 * nbytes).from_address(self.hosts[k])
            np.copyto(np.frombuffer(staged, dtype).reshape(piece.shape), piece, casting="unsafe")
            self.device._call(drv.cuMemcpyHtoDAsync(ptr + at * row, self.hosts[k], nbytes, stream), "cuMemcpyHtoDAsync")
            self.device._call(drv.cuEventRecord(self.events[k], stream), "cuEventRecord")
            self.pending[k] = True

    def close(self) -> None:
        """Waits for the last copies, then frees the buffers and events."""
        drv = self.device.drv
        for k, event in enumerate(self.events):
            if self.pending[k]:
                drv.cuEventSynchronize(event)
            drv.cuEventDestroy(event)
        for host in self.hosts:
            drv.cuMemFreeHost(host)
        self.hosts, self.events = [], []


def _free_quietly(buf) -> None:
    """Frees ``buf`` while another error propagates: that error is the one to report."""
    try:
        buf.free()
    except Exception:
        pass


def _dim3(values: Sequence[int]) -> tuple[int, int, int]:
    out = tuple(int(x) for x in values) + (1,) * (3 - len(values))
    return out  # type: ignore[return-value]


def _packed(args: Sequence[tuple[str, object]], layout: ArgumentLayout | None = None):
    """The C-ABI argument buffer and the ``kernelParams`` array pointing into it (both
    ctypes objects the launch keeps alive)."""
    if layout is None:
        layout = ArgumentLayout.of(kind for kind, _ in args)
    payload, offsets = bytes(layout.pack([value for _, value in args])), layout.offsets
    buf = ctypes.create_string_buffer(payload, max(8, len(payload)))
    base = ctypes.addressof(buf)
    kparams = (ctypes.c_void_p * max(1, len(offsets)))(*[base + o for o in offsets])
    return buf, kparams, tuple(offsets)


@dataclass
class CudaFunction:
    """A kernel of a loaded module, with its shared-memory opt-in done."""

    module: CudaModule
    name: str
    handle: object


class CudaLaunch:
    """One kernel launch with its arguments packed once: calling it is one
    ``cuLaunchKernel`` on the given stream."""

    __slots__ = (
        "_address",
        "_cluster",
        "_config",
        "_launch",
        "args",
        "block",
        "buffer",
        "device",
        "function",
        "grid",
        "kparams",
        "offsets",
        "operands",
        "smem",
    )

    def __init__(self, device: CudaDevice, function: CudaFunction, grid, block, smem, buffer, kparams, offsets):
        self.device, self.function, self.grid, self.block, self.smem = device, function, grid, block, smem
        self.buffer, self.kparams, self.offsets = buffer, kparams, offsets
        self._address = ctypes.addressof(kparams)
        self._launch = device.drv.cuLaunchKernel
        self._config = None
        self._cluster: tuple[int, int, int] | None = None
        self.args: tuple = ()

    def clone(self) -> CudaLaunch:
        """The same launch with its own copy of the packed arguments (a bound plan patches
        the pointers of its own launches)."""
        buffer = ctypes.create_string_buffer(self.buffer.raw, len(self.buffer))
        base = ctypes.addressof(buffer)
        kparams = (ctypes.c_void_p * len(self.kparams))(*[base + o for o in self.offsets])
        copy = CudaLaunch(self.device, self.function, self.grid, self.block, self.smem, buffer, kparams, self.offsets)
        copy.args, copy.operands = self.args, self.operands
        if self._cluster is not None:
            copy.with_cluster(self._cluster)
        return copy

    @property
    def params(self) -> bytes:
        return self.buffer.raw

    def set_pointer(self, arg: int, ptr: int) -> None:
        """Rewrites pointer argument ``arg`` in the packed buffer (a zero-copy input); a TMA
        descriptor's address is opaque, so that argument is encoded again."""
        kind, value = self.args[arg] if self.args and arg < len(self.args) else ("ptr", None)
        if kind == "tensormap":
            encoded = self.device.encode_tensor_map(value.request.at(ptr))  # type: ignore[union-attr]
            self.args = (*self.args[:arg], ("tensormap", encoded), *self.args[arg + 1:])
            ctypes.memmove(ctypes.addressof(self.buffer) + self.offsets[arg], encoded.raw, len(encoded.raw))
            return
        struct.pack_into("<Q", self.buffer, self.offsets[arg], ptr)

    def with_cluster(self, cluster: tuple[int, int, int]) -> None:
        """Launch through ``cuLaunchKernelEx`` with ``cluster`` CTAs per cluster."""
        drv = self.device.drv
        config = drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = self.grid
        config.blockDimX, config.blockDimY, config.blockDimZ = self.block
        config.sharedMemBytes = self.smem
        attribute = drv.CUlaunchAttribute()
        attribute.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = cluster
        config.attrs, config.numAttrs = [attribute], 1
        self._config, self._cluster = config, cluster

    def __call__(self, stream) -> None:
        if self._config is not None:
            self._config.hStream = stream
            result = self.device.drv.cuLaunchKernelEx(self._config, self.function.handle, self._address, 0)
            err = result[0] if isinstance(result, tuple) else result
            if err != self.device.drv.CUresult.CUDA_SUCCESS:
                self.device._call(result, f"cuLaunchKernelEx({self.function.name})")
            return
        g, b = self.grid, self.block
        result = self._launch(self.function.handle, g[0], g[1], g[2], b[0], b[1], b[2], self.smem, stream, self._address, 0)
        err = result[0] if isinstance(result, tuple) else result
        if err != self.device.drv.CUresult.CUDA_SUCCESS:
            self.device._call(result, f"cuLaunchKernel({self.function.name})")


def _plain_kernel(step) -> bool:
    """A step that is one kernel node whose parameters can be set in an executable graph."""
    return type(step) is CudaLaunch and step._cluster is None


def _kernel_params(step) -> tuple | None:
    """What a kernel node holds of a launch (function, geometry, argument bytes); None
    for any other step."""
    if type(step) is not CudaLaunch:
        return None
    return step.function.module, step.function.name, step.grid, step.block, step.smem, step.buffer.raw


class CudaGraph:
    """An instantiated CUDA graph: ``launch(stream)`` replays it with one call.

    It keeps the steps it was instantiated from (``origin``), the kernel node of each
    plain launch among them (``nodes``: handles of the graph instantiated, the ones
    ``cuGraphExecKernelNodeSetParams`` names) and what each kernel node of the
    executable holds now (``params``), so an update can set only the launches that
    changed."""

    def __init__(self, device: CudaDevice, graph: object, executable: object, steps: list, nodes: list):
        self.device, self.graph, self.executable = device, graph, executable
        self.instantiated(steps, nodes)

    def instantiated(self, steps: list, nodes: list) -> None:
        self.origin, self.nodes = steps, nodes
        self.holds(steps)

    def holds(self, steps: Sequence) -> None:
        """The executable now runs ``steps`` (after an update of every node)."""
        self.current = list(steps)
        self.params = [_kernel_params(step) for step in steps]

    def set_launches(self, steps: Sequence) -> bool:
        """Sets the kernel nodes whose launch changed, when every other step is the work
        the executable holds as instantiated (library calls, copies and cluster launches
        the same objects, packed alike): their nodes, and so the pairing of each plain
        launch with its node, are unchanged. False (nothing set) otherwise."""
        if len(steps) != len(self.origin):
            return False
        changed = []
        for i, step in enumerate(steps):
            params = _kernel_params(step)
            if self.nodes[i] is None:
                if step is not self.origin[i] or self.current[i] is not step or params != self.params[i]:
                    return False
            elif not _plain_kernel(step):
                return False
            elif params != self.params[i]:
                changed.append((i, step, params))
        drv = self.device.drv
        for i, launch, params in changed:
            node = drv.CUDA_KERNEL_NODE_PARAMS()
            node.func = launch.function.handle
            node.gridDimX, node.gridDimY, node.gridDimZ = launch.grid
            node.blockDimX, node.blockDimY, node.blockDimZ = launch.block
            node.sharedMemBytes = launch.smem
            node.kernelParams = launch._address  # the driver copies the arguments now
            node.extra = 0
            result = drv.cuGraphExecKernelNodeSetParams(self.executable, self.nodes[i], node)
            if (result[0] if isinstance(result, tuple) else result) != drv.CUresult.CUDA_SUCCESS:
                return False  # a refused node (a function it cannot take): a whole update instead
            self.params[i] = params
        self.current = list(steps)
        return True

    def launch(self, stream) -> None:
        self.device._call(self.device.drv.cuGraphLaunch(self.executable, stream), "cuGraphLaunch")

    def destroy(self) -> None:
        drv = self.device.drv
        if self.executable is not None:
            drv.cuGraphExecDestroy(self.executable)
            drv.cuGraphDestroy(self.graph)
            self.executable = None


class CudaModule:
    """A cubin loaded with ``cuModuleLoadData``."""

    def __init__(self, device: CudaDevice, cubin: bytes):
        self.device = device
        self._image = bytes(cubin)  # keep alive while loading
        device.make_current()
        self.module = device._call(device.drv.cuModuleLoadData(self._image), "cuModuleLoadData")
        self._functions: dict[str, object] = {}
        self._smem_opt_in: dict[str, int] = {}

    def function(self, name: str):
        fn = self._functions.get(name)
        if fn is None:
            fn = self.device._call(self.device.drv.cuModuleGetFunction(self.module, name.encode()),
                                   f"cuModuleGetFunction({name})")
            self._functions[name] = fn
        return fn

    def kernel(self, name: str, smem: int = 0, emulation=None) -> CudaFunction:
        """The kernel ``name``, opted in to ``smem`` bytes of dynamic shared memory
        (``emulation`` is for simulated devices and unused here)."""
        fn = self.function(name)
        self._ensure_smem(name, fn, int(smem))
        return CudaFunction(self, name, fn)

    def global_int(self, name: str) -> int:
        """Read a ``__device__ int`` (e.g. ``<entry>_smem_bytes``)."""
        drv = self.device.drv
        ptr, size = self.device._call(drv.cuModuleGetGlobal(self.module, name.encode()), f"cuModuleGetGlobal({name})")
        out = np.zeros(1, dtype=np.int32)
        self.device._call(drv.cuMemcpyDtoH(out.ctypes.data, ptr, 4), "cuMemcpyDtoH")
        return int(out[0])

    def _ensure_smem(self, name: str, fn, smem: int) -> None:
        if smem < LARGE_SMEM or self._smem_opt_in.get(name, 0) >= smem:
            return
        drv = self.device.drv
        self.device._call(drv.cuFuncSetAttribute(
            fn, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
            f"cuFuncSetAttribute({name}, MAX_DYNAMIC_SHARED_SIZE_BYTES={smem})")
        self._smem_opt_in[name] = smem

    def launch(self, name: str, grid: Sequence[int], block: Sequence[int],
               args: Sequence[tuple[str, object]], smem: int = 0, stream=0) -> None:
        """Launch ``name`` with C-ABI-packed ``args`` (see ``partita.runtime.arguments.pack_kernel_args``)."""
        self.device.prepare_launch(self.kernel(name, smem), grid, block, smem, args)(stream)

    def unload(self) -> None:
        if self.module is not None:
            self.device._call(self.device.drv.cuModuleUnload(self.module), "cuModuleUnload")
            self.module = None


def launch_entry(module: CudaModule, entry, pointers: dict[str, int],
                 dims: dict[str, int] | None = None, smem: int | None = None) -> None:
    """Launch a CUTLASS entry (an ``EntryInfo`` from the emitter) with its geometry."""
    if smem is None:
        smem = module.global_int(entry.smem_symbol)
    module.launch(entry.name, entry.grid(dims), entry.block, entry.args(pointers, dims), smem)
