"""Running a cublas partition through cuBLASLt (``nvmath.bindings.cublasLt``).

``make_plan`` (at load, once per shape signature) creates the matmul descriptor (compute
and scale types, transposes, epilogue), the three matrix layouts (each of its own type: an
FP8 matmul's A and B are 8-bit floats, its D f32), a preference capped at the record's
workspace, and asks the heuristics for the best algorithm; ``launch`` sets the bias (and
an FP8 matmul's scale) pointer and calls ``cublasLtMatmul`` on the runtime's stream with the runtime's
workspace. Without a device the reference body runs instead (``emulate`` returns None).

The binding is used through the names of its functions and enums only, so a recording
stand-in (``tests/support/recording_libs.py``) with the same names checks every descriptor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import DictionaryAttr

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.lowering.cublas.codegen import GemmRecord, describe
from partita.runtime.libraries import LibraryHandle, require

#: Attribute value types (cuBLASLt's documented C types).
_DESC_TYPES = {"TRANSA": np.int32, "TRANSB": np.int32, "EPILOGUE": np.uint32, "BIAS_POINTER": np.uint64,
               "BIAS_DATA_TYPE": np.int32, "A_SCALE_POINTER": np.uint64}
_LAYOUT_TYPES = {"BATCH_COUNT": np.int32, "STRIDED_BATCH_OFFSET": np.int64}
_PREFERENCE_TYPES = {"MAX_WORKSPACE_BYTES": np.uint64}


class CublasLtBinding:
    """``nvmath.bindings.cublasLt`` plus the enums it takes from ``nvmath`` and
    ``nvmath.bindings.cublas``, under one namespace."""

    def __init__(self) -> None:
        nvmath = require("nvmath", "cublas", "NVIDIA's nvmath-python (cuBLASLt bindings) and cuBLAS")
        from nvmath.bindings import cublas, cublasLt

        self._lt = cublasLt
        self.CudaDataType = nvmath.CudaDataType
        self.ComputeType = cublas.ComputeType
        self.Operation = cublas.Operation

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lt, name)


@dataclass
class CublasLtPlan:
    handle: int
    desc: int
    a: int
    b: int
    d: int
    preference: int
    algo: np.ndarray  # the heuristic result (its ``algo`` field is passed by address)
    workspace: int
    m: int
    batch: int


def _set(lib: Any, setter: Any, obj: int, enum: Any, types: dict[str, Any], name: str, value: int) -> None:
    buf = np.array([value], dtype=types[name])
    setter(obj, int(getattr(enum, name)), buf.ctypes.data, buf.nbytes)


@dataclass(frozen=True)
class CublasLtHandle(LibraryHandle):
    """One extern function's cuBLASLt matmul (see the module doc)."""

    function: str
    binary: str
    record: GemmRecord
    kind: ClassVar[str] = "cublaslt"
    library: ClassVar[str] = "cublas"

    @property
    def kernel_name(self) -> str:
        r = self.record
        return f"cublasLt {r.op} {r.dtype} epilogue {r.epilogue}"

    def describe(self) -> str:
        return describe(self.record)

    @classmethod
    def from_record(cls, function: str, binary: byoc.BinaryOp, record: DictionaryAttr) -> CublasLtHandle:
        return cls(function, binary.sym_name.data, GemmRecord.from_attr(record))

    def load_library(self) -> Any:
        binding = CublasLtBinding()
        # The bindings import without libcublasLt; loading it is what needs the extra.
        require("nvmath.bindings.cublasLt", "cublas", "cuBLASLt (libcublasLt)", probe=lambda lt: lt.get_version())
        return binding

    def make_plan(self, lib: Any, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[str]) -> CublasLtPlan:
        r = self.record
        m, batch = r.runtime_dims(shapes)
        if r.m > 0 and m != r.m or r.batch > 0 and batch != r.batch:
            raise PartitaError(f"@{self.function}: inputs of shapes {list(shapes)} do not fit the GEMM's m={r.m}, batch={r.batch}")
        data_type = int(getattr(lib.CudaDataType, r.data_type))
        desc = lib.matmul_desc_create(int(getattr(lib.ComputeType, r.compute_type)), int(getattr(lib.CudaDataType, r.scale_type)))
        attr = lambda name, value: _set(lib, lib.matmul_desc_set_attribute, desc, lib.MatmulDescAttribute,  # noqa: E731
                                        _DESC_TYPES, name, value)
        attr("TRANSA", int(getattr(lib.Operation, r.transa)))
        attr("TRANSB", int(getattr(lib.Operation, r.transb)))
        attr("EPILOGUE", int(getattr(lib.Epilogue, r.epilogue)))
        if "BIAS" in r.epilogue:
            attr("BIAS_DATA_TYPE", data_type)
        layouts = []
        for lay, type_name in zip(r.layouts(m, batch), (r.a_type, r.b_type, r.data_type)):
            layout = lib.matrix_layout_create(int(getattr(lib.CudaDataType, type_name)), lay.rows, lay.cols, lay.ld)
            if batch > 1:
                for name, value in (("BATCH_COUNT", lay.batch), ("STRIDED_BATCH_OFFSET", lay.stride)):
                    _set(lib, lib.matrix_layout_set_attribute, layout, lib.MatrixLayoutAttribute, _LAYOUT_TYPES, name, value)
            layouts.append(layout)
        a, b, d = layouts
        preference = lib.matmul_preference_create()
        _set(lib, lib.matmul_preference_set_attribute, preference, lib.MatmulPreferenceAttribute, _PREFERENCE_TYPES,
             "MAX_WORKSPACE_BYTES", r.workspace)
        handle = lib.create()
        results = np.zeros(1, dtype=lib.matmul_heuristic_result_dtype)
        count = np.zeros(1, dtype=np.int32)
        lib.matmul_algo_get_heuristic(handle, desc, a, b, d, d, preference, 1, results.ctypes.data, count.ctypes.data)
        if count[0] < 1:
            raise PartitaError(f"@{self.function}: cuBLASLt has no algorithm for {describe(r)}")
        return CublasLtPlan(handle, desc, a, b, d, preference, results, int(results["workspace_size"][0]), m, batch)

    def release_plan(self, lib: Any, plan: CublasLtPlan) -> None:
        lib.matmul_preference_destroy(plan.preference)
        for layout in (plan.a, plan.b, plan.d):
            lib.matrix_layout_destroy(layout)
        lib.matmul_desc_destroy(plan.desc)
        lib.destroy(plan.handle)

    def workspace_bytes(self, plan: CublasLtPlan) -> int:
        return max(plan.workspace, 0)

    def launch(self, lib: Any, plan: CublasLtPlan, stream: int, inputs: Sequence[int], outputs: Sequence[int],
               workspace: int) -> None:
        ptr = dict(zip(self.record.roles, inputs, strict=True))
        for role, name in (("bias", "BIAS_POINTER"), ("scale", "A_SCALE_POINTER")):
            if role in ptr:
                _set(lib, lib.matmul_desc_set_attribute, plan.desc, lib.MatmulDescAttribute, _DESC_TYPES, name, ptr[role])
        alpha, beta = np.ones(1, np.float32), np.zeros(1, np.float32)
        (out,) = outputs
        algo = plan.algo.ctypes.data  # ``algo`` is the first field of the heuristic result
        lib.matmul(plan.handle, plan.desc, alpha.ctypes.data, ptr["rhs"], plan.a, ptr["lhs"], plan.b, beta.ctypes.data,
                   out, plan.d, out, plan.d, algo, workspace, plan.workspace, stream)

