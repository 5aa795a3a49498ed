"""CUDA lowering rules of the ``nn.linalg`` family beyond the built-in tiled GEMMs (which
take f16 / bf16 / f32, and ``nn.matmul_float8`` and ``nn.matmul_integer`` on the tensor-core
tiles): GEMMs in f64 or integer types as a ``window`` rule (one thread per output element, a
loop over K in the compute type), and ``nn.matmul_nbits``'s GEMV and tile schedules: what
runs where no tensor-core library takes the product."""

from __future__ import annotations

from xdsl.ir import BlockArgument

from partita.dialects import nn
from partita.lowering.cuda.cexpr import _C_TYPES, MMA_DTYPES
from partita.lowering.cuda.ops.indexing import derived_dims
from partita.lowering.cuda.ops.reduction import y_decl
from partita.lowering.cuda.rules import Staging, TiledProduct, window

_TILED_DTYPES = ("f16", "bf16", "f32")


def _untiled(op) -> bool:
    return str(op.result.type.element_type) not in _TILED_DTYPES


def _operand_indices(emitter, op, k: str) -> tuple[list[str], list[str]]:
    """The lhs and rhs indices of the product term at reduction index ``k``."""
    o = list(emitter.out_index)
    a, b = op.operands[0], op.operands[1]
    if isinstance(op, nn.DenseOp):  # x[..., K] x w[N, K]
        return [*o[:-1], k], [o[-1], k]
    ai = emitter.broadcast_index(a, op.results[0], o)
    bi = emitter.broadcast_index(b, op.results[0], o)
    if isinstance(op, nn.BatchMatmulOp):
        ai[1:] = [k, o[1]] if op.transpose_a else [o[1], k]
        bi[1:] = [o[2], k] if op.transpose_b else [k, o[2]]
        return ai, bi
    ai[-2:] = [o[-2], k]
    bi[-2:] = [k, o[-1]]
    return ai, bi


def _k_dim(emitter, op):
    a = op.operands[0]
    if isinstance(op, nn.BatchMatmulOp) and op.transpose_a:
        return emitter.dims[a][-2]
    return emitter.dims[a][-1]


def _gemm_dims(emitter, op):
    """Result dims of a GEMM (the built-in kernels' rule: batch dims broadcast)."""
    a, b = emitter.dims[op.operands[0]], emitter.dims[op.operands[1]]
    if isinstance(op, nn.DenseOp):
        return [*a[:-1], b[0]]
    (m, _), (_, n) = emitter._gemm_axes(op)
    return [*emitter._broadcast_dims(a[:-2], b[:-2]), a[m], b[n]]


@window(nn.DenseOp, nn.MatmulOp, nn.BatchMatmulOp, supports=_untiled, dims=_gemm_dims)
def _gemm(emitter, op) -> list[str]:
    A = emitter.ctype(op.results[0])
    k = emitter.var("k")
    ai, bi = _operand_indices(emitter, op, k)
    a, b = op.operands[0], op.operands[1]
    return [
        f"    {A} acc = 0;",
        f"    for ({emitter.index_type} {k} = 0; {k} < {_k_dim(emitter, op)}; ++{k})",
        f"      acc += ({A}){emitter.load(a, ai)} * ({A}){emitter.load(b, bi)};",
        y_decl(emitter, op, "acc"),
    ]


def _code(emitter, op: nn.MatmulNBitsOp, n: str, k: str) -> str:
    """The 4-bit code of weight element ``(n, k)`` as a float: the low nibble of byte
    ``k // 2`` for an even ``k``, the high one for an odd ``k``."""
    byte = emitter.load(op.weight, [n, f"(({k}) >> 1)"])  # parenthesized: the index is summed
    return f"(float)((({k}) & 1) ? ((unsigned)({byte}) >> 4) : ((unsigned)({byte}) & 15u))"


def _gemv_nbits(emitter, op: nn.MatmulNBitsOp) -> tuple[list[str], str] | None:
    """The warp-per-output schedule of a 4-bit GEMV (a decode step's projections: few rows,
    a weight read once; ``Rule.warp``): the lanes stride over the packed weight row 16 bytes
    (32 codes, one 128-bit load) at a time where K is a multiple of 32, else 4 bytes (8
    codes), so each warp load is 512 (128) contiguous bytes of the weight, and the warps of
    a block take consecutive outputs (the next weight rows); an f16 / bf16 input argument is
    read 8 elements (16 bytes) a word. The weight must be a kernel argument (it is read
    through a raw pointer)."""
    if not isinstance(op.weight, BlockArgument):
        return None
    o = list(emitter.out_index)
    k = op.input.type.get_shape()[-1]
    words = 4 if k % 32 == 0 else 1  # 32-bit words of 8 codes a load
    vector = "partita_v16" if words == 4 else "unsigned int"
    first = f"(c * {8 * words} + 8 * w)"  # the first code of word w of load c
    block = f"({first} / {op.block_size})"
    scale = emitter.load(op.scales, [o[-1], block])
    zero = emitter.load(op.zero_points, [o[-1], block])
    unpack = "const unsigned* word = q.w;" if words == 4 else "const unsigned word[1] = {q};"
    dtype = str(op.input.type.element_type)
    xs: list[str] = []
    if dtype in MMA_DTYPES and isinstance(op.input, BlockArgument):
        # A half input row read 16 bytes (the 8 elements of a word's codes) at a time: rows
        # K elements apart, K a multiple of 8 (of the block size), buffers 256-byte aligned.
        ct = _C_TYPES[dtype]
        row = emitter._linear(emitter.dims[op.input], [*o[:-1], "0"])
        xs = [f"          const partita_v16 xv = *(const partita_v16*)(in{op.input.index} + {row} + {first});",
              f"          const {ct}* xe = (const {ct}*)&xv;"]
        x = f"ld_{dtype}(xe[j])"
    else:
        x = emitter.load(op.input, [*o[:-1], f"({first} + j)"])
    lines = [
        f"      const {vector}* codes = (const {vector}*)(in{op.weight.index} + ({emitter.index_type}){o[-1]} * {k // 2});",
        f"      for (int c = lane; c < {k // (8 * words)}; c += 32) {{",
        f"        const {vector} q = codes[c];",
        f"        {unpack}",
        "#pragma unroll",
        f"        for (int w = 0; w < {words}; ++w) {{",
        f"          const float scale = {scale}, zero = (float){zero};",
        *xs,
        "#pragma unroll",
        "          for (int j = 0; j < 8; ++j)",
        "            acc = fmaf((float)" + x + ", ((float)((word[w] >> (4 * j)) & 15u) - zero) * scale, acc);",
        "        }",
        "      }",
    ]
    return lines, emitter._round("acc", str(op.result.type.element_type))


