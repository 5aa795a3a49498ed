"""A recording stand-in for ``cuda.bindings.driver``: the calls ``CudaDevice`` makes, with
the same return conventions (``(CUresult, value...)``), counted one by one, and as strict
as the driver where the driver is strict.

Device memory is real host memory (its addresses are the "device pointers"), so copies
move real bytes; kernels do not run (their outputs keep what the memory held), launches
are recorded with their stream, argument-buffer address and, for a kernel of a real cubin
(its parameters' sizes read from it), the bytes of each argument at the launch or capture
(``arguments``: what the driver copies then; a later change to the buffer is not seen). Stream capture records
launches and asynchronous copies into a graph instead of running them; ``cuGraphLaunch``
replays the record. ``fail`` makes the named call return an error (``{"cuLaunchKernel": 719}``).

What the real driver refuses, this one refuses too:

* the current context is per thread: a call that needs one, made from a thread that has
  not made a context current, is ``CUDA_ERROR_INVALID_CONTEXT``;
* while a thread captures a stream (thread-local mode), a synchronous allocation, copy,
  memset, synchronization or module load from that thread is
  ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`` and invalidates the capture (its
  ``cuStreamEndCapture`` is then ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``); libraries
  ask ``check_not_capturing`` before they create plans;
* launch limits: block dims and threads per block, grid dims, dynamic shared memory at or
  above 48 KiB without the function's opt-in, static + dynamic shared memory above the
  device's opt-in maximum (``static_smem`` holds a kernel's static shared memory);
* pointer alignment: ``alignment[kernel] = {argument index: bytes}`` (what the kernel
  was compiled for); a misaligned pointer launches, then the context holds the sticky
  ``CUDA_ERROR_MISALIGNED_ADDRESS`` that every later call returns;
* stream order: ``log`` lists the asynchronous work in the order it was enqueued, with
  its stream, and ``cuStreamWaitEvent`` records which stream waited for which; a copy
  that reads bytes another stream wrote, with no event wait or synchronization ordering
  it after that write, is a race, listed in ``races`` (the hardware would read stale
  bytes without a word);
* graph nodes: ``cuStreamGetCaptureInfo`` names the node a capture added last;
  ``cuGraphExecKernelNodeSetParams`` takes only a kernel node of the graph the executable
  was instantiated from, while that graph lives (the driver's rule: a node of a graph
  later applied with ``cuGraphExecUpdate``, or of a destroyed graph, names nothing), and
  checks the new launch's limits as a launch would;
* TMA and clusters (Hopper): ``cuTensorMapEncodeTiled`` checks the driver's rules (sm_90 or
  newer, rank 1..5, a known data type, a 16-byte-aligned global address, global strides
  that are multiples of 16 bytes below 2^40, box dims 1..256 whose inner extent is a
  multiple of 16 bytes and fits the swizzle width, element strides 1..8) and returns a
  descriptor whose bytes name the request (``tensor_maps`` lists what was encoded); its
  rank and per-dimension lists must be ``cuuint32_t`` / ``cuuint64_t`` (a TypeError for a
  plain int, as cuda-bindings 13.3 raises on the GPU);
  ``cuLaunchKernelEx`` takes a ``CUlaunchConfig``: grid, block and shared memory as
  ``cuLaunchKernel`` (opt-in above 48 KiB), a cluster-dimension attribute of at most 8
  CTAs (16 with the non-portable opt-in) that divides the grid, only on sm_90 or newer;
* everything created is tracked until destroyed: ``live()`` lists what ``close()``
  left behind (memory, modules, streams, events, graphs, retained contexts);
* events time work as the driver does, on a stand-in clock: each stream has a clock (in
  microseconds) that the work it executes advances, a kernel launch by
  ``kernel_us[name]`` (default ``launch_us``), a library call by ``library_us[name]``
  (default ``launch_us``), a copy by its bytes at ``copy_bytes_per_us``; an event
  recorded on a stream takes its clock, and ``cuEventElapsedTime`` is the difference in
  milliseconds. Deterministic, derived from the recorded work only; an event created
  with ``CU_EVENT_DISABLE_TIMING``, or not yet recorded, cannot be timed (as the driver
  says).
"""

from __future__ import annotations

import ctypes
import threading
from collections import Counter
from types import SimpleNamespace

import numpy as np

from partita.lowering.cubin import CubinError, kernel_params

SUCCESS = 0
INVALID_VALUE = 1
INVALID_CONTEXT = 201
INVALID_HANDLE = 400
NOT_READY = 600
MISALIGNED_ADDRESS = 716
CAPTURE_UNSUPPORTED = 900
CAPTURE_INVALIDATED = 901
GRAPH_EXEC_UPDATE_FAILURE = 910


class CUresult(int):
    CUDA_SUCCESS = SUCCESS


