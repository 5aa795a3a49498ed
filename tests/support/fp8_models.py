"""FP8 QDQ models built from code (random weights): what TensorRT Model Optimizer and
onnxruntime's quantizer export for a linear layer."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

E4M3, E5M2 = TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2
_NP = {E4M3: ml_dtypes.float8_e4m3fn, E5M2: ml_dtypes.float8_e5m2}
_MAX = {E4M3: 448.0, E5M2: 57344.0}


def fp8_linear(*, gemm: bool = False, per_channel: bool = False, x_type: int = E4M3, w_type: int = E4M3,
               k: int = 64, n: int = 32, rows: int = 5, seed: int = 0) -> tuple[onnx.ModelProto, list[int]]:
    """``y = DQ(Q(x)) @ DQ(wq) + b`` (a MatMul and an Add, or one Gemm with a transposed
    weight): the activation quantized per tensor at run time, the weight an FP8
    initializer scaled per tensor or per output channel; and the input's shape."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32)
    sw = np.abs(w).max(axis=0) / _MAX[w_type] if per_channel else np.float32(np.abs(w).max() / _MAX[w_type])
    wq = (w / sw).astype(_NP[w_type])
    if gemm:
        wq = np.ascontiguousarray(wq.T)
    inits = [numpy_helper.from_array(np.float32(0.01), "sx"),
             helper.make_tensor("zx", x_type, [], [0]),
             helper.make_tensor("wq", w_type, list(wq.shape), wq.view(np.uint8).tobytes(), raw=True),
             numpy_helper.from_array(np.asarray(sw, np.float32), "sw"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw"], ["wd"], axis=0 if gemm else 1)]
    if gemm:
        nodes.append(helper.make_node("Gemm", ["xd", "wd", "b"], ["y"], transB=1))
        shape = [4, k]
    else:
        nodes += [helper.make_node("MatMul", ["xd", "wd"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
        shape = [2, rows, k]
    graph = helper.make_graph(nodes, "fp8", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*shape[:-1], n])], inits)
    opsets = [helper.make_opsetid("", 21)]  # IR 10, not onnx's newest: what an older onnxruntime reads too
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets)), shape
