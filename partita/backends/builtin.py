"""The built-in backends, registered in priority order: cutlass, cublas, cudnn, tensorrt.

Patterns and predicates follow TVM's CUTLASS/cuBLAS/cuDNN BYOC integrations:
GEMMs (``nn.dense``, ``nn.matmul`` with batch dims and whole-operand broadcasting,
``nn.batch_matmul`` in every transpose combination) in f16, bf16 or f32 with bias and
activation epilogues (and, for a dense, a residual add, after a bias too), NHWC/OHWI
non-grouped conv2d in f16 or f32 (with a bias, a residual add and a ReLU: a ResNet block's
second convolution); and the quantized GEMM, ``nn.matmul_integer`` of s8 / u8
operands with a ``[N, K]`` weight (``transpose_b``, the TN form IMMA reads) and zero points
that are constant zeros (the frontend folds a lhs zero point into an i32 bias row), with that
bias added, and the quantized convolution, ``nn.conv_integer`` in NHWC / OHWI, not grouped, with the same
operand types, zero points and bias row. cuBLASLt also takes the FP8 GEMM, ``nn.matmul_float8`` with
its scale, and CUTLASS the FP8 product alone, on devices with FP8 tensor cores (``requires_sm(89)``).
"""

from __future__ import annotations

import math

from xdsl.ir import Operation

from partita.backends import register_backend, requires_sm
from partita.backends.gemm_forms import (
    INT8_GEMM_MAX_K,
    batched_gemm,
    is_zero_constant,
    residual_of,
    why_not_int8_gemm,
)
from partita.backends.pattern import (
    Match,
    Pattern,
    element_type_name,
    is_attention,
    is_constant,
    is_op,
    op_attr,
    shape_of,
    wildcard,
)
from partita.backends.tensorrt import TENSORRT_OPS, FlattenTensorRTPartitions, unsupported_reason
from partita.dialects import nn

GEMM_DTYPES = ("f16", "f32")
"""Element types CUTLASS convolutions accept."""
CUTLASS_GEMM_DTYPES = ("f16", "bf16", "f32")
"""Element types CUTLASS GEMMs accept (tensor cores: f16/bf16 HMMA, f32 as TF32)."""


def _dtypes_ok(match: Match, allowed: tuple[str, ...] = GEMM_DTYPES) -> bool:
    values = [*match.inputs, *match.outputs]
    return all(element_type_name(v) in allowed for v in values)


def _bias_ok(match: Match, anchor: Operation, channel_axis: int) -> bool:
    """The bias of a ``bias_add``/``add`` epilogue is a per-channel vector along
    ``channel_axis`` of the anchor's result (broadcast over every other dim)."""
    bias_op = match.find("nn.bias_add") or match.find("nn.add")
    if bias_op is None:
        return True
    out = shape_of(anchor.results[0])
    bias_shape = shape_of(bias_op.operands[1])
    if out is None or bias_shape is None or bias_op.operands[0] is not anchor.results[0]:
        return False
    axis = channel_axis % len(out)
    channels = out[axis]
    if bias_op.name == "nn.bias_add":
        return op_attr(bias_op, "axis") % len(out) == axis and bias_shape == (channels,)
    # nn.add: a vector, or a tensor of ones but the channel dim, of rank <= the output.
    if len(bias_shape) > len(out) or channels < 0:
        return False
    padded = (1,) * (len(out) - len(bias_shape)) + bias_shape
    return all(d == (channels if i == axis else 1) for i, d in enumerate(padded))


def check_dense(match: Match) -> bool:
    dense = match.find("nn.dense")
    if dense is None or not _dtypes_ok(match, CUTLASS_GEMM_DTYPES):
        return False
    weight = shape_of(dense.operands[1])
    return weight is not None and len(weight) == 2 and _bias_ok(match, dense, -1)


