"""Partita's flash attention kernel (``partita.lowering.cuda.flash_attention``) built for the
host with ``tests/support/cuda_host.py``'s shim (``PARTITA_HOST_EMULATION``: the ``mma.sync``
fragments exchanged through shared memory), and launched on NumPy arrays."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np

from partita.lowering.cuda.flash_attention import (
    DecodeConfig,
    FlashConfig,
    flash_attention_source,
    flash_decode_source,
)
from support.cuda_host import SHIM  # tests/support/cuda_host.py


def build(configs: list[FlashConfig], directory: Path) -> ctypes.CDLL:
    wrappers = "".join(
        f'extern "C" void host_{c.entry}(const unsigned* geo, void** p, const int* d, float scale, '
        f"const long long* rows) {{\n"
        f"  partita_launch(geo, [&] {{ {c.entry}((const {_t(c)}*)p[0], (const {_t(c)}*)p[1], "
        f"(const {_t(c)}*)p[2], (const unsigned char*)p[3], ({_t(c)}*)p[4], d[0], d[1], d[2], d[3], scale, "
        f"rows[0], rows[1], rows[2]); }});\n}}\n"
        for c in configs)
    source = SHIM + flash_attention_source(configs) + wrappers
    (directory / "flash.cpp").write_text(source)
    subprocess.run(["g++", "-O1", "-std=c++17", "-mf16c", "-shared", "-fPIC", "-o", str(directory / "flash.so"),
                    str(directory / "flash.cpp")], check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(directory / "flash.so"))


def _t(c: FlashConfig) -> str:
    return "__half" if c.dtype == "f16" else "__nv_bfloat16"


def launch(lib: ctypes.CDLL, config: FlashConfig, q: np.ndarray, k: np.ndarray, v: np.ndarray,
           key_mask: np.ndarray | None, scale: float) -> np.ndarray:
    """``o`` from the kernel run on the host, every block launched; q, k, v and o in the
    config's layout (``[B, H, S, D]`` or ``[B, S, H, D]``). In BSHD, q, k and v may be
    views whose tokens lie further apart (heads of a packed ``[B, S, 3, H, D]``
    projection): the kernel reads them in place, with their row strides."""
    if config.layout == "BSHD":
        b, q_len, heads, _ = q.shape
        kv_len, kv_heads = k.shape[1], k.shape[2]
    else:
        b, heads, q_len, _ = q.shape
        kv_heads, kv_len = k.shape[1], k.shape[2]
    out = np.full(q.shape, np.nan, q.dtype)
    arrays = [a if config.layout == "BSHD" and _token_rows(a) else np.ascontiguousarray(a) for a in (q, k, v)]
    mask = None if key_mask is None else np.ascontiguousarray(key_mask.astype(np.uint8))
    pointers = (ctypes.c_void_p * 5)(*[a.ctypes.data for a in arrays],
                                      None if mask is None else mask.ctypes.data, out.ctypes.data)
    geo = (ctypes.c_uint * 6)(*config.grid(b, heads, q_len), *config.block)
    dims = (ctypes.c_int * 4)(heads, kv_heads, q_len, kv_len)
    rows = (ctypes.c_longlong * 3)(*[(_token_rows(a) or 0) if config.layout == "BSHD" else 0 for a in arrays])
    getattr(lib, f"host_{config.entry}")(geo, pointers, dims, ctypes.c_float(scale), rows)
    return out


def _token_rows(a: np.ndarray) -> int | None:
    """The elements between consecutive tokens of a BSHD array whose heads are contiguous
    ``[H, D]`` blocks and whose batches follow one another (contiguous, or a head view of
    a packed projection), else None."""
    item = a.itemsize
    _, seq, heads, dim = a.shape
    row, rest = a.strides[1] // item, a.strides
    if rest[3] != item or rest[2] != dim * item or rest[1] % item or rest[0] != seq * rest[1]:
        return None
    return row


def build_decode(configs: list[DecodeConfig], directory: Path) -> ctypes.CDLL:
    """The split-KV decode pass 1 of ``flash_decode_source`` for the host, each config's
    device function under a ``host_<entry>`` launch whose blocks stride over the
    (split, batch x head) pairs as the window kernel's do."""
    wrappers = "".join(
        f'extern "C" void host_{c.entry}(const unsigned* geo, void** p, const int* d, float scale, long long mb, '
        f'float fill) {{\n'
        f"  partita_launch(geo, [&] {{\n"
        f"    for (int t = blockIdx.x; t < d[3] * d[4]; t += gridDim.x)\n"
        f"      {c.entry}((const {_T[c.dtype]}*)p[0], (const {_T[c.dtype]}*)p[1], (const {_T[c.dtype]}*)p[2], "
        f"(const {_MASK_T[c.mask] or _T[c.dtype]}*)p[3], (float*)p[4], d[0], d[1], d[2], scale, d[3], t % d[3], "
        f"t / d[3], mb, d[5], (long long)d[0] * {c.head_dim}, fill);\n  }});\n}}\n"
        for c in configs)
    source = SHIM + flash_decode_source(configs) + wrappers
    (directory / "decode.cpp").write_text(source)
    subprocess.run(["g++", "-O1", "-std=c++17", "-mf16c", "-shared", "-fPIC", "-o", str(directory / "decode.so"),
                    str(directory / "decode.cpp")], check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(directory / "decode.so"))


_T = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}
_MASK_T = {"none": "unsigned char", "boolean": "unsigned char", "additive": "", "last_key": "long long"}


def launch_decode(lib: ctypes.CDLL, config: DecodeConfig, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  mask: np.ndarray | None, scale: float, splits: int, blocks: int | None = None,
                  fill: float = -np.inf) -> np.ndarray:
    """The partials ``[B, H, splits, D + 2]`` of pass 1 run on the host (q, k, v in the
    config's layout; ``mask`` ``[B | 1, Skv | 1]``, bool or the query's type, or the int64
    last keys ``[B | 1]``), on ``blocks`` blocks (default: one per pair), hidden keys
    scoring ``fill``."""
    bshd = config.layout == "BSHD"
    b, heads = (q.shape[0], q.shape[2]) if bshd else q.shape[:2]
    kv_heads, kv_len = (k.shape[2], k.shape[1]) if bshd else k.shape[1:3]
    part = np.full((b, heads, splits, config.head_dim + 2), 7.0, np.float32)  # every value written
    arrays = [np.ascontiguousarray(a) for a in (q, k, v)]
    mb = mk = 0
    if mask is not None and mask.dtype == np.int64:  # last keys
        mb = 0 if mask.shape[0] == 1 else 1
    elif mask is not None:
        mb = 0 if mask.shape[0] == 1 else mask.shape[1]
        mk = 0 if mask.shape[1] == 1 else 1
        mask = np.ascontiguousarray(mask.astype(np.uint8) if mask.dtype == np.bool_ else mask)
    pointers = (ctypes.c_void_p * 5)(*[a.ctypes.data for a in arrays], None if mask is None else mask.ctypes.data,
                                      part.ctypes.data)
    pairs = splits * b * heads
    geo = (ctypes.c_uint * 6)(blocks or pairs, 1, 1, *config.block)
    dims = (ctypes.c_int * 6)(heads, kv_heads, kv_len, splits, b * heads, mk)
    getattr(lib, f"host_{config.entry}")(geo, pointers, dims, ctypes.c_float(scale), ctypes.c_longlong(mb),
                                         ctypes.c_float(fill))
    return part
