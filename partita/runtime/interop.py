"""Arrays crossing the runtime's boundary: NumPy, ``__cuda_array_interface__`` and DLPack
inputs, and device-array outputs.

* ``as_input(value)`` turns what a user passed into a NumPy array (host memory) or a
  ``DeviceTensor`` (device memory: CuPy / PyTorch / Numba arrays through
  ``__cuda_array_interface__`` v2/v3, or anything with ``__dlpack__`` on a CUDA device).
  DLPack capsules are read with ctypes (``DLManagedTensor``); CPU DLPack tensors become
  NumPy arrays without a copy.
* ``DeviceArray`` is an output left on the device: it exposes
  ``__cuda_array_interface__`` (CuPy's ``cupy.asarray`` and ``torch.as_tensor`` take it
  without a copy) and ``numpy()`` for a host copy. It aliases the runtime's memory plan,
  so it is valid until the next ``run`` of the same executable (as TensorRT's and IREE's
  output buffers are); copy it to keep it. It is also a DLPack producer
  (``__dlpack__`` / ``__dlpack_device__``): ``torch.from_dlpack(out)`` works, and it can
  be fed back to ``exe.run``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DeviceArray", "DeviceTensor", "as_input", "dlpack_tensor", "export_dlpack"]

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13


@dataclass(frozen=True)
class DeviceTensor:
    """A dense tensor in device memory that the runtime reads in place."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    owner: Any = None
    """What keeps the memory alive (the user's array)."""
    stream: int | None = None
    """The producer's stream (the CUDA array interface's ``stream`` key) that the runtime's
    stream must wait for before reading; ``None``: no synchronization needed."""

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


def _dl_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    if lanes != 1:
        raise TypeError(f"DLPack tensors with {lanes} lanes are not supported")
    if code == 4 and bits == 16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    kind = {0: "i", 1: "u", 2: "f", 6: "b"}.get(code)
    if kind is None:
        raise TypeError(f"DLPack dtype code {code} is not supported")
    return np.dtype(f"{kind}{bits // 8}") if kind != "b" else np.dtype(np.bool_)


def dlpack_tensor(capsule: Any) -> tuple[int, int, DeviceTensor]:
    """``(device_type, device_id, tensor)`` of a ``dltensor`` capsule, read in place (the
    capsule keeps ownership, so its destructor still frees it)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    address = get(capsule, b"dltensor")
    t = _DLTensor.from_address(address)  # DLManagedTensor starts with its DLTensor
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    dtype = _dl_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    if t.strides:
        strides = tuple(int(t.strides[i]) for i in range(t.ndim))
        if not _contiguous(shape, strides, 1):
            raise TypeError(f"a DLPack tensor of shape {shape} with strides {strides} is not C-contiguous")
    return t.device.device_type, t.device.device_id, DeviceTensor(int(t.data or 0) + int(t.byte_offset), shape, dtype, capsule)


def _contiguous(shape, strides, itemsize: int) -> bool:
    expected = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim > 1 and stride != expected:
            return False
        expected *= dim
    return True


def as_input(value: Any, stream: int | None = None) -> np.ndarray | DeviceTensor:
    """A host array or a device tensor for ``value``; anything else is a ``TypeError``.

    ``stream`` is the consumer's stream handle: a DLPack producer is asked to order its
    work before it (``__dlpack__(stream=...)``, as the DLPack and array API specs say),
    while a CUDA array's own ``stream`` key is kept for the consumer to wait on."""
    if isinstance(value, np.ndarray):
        return value
    if getattr(value, "requires_grad", False) and hasattr(value, "detach"):
        # Inference tracks no gradients; torch refuses to export such tensors otherwise.
        value = value.detach()
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        dtype = np.dtype(cai["typestr"])
        shape = tuple(int(d) for d in cai["shape"])
        strides = cai.get("strides")
        if strides is not None and not _contiguous(shape, strides, dtype.itemsize):
            raise TypeError(f"a CUDA array of shape {shape} with strides {strides} is not C-contiguous")
        producer = cai.get("stream")
        if producer is not None and int(producer) == 0:
            raise TypeError("a CUDA array interface 'stream' of 0 is ambiguous and disallowed by the interface")
        return DeviceTensor(int(cai["data"][0] or 0), shape, dtype, value, None if producer is None else int(producer))
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        device_type, _ = value.__dlpack_device__()
        if int(device_type) == KDL_CPU:
            return np.from_dlpack(value)
        if int(device_type) in (KDL_CUDA, KDL_CUDA_MANAGED):
            if stream is None:
                capsule = value.__dlpack__()
            else:  # 0 is disallowed; a producer without the keyword predates stream exchange
                try:
                    capsule = value.__dlpack__(stream=int(stream))
                except TypeError:
                    capsule = value.__dlpack__()
            _, _, tensor = dlpack_tensor(capsule)
            return DeviceTensor(tensor.ptr, tensor.shape, tensor.dtype, (value, tensor.owner))
        raise TypeError(f"DLPack device type {device_type} is neither the CPU nor CUDA")
    raise TypeError(f"expected a NumPy array, a CUDA array or a DLPack tensor, got {type(value).__name__}")