def check_dense_gelu(match: Match) -> bool:
    """CUTLASS's GELU epilogues: the erf form (``LinearCombinationGELU``) and the tanh
    approximation (``GELU_taylor``)."""
    gelu = match.find("nn.gelu")
    return check_dense(match) and gelu is not None and op_attr(gelu, "approximate") in ("none", "tanh")


def check_dense_residual(match: Match) -> bool:
    """``dense + r`` in either order, ``r`` of the output's shape (a residual, not a bias
    row) and not an operand of the dense (each kernel argument has one role): CUTLASS reads
    it as its epilogue's source C."""
    dense, add = match.find("nn.dense"), match.find("nn.add")
    if dense is None or add is None or not _dtypes_ok(match, CUTLASS_GEMM_DTYPES):
        return False
    weight = shape_of(dense.operands[1])
    return weight is not None and len(weight) == 2 and residual_of(add, dense) is not None


def _residual_after_bias(match: Match, anchor: Operation) -> bool:
    """The match adds a residual after ``anchor``'s bias add: an ``nn.add`` of the bias
    add's result and ``r`` of its shape (``residual_of``), ``r`` no operand of ``anchor``
    (each kernel argument has one role)."""
    bias = next((op for op in match.ops if op.name in ("nn.bias_add", "nn.add") and op.operands[0] is anchor.results[0]),
                None)
    outer = next((op for op in match.ops if op.name == "nn.add" and op is not bias), None)
    if bias is None or outer is None:
        return False
    residual = residual_of(outer, bias)
    return residual is not None and residual not in anchor.operands


def check_dense_bias_residual(match: Match) -> bool:
    """``(dense + bias) + r`` in either order of the outer add: a bias row as
    :func:`check_dense` takes it and a residual as :func:`check_dense_residual` does (of
    the output's shape, no operand of the dense or of the bias add): CUTLASS's broadcast
    epilogue reads the bias as its vector and ``r`` as its source C."""
    dense = match.find("nn.dense")
    return dense is not None and check_dense(match) and _residual_after_bias(match, dense)


def check_conv2d_bias_residual(match: Match) -> bool:
    """``[relu]((conv2d + bias) + r)`` in either order of the outer add (a ResNet block's
    second convolution, its batch norm folded, the shortcut and the block's ReLU): a
    convolution :func:`check_conv2d` takes, with a residual of its output's shape that is
    no operand of the convolution or of the bias add."""
    conv = match.find("nn.conv2d")
    return conv is not None and check_conv2d(match) and _residual_after_bias(match, conv)


def check_batch_matmul(match: Match) -> bool:
    """``nn.batch_matmul`` (any transposes) or ``nn.matmul`` whose batch dims are equal,
    or broadcast as a whole operand (a batched GEMM with batch stride 0)."""
    gemm = match.find("nn.batch_matmul") or match.find("nn.matmul")
    if gemm is None or not _dtypes_ok(match, CUTLASS_GEMM_DTYPES):
        return False
    if len({element_type_name(v) for v in (*match.inputs, *match.outputs)}) != 1:
        return False
    lhs, rhs = shape_of(gemm.operands[0]), shape_of(gemm.operands[1])
    if lhs is None or rhs is None:
        return False
    transposes = (bool(op_attr(gemm, "transpose_a")), bool(op_attr(gemm, "transpose_b"))) \
        if gemm.name == "nn.batch_matmul" else (False, False)
    return not isinstance(batched_gemm(lhs, rhs, *transposes), str) and _bias_ok(match, gemm, -1)


def check_conv2d(match: Match) -> bool:
    """NHWC data, OHWI kernel, not grouped/depthwise (TVM's ``check_conv2d``), static C
    (the alignment of the implicit GEMM's accesses follows it); the batch and the image's
    height and width may be run-time dims (the kernel takes every problem dim at run time)."""
    conv = match.find("nn.conv2d")
    if conv is None or not _dtypes_ok(match):
        return False
    if op_attr(conv, "data_layout") != "NHWC" or op_attr(conv, "kernel_layout") != "OHWI":
        return False
    x = shape_of(conv.operands[0])
    if x is None or len(x) != 4 or x[3] < 0:
        return False
    return op_attr(conv, "groups") == 1 and _bias_ok(match, conv, 3)


