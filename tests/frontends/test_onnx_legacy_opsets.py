"""Models older than opset 9 import when every op is the version it is at opset 9
(``legacy_version_check``); an op whose schema changed since is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError
from partita.runtime.reference import run


def _model(op_type: str, opset: int, elem=TensorProto.BOOL, inputs=("a", "b")):
    graph = helper.make_graph(
        [helper.make_node(op_type, list(inputs), ["y"])], "g",
        [helper.make_tensor_value_info(n, elem, [2, 3]) for n in inputs],
        [helper.make_tensor_value_info("y", TensorProto.BOOL, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(("op_type", "opset", "inputs"), [("And", 7, ("a", "b")), ("Xor", 8, ("a", "b")),
                                                          ("Not", 1, ("a",))])
def test_unchanged_op_of_an_old_opset_imports_and_matches_onnx(op_type, opset, inputs):
    model = _model(op_type, opset, inputs=inputs)
    rng = np.random.default_rng(0)
    feeds = {n: rng.random((2, 3)) > 0.5 for n in inputs}
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    (got,) = run(import_onnx(model), *feeds.values())
    np.testing.assert_array_equal(got, want)


def test_op_changed_since_the_old_opset_is_refused_by_name():
    # Greater-7 took only floats; opset 9 replaced it, so an opset-8 Greater is not opset 9's.
    model = _model("Greater", 8, elem=TensorProto.FLOAT)
    with pytest.raises(PartitaError, match=r"\(Greater\): unsupported ONNX opset 8 for Greater: its version 7 "
                                           r"changed in opset 9"):
        import_onnx(model)