class DeviceArray:
    """An output on the device (see the module docstring: valid until the next run)."""

    def __init__(self, device: Any, ptr: int, shape: tuple[int, ...], dtype: np.dtype):
        self.device, self.ptr, self.shape, self.dtype = device, int(ptr), tuple(shape), np.dtype(dtype)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        if getattr(self.device, "simulated", False):
            raise AttributeError("a simulated device's array is host memory: use numpy()")
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3, "strides": None}

    def numpy(self) -> np.ndarray:
        """A host copy."""
        out = np.empty(self.shape, self.dtype)
        if out.nbytes:
            stream = None
            if getattr(self.device, "simulated", False):
                self.device.download(out, self.ptr, stream)
            else:
                self.device.make_current()  # the current context is per thread
                self.device.copy_dtoh(out, self.ptr)
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def __dlpack_device__(self) -> tuple[int, int]:
        if getattr(self.device, "simulated", False):
            return KDL_CPU, 0
        return KDL_CUDA, int(getattr(self.device, "ordinal", 0) or 0)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None) -> Any:
        """A ``dltensor`` capsule (``torch.from_dlpack``, ``cupy.from_dlpack``...). On a
        CUDA device it aliases the output (valid until the next run, like the array); the
        simulated device's memory is the runtime's own, so it exports a host copy."""
        if getattr(self.device, "simulated", False):
            return self.numpy().__dlpack__()
        # The runtime's single stream is synchronized before outputs are returned, so
        # the consumer's stream needs no extra wait.
        return export_dlpack(self.ptr, self.shape, self.dtype, KDL_CUDA, self.__dlpack_device__()[1], owner=self)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, ptr={self.ptr:#x})"


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

# What an exported capsule points into (its struct, shape array and owner), kept alive
# until the consumer (or the capsule's destructor) calls the deleter. Keyed by the
# struct's address; an entry lives exactly as long as one exported DLPack tensor.
_LIVE_EXPORTS: dict[int, tuple[Any, ...]] = {}


@_DELETER
def _release(managed: Any) -> None:
    _LIVE_EXPORTS.pop(ctypes.addressof(managed.contents), None)


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule: int) -> None:
    # Only a capsule nobody consumed still has the name "dltensor"; a consumer renames it
    # to "used_dltensor" and calls the deleter itself.
    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.restype, is_valid.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]
    if is_valid(capsule, b"dltensor"):
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
        _release(ctypes.cast(get(capsule, b"dltensor"), ctypes.POINTER(_DLManagedTensor)))


_DL_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}
# The capsule keeps a pointer to its name: it must outlive every capsule.
_CAPSULE_NAME = ctypes.create_string_buffer(b"dltensor")


def export_dlpack(ptr: int, shape: tuple[int, ...], dtype: np.dtype, device_type: int, device_id: int,
                  owner: Any) -> Any:
    """A ``dltensor`` capsule describing ``ptr`` (C-contiguous); ``owner`` is kept alive
    until the consumer releases it."""
    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16":
        code = 4
    else:
        code = _DL_CODES.get(dtype.kind)
        if code is None:
            raise TypeError(f"dtype {dtype} has no DLPack code")
    managed = _DLManagedTensor()
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    managed.dl_tensor.data = ptr
    managed.dl_tensor.device = _DLDevice(device_type, device_id)
    managed.dl_tensor.ndim = len(shape)
    managed.dl_tensor.dtype = _DLDataType(code, dtype.itemsize * 8, 1)
    managed.dl_tensor.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.strides = None  # compact row-major
    managed.dl_tensor.byte_offset = 0
    managed.deleter = _release
    address = ctypes.addressof(managed)
    _LIVE_EXPORTS[address] = (managed, dims, owner)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_void_p, _CAPSULE_DESTRUCTOR]
    return new(address, ctypes.addressof(_CAPSULE_NAME), _capsule_destructor)
