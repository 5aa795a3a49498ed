"""Invalid ONNX nodes are located errors, never internal ones: attributes checked against
the op's ONNX schema (required ones present, each of its type), unknown element types and
string tensors named; ops and domains Partita leaves alone say why."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import partita
from partita.ir import PartitaError

vi = helper.make_tensor_value_info
X = vi("x", TensorProto.FLOAT, [2, 3])
X4 = vi("x", TensorProto.FLOAT, [1, 1, 4, 4])
Y = vi("y", TensorProto.FLOAT, None)


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _leaky_relu_with_alpha_list():
    node = helper.make_node("LeakyRelu", ["x"], ["y"])
    node.attribute.append(helper.make_attribute("alpha", [0.1, 0.2]))
    return _model([node], [X], [Y])


CASES = {
    "concat without axis": (_model([helper.make_node("Concat", ["x", "x"], ["y"])], [X], [Y]),
                            r"node 0 'y' \(Concat\): missing required attribute 'axis'"),
    "max pool without kernel_shape": (_model([helper.make_node("MaxPool", ["x"], ["y"])], [X4], [Y]),
                                      "missing required attribute 'kernel_shape'"),
    "leaky relu alpha as a list": (_leaky_relu_with_alpha_list(), "attribute 'alpha' must be FLOAT, not FLOATS"),
    "unknown element type": (_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", 999, [2])], [Y]),
                             "graph input 'x' has unsupported element type 999"),
    "string initializer": (_model([helper.make_node("Identity", ["s"], ["y"])], [], [vi("y", TensorProto.STRING, [1])],
                                  [helper.make_tensor("s", TensorProto.STRING, [1], [b"hi"])]),
                           "initializer 's' has unsupported element type STRING"),
    "image decoder": (_model([helper.make_node("ImageDecoder", ["b"], ["y"])], [vi("b", TensorProto.UINT8, [64])],
                             [vi("y", TensorProto.UINT8, None)]),
                      r"node 0 'y' \(ImageDecoder\): unsupported op type 'ImageDecoder': it decodes image files .* "
                      r"belongs to the input pipeline"),
    "classical ML domain only": (
        helper.make_model(helper.make_graph([helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml")], "g",
                                            [X], [Y]), opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)]),
        r"no default-domain \(ai.onnx\) opset, only ai.onnx.ml: classical machine-learning operators"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_invalid_nodes_are_located_errors(name: str) -> None:
    model, message = CASES[name]
    with pytest.raises(PartitaError, match=message):
        partita.compile(model)
