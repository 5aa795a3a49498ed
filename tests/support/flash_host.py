"""Partita's flash attention kernel (``partita.lowering.cuda.flash_attention``) built for the
host with ``tests/support/cuda_host.py``'s shim (``PARTITA_HOST_EMULATION``: the ``mma.sync``
fragments exchanged through shared memory), and launched on NumPy arrays."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np

from partita.lowering.cuda.flash_attention import (
    FlashConfig,
    flash_attention_source,
    flash_decode_entry,
    flash_decode_source,
)
from support.cuda_host import SHIM  # tests/support/cuda_host.py


def build(configs: list[FlashConfig], directory: Path) -> ctypes.CDLL:
    wrappers = "".join(
        f'extern "C" void host_{c.entry}(const unsigned* geo, void** p, const int* d, float scale) {{\n'
        f"  partita_launch(geo, [&] {{ {c.entry}((const {_t(c)}*)p[0], (const {_t(c)}*)p[1], "
        f"(const {_t(c)}*)p[2], (const unsigned char*)p[3], ({_t(c)}*)p[4], d[0], d[1], d[2], d[3], scale); }});\n}}\n"
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
    config's layout (``[B, H, S, D]`` or ``[B, S, H, D]``)."""
    if config.layout == "BSHD":
        b, q_len, heads, _ = q.shape
        kv_len, kv_heads = k.shape[1], k.shape[2]
    else:
        b, heads, q_len, _ = q.shape
        kv_heads, kv_len = k.shape[1], k.shape[2]
    out = np.full(q.shape, np.nan, q.dtype)
    arrays = [np.ascontiguousarray(a) for a in (q, k, v)]
    mask = None if key_mask is None else np.ascontiguousarray(key_mask.astype(np.uint8))
    pointers = (ctypes.c_void_p * 5)(*[a.ctypes.data for a in arrays],
                                      None if mask is None else mask.ctypes.data, out.ctypes.data)
    geo = (ctypes.c_uint * 6)(*config.grid(b, heads, q_len), *config.block)
    dims = (ctypes.c_int * 4)(heads, kv_heads, q_len, kv_len)
    getattr(lib, f"host_{config.entry}")(geo, pointers, dims, ctypes.c_float(scale))
    return out


def build_decode(dtype: str, head_dim: int, directory: Path) -> ctypes.CDLL:
    """The split-KV decode kernels of ``flash_decode_source`` for the host."""
    entry = flash_decode_entry(dtype, head_dim)
    t = "__half" if dtype == "f16" else "__nv_bfloat16"
    wrappers = (
        f'extern "C" void host_{entry}(const unsigned* geo, void** p, const int* d, float scale) {{\n'
        f"  partita_launch(geo, [&] {{ {entry}((const {t}*)p[0], (const {t}*)p[1], (const {t}*)p[2], "
        f"(const unsigned char*)p[3], (float*)p[4], (float*)p[5], d[0], d[1], d[2], scale, d[3]); }});\n}}\n"
        f'extern "C" void host_{entry}_combine(const unsigned* geo, void** p, const int* d) {{\n'
        f"  partita_launch(geo, [&] {{ {entry}_combine((const float*)p[0], (const float*)p[1], ({t}*)p[2], d[0], d[1]); }});\n}}\n")
    source = SHIM + flash_decode_source(dtype, head_dim) + wrappers
    (directory / f"{entry}.cpp").write_text(source)
    subprocess.run(["g++", "-O1", "-std=c++17", "-mf16c", "-shared", "-fPIC", "-o", str(directory / f"{entry}.so"),
                    str(directory / f"{entry}.cpp")], check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(directory / f"{entry}.so"))


def launch_decode(lib: ctypes.CDLL, dtype: str, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  key_mask: np.ndarray | None, scale: float, splits: int, zero_undefined_rows: bool) -> np.ndarray:
    """``o[B, H, 1, D]``: pass 1 on grid ``(splits, B * H)``, then the combine."""
    b, heads, _, d = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    entry = flash_decode_entry(dtype, d)
    part_o = np.full((b * heads, splits, d), np.nan, np.float32)
    part_ml = np.full((b * heads, splits, 2), np.nan, np.float32)
    out = np.full(q.shape, np.nan, q.dtype)
    arrays = [np.ascontiguousarray(a) for a in (q, k, v)]
    mask = None if key_mask is None else np.ascontiguousarray(key_mask.astype(np.uint8))
    pointers = (ctypes.c_void_p * 6)(*[a.ctypes.data for a in arrays], None if mask is None else mask.ctypes.data,
                                      part_o.ctypes.data, part_ml.ctypes.data)
    getattr(lib, f"host_{entry}")((ctypes.c_uint * 6)(splits, b * heads, 1, 128, 1, 1), pointers,
                                  (ctypes.c_int * 4)(heads, kv_heads, kv_len, splits), ctypes.c_float(scale))
    pointers = (ctypes.c_void_p * 3)(part_o.ctypes.data, part_ml.ctypes.data, out.ctypes.data)
    getattr(lib, f"host_{entry}_combine")((ctypes.c_uint * 6)(b * heads, 1, 1, min(256, d), 1, 1), pointers,
                                          (ctypes.c_int * 2)(splits, int(zero_undefined_rows)))
    return out
