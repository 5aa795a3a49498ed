"""Recording stand-ins for the libraries, for tests without a GPU.

``RecordingCublasLt`` has the names the cuBLASLt handle uses (functions and enums of
``nvmath.bindings.cublasLt``), records every descriptor it is given, and on ``matmul``
computes the product with NumPy *from the descriptors* (column-major layouts, transposes,
leading dims, batch strides, epilogue) in device memory: a wrong leading dim or transpose
gives a wrong result, not just a wrong record. ``RecordingCudnn`` and ``RecordingTensorRT``
do the same for cuDNN graphs and TensorRT engines.

"Device memory" is that of the recording CUDA driver (``recording_driver.py``: host
memory at real addresses, so a launch plan's arena works).
Work a library enqueues goes through the driver's ``enqueue``, so a CUDA graph capture
records it and replays it, as on a GPU.

As strict as the libraries: cuBLASLt computes in its declared compute type (f32 inputs
rounded to TF32 under ``COMPUTE_32F_FAST_TF32``) and refuses an FP8 matmul in any form the
library refuses (not "TN", E5M2 x E5M2, rows not 16-byte aligned, compute or scale type
not f32), the cuDNN graph validates the strides
the real frontend validates at ``build()`` (unit stride of the head dim for Q, K, V and
O), a cuDNN graph builds its engine at its first execute and TensorRT needs one enqueue
after its shapes are set, neither of which may happen inside a stream capture; no
handle, descriptor, plan or context may be created inside a capture; and every object
created is tracked until destroyed (``live()``).
"""

from __future__ import annotations

import ctypes
import enum
import math
import weakref
from dataclasses import dataclass, field

import numpy as np


class DeviceMemory:
    """The allocations of a recording driver (``owner.memory``: base
    address -> bytes), looked up by any address inside them."""

    def __init__(self, owner) -> None:
        self.owner = owner

    def buffer(self, ptr: int) -> tuple[int, np.ndarray]:
        memory = self.owner.memory
        if ptr in memory:  # an allocation's own base first
            return ptr, memory[ptr]
        for base, block in memory.items():
            if base <= ptr < base + max(block.nbytes, 1):
                return base, block
        raise AssertionError(f"pointer {ptr:#x} is not device memory")

    def flat(self, ptr: int, dtype) -> np.ndarray:
        """Elements of ``dtype`` from ``ptr`` to the end of its allocation."""
        base, block = self.buffer(ptr)
        raw = block[ptr - base:]
        return raw[: raw.nbytes - raw.nbytes % np.dtype(dtype).itemsize].view(dtype)

    def enqueue(self, stream, name: str, work) -> None:
        enqueue = getattr(self.owner, "enqueue", None)
        if enqueue is None:
            work()
        else:
            enqueue(stream, name, work)

    def capturing(self, stream=None) -> bool:
        capturing = getattr(self.owner, "capturing", None)
        return bool(capturing(stream)) if capturing is not None else False

    def check_not_capturing(self, what: str) -> None:
        check = getattr(self.owner, "check_not_capturing", None)
        if check is not None:
            check(what)