_ERRORS = {1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS",
           719: "CUDA_ERROR_LAUNCH_FAILED", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU", 201: "CUDA_ERROR_INVALID_CONTEXT",
           716: "CUDA_ERROR_MISALIGNED_ADDRESS", 900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
           901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", 910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
           400: "CUDA_ERROR_INVALID_HANDLE", 600: "CUDA_ERROR_NOT_READY"}

#: Calls that need no current context (device queries, init, the primary context's own).
_CONTEXT_FREE = {"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDevicePrimaryCtxRetain",
                 "cuDevicePrimaryCtxRelease", "cuCtxSetCurrent", "cuDeviceGetAttribute", "cuDeviceGetName"}
#: Calls the driver refuses from a capturing thread (they would synchronize with the device).
_UNSAFE_IN_CAPTURE = {"cuMemAlloc", "cuMemFree", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemsetD8", "cuCtxSynchronize",
                      "cuStreamSynchronize", "cuEventSynchronize", "cuModuleLoadData", "cuModuleUnload"}
#: Streams the driver names by number (the legacy and the per-thread default streams).
_DEFAULT_STREAMS = {0, 1, 2}
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
LARGE_SMEM = 48 * 1024
#: cudaDevAttrMaxSharedMemoryPerBlockOptin by compute capability.
SMEM_OPT_IN = {(9, 0): 232448, (8, 0): 166912, (8, 6): 101376, (8, 9): 101376, (7, 5): 65536}


class _SizedInt(int):
    """``cuda.bindings``' ``cuuint32_t`` / ``cuuint64_t``: what ``cuTensorMapEncodeTiled``
    takes for its rank and its per-dimension lists (cuda-bindings 13.3 refuses plain ints
    there, with a TypeError; 13.4 converts them)."""


class cuuint32_t(_SizedInt):  # noqa: N801 - the binding's name
    pass


class cuuint64_t(_SizedInt):  # noqa: N801 - the binding's name
    pass


def _sized(value, kind: type) -> int:
    if not isinstance(value, kind):
        raise TypeError(f"Cannot convert {type(value).__name__} to cuda.bindings.driver.{kind.__name__}")
    return int(value)


