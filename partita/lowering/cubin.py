"""Inspection of NVIDIA cubins (ELF files) with pyelftools.

* :func:`kernel_symbols` -- names of the ``__global__`` functions;
* :func:`kernel_params` -- per-parameter ordinal/offset/size from the
  ``.nv.info.<kernel>`` section (EIATTR_KPARAM_INFO records);
* :func:`read_global` / :func:`read_int_global` -- bytes of an initialised
  ``__device__`` variable (e.g. the ``<entry>_smem_bytes`` constants the CUTLASS
  emitter writes).

``.nv.info`` records: a 4-byte header ``u8 format, u8 attribute, u16 operand``;
for format 0x04 (EIFMT_SVAL) the operand is the size of the payload that
follows, for 0x03 (HVAL) / 0x02 (BVAL) it is the value, for 0x01 (NVAL) unused.  KPARAM_INFO
(attribute 0x17) payload: ``u32 index, u16 ordinal, u16 offset, u32 flags``,
the parameter size in bytes being ``flags >> 18`` (bits 18..31).
"""

from __future__ import annotations

import io
import re
import shutil
import struct
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

EIATTR_KPARAM_INFO = 0x17
EIATTR_PARAM_CBANK = 0x0A
EIATTR_REQNTID = 0x05
EIATTR_MAX_THREADS = 0x05
"""``__launch_bounds__``: u32 x, y, z (checked on NVRTC cubins: 256,1,1 for a bound of 256)."""
STT_FUNC = "STT_FUNC"


class CubinError(ValueError):
    pass


@dataclass(frozen=True)
class ParamInfo:
    ordinal: int
    offset: int
    size: int


def _elf(cubin: bytes) -> ELFFile:
    if cubin[:4] != b"\x7fELF":
        raise CubinError("not an ELF cubin")
    return ELFFile(io.BytesIO(cubin))


def kernel_symbols(cubin: bytes) -> set[str]:
    """Names of the kernels (function symbols with a ``.text.<name>`` section)."""
    elf = _elf(cubin)
    texts = {s.name[len(".text."):] for s in elf.iter_sections() if s.name.startswith(".text.")}
    out = set()
    for sec in elf.iter_sections():
        if isinstance(sec, SymbolTableSection):
            for sym in sec.iter_symbols():
                if sym["st_info"]["type"] == STT_FUNC and sym.name in texts:
                    out.add(sym.name)
    return out


def global_symbols(cubin: bytes) -> set[str]:
    """Names of the data objects (``__device__`` / ``__constant__`` variables)."""
    elf = _elf(cubin)
    out = set()
    for sec in elf.iter_sections():
        if isinstance(sec, SymbolTableSection):
            out |= {s.name for s in sec.iter_symbols() if s["st_info"]["type"] == "STT_OBJECT"}
    return out


def nv_info_sections(cubin: bytes) -> dict[str, bytes]:
    """Every kernel's ``.nv.info.<entry>`` section by entry, read in one pass over the ELF
    (a lookup by name re-reads every section header: a module of many kernels is read once)."""
    prefix = ".nv.info."
    return {sec.name[len(prefix):]: sec.data() for sec in _elf(cubin).iter_sections() if sec.name.startswith(prefix)}


def nv_info_records(cubin: bytes, entry: str, sections: dict[str, bytes] | None = None) -> list[tuple[int, int, bytes]]:
    """``(format, attribute, payload)`` records of ``.nv.info.<entry>`` (from ``sections``,
    ``nv_info_sections(cubin)``, when the caller has read them)."""
    data = (nv_info_sections(cubin) if sections is None else sections).get(entry)
    if data is None:
        raise CubinError(f"no .nv.info.{entry} section (is {entry!r} a kernel in this cubin?)")
    recs, i = [], 0
    # every record starts with a 4-byte header: format, attribute, u16 operand
    # (the payload size for SVAL, the value for HVAL/BVAL, unused for NVAL)
    while i + 4 <= len(data):
        fmt, attr = data[i], data[i + 1]
        (operand,) = struct.unpack_from("<H", data, i + 2)
        i += 4
        if fmt == 0x04:
            recs.append((fmt, attr, data[i:i + operand]))
            i += operand
        elif fmt in (0x01, 0x02, 0x03):
            recs.append((fmt, attr, data[i - 2:i] if fmt != 0x01 else b""))
        else:
            raise CubinError(f"unknown .nv.info record format 0x{fmt:02x} at byte {i - 4}")
    return recs