INT8_TYPES = ("i8", "ui8")
"""Operand types of CUTLASS's int8 tensor-core GEMMs (IMMA takes s8 and u8, mixed too)."""


def check_matmul_integer(match: Match) -> bool:
    """``nn.matmul_integer`` on int8 tensor cores: s8 / u8 operands, a static ``[N, K]``
    weight (``transpose_b``) with K % 16 == 0 and N % 4 == 0, constant-zero zero points,
    and an i32 bias row at most; the i32 result is exact (IMMA accumulates in i32)."""
    gemm = match.find("nn.matmul_integer")
    if gemm is None or not op_attr(gemm, "transpose_b"):
        return False
    if any(element_type_name(v) not in INT8_TYPES for v in gemm.operands[:2]):
        return False
    lhs, rhs = shape_of(gemm.operands[0]), shape_of(gemm.operands[1])
    if lhs is None or rhs is None or len(rhs) != 2 or len(lhs) < 2 or min(rhs) < 0 or lhs[-1] != rhs[1]:
        return False
    if why_not_int8_gemm(rhs[0], rhs[1]) or not all(is_zero_constant(v) for v in gemm.operands[2:]):
        return False
    add = match.find("nn.add")
    return add is None or (element_type_name(add.operands[1]) == "i32" and _bias_ok(match, gemm, -1))


def check_conv_integer(match: Match) -> bool:
    """``nn.conv_integer`` on int8 tensor cores (CUTLASS's implicit GEMM): s8 / u8 operands,
    NHWC data and an OHWI weight over 2 spatial dims, not grouped, static C (N, H and W
    may be run-time dims, as for :func:`check_conv2d`) with C % 16 == 0 (16-channel
    accesses) and K % 4 == 0, constant-zero zero points, and an i32 bias row at most."""
    conv = match.find("nn.conv_integer")
    if conv is None or any(element_type_name(v) not in INT8_TYPES for v in conv.operands[:2]):
        return False
    if conv.data_layout != "NHWC" or conv.kernel_layout != "OHWI" or conv.groups != 1:
        return False
    x, w = shape_of(conv.operands[0]), shape_of(conv.operands[1])
    if x is None or w is None or len(x) != 4 or x[3] < 0 or min(w) < 0:
        return False
    k, r, s, c = w
    if c % 16 or k % 4 or r * s * c > INT8_GEMM_MAX_K or not all(is_zero_constant(v) for v in conv.operands[2:]):
        return False
    add = match.find("nn.add")
    return add is None or (element_type_name(add.operands[1]) == "i32" and _bias_ok(match, conv, 3))


FP8_GEMM_TYPES = tuple(nn.type_name(t) for t in nn.FP8_GEMM_TYPES)
"""FP8 operand types, the nn dialect's (E4M3 x E4M3, or either with E5M2; cuBLASLt never
takes E5M2 x E5M2)."""


@requires_sm(89)
def check_matmul_float8(match: Match) -> bool:
    """``nn.matmul_float8`` on FP8 tensor cores (CUTLASS's Sm89 mma 16x8x32): E4M3 / E5M2
    operands, a static ``[N, K]`` weight (``transpose_b``) with K % 16 == 0 and N % 4 == 0;
    the f32 product alone (the scale and bias are the next native kernel's)."""
    gemm = match.find("nn.matmul_float8")
    if gemm is None or not op_attr(gemm, "transpose_b"):
        return False
    if any(element_type_name(v) not in FP8_GEMM_TYPES for v in gemm.operands):
        return False
    lhs, rhs = shape_of(gemm.operands[0]), shape_of(gemm.operands[1])
    return lhs is not None and rhs is not None and len(rhs) == 2 and len(lhs) >= 2 and min(rhs) >= 0 \
        and lhs[-1] == rhs[1] and rhs[1] % 16 == 0 and rhs[0] % 4 == 0