def _tiles_nbits(emitter, op: nn.MatmulNBitsOp) -> TiledProduct | None:
    """The tensor-core tiles of a 4-bit GEMM with many rows (a prefill; ``Rule.tiles``):
    the weight tile staged a 32-bit word of 8 codes a vector (fetched with the step's other
    loads; each code less its block's zero point, times its scale, rounded to the input's
    type as it is stored: what the f16 / bf16 tensor cores take), so each weight byte is
    read once per 128 rows rather than once per row; the input tile 16 bytes a load. f32
    inputs take 16x16 SIMT tiles instead (exact f32 products: the weight read once per 16
    rows, each code dequantized once per 16 rows rather than once per row). The operands
    must be kernel arguments."""
    dtype = str(op.input.type.element_type)
    if not all(isinstance(v, BlockArgument) for v in op.operands):
        return None
    k = op.input.type.get_shape()[-1]
    block = f"(kk / {op.block_size})"
    zero = emitter.load(op.zero_points, ["nn", block])
    scale = emitter.load(op.scales, ["nn", block])
    x = f"in{op.input.index}[mm * K + kk]"
    if dtype not in MMA_DTYPES:  # f32: 16x16 SIMT tiles, exact f32 products, an element a thread
        code = _code(emitter, op, "nn", "kk")
        return TiledProduct(dtype, k, a=x, b=f"({code} - (float){zero}) * {scale}", a_rows=True, b_rows=False)
    T = emitter.index_type
    # A vector: column n's 8 codes from k (one aligned 32-bit word: rows K / 2 bytes apart,
    # a multiple of 8; inside one block of >= 16 codes, so one scale and zero point; K a
    # multiple of 16, so a word is whole or past K).
    weight = Staging(
        declare=("unsigned qw[2];", "float qz[2], qs[2];"),
        fetch=(f"const {T} nn = n0 + r, kk = kn + c;",
               "const bool ok = nn < N && kk < K;",
               f"qw[i] = ok ? *(const unsigned*)(in{op.weight.index} + nn * (K / 2) + (kk >> 1)) : 0u;",
               f"qz[i] = ok ? (float){zero} : 0.0f;",
               f"qs[i] = ok ? (float){scale} : 0.0f;"),
        store=(f"{_C_TYPES[dtype]}* e = ({_C_TYPES[dtype]}*)&vec;",
               "#pragma unroll",
               f"for (int j = 0; j < 8; ++j) e[j] = st_{dtype}(((float)((qw[i] >> (4 * j)) & 15u) - qz[i]) * qs[i]);"),
    )
    return TiledProduct(dtype, k, a=f"ld_{dtype}({x})", b="", a_rows=True, b_rows=False,
                        a_ptr=f"in{op.input.index}", stage_b=weight)


@window(nn.MatmulNBitsOp, dims=derived_dims, warp=_gemv_nbits, tiles=_tiles_nbits)
def _matmul_nbits(emitter, op: nn.MatmulNBitsOp) -> list[str]:
    """Each 4-bit code unpacked from its byte (low nibble for an even k), shifted by its
    block's zero point and scaled, times the input, summed in f32: the weight is read
    packed, a quarter of an f16 weight's bytes."""
    o = list(emitter.out_index)
    k = emitter.var("k")
    block = f"(({k}) / {op.block_size})"
    code = _code(emitter, op, o[-1], k)
    zero = emitter.load(op.zero_points, [o[-1], block])
    scale = emitter.load(op.scales, [o[-1], block])
    x = emitter.load(op.input, [*o[:-1], k])
    return [
        "    float acc = 0.0f;",
        f"    for ({emitter.index_type} {k} = 0; {k} < {emitter.dims[op.input][-1]}; ++{k})",
        f"      acc = fmaf((float){x}, ({code} - (float){zero}) * (float){scale}, acc);",
        y_decl(emitter, op, "acc"),
    ]
