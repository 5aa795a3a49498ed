"""The wgmma flash attention's shared-memory layouts, descriptors and fragment layouts
against CuTe's own (``cute::SM90::GMMA``, built on the host with g++): the truth the host
emulation of ``wgmma.mma_async`` (``flash_attention``'s prelude) is checked by, so that
the emulated kernel's results (``test_flash_attention.py``, the ``wgmma`` cases) say what
an H100 computes.

- CuTe's ``make_gmma_desc`` accepts the kernel's tiles as canonical no-swizzle layouts (it
  static-asserts the form): Q and K K-major, V MN-major (transposed B), and gives the
  leading and stride byte offsets the kernel encodes;
- the emulation's decoding of those descriptors lands every (row, k) on the byte CuTe's
  layout puts it at;
- the emulation's accumulator and register-A layouts are CuTe's ``CLayout_64xN`` and
  ``ALayout_64x16`` (thread, value) -> (m, n) / (m, k).
"""

from __future__ import annotations

import ctypes
import subprocess

import pytest
from support.cuda_host import SHIM, have_gxx  # tests/support/cuda_host.py

from partita.lowering import nvrtc
from partita.lowering.cuda.flash_attention import FlashConfig, flash_attention_source

pytestmark = pytest.mark.skipif(not have_gxx(), reason="needs g++")

CHUNKS = (4, 8, 12, 16)
"""16-byte chunks a row: head dims 32, 64, 96 and 128."""

_CUTE = r"""
#include <cstdio>
#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
using namespace cute;
namespace gmma = cute::SM90::GMMA;
alignas(128) static half_t buf[128 * 16 * 8];
template <int R, int CK>
void k_major() {  // a K-major (R x 16) slice of a tile of CK chunks a row: Q's and K's
  auto layout = make_layout(make_shape(make_shape(_8{}, Int<R / 8>{}), make_shape(_8{}, _2{})),
                            make_stride(make_stride(_8{}, Int<CK * 64>{}), make_stride(_1{}, _64{})));
  GmmaDescriptor d = gmma::make_gmma_desc<gmma::Major::K>(make_tensor(make_smem_ptr(buf), layout));
  printf("K %d %d %u %u %u", R, CK, d.bitfield.leading_byte_offset_, d.bitfield.stride_byte_offset_,
         d.bitfield.layout_type_);
  for (int r = 0; r < R; ++r) for (int k = 0; k < 16; ++k) printf(" %d", int(layout(r, k)));
  printf("\n");
}
template <int CK>
void mn_major() {  // V's 16 keys (K) by CK * 8 dims (N), N contiguous: an MN-major B
  auto layout = make_layout(make_shape(make_shape(_8{}, Int<CK>{}), make_shape(_8{}, _2{})),
                            make_stride(make_stride(_1{}, _64{}), make_stride(_8{}, Int<CK * 64>{})));
  GmmaDescriptor d = gmma::make_gmma_desc<gmma::Major::MN>(make_tensor(make_smem_ptr(buf), layout));
  printf("MN %d %u %u %u", CK, d.bitfield.leading_byte_offset_, d.bitfield.stride_byte_offset_,
         d.bitfield.layout_type_);
  for (int n = 0; n < CK * 8; ++n) for (int k = 0; k < 16; ++k) printf(" %d", int(layout(n, k)));
  printf("\n");
}
int main() {
  CASES
  printf("C");  // (thread, value) -> m + 64 n of the m64n128 f32 accumulators
  for (int t = 0; t < 128; ++t) for (int v = 0; v < 64; ++v) printf(" %d", int(gmma::CLayout_64xN<128>{}(t, v)));
  printf("\nA");  // (thread, value) -> m + 64 k of the m64k16 register A of 16-bit types
  for (int t = 0; t < 128; ++t) for (int v = 0; v < 8; ++v) printf(" %d", int(gmma::ALayout_64x16{}(t, v)));
  printf("\n");
}
"""

_EXPORTS = r"""
extern "C" unsigned wg_k_major(unsigned long long d, int row, int k) { return fa_wg_k_major(d, row, k); }
extern "C" unsigned wg_mn_major(unsigned long long d, int k, int col) { return fa_wg_mn_major(d, k, col); }
extern "C" unsigned wg_core_offset(unsigned row, unsigned dim, unsigned ck) { return fa_core_offset(row, dim, ck); }
extern "C" void wg_c_coord(int t, int v, int* row, int* col) { fa_wg_c_coord(t, v, *row, *col); }
extern "C" void wg_a_owner(int row, int k, int* t, int* v) { fa_wg_a_owner(row, k, *t, *v); }
"""


@pytest.fixture(scope="module")
def cute(tmp_path_factory) -> dict:
    """CuTe's descriptors, layouts and fragment layouts, by case."""
    where = tmp_path_factory.mktemp("cute")
    cases = "".join(f"k_major<{r}, {ck}>(); " for r in (64, 128) for ck in CHUNKS)
    cases += "".join(f"mn_major<{ck}>(); " for ck in CHUNKS)
    (where / "cute.cpp").write_text(_CUTE.replace("CASES", cases))
    includes = [f"-I{p}" for p in nvrtc.cuda_include_paths()]
    subprocess.run(["g++", "-std=c++17", "-O0", "-w", *includes, str(where / "cute.cpp"), "-o", str(where / "cute")],
                   check=True, capture_output=True, timeout=600)
    out = subprocess.run([str(where / "cute")], check=True, capture_output=True, text=True).stdout
    table: dict = {}
    for line in out.splitlines():
        tag, *values = line.split()
        if tag not in ("K", "MN", "C", "A"):  # CuTe's note that the host has no shared address
            continue
        numbers = [int(v) for v in values]
        if tag == "K":
            r, ck, lbo, sbo, kind, *offsets = numbers
            table["K", r, ck] = (lbo, sbo, kind, offsets)
        elif tag == "MN":
            ck, lbo, sbo, kind, *offsets = numbers
            table["MN", ck] = (lbo, sbo, kind, offsets)
        elif tag in ("C", "A"):
            table[tag] = numbers
    return table