def _matmul_integer() -> Pattern:
    return is_op("nn.matmul_integer")(wildcard(), wildcard(), is_constant(), is_constant())


def _conv_integer() -> Pattern:
    return is_op("nn.conv_integer")(wildcard(), wildcard(), is_constant(), is_constant())


def _with_bias(anchor: Pattern) -> Pattern:
    return (is_op("nn.bias_add") | is_op("nn.add"))(anchor, wildcard())


def _dense() -> Pattern:
    return is_op("nn.dense")(wildcard(), wildcard())


def _conv2d() -> Pattern:
    return is_op("nn.conv2d")(wildcard(), wildcard())


def _batch_matmul() -> Pattern:
    return is_op("nn.batch_matmul")(wildcard(), wildcard())


def cutlass_patterns() -> list[tuple[str, Pattern, object]]:
    return [
        ("dense_bias_residual", is_op("nn.add")(_with_bias(_dense()), wildcard()), check_dense_bias_residual),
        ("residual_dense_bias", is_op("nn.add")(wildcard(), _with_bias(_dense())), check_dense_bias_residual),
        ("dense_bias_gelu", is_op("nn.gelu")(_with_bias(_dense())), check_dense_gelu),
        ("dense_bias_relu", is_op("nn.relu")(_with_bias(_dense())), check_dense),
        ("dense_bias", _with_bias(_dense()), check_dense),
        ("dense_residual", is_op("nn.add")(_dense(), wildcard()), check_dense_residual),
        ("residual_dense", is_op("nn.add")(wildcard(), _dense()), check_dense_residual),
        ("dense", _dense(), check_dense),
        ("batch_matmul_bias", _with_bias(_batch_matmul()), check_batch_matmul),
        ("batch_matmul", _batch_matmul(), check_batch_matmul),
        ("matmul_bias", _with_bias(is_op("nn.matmul")(wildcard(), wildcard())), check_batch_matmul),
        ("matmul", is_op("nn.matmul")(wildcard(), wildcard()), check_batch_matmul),
        ("conv2d_bias_residual_relu", is_op("nn.relu")(is_op("nn.add")(_with_bias(_conv2d()), wildcard())),
         check_conv2d_bias_residual),
        ("residual_conv2d_bias_relu", is_op("nn.relu")(is_op("nn.add")(wildcard(), _with_bias(_conv2d()))),
         check_conv2d_bias_residual),
        ("conv2d_bias_residual", is_op("nn.add")(_with_bias(_conv2d()), wildcard()), check_conv2d_bias_residual),
        ("residual_conv2d_bias", is_op("nn.add")(wildcard(), _with_bias(_conv2d())), check_conv2d_bias_residual),
        ("conv2d_bias_relu", is_op("nn.relu")(_with_bias(_conv2d())), check_conv2d),
        ("conv2d_bias", _with_bias(_conv2d()), check_conv2d),
        ("conv2d", _conv2d(), check_conv2d),
        ("matmul_integer_bias", is_op("nn.add")(_matmul_integer(), wildcard()), check_matmul_integer),
        ("matmul_integer", _matmul_integer(), check_matmul_integer),
        ("conv_integer_bias", is_op("nn.add")(_conv_integer(), wildcard()), check_conv_integer),
        ("conv_integer", _conv_integer(), check_conv_integer),
        ("matmul_float8", is_op("nn.matmul_float8")(wildcard(), wildcard()), check_matmul_float8),
    ]


CUBLAS_DTYPES = ("f16", "bf16", "f32")
"""cuBLASLt GEMM element types (TVM's cuBLAS BYOC takes the same float types)."""


def _static_nk(gemm: Operation) -> bool:
    """K and N are static (M and batch dims may be dynamic): the right operand's matrix."""
    lhs, rhs = shape_of(gemm.operands[0]), shape_of(gemm.operands[1])
    return lhs is not None and rhs is not None and len(rhs) >= 2 and len(lhs) >= 2 and min(rhs[-2:]) >= 0


