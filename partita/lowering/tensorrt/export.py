"""A partition function as an ONNX model (what TensorRT's ONNX parser reads).

TVM's TensorRT BYOC builds the network layer by layer through TensorRT's API; writing
ONNX instead keeps the export checkable without a GPU (onnxruntime or ONNX's reference
evaluator run the very bytes TensorRT will parse) and lets TensorRT's parser own the
op-to-layer mapping. Opset 20 (``Gelu``, ``LayerNormalization``).

:data:`CONVERTERS` has one converter per op the ``tensorrt`` backend accepts
(``partita.backends.tensorrt.TENSORRT_OPS``, whose ``unsupported_reason`` the export's
located errors reuse).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue

from partita.backends.tensorrt import unsupported_reason
from partita.dialects import nn
from partita.ir import op_error

OPSET = 20


def _onnx() -> Any:
    import onnx  # a core dependency

    return onnx


@dataclass
class _Graph:
    """Nodes, initializers and value names of the model being written."""

    nodes: list = field(default_factory=list)
    initializers: list = field(default_factory=list)
    names: dict[SSAValue, str] = field(default_factory=dict)
    counter: int = 0

    def fresh(self, hint: str = "t") -> str:
        self.counter += 1
        return f"{hint}{self.counter}"

    def name(self, value: SSAValue) -> str:
        return self.names[value]

    def const(self, array: np.ndarray, hint: str = "c") -> str:
        name = self.fresh(hint)
        self.initializers.append(_onnx().numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op_type: str, inputs: list[str], hint: str = "t", **attrs: Any) -> str:
        out = self.fresh(hint)
        self.nodes.append(_onnx().helper.make_node(op_type, inputs, [out], **attrs))
        return out


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def _np_dtype(value: SSAValue) -> np.dtype:
    assert isinstance(value.type, TensorType)
    return nn.numpy_dtype(value.type.element_type)


def _nchw(g: _Graph, x: str, layout: str) -> str:
    return x if layout == "NCHW" else g.node("Transpose", [x], perm=[0, 3, 1, 2])


def _from_nchw(g: _Graph, y: str, layout: str) -> str:
    return y if layout == "NCHW" else g.node("Transpose", [y], perm=[0, 2, 3, 1])


def _pads(padding: tuple[int, ...]) -> list[int]:
    top, left, bottom, right = padding
    return [top, left, bottom, right]  # ONNX: begins of each spatial axis, then ends


def _conv(g: _Graph, op: nn.Conv2DOp, x: str, w: str) -> str:
    if op.kernel_layout == "OHWI":
        w = g.node("Transpose", [w], perm=[0, 3, 1, 2])
    y = g.node("Conv", [_nchw(g, x, op.data_layout), w], strides=list(op.strides), pads=_pads(op.padding),
               dilations=list(op.dilation), group=op.groups)
    return _from_nchw(g, y, op.data_layout)


def _pool(g: _Graph, op: nn.Pool2DOp, x: str) -> str:
    attrs = {"kernel_shape": list(op.pool_size), "strides": list(op.strides), "pads": _pads(op.padding),
             "dilations": list(op.dilation), "ceil_mode": int(op.ceil_mode)}
    if isinstance(op, nn.AvgPool2DOp):
        y = g.node("AveragePool", [_nchw(g, x, op.layout)], count_include_pad=int(op.count_include_pad), **attrs)
    else:
        y = g.node("MaxPool", [_nchw(g, x, op.layout)], **attrs)
    return _from_nchw(g, y, op.layout)


def _dense(g: _Graph, op: Operation, x: str, w: str) -> str:
    return g.node("MatMul", [x, g.node("Transpose", [w], perm=[1, 0])])


def _batch_matmul(g: _Graph, op: nn.BatchMatmulOp, a: str, b: str) -> str:
    if op.transpose_a:
        a = g.node("Transpose", [a], perm=[0, 2, 1])
    if op.transpose_b:
        b = g.node("Transpose", [b], perm=[0, 2, 1])
    return g.node("MatMul", [a, b])


def _bias_add(g: _Graph, op: nn.BiasAddOp, x: str, b: str) -> str:
    rank = len(_shape(op.operands[0]))
    axis = op.axis % rank
    if axis != rank - 1:
        shape = [1] * rank
        shape[axis] = -1
        b = g.node("Reshape", [b, g.const(np.array(shape, np.int64), "shape")])
    return g.node("Add", [x, b])


def _scalar(g: _Graph, op: Operation, value: float) -> str:
    return g.const(np.array(value, _np_dtype(op.results[0])))


def _clip(g: _Graph, op: nn.ClipOp, x: str) -> str:
    return g.node("Clip", [x, _scalar(g, op, op.min), _scalar(g, op, op.max)])


def _pad(g: _Graph, op: nn.PadOp, x: str) -> str:
    pads = np.array([*op.pad_before, *op.pad_after], np.int64)
    return g.node("Pad", [x, g.const(pads, "pads"), _scalar(g, op, op.pad_value)], mode="constant")


def _reshape(g: _Graph, op: nn.ReshapeOp, x: str, *refs: str) -> str:
    """ONNX ``Reshape``: static dims as they are, a dim sized by a shape reference read off
    that tensor (``Shape`` + ``Gather``), the inferred ``?`` as -1."""
    shape = [d if d >= 0 else -1 for d in _shape(op.results[0])]
    if not refs:
        return g.node("Reshape", [x, g.const(np.array(shape, np.int64), "shape")])
    pieces = [g.const(np.array([d], np.int64), "dim") for d in shape]
    for ref, axis, target in zip(refs, op.ref_axes, op.targets):
        pieces[target] = g.node("Gather", [g.node("Shape", [ref]), g.const(np.array([axis], np.int64), "axis")],
                                axis=0)
    return g.node("Reshape", [x, g.node("Concat", pieces, "shape", axis=0)])


def _global_avg_pool(g: _Graph, op: nn.GlobalAvgPool2DOp, x: str) -> str:
    return _from_nchw(g, g.node("GlobalAveragePool", [_nchw(g, x, op.layout)]), op.layout)


def _simple(op_type: str, **attrs: Callable[[Any], Any]) -> Callable[..., str]:
    def convert(g: _Graph, op: Operation, *inputs: str) -> str:
        return g.node(op_type, list(inputs), **{k: f(op) for k, f in attrs.items()})

    return convert


#: nn op name -> converter ``(graph, op, *input names) -> output name``.
CONVERTERS: dict[str, Callable[..., str]] = {
    "nn.add": _simple("Add"),
    "nn.subtract": _simple("Sub"),
    "nn.multiply": _simple("Mul"),
    "nn.divide": _simple("Div"),
    "nn.relu": _simple("Relu"),
    "nn.sigmoid": _simple("Sigmoid"),
    "nn.tanh": _simple("Tanh"),
    "nn.gelu": _simple("Gelu", approximate=lambda op: op.approximate),
    "nn.clip": _clip,
    "nn.softmax": _simple("Softmax", axis=lambda op: op.axis),
    "nn.dense": _dense,
    "nn.matmul": _simple("MatMul"),
    "nn.batch_matmul": _batch_matmul,
    "nn.bias_add": _bias_add,
    "nn.layer_norm": _simple("LayerNormalization", axis=lambda op: op.axis, epsilon=lambda op: op.epsilon),
    "nn.batch_norm": _simple("BatchNormalization", epsilon=lambda op: op.epsilon),
    "nn.conv2d": _conv,
    "nn.max_pool2d": _pool,
    "nn.avg_pool2d": _pool,
    "nn.global_avg_pool2d": _global_avg_pool,
    "nn.pad": _pad,
    "nn.reshape": _reshape,
    "nn.transpose": _simple("Transpose", perm=lambda op: list(op.perm)),
    "nn.concatenate": _simple("Concat", axis=lambda op: op.axis),
}


def _value_info(name: str, value: SSAValue, dynamic: str) -> Any:
    onnx = _onnx()
    dims = [d if d >= 0 else f"{dynamic}{i}" for i, d in enumerate(_shape(value))]
    elem = onnx.helper.np_dtype_to_tensor_dtype(_np_dtype(value))
    return onnx.helper.make_tensor_value_info(name, elem, dims)


def export_function(function: FuncOp, constants: dict[int, np.ndarray] | None = None) -> Any:
    """The ``onnx.ModelProto`` of a partition function (inputs ``arg<i>``, outputs
    ``out<i>``); an op that does not convert is a located error. Arguments in
    ``constants`` become initializers of the same name (weights TensorRT builds into the
    engine) instead of inputs."""
    onnx = _onnx()
    g = _Graph()
    block = function.body.block
    inputs = []
    for i, arg in enumerate(block.args):
        g.names[arg] = f"arg{i}"
        if constants and i in constants:
            g.initializers.append(onnx.numpy_helper.from_array(np.asarray(constants[i], _np_dtype(arg)), f"arg{i}"))
        else:
            inputs.append(_value_info(f"arg{i}", arg, f"arg{i}_d"))
    outputs = []
    for op in block.ops:
        if isinstance(op, ReturnOp):
            for i, value in enumerate(op.operands):
                name = f"out{i}"
                g.nodes.append(onnx.helper.make_node("Identity", [g.name(value)], [name]))
                outputs.append(_value_info(name, value, f"out{i}_d"))
            continue
        if isinstance(op, nn.ConstantOp):
            g.names[op.results[0]] = g.const(op.to_numpy(), "const")
            continue
        if (why := unsupported_reason(op)) is not None:
            raise op_error(op, f"{why}, so it cannot be part of a TensorRT partition")
        g.names[op.results[0]] = CONVERTERS[op.name](g, op, *(g.name(v) for v in op.operands))
    graph = onnx.helper.make_graph(g.nodes, function.sym_name.data, inputs, outputs, g.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   producer_name="partita")
    model.ir_version = min(model.ir_version, 10)  # what onnxruntime and TensorRT 10 read
    onnx.checker.check_model(model)
    return model
