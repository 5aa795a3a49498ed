"""Splat constants stay splat (issue 14): ``dense<1.0> : tensor<30000000x4xf32>`` is one
element in the IR, through parsing, printing, passes, import and saved models; its values
are materialized only where a buffer is needed, and a buffer over the limit is a located
error naming the op."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import partita
from partita.dialects import make_context, nn
from partita.ir import PartitaError, parse_module
from partita.ir.constants import constant_values, is_splat, materialize_limit
from partita.ir.parsing import LocatingParser
from partita.tools import import_model, opt, run

LARGE = "tensor<30000000x4xf32>"  # 458 MiB once materialized: over the 256 MiB limit


def _constants(module) -> list[nn.ConstantOp]:
    return [op for op in module.walk() if isinstance(op, nn.ConstantOp)]


def test_large_splat_round_trips_in_small_memory(tmp_path: Path) -> None:
    """partita-opt parses and prints 1.7 GB worth of splats in a fresh process whose peak
    memory stays far below a single one of them."""
    path = tmp_path / "splat.mlir"
    path.write_text(
        "func.func @main() -> tensor<30000000x4xf32> {\n"
        f"  %0 = nn.constant dense<1.0> : {LARGE}\n"
        "  %1 = nn.constant dense<true> : tensor<40000x30000xi1>\n"
        f"  func.return %0 : {LARGE}\n}}\n"
    )
    # VmHWM is the peak of this process's own memory (ru_maxrss would count the RSS of
    # the pytest process that forked it, which Linux carries across exec).
    script = (
        "import re, sys\n"
        "from partita.tools import opt\n"
        f"code = opt.main([{str(path)!r}, '--print-op-generic'])\n"
        "peak = re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1)\n"
        "print('maxrss_kib', peak, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert f'"nn.constant"() <{{value = dense<1.000000e+00> : {LARGE}}}>' in done.stdout
    assert "dense<true> : tensor<40000x30000xi1>" in done.stdout
    peak_mib = int(done.stderr.split("maxrss_kib")[1].split()[0]) / 1024
    assert peak_mib < 400, f"peak {peak_mib:.0f} MiB"  # one materialized splat alone is 458 MiB
    # ... and the generic form parses back as the same splat.
    generic = tmp_path / "generic.mlir"
    generic.write_text(done.stdout)
    (op, _) = _constants(parse_module(generic.read_text(), make_context()))
    assert is_splat(op.value) and len(op.value.data.data) == 4 and str(op.value.type) == LARGE


def test_splat_values_are_a_view_until_a_buffer_is_needed(tmp_path: Path) -> None:
    text = f"func.func @main() -> {LARGE} {{\n  %0 = nn.constant dense<2.5> : {LARGE}\n  func.return %0 : {LARGE}\n}}\n"
    (op,) = _constants(parse_module(text, make_context(), "m.mlir"))
    view = op.to_numpy()
    assert view.shape == (30000000, 4) and view.dtype == np.float32 and view.strides == (0, 0)
    assert not view.flags.writeable and view[12345, 3] == 2.5
    with pytest.raises(PartitaError) as err:
        op.to_numpy(buffer=True)
    assert str(err.value).startswith("m.mlir:2:3: error: 'nn.constant' op splat constant of type")
    assert "458 MiB once materialized, over the limit of 256 MiB" in str(err.value)
    # The limit is what stops it, not the size: a 32-byte splat over a 16-byte limit.
    small = nn.ConstantOp(np.broadcast_to(np.float32(1.0), (8,)))
    with materialize_limit(16):
        assert constant_values(small).strides == (0,)  # a view needs no buffer
        with pytest.raises(PartitaError, match="would take 0 MiB once materialized, over the limit of 0 MiB"):
            constant_values(small, buffer=True)
    with materialize_limit(None):
        np.testing.assert_array_equal(constant_values(small, buffer=True), np.ones(8, np.float32))


def test_small_splats_of_any_element_type(tmp_path: Path) -> None:
    for literal, type_, expected in [
        ("1.5", "tensor<2x3xf32>", np.full((2, 3), 1.5, np.float32)),
        ("-2", "tensor<4xi32>", np.full(4, -2, np.int32)),
        ("true", "tensor<3xi1>", np.ones(3, np.bool_)),
        ("7", "tensor<2xi8>", np.full(2, 7, np.int8)),
        ("200", "tensor<2x2xui8>", np.full((2, 2), 200, np.uint8)),
        ("-1.25", "tensor<5xbf16>", np.full(5, -1.25, np.float32)),
        ("3", "tensor<1xi64>", np.full(1, 3, np.int64)),
    ]:
        attr = LocatingParser(make_context(), f"dense<{literal}> : {type_}").parse_attribute()
        op = nn.ConstantOp(attr)
        assert str(attr.type) == type_
        assert is_splat(attr) == (expected.size > 1), type_
        buffer = op.to_numpy(buffer=True)
        # A materialized splat is an array of its own; anything else a read-only view of
        # the attribute's bytes (issue 25: weights are never copied to be read).
        assert buffer.flags.c_contiguous and buffer.flags.writeable == (expected.size > 1)
        np.testing.assert_array_equal(buffer.astype(expected.dtype), expected, err_msg=type_)
        np.testing.assert_array_equal(op.to_numpy().astype(expected.dtype), expected, err_msg=type_)


def test_bad_splat_literals_are_located_errors(tmp_path: Path, capsys) -> None:
    for literal, column in [("300", 26), ("[300, 1, 2, 3]", 25)]:  # a splat, then a list
        path = tmp_path / "bad.mlir"
        path.write_text(f"func.func @main() -> tensor<4xi8> {{\n  %0 = nn.constant dense<{literal}> : tensor<4xi8>\n"
                        "  func.return %0 : tensor<4xi8>\n}\n")
        assert opt.main([str(path)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"{path}:2:{column}: error: Integer value 300 is out of range for type i8"), err
        assert "Traceback" not in err and "internal error" not in err


def test_hex_float_literals_are_bit_patterns(tmp_path: Path, capsys) -> None:
    text = "func.func @main() -> tensor<3xT> {{\n  %0 = nn.constant dense<{}> : tensor<3xT>\n  func.return %0 : tensor<3xT>\n}}\n"
    for dtype, literal, expected in [("f32", "[0xFF800000, 0x3F800000, 0x7FC00000]", [-np.inf, 1.0, np.nan]),
                                     ("f16", "0x7C00", [np.inf] * 3), ("bf16", "[0xFF80, 0x3F80, 0x4000]", [-np.inf, 1, 2])]:
        module = parse_module(text.format(literal).replace("T", dtype), make_context())
        (op,) = [o for o in module.walk() if isinstance(o, nn.ConstantOp)]
        np.testing.assert_array_equal(op.to_numpy().astype(np.float64), expected, err_msg=dtype)
    for literal, why in [("0x1FF800000", "does not fit f32"), ("-0x3F800000", "cannot be negative")]:
        path = tmp_path / "bad.mlir"
        path.write_text(text.format(literal).replace("T", "f32"))
        assert opt.main([str(path)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"{path}:2:") and why in err and "Traceback" not in err, err


def test_broadcast_arrays_and_transposes_stay_splat() -> None:
    op = nn.ConstantOp(np.broadcast_to(np.float16(3.0), (1000, 2000, 3)))
    assert is_splat(op.value) and str(op.value.type) == "tensor<1000x2000x3xf16>"
    transposed = nn.ConstantOp(op.to_numpy().transpose(2, 0, 1))  # what convert-layout does
    assert is_splat(transposed.value) and str(transposed.value.type) == "tensor<3x1000x2000xf16>"
    dense = nn.ConstantOp(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert not is_splat(dense.value)
    np.testing.assert_array_equal(dense.to_numpy(), np.arange(6).reshape(2, 3))


def test_payload_must_match_the_type() -> None:
    from xdsl.dialects.builtin import (
        BytesAttr,
        DenseIntOrFPElementsAttr,
        TensorType,
        f32,
    )
    from xdsl.utils.exceptions import VerifyException

    op = nn.ConstantOp(DenseIntOrFPElementsAttr(TensorType(f32, [3]), BytesAttr(bytes(8))))
    with pytest.raises(VerifyException, match="value holds 2 elements, its type 3"):
        op.verify()


SUM_OF_SPLAT = """func.func @main(%x: tensor<1x1024xf32>) -> tensor<1x1024xf32> {{
  %0 = nn.constant dense<0.5> : tensor<{rows}x1024xf32>
  %1 = nn.reduce_sum %0 {{axes = array<i64: 0>}} : (tensor<{rows}x1024xf32>) -> tensor<1x1024xf32>
  %2 = nn.add %x, %1 : (tensor<1x1024xf32>, tensor<1x1024xf32>) -> tensor<1x1024xf32>
  func.return %2 : tensor<1x1024xf32>
}}
"""


def test_splat_feeding_an_op_runs_on_the_cpu_path(tmp_path: Path) -> None:
    """A 32 MiB splat stays one element through the pipeline and is materialized once,
    for the weight upload, with the right values."""
    module = parse_module(SUM_OF_SPLAT.format(rows=8192), make_context())
    exe = partita.compile(module, ["llvm"], cache_dir=tmp_path)
    constants = _constants(exe.module)
    assert constants and all(is_splat(op.value) and len(op.value.data.data) == 4 for op in constants)
    x = np.random.default_rng(0).standard_normal((1, 1024)).astype(np.float32)
    np.testing.assert_array_equal(exe.run(x)[0], x + np.float32(4096.0))
    # A saved model keeps the splat a splat: one element in the file, not 32 MiB.
    path = tmp_path / "model.partita"
    exe.save(path)
    assert path.stat().st_size < 1 << 20
    loaded = partita.load(path)
    assert all(is_splat(op.value) for op in _constants(loaded.module))
    np.testing.assert_array_equal(loaded.run(x)[0], x + np.float32(4096.0))


def test_splat_over_the_host_limit_runs_from_partita_run(tmp_path: Path) -> None:
    """A 458 MiB splat weight (over the host materialization limit) is filled on the
    device by the launch plan (issue 24), so partita-run runs it instead of refusing it."""
    path = tmp_path / "large.mlir"
    path.write_text(SUM_OF_SPLAT.format(rows=30000000).replace("1024xf32>", "4xf32>").replace("1x1024", "1x4")
                    .replace("reduce_sum", "reduce_max"))  # a sum of 30 million in f32 stops at 2**24
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    np.savez(tmp_path / "in.npz", x=x)
    out = tmp_path / "out.npz"
    code = run.main([str(path), "-q", "--targets", "llvm", "--cache-dir", str(tmp_path / "cache"),
                     "--inputs", str(tmp_path / "in.npz"), "--output", str(out)])
    assert code == 0
    (result,) = np.load(out).values()
    np.testing.assert_array_equal(result, x + np.float32(0.5))


def test_onnx_constant_of_shape_imports_as_a_splat(tmp_path: Path, capsys) -> None:
    shape = onnx.numpy_helper.from_array(np.array([30000000, 4], np.int64), "shape")
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["c"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.25])),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[shape])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert import_model.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert f"nn.constant dense<2.500000e-01> : {LARGE}" in out