def check_cublas(match: Match) -> bool:
    """f16/bf16/f32 operands of one type, static N and K, a bias along the output columns,
    GELU only in cuBLASLt's tanh form; matmul with a 2-D right operand or equal batch dims."""
    gemm = match.find("nn.dense") or match.find("nn.matmul") or match.find("nn.batch_matmul")
    if gemm is None or not _dtypes_ok(match, CUBLAS_DTYPES) or not _static_nk(gemm):
        return False
    if len({element_type_name(v) for v in (*match.inputs, *match.outputs)}) != 1:
        return False
    if gemm.name == "nn.matmul":
        lhs, rhs = shape_of(gemm.operands[0]), shape_of(gemm.operands[1])
        if len(rhs) != 2 and (len(lhs) != len(rhs) or lhs[:-2] != rhs[:-2]):
            return False
    gelu = match.find("nn.gelu")
    if gelu is not None and op_attr(gelu, "approximate") != "tanh":
        return False
    return _bias_ok(match, gemm, -1)


@requires_sm(89)
def check_cublas_float8(match: Match) -> bool:
    """cuBLASLt's FP8 matmul (Ada and Hopper): ``nn.matmul_float8`` of E4M3 / E5M2 operands
    (not both E5M2) with a static 2-D ``[N, K]`` weight, or strided-batched over the lhs's
    own batch dims (two activations, the rhs ``[..., N, K]``) (``transpose_b``: the "TN"
    form, the only one FP8 takes), static N and K multiples of 16, and at most the multiply
    by one f32 scale (its ``A_SCALE_POINTER``)."""
    gemm = match.find("nn.matmul_float8")
    if gemm is None or not op_attr(gemm, "transpose_b"):
        return False
    types = tuple(element_type_name(v) for v in gemm.operands)
    if any(t not in FP8_GEMM_TYPES for t in types) or types == ("f8E5M2", "f8E5M2"):
        return False
    lhs, rhs = shape_of(gemm.operands[0]), shape_of(gemm.operands[1])
    if lhs is None or rhs is None or len(rhs) < 2 or len(lhs) < 2 or min(rhs[-2:]) < 0 or rhs[-2] % 16 \
            or rhs[-1] % 16 or len(rhs) > 2 and (len(lhs) != len(rhs) or lhs[:-2] != rhs[:-2]):
        return False
    scale = match.find("nn.multiply")
    if scale is None:
        return True
    factor = shape_of(scale.operands[1])
    return scale.operands[0] is gemm.results[0] and element_type_name(scale.operands[1]) == "f32" \
        and factor is not None and min(factor, default=1) >= 0 and math.prod(factor) == 1


def cublas_patterns() -> list[tuple[str, Pattern, object]]:
    """TVM's cuBLAS table, with cuBLASLt's epilogues (bias, ReLU, tanh-GELU), and its FP8
    matmul with the dequantize scale (sm_89 and later)."""
    float8 = is_op("nn.matmul_float8")(wildcard(), wildcard())
    return [
        ("matmul_float8_scale", is_op("nn.multiply")(float8, wildcard()), check_cublas_float8),
        ("matmul_float8", float8, check_cublas_float8),
        ("dense_bias_gelu", is_op("nn.gelu")(_with_bias(_dense())), check_cublas),
        ("dense_bias_relu", is_op("nn.relu")(_with_bias(_dense())), check_cublas),
        ("dense_bias", _with_bias(_dense()), check_cublas),
        ("dense", _dense(), check_cublas),
        ("matmul", is_op("nn.matmul")(wildcard(), wildcard()), check_cublas),
        ("batch_matmul", _batch_matmul(), check_cublas),
    ]