def tf32(values: np.ndarray) -> np.ndarray:
    """f32 values rounded to TF32 (10 mantissa bits, round to nearest even), as the
    tensor cores read them under ``COMPUTE_32F_FAST_TF32``."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
    return rounded.astype(np.uint32).view(np.float32)


class CudaDataType(enum.IntEnum):
    CUDA_R_16F = 2
    CUDA_R_32F = 0
    CUDA_R_16BF = 14
    CUDA_R_8F_E4M3 = 28
    CUDA_R_8F_E5M2 = 29


class ComputeType(enum.IntEnum):
    COMPUTE_32F = 68
    COMPUTE_32F_FAST_TF32 = 77


class Operation(enum.IntEnum):
    N = 0
    T = 1


class Epilogue(enum.IntEnum):
    DEFAULT = 1
    RELU = 2
    BIAS = 4
    RELU_BIAS = 6
    GELU = 32
    GELU_BIAS = 36


class MatmulDescAttribute(enum.IntEnum):
    TRANSA = 3
    TRANSB = 4
    EPILOGUE = 7
    BIAS_POINTER = 8
    A_SCALE_POINTER = 17
    B_SCALE_POINTER = 18
    BIAS_DATA_TYPE = 26


class MatrixLayoutAttribute(enum.IntEnum):
    BATCH_COUNT = 5
    STRIDED_BATCH_OFFSET = 6


class MatmulPreferenceAttribute(enum.IntEnum):
    MAX_WORKSPACE_BYTES = 1


import ml_dtypes  # noqa: E402

_NP = {CudaDataType.CUDA_R_16F: np.float16, CudaDataType.CUDA_R_32F: np.float32,
       CudaDataType.CUDA_R_16BF: ml_dtypes.bfloat16, CudaDataType.CUDA_R_8F_E4M3: ml_dtypes.float8_e4m3fn,
       CudaDataType.CUDA_R_8F_E5M2: ml_dtypes.float8_e5m2}
_FP8 = (CudaDataType.CUDA_R_8F_E4M3, CudaDataType.CUDA_R_8F_E5M2)
_ATTR_TYPES = {"TRANSA": np.int32, "TRANSB": np.int32, "EPILOGUE": np.uint32, "BIAS_POINTER": np.uint64,
               "A_SCALE_POINTER": np.uint64, "B_SCALE_POINTER": np.uint64,
               "BIAS_DATA_TYPE": np.int32, "BATCH_COUNT": np.int32, "STRIDED_BATCH_OFFSET": np.int64,
               "MAX_WORKSPACE_BYTES": np.uint64}


def _read(ptr: int, size: int, name: str) -> int:
    raw = ctypes.string_at(ptr, size)
    return int(np.frombuffer(raw, _ATTR_TYPES[name])[0])


@dataclass
class Layout:
    type: int
    rows: int
    cols: int
    ld: int
    attrs: dict = field(default_factory=dict)


@dataclass
class Desc:
    compute_type: int
    scale_type: int
    attrs: dict = field(default_factory=dict)


class Preference(dict):
    """A matmul preference's attributes."""