class RecordingDriver:
    """Counts every call in ``calls``; see the module docstring."""

    CUresult = CUresult
    CUdevice_attribute = SimpleNamespace(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR=75,
                                         CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR=76,
                                         CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT=16)
    CUfunction_attribute = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)
    CUstreamCaptureMode = SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)
    CUstreamCaptureStatus = SimpleNamespace(CU_STREAM_CAPTURE_STATUS_NONE=0, CU_STREAM_CAPTURE_STATUS_ACTIVE=1,
                                            CU_STREAM_CAPTURE_STATUS_INVALIDATED=2)
    # cuda.bindings' enums are IntEnums called with their value; ints stand in for them
    CUtensorMapDataType = CUtensorMapInterleave = CUtensorMapSwizzle = int
    CUtensorMapL2promotion = CUtensorMapFloatOOBfill = int
    cuuint32_t, cuuint64_t = cuuint32_t, cuuint64_t
    CUlaunchAttributeID = SimpleNamespace(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION=4)
    #: CUtensorMapDataType -> element bytes (UINT8, UINT16, UINT32, INT32, UINT64, INT64,
    #: FLOAT16, FLOAT32, FLOAT64, BFLOAT16, ...)
    TENSOR_MAP_BYTES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}
    TENSOR_MAP_SWIZZLE = {0: 0, 1: 32, 2: 64, 3: 128}

    class CUlaunchConfig:
        def __init__(self):
            self.gridDimX = self.gridDimY = self.gridDimZ = 1
            self.blockDimX = self.blockDimY = self.blockDimZ = 1
            self.sharedMemBytes, self.hStream, self.attrs, self.numAttrs = 0, 0, [], 0

    class CUlaunchAttribute:
        def __init__(self):
            self.id = 0
            self.value = SimpleNamespace(clusterDim=SimpleNamespace(x=0, y=0, z=0))

    class CUDA_KERNEL_NODE_PARAMS:  # noqa: N801 - the binding's name
        def __init__(self):
            self.func = self.kern = self.ctx = None
            self.gridDimX = self.gridDimY = self.gridDimZ = 0
            self.blockDimX = self.blockDimY = self.blockDimZ = 0
            self.sharedMemBytes, self.kernelParams, self.extra = 0, 0, 0

    def __init__(self, *, version: int = 13000, arch: tuple[int, int] = (9, 0), devices: int = 1, fail=None,
                 kernel_us=None, library_us=None, launch_us: float = 5.0, copy_bytes_per_us: float = 1000.0,
                 sm_count: int = 132):
        self.version, self.arch, self.devices, self.sm_count = version, arch, devices, sm_count
        self.calls: Counter[str] = Counter()
        self.images: list[bytes] = []
        self.fail = dict(fail or {})
        self.memory: dict[int, np.ndarray] = {}
        self.pinned: dict[int, np.ndarray] = {}  # cuMemHostAlloc
        self.launches: list[dict] = []  # executed (eagerly or by a graph)
        self.log: list[tuple] = []  # (what, stream, ...) of asynchronous work, in enqueue order
        self.func_attributes: dict[tuple[str, int], int] = {}
        self.static_smem: dict[str, int] = {}
        self.alignment: dict[str, dict[int, int]] = {}
        self.param_sizes: dict[tuple, list[int]] = {}  # function -> its parameters' sizes, from its cubin
        self._images: dict[int, bytes] = {}  # module -> the image it was loaded from
        self.tensor_maps: list[dict] = []  # cuTensorMapEncodeTiled requests that succeeded
        self.non_portable_clusters: set[str] = set()  # kernels opted in to 16-CTA clusters
        self.sticky: int | None = None
        self.current: dict[int, object] = {}  # thread id -> context
        self.retained = 0
        self.streams: set[int] = set()
        self.modules: set[int] = set()
        self.events: dict[int, object] = {}  # event -> the stream it was last recorded on
        self.waits: list[tuple] = []  # (stream, the stream it waited for)
        self.races: list[tuple] = []  # (reading stream, writing stream, address)
        self._work: Counter = Counter()  # stream -> asynchronous operations enqueued so far
        self._seen: dict[int, dict] = {}  # stream -> {stream: operations it is ordered after}
        self._writes: list[tuple] = []  # (start, end, stream, operation number) not yet synchronized
        self._capturing: dict[int, list] = {}
        self._capture_graph: dict[int, int] = {}  # capturing stream -> the graph it records into
        self._capture_thread: dict[int, int] = {}
        self._invalidated: set[int] = set()
        self._graphs: dict[int, list] = {}
        self._execs: dict[int, list] = {}  # instantiated graph -> its records
        self._next = 0x1000  # clear of the numbered default streams (0, 1, 2)
        # The stand-in clock (see the module docstring).
        self.kernel_us, self.library_us = dict(kernel_us or {}), dict(library_us or {})
        self.launch_us, self.copy_bytes_per_us = float(launch_us), float(copy_bytes_per_us)
        self.clock: Counter = Counter()  # stream -> microseconds of work it has executed
        self._timing: dict[int, bool] = {}  # event -> created able to time
        self._event_us: dict[int, float] = {}  # event -> its stream's clock when recorded

    # -- bookkeeping -------------------------------------------------------------
    def _handle(self) -> int:
        self._next += 1
        return self._next

    def _call(self, name: str, *values):
        self.calls[name] += 1
        err = self._refusal(name)
        if err:
            return (err, *([None] * len(values))) if values else (err,)
        return (SUCCESS, *values)

    def _refusal(self, name: str) -> int:
        if name in self.fail:
            return self.fail[name]
        if name in _CONTEXT_FREE:
            return SUCCESS
        if self.current.get(threading.get_ident()) is None:
            return INVALID_CONTEXT
        if self.sticky is not None:
            return self.sticky
        if name in _UNSAFE_IN_CAPTURE:
            mine = [s for s, t in self._capture_thread.items() if t == threading.get_ident()]
            if mine:
                self._invalidated.update(mine)
                return CAPTURE_UNSUPPORTED
        return SUCCESS

    def capturing(self, stream=None) -> bool:
        """Whether ``stream`` (any stream, by default) is being captured."""
        return bool(self._capturing) if stream is None else stream in self._capturing

    def check_not_capturing(self, what: str) -> None:
        """What a library does before it creates a plan: fail inside a capture."""
        if any(t == threading.get_ident() for t in self._capture_thread.values()):
            self._invalidated.update(s for s, t in self._capture_thread.items() if t == threading.get_ident())
            raise RuntimeError(f"{what}: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (plan creation inside a stream capture)")

    def live(self) -> dict:
        """What is still allocated, loaded, created or retained (empty after a clean close)."""
        out = {"memory": len(self.memory), "modules": len(self.modules), "streams": len(self.streams),
               "events": len(self.events), "graphs": len(self._graphs), "graph_execs": len(self._execs),
               "contexts": self.retained}
        return {k: v for k, v in out.items() if v}

    def read(self, ptr: int, nbytes: int) -> bytes:
        """The bytes at a device pointer."""
        return ctypes.string_at(int(ptr), int(nbytes))

    def reset(self) -> None:
        self.calls.clear()
        self.launches.clear()
        self.log.clear()
        self.waits.clear()

    def _stream_ok(self, stream) -> bool:
        return stream in _DEFAULT_STREAMS or stream in self.streams

    def _async(self, name: str, stream, work, *values, us: float = 0.0):
        """Asynchronous work on ``stream``: done now, or recorded into its capture (``us``:
        what it advances the stream's clock by when it is done)."""
        result = self._call(name, *values)
        if result[0] != SUCCESS:
            return result
        if not self._stream_ok(stream):
            return (INVALID_VALUE, *([None] * len(values))) if values else (INVALID_VALUE,)
        if stream in self._invalidated:
            return (CAPTURE_INVALIDATED, *([None] * len(values))) if values else (CAPTURE_INVALIDATED,)
        self.log.append((name, stream))
        if stream in self._capturing:
            self._capturing[stream].append({"name": name, "stream": stream, "work": work, "copy": True, "us": us})
        else:
            work()
            self.clock[stream] += us
        return result

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
        result = self._call("cuDevicePrimaryCtxRetain", "ctx")
        if result[0] == SUCCESS:
            self.retained += 1
        return result

    def cuDevicePrimaryCtxRelease(self, device):
        result = self._call("cuDevicePrimaryCtxRelease")
        if result[0] == SUCCESS:
            self.retained -= 1
        return result

    def cuCtxSetCurrent(self, ctx):
        result = self._call("cuCtxSetCurrent")
        if result[0] == SUCCESS:
            self.current[threading.get_ident()] = ctx
        return result

    def cuCtxSynchronize(self):
        result = self._call("cuCtxSynchronize")
        if result[0] == SUCCESS:
            self._synchronized()
        return result

    def cuDeviceGetAttribute(self, attribute, device):
        a = self.CUdevice_attribute
        value = {a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.arch[0],
                 a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.arch[1],
                 a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: self.sm_count}.get(attribute)
        if value is None:
            return (INVALID_VALUE, None)
        return self._call("cuDeviceGetAttribute", value)

    def cuDeviceGetName(self, length, device):
        return self._call("cuDeviceGetName", b"Recording GPU\0")

    # -- memory ------------------------------------------------------------------------
    def cuMemAlloc(self, nbytes):
        result = self._call("cuMemAlloc", 0)
        if result[0] != SUCCESS:
            return result
        block = np.zeros(int(nbytes), np.uint8)
        ptr = block.ctypes.data
        self.memory[ptr] = block
        return SUCCESS, ptr

    def cuMemHostAlloc(self, nbytes, flags):
        """Page-locked host memory: kept apart from device memory, so a test sees what
        went up through it."""
        result = self._call("cuMemHostAlloc", 0)
        if result[0] != SUCCESS:
            return result
        block = np.zeros(int(nbytes), np.uint8)
        self.pinned[block.ctypes.data] = block
        return SUCCESS, block.ctypes.data

    def cuMemFreeHost(self, ptr):
        result = self._call("cuMemFreeHost")
        if result[0] == SUCCESS:
            if int(ptr) not in self.pinned:
                return (INVALID_VALUE,)
            del self.pinned[int(ptr)]
        return result

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

    def _copy_async(self, name: str, dst: int, src: int, nbytes: int, stream):
        self.calls[name + ":bytes"] += int(nbytes)
        result = self._async(name, stream, lambda: ctypes.memmove(int(dst), int(src), int(nbytes)),
                             us=int(nbytes) / self.copy_bytes_per_us)
        if result[0] == SUCCESS:
            if not name.endswith("HtoDAsync"):
                self._read(stream, int(src), int(nbytes))
            if not name.endswith("DtoHAsync"):
                self._write(stream, int(dst), int(nbytes))
        return result

    # -- stream order ----------------------------------------------------------------
    def _write(self, stream, ptr: int, nbytes: int) -> None:
        self._work[stream] += 1
        self._writes.append((ptr, ptr + nbytes, stream, self._work[stream]))

    def _read(self, stream, ptr: int, nbytes: int) -> None:
        seen = self._seen.get(stream, {})
        for start, end, writer, number in self._writes:
            if writer != stream and start < ptr + nbytes and ptr < end and seen.get(writer, 0) < number:
                self.races.append((stream, writer, ptr))

    def _synchronized(self, stream=None) -> None:
        self._writes = [w for w in self._writes if stream is not None and w[2] != stream]

    def cuMemcpyHtoD(self, dst, src, nbytes):
        return self._copy("cuMemcpyHtoD", dst, src, nbytes)

    def cuMemcpyDtoH(self, dst, src, nbytes):
        return self._copy("cuMemcpyDtoH", dst, src, nbytes)

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        return self._copy_async("cuMemcpyHtoDAsync", dst, src, nbytes, stream)

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):
        return self._copy_async("cuMemcpyDtoHAsync", dst, src, nbytes, stream)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        return self._copy_async("cuMemcpyDtoDAsync", dst, src, nbytes, stream)

    def cuMemsetD8(self, ptr, value, nbytes):
        result = self._call("cuMemsetD8")
        if result[0] == SUCCESS:
            ctypes.memset(int(ptr), value, int(nbytes))
        return result

    def cuMemsetD8Async(self, ptr, value, nbytes, stream):
        return self._async("cuMemsetD8Async", stream, lambda: ctypes.memset(int(ptr), value, int(nbytes)))

    def _fill_async(self, name: str, ptr, value, dtype, count: int, pitch: int, stream):
        """A memset of ``count`` elements of ``dtype`` every ``pitch`` bytes, checked as the
        driver does: aligned to the element and inside one allocation."""
        ptr, dtype = int(ptr), np.dtype(dtype)
        span = (int(count) - 1) * pitch + dtype.itemsize if count else 0
        block = next((b for base, b in self.memory.items() if base <= ptr and ptr + span <= base + b.nbytes), None)
        if ptr % dtype.itemsize or pitch % dtype.itemsize or block is None:
            return (INVALID_VALUE,)
        start = ptr - block.ctypes.data
        view = np.ndarray((int(count),), dtype, buffer=block, offset=start, strides=(pitch,))
        self.calls[name + ":bytes"] += int(count) * dtype.itemsize
        result = self._async(name, stream, lambda: view.__setitem__(Ellipsis, np.array(value).astype(dtype)))
        if result[0] == SUCCESS:
            self._write(stream, ptr, span)
        return result

    def cuMemsetD16Async(self, ptr, value, count, stream):
        return self._fill_async("cuMemsetD16Async", ptr, value, np.uint16, count, 2, stream)

    def cuMemsetD32Async(self, ptr, value, count, stream):
        return self._fill_async("cuMemsetD32Async", ptr, value, np.uint32, count, 4, stream)

    def cuMemsetD2D32Async(self, ptr, pitch, value, width, height, stream):
        if int(width) != 1:  # the plan fills one word per row; wider rows are not modelled
            return (INVALID_VALUE,)
        return self._fill_async("cuMemsetD2D32Async", ptr, value, np.uint32, height, int(pitch), stream)

    # -- streams, events -----------------------------------------------------------------
    def cuStreamCreate(self, flags):
        result = self._call("cuStreamCreate", 0)
        if result[0] != SUCCESS:
            return result
        stream = self._handle()
        self.streams.add(stream)
        return SUCCESS, stream

    def cuStreamDestroy(self, stream):
        result = self._call("cuStreamDestroy")
        if result[0] == SUCCESS:
            if stream not in self.streams:
                return (INVALID_VALUE,)
            self.streams.discard(stream)
        return result

    def cuStreamSynchronize(self, stream):
        result = self._call("cuStreamSynchronize")
        if result[0] == SUCCESS:
            self._synchronized(stream)
        return result

    def cuEventCreate(self, flags):
        result = self._call("cuEventCreate", 0)
        if result[0] != SUCCESS:
            return result
        event = self._handle()
        self.events[event] = None
        self._timing[event] = not int(flags) & 2  # CU_EVENT_DISABLE_TIMING
        return SUCCESS, event

    def cuEventRecord(self, event, stream):
        result = self._call("cuEventRecord")
        if result[0] == SUCCESS:
            if event not in self.events or not self._stream_ok(stream):
                return (INVALID_VALUE,)
            self.events[event] = (stream, self._work[stream])
            self._event_us[event] = self.clock[stream]
            self.log.append(("cuEventRecord", stream, event))
        return result

    def cuStreamWaitEvent(self, stream, event, flags):
        result = self._call("cuStreamWaitEvent")
        if result[0] == SUCCESS:
            if event not in self.events or not self._stream_ok(stream):
                return (INVALID_VALUE,)
            producer, number = self.events[event] or (None, 0)
            seen = self._seen.setdefault(stream, {})
            seen[producer] = max(seen.get(producer, 0), number)
            self.waits.append((stream, producer))
            self.log.append(("cuStreamWaitEvent", stream, producer))
        return result

    def cuEventSynchronize(self, event):
        return self._call("cuEventSynchronize")

    def cuEventElapsedTime(self, start, stop):
        result = self._call("cuEventElapsedTime", 0.0)
        if result[0] != SUCCESS:
            return result
        if not (self._timing.get(start) and self._timing.get(stop)):
            return INVALID_HANDLE, None  # an unknown event, or one made without timing
        if start not in self._event_us or stop not in self._event_us:
            return NOT_READY, None  # never recorded
        return SUCCESS, (self._event_us[stop] - self._event_us[start]) / 1e3

    def cuEventDestroy(self, event):
        result = self._call("cuEventDestroy")
        if result[0] == SUCCESS:
            if event not in self.events:
                return (INVALID_VALUE,)
            del self.events[event]
            self._timing.pop(event, None)
            self._event_us.pop(event, None)
        return result

    # -- modules, launches ---------------------------------------------------------------
    def cuModuleLoadData(self, image):
        result = self._call("cuModuleLoadData", None)
        if result[0] != SUCCESS:
            return result
        self.images.append(bytes(image))  # what reached the driver
        module = self._handle()
        self.modules.add(module)
        self._images[module] = bytes(image)
        return SUCCESS, ("module", len(image), module)

    def cuModuleUnload(self, module):
        result = self._call("cuModuleUnload")
        if result[0] == SUCCESS:
            if module[2] not in self.modules:
                return (INVALID_VALUE,)
            self.modules.discard(module[2])
            self._images.pop(module[2], None)
            self.param_sizes = {f: sizes for f, sizes in self.param_sizes.items() if f[2] != module[2]}
        return result

    def cuModuleGetFunction(self, module, name):
        # the handle names its module: kernels of one name in two cubins are two functions
        function = ("function", name.decode(), module[2])
        result = self._call("cuModuleGetFunction", function)
        if result[0] == SUCCESS and function not in self.param_sizes:
            try:  # a real cubin (not a test's placeholder bytes) says each parameter's size
                sizes = [p.size for p in kernel_params(self._images.get(module[2], b""), name.decode())]
            except CubinError:
                sizes = []
            if sizes:
                self.param_sizes[function] = sizes
        return result

    def arguments(self, function, params: int) -> tuple[bytes, ...] | None:
        """The bytes of each argument ``params`` (a ``kernelParams`` array) points at, read
        now, as a launch or a kernel node copies them; None for a kernel of unknown
        parameters (no cubin to read them from)."""
        sizes = self.param_sizes.get(tuple(function))
        if sizes is None or not params:
            return None
        return tuple(ctypes.string_at(ctypes.c_void_p.from_address(int(params) + 8 * i).value, size)
                     for i, size in enumerate(sizes))

    def cuFuncSetAttribute(self, function, attribute, value):
        result = self._call("cuFuncSetAttribute")
        if result[0] == SUCCESS:
            if value > SMEM_OPT_IN.get(tuple(self.arch), SMEM_OPT_IN[(9, 0)]) - self.static_smem.get(function[1], 0):
                return (INVALID_VALUE,)
            self.func_attributes[(function[1], attribute)] = value
        return result

    def _launch_error(self, name: str, grid, block, smem: int) -> int:
        if any(b < 1 or b > hi for b, hi in zip(block, MAX_BLOCK)) or block[0] * block[1] * block[2] > 1024:
            return INVALID_VALUE
        if any(g < 1 or g > hi for g, hi in zip(grid, MAX_GRID)):
            return INVALID_VALUE
        opted = self.func_attributes.get((name, self.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), 0)
        if smem >= LARGE_SMEM and smem > opted:
            return INVALID_VALUE
        if smem + self.static_smem.get(name, 0) > SMEM_OPT_IN.get(tuple(self.arch), SMEM_OPT_IN[(9, 0)]):
            return INVALID_VALUE
        return SUCCESS

    def _misaligned(self, name: str, params: int) -> bool:
        """Whether a pointer argument is not aligned as the kernel was compiled to read it
        (the values are read now: a launch copies its arguments)."""
        for arg, align in self.alignment.get(name, {}).items():
            slot = ctypes.c_void_p.from_address(int(params) + 8 * arg).value
            if ctypes.c_uint64.from_address(slot).value % align:
                return True
        return False

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        record = {"name": f[1], "grid": (gx, gy, gz), "block": (bx, by, bz), "smem": smem,
                  "stream": stream, "params": params}
        result = self._call("cuLaunchKernel")
        if result[0] != SUCCESS:
            return result
        err = self._launch_error(f[1], (gx, gy, gz), (bx, by, bz), int(smem))
        if err or not self._stream_ok(stream):
            return (err or INVALID_VALUE,)
        if stream in self._invalidated:
            return (CAPTURE_INVALIDATED,)
        record["misaligned"] = self._misaligned(f[1], params)
        record["arguments"] = self.arguments(f, params)
        self.log.append(("cuLaunchKernel", stream, f[1]))
        if stream in self._capturing:
            self._capturing[stream].append(record)
        else:
            self._executed(record)
        return result

    # -- Hopper: TMA descriptors and cluster launches --------------------------------------
    def cuTensorMapEncodeTiled(self, dtype, rank, address, dims, strides, box, element_strides, interleave,
                               swizzle, l2_promotion, oob_fill):
        result = self._call("cuTensorMapEncodeTiled", None)
        if result[0] != SUCCESS:
            return result
        dtype, rank, address = int(dtype), _sized(rank, cuuint32_t), int(address)
        dims, strides = [_sized(d, cuuint64_t) for d in dims], [_sized(s, cuuint64_t) for s in strides]
        box, element_strides = [_sized(b, cuuint32_t) for b in box], [_sized(e, cuuint32_t) for e in element_strides]
        size = self.TENSOR_MAP_BYTES.get(dtype)
        width = self.TENSOR_MAP_SWIZZLE.get(int(swizzle))
        valid = (
            tuple(self.arch) >= (9, 0) and size is not None and width is not None and 1 <= rank <= 5
            and int(interleave) == 0  # what Partita encodes; interleaved layouts have rules of their own
            and len(dims) == rank and len(strides) == rank - 1 and len(box) == rank and len(element_strides) == rank
            and address % 16 == 0 and all(1 <= d <= 2**32 for d in dims)
            and all(st % 16 == 0 and 0 <= st < 2**40 for st in strides)
            and all(1 <= b <= 256 for b in box) and (box[0] * size) % 16 == 0
            and (width == 0 or box[0] * size <= width) and all(1 <= e <= 8 for e in element_strides)
        )
        if not valid:
            return INVALID_VALUE, None
        request = {"dtype": dtype, "address": address, "dims": tuple(dims), "strides": tuple(strides),
                   "box": tuple(box), "swizzle": width, "l2_promotion": int(l2_promotion), "oob_fill": int(oob_fill)}
        self.tensor_maps.append(request)
        # the descriptor's words: the address, then a reference to the request
        return SUCCESS, SimpleNamespace(opaque=[address, len(self.tensor_maps) - 1] + [0] * 14)

    def cuLaunchKernelEx(self, config, f, params, extra):
        grid = (config.gridDimX, config.gridDimY, config.gridDimZ)
        block = (config.blockDimX, config.blockDimY, config.blockDimZ)
        cluster = None
        for attribute in list(config.attrs)[: config.numAttrs]:
            if attribute.id == self.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
                d = attribute.value.clusterDim
                cluster = (int(d.x), int(d.y), int(d.z))
        record = {"name": f[1], "grid": grid, "block": block, "smem": int(config.sharedMemBytes),
                  "stream": config.hStream, "params": params, "cluster": cluster,
                  "arguments": self.arguments(f, params)}
        result = self._call("cuLaunchKernelEx")
        if result[0] != SUCCESS:
            return result
        if cluster is not None:
            ctas = cluster[0] * cluster[1] * cluster[2]
            limit = 16 if f[1] in self.non_portable_clusters else 8
            if tuple(self.arch) < (9, 0) or min(cluster) < 1 or ctas > limit \
                    or any(g % c for g, c in zip(grid, cluster)):
                return (INVALID_VALUE,)
        err = self._launch_error(f[1], grid, block, int(config.sharedMemBytes))
        stream = config.hStream
        if err or not self._stream_ok(stream):
            return (err or INVALID_VALUE,)
        if stream in self._invalidated:
            return (CAPTURE_INVALIDATED,)
        self.log.append(("cuLaunchKernelEx", stream, f[1]))
        if stream in self._capturing:
            self._capturing[stream].append(record)
        else:
            self._executed(record)
        return result

    def _executed(self, record: dict) -> None:
        self.launches.append(record)
        costs = self.library_us if record.get("library") else self.kernel_us
        self.clock[record["stream"]] += costs.get(record["name"], self.launch_us)
        if record.get("misaligned"):
            self.sticky = MISALIGNED_ADDRESS  # the kernel faults; the context is lost
        elif "work" in record:
            record["work"]()

    def enqueue(self, stream, name: str, work) -> None:
        """Library work on ``stream`` (what cuBLASLt, cuDNN or TensorRT enqueue): done now
        and recorded as a launch, or recorded into the capture and done at each replay."""
        if self.current.get(threading.get_ident()) is None:
            raise RuntimeError(f"{name}: CUDA_ERROR_INVALID_CONTEXT (no current context in this thread)")
        if not self._stream_ok(stream):
            raise RuntimeError(f"{name}: CUDA_ERROR_INVALID_HANDLE (stream {stream})")
        record = {"name": name, "stream": stream, "library": True, "work": work}
        self.log.append((name, stream))
        if stream in self._capturing:
            self._capturing[stream].append(record)
        else:
            self._executed(record)

    # -- graphs ----------------------------------------------------------------------------
    def cuStreamBeginCapture(self, stream, mode):
        result = self._call("cuStreamBeginCapture")
        if result[0] == SUCCESS:
            if stream in _DEFAULT_STREAMS or stream not in self.streams:
                return (INVALID_VALUE,)  # the legacy stream cannot be captured
            self._capturing[stream] = []
            self._capture_thread[stream] = threading.get_ident()
            self._capture_graph[stream] = self._handle()
        return result

    def cuStreamGetCaptureInfo(self, stream):
        """(result, status, capture id, graph, the nodes the next work would depend on,
        their edge data, how many): a capture's last node, one ``("node", graph, index)``."""
        result = self._call("cuStreamGetCaptureInfo")
        if result[0] != SUCCESS:
            return result[0], None, None, None, [], [], 0
        status = self.CUstreamCaptureStatus
        if stream not in self._capturing:
            return SUCCESS, status.CU_STREAM_CAPTURE_STATUS_NONE, 0, None, [], [], 0
        if stream in self._invalidated:
            return SUCCESS, status.CU_STREAM_CAPTURE_STATUS_INVALIDATED, 0, None, [], [], 0
        graph, records = self._capture_graph[stream], self._capturing[stream]
        nodes = [("node", graph, len(records) - 1)] if records else []
        return SUCCESS, status.CU_STREAM_CAPTURE_STATUS_ACTIVE, graph, graph, nodes, [], len(nodes)

    def cuStreamEndCapture(self, stream):
        self.calls["cuStreamEndCapture"] += 1
        records = self._capturing.pop(stream, None)
        self._capture_thread.pop(stream, None)
        graph = self._capture_graph.pop(stream, None)
        if records is None:
            return INVALID_VALUE, None
        if stream in self._invalidated:
            self._invalidated.discard(stream)
            return CAPTURE_INVALIDATED, None
        self._graphs[graph] = records
        return SUCCESS, graph

    def cuGraphInstantiate(self, graph, flags):
        result = self._call("cuGraphInstantiate", ("exec", graph))
        if result[0] == SUCCESS:
            if graph not in self._graphs:
                return INVALID_VALUE, None
            self._execs[graph] = list(self._graphs[graph])
        return result

    def cuGraphLaunch(self, executable, stream):
        result = self._call("cuGraphLaunch")
        if result[0] != SUCCESS:
            return result
        if executable[1] not in self._execs or not self._stream_ok(stream):
            return (INVALID_VALUE,)
        self.log.append(("cuGraphLaunch", stream))
        for record in self._execs[executable[1]]:
            if record.get("copy"):
                record["work"]()
                self.clock[stream] += record["us"]
            else:
                self._executed({**record, "stream": stream, "graph": True})
        return result

    def cuGraphExecUpdate(self, executable, graph):
        """Applies ``graph``'s node parameters to ``executable`` when the two are
        topologically identical (as many nodes, each of the same kind: kernel, library
        work or copy, in the same order); otherwise ``CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE``
        and the executable is unchanged."""
        result = self._call("cuGraphExecUpdate", None)
        if result[0] != SUCCESS:
            return result
        if executable[1] not in self._execs or graph not in self._graphs:
            return INVALID_VALUE, None
        old, new = self._execs[executable[1]], self._graphs[graph]

        def kind(record):
            return "copy" if record.get("copy") else "library" if record.get("library") else "kernel"

        if len(old) != len(new) or any(kind(a) != kind(b) for a, b in zip(old, new)):
            return GRAPH_EXEC_UPDATE_FAILURE, None
        self._execs[executable[1]] = list(new)
        return result

    def cuGraphExecKernelNodeSetParams(self, executable, node, params):
        """Sets the kernel node ``node`` of ``executable`` to ``params`` (later replays
        launch it so); ``node`` must be a kernel node of the graph the executable was
        instantiated from, and that graph must still exist."""
        result = self._call("cuGraphExecKernelNodeSetParams")
        if result[0] != SUCCESS:
            return result
        source = executable[1]
        if source not in self._execs or source not in self._graphs or node[0] != "node" or node[1] != source:
            return (INVALID_VALUE,)
        records = self._execs[source]
        index = node[2]
        if not 0 <= index < len(records) or records[index].get("copy") or records[index].get("library"):
            return (INVALID_VALUE,)
        name = params.func[1]
        grid = (params.gridDimX, params.gridDimY, params.gridDimZ)
        block = (params.blockDimX, params.blockDimY, params.blockDimZ)
        err = self._launch_error(name, grid, block, int(params.sharedMemBytes))
        if err or params.extra:
            return (err or INVALID_VALUE,)
        records[index] = {**records[index], "name": name, "grid": grid, "block": block,
                          "smem": int(params.sharedMemBytes), "params": params.kernelParams,
                          "misaligned": self._misaligned(name, params.kernelParams),
                          "arguments": self.arguments(params.func, params.kernelParams)}
        return result

    def cuGraphExecDestroy(self, executable):
        self.calls["cuGraphExecDestroy"] += 1
        self._execs.pop(executable[1], None)
        return (SUCCESS,)

    def cuGraphDestroy(self, graph):
        self.calls["cuGraphDestroy"] += 1
        self._graphs.pop(graph, None)
        return (SUCCESS,)


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
    launched = {s.function.name: (s.grid, s.block, list(s.args), s.smem) for s in bound.steps
                if hasattr(s, "function")}  # kernel launches (not a split-K kernel's barrier memset)
    drv.runtime = runtime  # its memory stays allocated (readable with drv.read) while drv lives
    return drv, launched, outs