def check_cudnn_conv(match: Match) -> bool:
    """f16/bf16/f32, NCHW/OIHW or NHWC/OHWI, any groups and dilation, static C/H/W, a
    per-channel bias."""
    conv = match.find("nn.conv2d")
    if conv is None or not _dtypes_ok(match, CUBLAS_DTYPES):
        return False
    x = shape_of(conv.operands[0])
    if x is None or any(d < 0 for d in x[1:]) or op_attr(conv, "data_layout") not in ("NCHW", "NHWC"):
        return False
    return _bias_ok(match, conv, 1 if op_attr(conv, "data_layout") == "NCHW" else 3)


def check_cudnn_conv_relu(match: Match) -> bool:
    """``check_cudnn_conv``, NHWC only: for an NCHW convolution + ReLU with no bias, cuDNN
    9.19 on an H200 proposes no engine (its fused epilogues want NHWC there; with a bias it
    finds one), so that ReLU is left to another target."""
    conv = match.find("nn.conv2d")
    return conv is not None and op_attr(conv, "data_layout") == "NHWC" and check_cudnn_conv(match)


def check_attention(match: Match) -> bool:
    """cuDNN's fused attention: f16/bf16, head dim a multiple of 8 up to 128, softmax
    over the keys."""
    if not _dtypes_ok(match, ("f16", "bf16")):
        return False
    softmax = match.find("nn.softmax")
    q = shape_of(match.inputs[0])
    if softmax is None or q is None or op_attr(softmax, "axis") not in (-1, len(q) - 1):
        return False
    # cuDNN's SDPA needs K with a unit-stride head dim (its frontend rejects any other at
    # build()): ``nn.matmul(q, kᵀ)`` qualifies only with the transpose making Kᵀ in the
    # match (K then read as stored), a batch_matmul only without one.
    qk = next(op for op in match.ops if op.name in ("nn.matmul", "nn.batch_matmul"))
    transposed = any(op.name == "nn.transpose" for op in match.ops)
    if transposed != (qk.name == "nn.matmul"):
        return False
    if transposed:
        t = match.find("nn.transpose")
        rank = len(shape_of(t.operands[0]) or ())
        if list(op_attr(t, "perm")) != [*range(rank - 2), rank - 1, rank - 2]:
            return False
    return q[-1] > 0 and q[-1] % 8 == 0 and q[-1] <= 128


def cudnn_patterns() -> list[tuple[str, Pattern, object]]:
    return [
        ("sdpa", is_attention(), check_attention),
        ("conv2d_bias_relu", is_op("nn.relu")(_with_bias(_conv2d())), check_cudnn_conv),
        ("conv2d_bias", _with_bias(_conv2d()), check_cudnn_conv),
        ("conv2d_relu", is_op("nn.relu")(_conv2d()), check_cudnn_conv_relu),
        ("conv2d", _conv2d(), check_cudnn_conv),
    ]


def register_builtin_backends() -> None:
    # Each pattern is one library call or kernel: never combined (TVM's no-fusion BYOC style).
    register_backend("cutlass", patterns=cutlass_patterns(), partition_rule="pattern")
    register_backend("cublas", patterns=cublas_patterns(), partition_rule="pattern")
    register_backend("cudnn", patterns=cudnn_patterns(), partition_rule="pattern")
    # TensorRT compiles whole sub-graphs: Collage combines any touching matches (the
    # arbitrary style); eager merges adjacent composites into one region, whose nested
    # composites are then inlined: one plain sub-graph per partition.
    register_backend("tensorrt", patterns=tensorrt_patterns(), partition_rule="arbitrary",
                     after_partitioning=[FlattenTensorRTPartitions()])


def tensorrt_op_ok(match: Match) -> bool:
    """Every op of the match converts to ONNX for TensorRT's parser."""
    return all(unsupported_reason(op) is None for op in match.ops)


def tensorrt_patterns() -> list[tuple[str, Pattern, object]]:
    """One pattern per op TensorRT takes (TVM's TensorRT BYOC annotates single ops);
    Collage combines adjacent matches into convex sub-graphs (the arbitrary style)."""
    return [(name.removeprefix("nn."), is_op(name), tensorrt_op_ok) for name in TENSORRT_OPS]


register_builtin_backends()