class RecordingCublasLt:
    """The subset of ``nvmath.bindings.cublasLt`` the handle calls, recorded."""

    CudaDataType, ComputeType, Operation, Epilogue = CudaDataType, ComputeType, Operation, Epilogue
    MatmulDescAttribute, MatrixLayoutAttribute = MatmulDescAttribute, MatrixLayoutAttribute
    MatmulPreferenceAttribute = MatmulPreferenceAttribute
    matmul_heuristic_result_dtype = np.dtype([("algo", [("data_", "<u8", (8,))]), ("workspace_size", "<u8"), ("state", "<i4"),
                                              ("waves_count", "<f4"), ("reserved", "<i4", (4,))])

    def __init__(self, device, algo_workspace: int = 1 << 20):
        self.device = device
        self.memory = DeviceMemory(device)
        self.objects: dict[int, object] = {}
        self.created = 0
        self.calls: list[tuple] = []
        self.products = 0  # matmuls computed (a graph replay computes its captured ones again)
        self.algo_workspace = algo_workspace

    def _new(self, obj: object) -> int:
        self.memory.check_not_capturing("cuBLASLt object creation")
        self.created += 1
        handle = 0x100 + self.created
        self.objects[handle] = obj
        return handle

    def _destroy(self, handle: int, kind: type | str) -> None:
        obj = self.objects.pop(handle)  # a KeyError: destroyed twice, or never created
        assert obj == kind if isinstance(kind, str) else isinstance(obj, kind), f"{handle:#x} is not a {kind}"

    def live(self) -> dict:
        """Objects created and not destroyed, by kind."""
        kinds: dict[str, int] = {}
        for obj in self.objects.values():
            name = obj if isinstance(obj, str) else type(obj).__name__
            kinds[name] = kinds.get(name, 0) + 1
        return kinds

    def create(self) -> int:
        self.calls.append(("create",))
        return self._new("handle")

    def destroy(self, handle: int) -> None:
        self._destroy(handle, "handle")

    def matmul_desc_create(self, compute_type: int, scale_type: int) -> int:
        return self._new(Desc(ComputeType(compute_type), CudaDataType(scale_type)))

    def matmul_desc_destroy(self, desc: int) -> None:
        self._destroy(desc, Desc)

    def matrix_layout_destroy(self, layout: int) -> None:
        self._destroy(layout, Layout)

    def matmul_preference_destroy(self, pref: int) -> None:
        self._destroy(pref, Preference)

    def matmul_desc_set_attribute(self, desc: int, attr: int, buf: int, size: int) -> None:
        name = MatmulDescAttribute(attr).name
        self.objects[desc].attrs[name] = _read(buf, size, name)

    def matrix_layout_create(self, type_: int, rows: int, cols: int, ld: int) -> int:
        return self._new(Layout(CudaDataType(type_), rows, cols, ld))

    def matrix_layout_set_attribute(self, layout: int, attr: int, buf: int, size: int) -> None:
        name = MatrixLayoutAttribute(attr).name
        self.objects[layout].attrs[name] = _read(buf, size, name)

    def matmul_preference_create(self) -> int:
        return self._new(Preference())

    def matmul_preference_set_attribute(self, pref: int, attr: int, buf: int, size: int) -> None:
        name = MatmulPreferenceAttribute(attr).name
        self.objects[pref][name] = _read(buf, size, name)  # type: ignore[index]

    def matmul_algo_get_heuristic(self, handle, desc, a, b, c, d, pref, requested, results, count) -> None:
        self.memory.check_not_capturing("cublasLtMatmulAlgoGetHeuristic")
        self.calls.append(("heuristic", self.objects[desc], self.objects[a], self.objects[b], self.objects[d],
                           dict(self.objects[pref])))
        self._check_fp8(self.objects[desc], self.objects[a], self.objects[b], self.objects[d])
        out = np.frombuffer((ctypes.c_char * self.matmul_heuristic_result_dtype.itemsize).from_address(results),
                            self.matmul_heuristic_result_dtype)
        out["workspace_size"][0] = min(self.algo_workspace, self.objects[pref]["MAX_WORKSPACE_BYTES"])
        ctypes.c_int32.from_address(count).value = 1

    @staticmethod
    def _check_fp8(desc: Desc, a: Layout, b: Layout, d: Layout) -> None:
        """cuBLASLt's FP8 rules (its documentation's "FP8" table): A and B both 8-bit
        floats, not both E5M2, the "TN" form, 16-byte aligned leading dims, f32 compute and
        scale types, a D of f16, bf16 or f32. The real library finds no algorithm (status
        NOT_SUPPORTED) for anything else."""
        if a.type not in _FP8 and b.type not in _FP8:
            return
        assert a.type in _FP8 and b.type in _FP8, "FP8 matmuls need both A and B in FP8"
        assert (a.type, b.type) != (CudaDataType.CUDA_R_8F_E5M2,) * 2, "E5M2 x E5M2 is not supported"
        assert desc.attrs.get("TRANSA") == Operation.T and desc.attrs.get("TRANSB", 0) == Operation.N, \
            "FP8 matmuls take the TN form only"
        assert desc.compute_type == ComputeType.COMPUTE_32F and desc.scale_type == CudaDataType.CUDA_R_32F
        assert d.type in (CudaDataType.CUDA_R_16F, CudaDataType.CUDA_R_16BF, CudaDataType.CUDA_R_32F)
        for layout in (a, b, d):
            assert layout.ld * np.dtype(_NP[layout.type]).itemsize % 16 == 0, "FP8 leading dims are 16-byte multiples"

    def _scalar(self, ptr: int) -> float:
        """An f32 scale read from device memory (when the product runs, as the GPU reads it)."""
        base, memory = self._buffer(ptr)
        return float(memory.view(np.float32)[(ptr - base) // 4])

    # -- the product, from the descriptors --------------------------------------------
    def _matrix(self, ptr: int, layout: Layout, batch_index: int, compute: ComputeType) -> np.ndarray:
        dtype = _NP[layout.type]
        base, memory = self._buffer(ptr)
        offset = (ptr - base) // np.dtype(dtype).itemsize + batch_index * layout.attrs.get("STRIDED_BATCH_OFFSET", 0)
        flat = memory.view(dtype)
        # Column-major rows x cols with leading dim ld: element (i, j) at j*ld + i.
        idx = offset + np.arange(layout.rows)[:, None] + layout.ld * np.arange(layout.cols)[None, :]
        values = flat[idx]
        if compute == ComputeType.COMPUTE_32F_FAST_TF32 and values.dtype == np.float32:
            values = tf32(values)  # what the tensor cores multiply
        return values.astype(np.float64)

    def _buffer(self, ptr: int) -> tuple[int, np.ndarray]:
        return self.memory.buffer(ptr)

    def matmul(self, handle, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, workspace, ws_size,
               stream) -> None:
        dsc, la, lb, ld = self.objects[desc], self.objects[adesc], self.objects[bdesc], self.objects[ddesc]
        self.calls.append(("matmul", dsc, la, lb, ld, workspace, ws_size, stream))
        assert c == d and cdesc == ddesc, "D is written in place of C"
        alpha_v = ctypes.c_float.from_address(alpha).value
        assert ctypes.c_float.from_address(beta).value == 0.0
        if ws_size:
            self._buffer(workspace)  # a real device buffer of the runtime
        # What the call captures: the descriptors' values now (the bias pointer included).
        attrs = dict(dsc.attrs)
        compute = dsc.compute_type
        self.memory.enqueue(stream, "cublasLtMatmul",
                            lambda: self._product(attrs, a, la, b, lb, d, ld, alpha_v, compute))

    def _product(self, attrs: dict, a: int, la: Layout, b: int, lb: Layout, d: int, ld: Layout, alpha_v: float,
                 compute: ComputeType) -> None:
        self.products += 1
        batch = ld.attrs.get("BATCH_COUNT", 1)
        epilogue = Epilogue(attrs.get("EPILOGUE", Epilogue.DEFAULT))
        for i in range(batch):
            opa = self._matrix(a, la, i, compute)
            opb = self._matrix(b, lb, i, compute)
            if attrs.get("TRANSA", 0):
                opa = opa.T
            if attrs.get("TRANSB", 0):
                opb = opb.T
            assert opa.shape[1] == opb.shape[0], "inner dimensions disagree"
            out = alpha_v * (opa @ opb)
            for scale in ("A_SCALE_POINTER", "B_SCALE_POINTER"):
                if scale in attrs:
                    out = out * self._scalar(attrs[scale])
            assert out.shape == (ld.rows, ld.cols)
            if epilogue.name.endswith("BIAS"):
                bias_ptr = attrs["BIAS_POINTER"]
                base, memory = self._buffer(bias_ptr)
                bias_dtype = _NP[CudaDataType(attrs["BIAS_DATA_TYPE"])]
                out = out + memory.view(bias_dtype)[(bias_ptr - base) // np.dtype(bias_dtype).itemsize:][: ld.rows, None]
            if epilogue.name.startswith("RELU"):
                out = np.maximum(out, 0)
            if epilogue.name.startswith("GELU"):  # cuBLASLt's GELU: the tanh approximation
                out = 0.5 * out * (1 + np.tanh(math.sqrt(2 / math.pi) * (out + 0.044715 * out**3)))
            base, memory = self._buffer(d)
            flat = memory.view(_NP[ld.type])
            offset = (d - base) // flat.itemsize + i * ld.attrs.get("STRIDED_BATCH_OFFSET", 0)
            idx = offset + np.arange(ld.rows)[:, None] + ld.ld * np.arange(ld.cols)[None, :]
            flat[idx] = out


# ------------------------------------------------------------------------------ cuDNN
class CudnnDataType(enum.IntEnum):
    FLOAT = 0
    HALF = 2
    BFLOAT16 = 9


class HeurMode(enum.IntEnum):
    A = 1
    FALLBACK = 3


_CUDNN_NP = {CudnnDataType.HALF: np.float16, CudnnDataType.FLOAT: np.float32,
             CudnnDataType.BFLOAT16: ml_dtypes.bfloat16}


@dataclass(eq=False)
class CudnnTensor:
    name: str
    dim: list
    stride: list
    data_type: object
    is_output: bool = False

    def set_output(self, flag: bool) -> CudnnTensor:
        self.is_output = flag
        return self

    def set_dim(self, dim) -> CudnnTensor:
        self.dim = list(dim)
        return self

    def set_stride(self, stride) -> CudnnTensor:
        self.stride = list(stride)
        return self

    def set_data_type(self, data_type) -> CudnnTensor:
        self.data_type = data_type
        return self


class RecordingCudnnGraph:
    def __init__(self, lib: RecordingCudnn, **options):
        self.lib, self.options = lib, options
        self.tensors: list[CudnnTensor] = []
        self.nodes: list[tuple] = []
        self.built: list | None = None
        self.engine = False  # the execution engine, made at the first execute

    def tensor(self, name, dim, stride, data_type) -> CudnnTensor:
        assert len(dim) == len(stride)
        self.tensors.append(CudnnTensor(name, list(dim), list(stride), data_type))
        return self.tensors[-1]

    def _virtual(self, name) -> CudnnTensor:
        return CudnnTensor(name, [], [], None)

    def conv_fprop(self, image, weight, pre_padding, post_padding, stride, dilation, compute_data_type, name):
        out = self._virtual(name)
        self.nodes.append(("conv_fprop", out, image, weight, {"pre_padding": list(pre_padding),
                           "post_padding": list(post_padding), "stride": list(stride), "dilation": list(dilation),
                           "compute_data_type": compute_data_type}))
        return out

    def bias(self, input, bias, name):
        out = self._virtual(name)
        self.nodes.append(("bias", out, input, bias, {}))
        return out

    def relu(self, input, name):
        out = self._virtual(name)
        self.nodes.append(("relu", out, input, None, {}))
        return out

    def sdpa(self, q, k, v, attn_scale, generate_stats, name, bias=None):
        out = self._virtual(name)
        self.nodes.append(("sdpa", out, (q, k, v, bias), None, {"attn_scale": attn_scale, "generate_stats": generate_stats}))
        return out, None

    def build(self, modes) -> None:
        """Validates what the real frontend validates before it asks the heuristics."""
        self.lib.memory.check_not_capturing("cudnn graph build")
        kinds = [n[0] for n in self.nodes]
        if kinds == ["conv_fprop", "relu"] and self.nodes[0][2].stride[1] != 1:
            # cuDNN 9.19 on an H200: no engine for a non-NHWC convolution + ReLU without a bias
            raise RuntimeError("cudnnGraphNotSupportedError: no engine proposed a plan for this graph "
                               "(Epilogue tensors must be row major or N(D)HWC layout)")
        for kind, out, inputs, _b, _attrs in self.nodes:
            if kind != "sdpa":
                continue
            for role, t in zip("QKVO", (*inputs[:3], out)):
                if t.stride and t.stride[-1] != 1:
                    raise RuntimeError(f"[cudnn_frontend] Error: The stride for the last dimension corresponding to "
                                       f"the embedding size per head should be 1 for {role}")
            q, k, v = inputs[:3]
            if len(q.dim) != 4 or q.dim[3] != k.dim[3] or k.dim[2] != v.dim[2] or q.dim[0] != k.dim[0]:
                raise RuntimeError(f"[cudnn_frontend] Error: sdpa needs 4-D Q, K, V as (b, h, s, d) that agree, "
                                   f"got {q.dim}, {k.dim}, {v.dim}")
        self.built = list(modes)

    def get_workspace_size(self) -> int:
        return self.lib.workspace

    # -- the graph, from its descriptors ------------------------------------------
    def _view(self, t: CudnnTensor, ptr: int) -> np.ndarray:
        dtype = np.dtype(_CUDNN_NP[t.data_type])
        flat = self.lib.memory.flat(ptr, dtype)
        span = 1 + sum((d - 1) * s for d, s in zip(t.dim, t.stride))
        assert span <= flat.size, f"{t.name}: dims {t.dim} strides {t.stride} overrun its buffer"
        return np.lib.stride_tricks.as_strided(flat, shape=t.dim, strides=[s * dtype.itemsize for s in t.stride],
                                               writeable=True)

    def execute(self, pack, workspace, handle) -> None:
        assert self.built, "executed before build"
        assert handle in self.lib.handles, "executed on a destroyed cuDNN handle"
        stream = self.lib.stream_of.get(handle, 0)
        if not self.engine:  # the engine is made at the first execute: never inside a capture
            if self.lib.memory.capturing(stream):
                raise RuntimeError("cudnn graph execute: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (the execution "
                                   "engine is built at the first execute, which cannot be captured)")
            self.engine = True
        missing = [t.name for t in self.tensors if t not in pack] + [n[1].name for n in self.nodes
                                                                      if n[1].is_output and n[1] not in pack]
        if missing:  # the frontend's INVALID_VARIANT_PACK
            raise ValueError(f"[cudnn_frontend] Error: no device pointer in the variant pack for {missing}")
        self.lib.executed.append((self, dict(pack), workspace, handle))
        pack = dict(pack)
        self.lib.memory.enqueue(stream, "cudnnGraphExecute", lambda: self._evaluate(pack))

    def _evaluate(self, pack: dict) -> None:
        values = {t: self._view(t, ptr).astype(np.float64) for t, ptr in pack.items() if not t.is_output}
        tf32_inputs = self.options.get("io_data_type") == CudnnDataType.FLOAT
        for kind, out, a, b, attrs in self.nodes:
            if kind == "conv_fprop":
                x, w = values[a], values[b]
                if tf32_inputs:  # f32 convolutions may run on TF32 tensor-core engines
                    x, w = (tf32(v.astype(np.float32)).astype(np.float64) for v in (x, w))
                values[out] = _conv_nchw(x, w, attrs)
            elif kind == "bias":
                values[out] = values[a] + values[b]
            elif kind == "relu":
                values[out] = np.maximum(values[a], 0)
            else:
                q, k, v, mask = (values[t] if t is not None else None for t in a)
                s = attrs["attn_scale"] * np.einsum("bhqd,bhkd->bhqk", q, k)
                if mask is not None:
                    s = s + mask
                p = np.exp(s - s.max(-1, keepdims=True))
                values[out] = np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v)
        (y,) = [t for t in pack if t.is_output]
        assert list(values[y].shape) == y.dim, f"output dims {y.dim} disagree with the graph's {values[y].shape}"
        self._view(y, pack[y])[...] = values[y]


def _conv_nchw(x: np.ndarray, w: np.ndarray, attrs: dict) -> np.ndarray:
    (t, left), (b, r) = attrs["pre_padding"], attrs["post_padding"]
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    x = np.pad(x, [(0, 0), (0, 0), (t, b), (left, r)])
    n, c, h, wd = x.shape
    k, cg, kr, ks = w.shape
    groups = c // cg
    oh = (h - dh * (kr - 1) - 1) // sh + 1
    ow = (wd - dw * (ks - 1) - 1) // sw + 1
    out = np.zeros((n, k, oh, ow))
    kg = k // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg]
        for i in range(kr):
            for j in range(ks):
                patch = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, g * kg:(g + 1) * kg] += np.einsum("nchw,kc->nkhw", patch, w[g * kg:(g + 1) * kg, :, i, j])
    return out


class RecordingCudnn:
    """The subset of the ``cudnn`` frontend module the handle uses, recorded; ``execute``
    evaluates the graph with NumPy from its tensors' dims and strides."""

    data_type = CudnnDataType
    heur_mode = HeurMode

    def __init__(self, device, workspace: int = 4096):
        self.memory = DeviceMemory(device)
        self.workspace = workspace
        self.stream_of: dict = {}  # handle -> the stream set on it
        self.graphs: list[RecordingCudnnGraph] = []
        self.executed: list[tuple] = []
        self.streams: list[int] = []
        self.handles: set[str] = set()
        self.created = 0

    def create_handle(self) -> str:
        self.memory.check_not_capturing("cudnnCreate")
        self.created += 1
        handle = f"cudnn-handle-{self.created}"
        self.handles.add(handle)
        return handle

    def destroy_handle(self, handle) -> None:
        self.handles.remove(handle)  # a KeyError: destroyed twice, or never created

    def live(self) -> dict:
        return {"handles": len(self.handles)} if self.handles else {}

    def set_stream(self, handle, stream) -> None:
        self.streams.append(stream)
        self.stream_of[handle] = stream

    def pygraph(self, **options) -> RecordingCudnnGraph:
        assert options.get("handle") in self.handles, "a graph on a handle that does not exist"
        self.graphs.append(RecordingCudnnGraph(self, **options))
        return self.graphs[-1]


# --------------------------------------------------------------------------- TensorRT
class RecordingTensorRT:
    """The subset of the ``tensorrt`` module the handle uses. The "engine" it builds is
    the ONNX model it parsed (checked with ``onnx.checker``), serialized with the profile
    shapes; executing it runs the model under onnxruntime in device memory
    at the addresses the context was given."""

    __version__ = "11.0.0-stand-in"

    class Logger:
        WARNING = 2

        def __init__(self, level):
            self.level = level

    class BuilderFlag(enum.IntEnum):  # TensorRT 11: strongly typed, no FP16/BF16/INT8 flags
        TF32 = 1

    class MemoryPoolType(enum.IntEnum):
        WORKSPACE = 0

    class TensorIOMode(enum.IntEnum):
        INPUT = 1
        OUTPUT = 2

    class ExecutionContextAllocationStrategy(enum.IntEnum):
        USER_MANAGED = 2

    def __init__(self, device, workspace: int = 8192):
        self.device = device
        self.memory = DeviceMemory(device)
        self.workspace = workspace
        self.builds: list[dict] = []
        self.deserialized = 0
        self.executions: list[dict] = []
        self.objects: weakref.WeakSet = weakref.WeakSet()  # engines and contexts alive
        lib = self

        class Builder:
            def __init__(self, logger):
                self.flags: set = set()

            def create_network(self, flags):
                return {"model": None, "flags": flags}

            def create_builder_config(self):
                return Config()

            def create_optimization_profile(self):
                return _Profile()

            def build_serialized_network(self, network, config):
                import json

                lib.builds.append({"flags": set(config.flags), "profiles": config.profiles, "pools": dict(config.pools)})
                (profile,) = config.profiles
                header = json.dumps({k: list(map(list, v)) for k, v in profile.items()}).encode()
                return len(header).to_bytes(4, "little") + header + network["model"]

        class Config:
            def __init__(self):
                self.flags, self.profiles, self.pools = set(), [], {}

            def set_flag(self, flag):
                self.flags.add(flag)

            def set_memory_pool_limit(self, pool, size):
                self.pools[pool] = size

            def add_optimization_profile(self, profile):
                self.profiles.append(profile)

        class OnnxParser:
            def __init__(self, network, logger):
                self.network, self.num_errors = network, 0

            def parse(self, data):
                import onnx

                onnx.checker.check_model(onnx.load_from_string(data))
                self.network["model"] = bytes(data)
                return True

        self.Builder, self.OnnxParser = Builder, OnnxParser
        self.Runtime = lambda logger: self

    def deserialize_cuda_engine(self, data: bytes):
        import json

        self.memory.check_not_capturing("TensorRT deserialize_cuda_engine")
        self.deserialized += 1
        size = int.from_bytes(data[:4], "little")
        engine = RecordingEngine(self, json.loads(data[4:4 + size]), data[4 + size:])
        self.objects.add(engine)
        return engine

    def live(self) -> dict:
        import gc

        gc.collect()
        kinds: dict[str, int] = {}
        for obj in list(self.objects):
            kinds[type(obj).__name__] = kinds.get(type(obj).__name__, 0) + 1
        return kinds


class RecordingTensorRT10(RecordingTensorRT):
    """TensorRT 10, which still has weakly typed networks (``BuilderFlag.FP16``)."""

    __version__ = "10.13.0-stand-in"

    class BuilderFlag(enum.IntEnum):
        TF32 = 1
        FP16 = 2


class _Profile(dict):
    def set_shape(self, name, lo, opt, hi):
        self[name] = (tuple(lo), tuple(opt), tuple(hi))


class RecordingEngine:
    def __init__(self, lib: RecordingTensorRT, profile: dict, model: bytes):
        import onnx

        self.lib, self.profile, self.model = lib, profile, model
        graph = onnx.load_from_string(model).graph
        self.inputs = [i.name for i in graph.input]
        self.outputs = [o.name for o in graph.output]
        self.num_io_tensors = len(self.inputs) + len(self.outputs)
        self.device_memory_size_v2 = lib.workspace

    def get_tensor_name(self, i: int) -> str:
        return (self.inputs + self.outputs)[i]

    def get_tensor_mode(self, name: str):
        return self.lib.TensorIOMode.INPUT if name in self.inputs else self.lib.TensorIOMode.OUTPUT

    def create_execution_context(self, strategy):
        assert strategy == self.lib.ExecutionContextAllocationStrategy.USER_MANAGED
        self.lib.memory.check_not_capturing("TensorRT create_execution_context")
        context = RecordingContext(self)
        self.lib.objects.add(context)
        return context


class RecordingContext:
    def __init__(self, engine: RecordingEngine):
        self.engine = engine
        self.shapes: dict = {}
        self.addresses: dict = {}
        self.memory: tuple | None = None
        self.warm = False  # one enqueue after the shapes are set must precede a capture

    def set_input_shape(self, name, shape) -> None:
        lo, _, hi = self.engine.profile[name]
        assert list(lo) == list(shape) == list(hi), "shapes outside the engine's profile"
        self.shapes[name] = tuple(shape)
        self.warm = False

    def set_device_memory(self, ptr, size) -> None:
        self.memory = (ptr, size)

    def set_tensor_address(self, name, ptr) -> None:
        self.addresses[name] = ptr

    def execute_async_v3(self, stream) -> bool:
        lib = self.engine.lib
        if not self.warm:
            if lib.memory.capturing(stream):
                return False  # TensorRT logs: enqueue once after setting shapes, before capturing
            self.warm = True
        lib.executions.append({"stream": stream, "addresses": dict(self.addresses), "memory": self.memory})
        addresses, shapes, model, memory = dict(self.addresses), dict(self.shapes), self.engine.model, lib.memory
        # The enqueued work holds the model, not the context: a record of it must not keep
        # the context alive past its release.
        lib.memory.enqueue(stream, "tensorrtEnqueue", lambda: _run_engine(model, memory, addresses, shapes))
        return True


def _run_engine(data: bytes, memory: DeviceMemory, addresses: dict, shapes: dict) -> None:
    import onnx
    import onnxruntime as ort

    model = onnx.load_from_string(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feeds = {}
    for info in model.graph.input:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        n = int(np.prod(shapes[info.name]))
        feeds[info.name] = memory.flat(addresses[info.name], dtype)[:n].reshape(shapes[info.name])
    for info, value in zip(model.graph.output, session.run(None, feeds), strict=True):
        value = np.ascontiguousarray(value)
        memory.flat(addresses[info.name], value.dtype)[: value.size] = value.reshape(-1)