@pytest.fixture(scope="module")
def emulation(tmp_path_factory) -> tuple[ctypes.CDLL, str]:
    """The emulation's layout functions, from the prelude of a wgmma kernel's source."""
    where = tmp_path_factory.mktemp("emulation")
    source = flash_attention_source(FlashConfig("f16", 128, wgmma=True))
    (where / "wg.cpp").write_text(SHIM + source + _EXPORTS)
    subprocess.run(["g++", "-O1", "-std=c++17", "-mf16c", "-shared", "-fPIC", "-o", str(where / "wg.so"),
                    str(where / "wg.cpp")], check=True, capture_output=True, text=True)
    lib = ctypes.CDLL(str(where / "wg.so"))
    for name in ("wg_k_major", "wg_mn_major"):
        getattr(lib, name).argtypes = [ctypes.c_ulonglong, ctypes.c_int, ctypes.c_int]
    return lib, source


def _desc(lbo: int, sbo: int) -> int:
    """A descriptor at start address 0 with these offsets (16-byte units), no swizzle."""
    return (lbo << 16) | (sbo << 32)


@pytest.mark.parametrize("ck", CHUNKS)
def test_q_and_k_tiles_are_canonical_k_major_layouts(cute, emulation, ck: int) -> None:
    """Q's m64 tiles and K's 64-key tiles (and 128-row ones), one k-step (16 dims) of a tile of ``ck``
    chunks a row: CuTe takes the kernel's core-matrix order as its canonical K-major form,
    with the offsets the kernel encodes (LBO 128 bytes, SBO ``ck * 128``), and the
    emulation reads each (row, k) where CuTe's layout (and the kernel's copies) put it."""
    lib, source = emulation
    assert "fa_gmma_desc(qs, smem, 128, CK * 128)" in source
    assert "fa_gmma_desc(ks[0], smem, 128, CK * 128)" in source and "fa_gmma_desc(ks[1], smem, 128, CK * 128)" in source
    for rows in (64, 128):
        lbo, sbo, kind, offsets = cute["K", rows, ck]
        assert (lbo * 16, sbo * 16, kind) == (128, ck * 128, 0)
        for st in range(ck // 2):  # every k-step of the tile: its slice starts st * 128 halves on
            base = lib.wg_core_offset(0, 16 * st, ck)
            assert base == st * 128
            for r in range(rows):
                for k in range(16):
                    at = offsets[r * 16 + k]
                    assert lib.wg_core_offset(r, 16 * st + k, ck) - base == at, (rows, st, r, k)
                    assert lib.wg_k_major(_desc(lbo, sbo), r, k) == 2 * at, (rows, r, k)


@pytest.mark.parametrize("ck", CHUNKS)
def test_v_tiles_are_canonical_mn_major_layouts(cute, emulation, ck: int) -> None:
    """V's tiles as the B operand of P V (K = 16 keys, N = the head dim, N contiguous):
    CuTe's canonical MN-major form, LBO ``ck * 128`` bytes (between groups of 8 keys), SBO
    128 (between groups of 8 dims), as the kernel encodes; the emulation reads (key, dim)
    where CuTe's layout and the kernel's copies put it."""
    lib, source = emulation
    assert "fa_gmma_desc(vs[0], smem, CK * 128, 128)" in source and "fa_gmma_desc(vs[1], smem, CK * 128, 128)" in source
    lbo, sbo, kind, offsets = cute["MN", ck]
    assert (lbo * 16, sbo * 16, kind) == (ck * 128, 128, 0)
    for n in range(ck * 8):
        for k in range(16):
            at = offsets[n * 16 + k]
            assert lib.wg_core_offset(k, n, ck) == at, (n, k)  # keys are the tile's rows
            assert lib.wg_mn_major(_desc(lbo, sbo), k, n) == 2 * at, (n, k)


def test_accumulator_and_register_a_layouts_are_cutes(cute, emulation) -> None:
    """Thread t's accumulator v is CuTe's (m, n) of ``CLayout_64xN``, the layout the kernel's
    softmax, masks and epilogue read S and O by (rows 16 w + lane / 4 and + 8, columns
    8 j + 2 (lane % 4) and + 1: mma.sync's, per warp); P's registers are CuTe's
    ``ALayout_64x16`` (mma.sync's A fragment, per warp)."""
    lib, _ = emulation
    row, col = ctypes.c_int(), ctypes.c_int()
    for t in range(128):
        for v in range(64):
            lib.wg_c_coord(t, v, ctypes.byref(row), ctypes.byref(col))
            assert row.value + 64 * col.value == cute["C"][t * 64 + v], (t, v)
    owner, value = ctypes.c_int(), ctypes.c_int()
    for t in range(128):
        for v in range(8):
            m_k = cute["A"][t * 8 + v]
            lib.wg_a_owner(m_k % 64, m_k // 64, ctypes.byref(owner), ctypes.byref(value))
            assert (owner.value, value.value) == (t, v), (t, v, m_k)