def kernel_params(cubin: bytes, entry: str, sections: dict[str, bytes] | None = None) -> list[ParamInfo]:
    """Parameters of ``entry`` sorted by ordinal: ``ParamInfo(ordinal, offset, size)``."""
    params = {}
    for fmt, attr, payload in nv_info_records(cubin, entry, sections):
        if fmt == 0x04 and attr == EIATTR_KPARAM_INFO and len(payload) >= 12:
            _index, ordinal, offset, flags = struct.unpack_from("<IHHI", payload, 0)
            params[ordinal] = ParamInfo(ordinal=ordinal, offset=offset, size=(flags >> 18) & 0x3FFF)
    return [params[k] for k in sorted(params)]


def read_global(cubin: bytes, symbol: str) -> bytes:
    """Initial bytes of a ``__device__``/``__constant__`` variable."""
    elf = _elf(cubin)
    for sec in elf.iter_sections():
        if not isinstance(sec, SymbolTableSection):
            continue
        for sym in sec.iter_symbols():
            if sym.name != symbol or sym["st_info"]["type"] != "STT_OBJECT":
                continue
            shndx = sym["st_shndx"]
            if not isinstance(shndx, int):
                raise CubinError(f"{symbol} is not defined in a section ({shndx})")
            target = elf.get_section(shndx)
            if target["sh_type"] == "SHT_NOBITS":
                return bytes(sym["st_size"])
            data = target.data()
            off = sym["st_value"]  # relocatable cubin: offset within its section
            return data[off:off + sym["st_size"]]
    raise CubinError(f"no data symbol {symbol!r} in cubin")


def read_int_global(cubin: bytes, symbol: str) -> int:
    (v,) = struct.unpack("<i", read_global(cubin, symbol)[:4])
    return v


def kernel_max_threads(cubin: bytes, entry: str, sections: dict[str, bytes] | None = None) -> int | None:
    """Threads per block ``entry`` was compiled for (its ``__launch_bounds__``), or None."""
    for fmt, attr, payload in nv_info_records(cubin, entry, sections):
        if fmt == 0x04 and attr == EIATTR_MAX_THREADS and len(payload) >= 12:
            x, y, z = struct.unpack_from("<III", payload, 0)
            return x * max(y, 1) * max(z, 1)
    return None


def nvdisasm_tool() -> str | None:
    """The ``nvdisasm`` on PATH, else the one of the ``nvidia-cuda-nvdisasm`` wheel (the
    test extra) beside this Python; None when neither is there."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    candidate = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cu13" / "bin" / "nvdisasm"
    return str(candidate) if candidate.exists() else None


def sass_listing(cubin: bytes | str | Path) -> str:
    """The SASS of a cubin (its bytes or its file) as ``nvdisasm`` prints it, one
    ``.text.<kernel>:`` section per function. Raises ``FileNotFoundError`` when there is no
    ``nvdisasm``."""
    tool = nvdisasm_tool()
    if tool is None:
        raise FileNotFoundError("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm)")
    if isinstance(cubin, bytes):
        with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
            file.write(cubin)
            file.flush()
            return subprocess.run([tool, file.name], check=True, capture_output=True, text=True).stdout
    return subprocess.run([tool, str(cubin)], check=True, capture_output=True, text=True).stdout


def sass_by_function(sass: str) -> dict[str, str]:
    """A SASS listing split into each function's body, by name."""
    parts = re.split(r"\n\s*\.text\.(\S+):", sass)
    return dict(zip(parts[1::2], parts[2::2]))
