"""Inspection of NVIDIA cubins (64-bit little-endian ELF files), read with ``struct``: a
cubin's section and symbol tables are fixed-size records (pyelftools, which this replaced,
built its parsers anew for every file and a symbol at a time, a third of a small model's
compile).

* :class:`Cubin` -- a cubin read once, for the many questions a plan or a code generator
  asks of it; the functions below take one or the cubin's bytes;
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

import re
import shutil
import struct
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

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


@dataclass(frozen=True)
class Section:
    name: str
    type: int  # sh_type: 2 SHT_SYMTAB, 8 SHT_NOBITS...
    offset: int
    size: int
    link: int
    info: int  # sh_info (a .text section's top byte: its register count)
    entsize: int

    def data(self, cubin: bytes) -> bytes:
        return b"" if self.type == SHT_NOBITS else cubin[self.offset:self.offset + self.size]


SHT_SYMTAB, SHT_NOBITS = 2, 8
_ELF64_SECTION = struct.Struct("<IIQQQQIIQQ")  # sh_name, type, flags, addr, offset, size, link, info, addralign, entsize
_ELF64_SYMBOL = struct.Struct("<IBBHQQ")  # st_name, st_info, st_other, st_shndx, st_value, st_size


def _cstring(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def sections(cubin: bytes) -> list[Section]:
    """The cubin's section headers, by index; a CubinError for anything that is not a 64-bit
    little-endian ELF file or whose tables lie outside it."""
    if cubin[:4] != b"\x7fELF":
        raise CubinError("not an ELF cubin")
    if len(cubin) < 0x40:
        raise CubinError("truncated ELF header")
    if cubin[4] != 2 or cubin[5] != 1:  # EI_CLASS ELFCLASS64, EI_DATA ELFDATA2LSB
        raise CubinError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    entsize, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    if entsize != _ELF64_SECTION.size or shoff + count * entsize > len(cubin) or names >= max(count, 1):
        raise CubinError("its section header table lies outside the file")
    headers = [_ELF64_SECTION.unpack_from(cubin, shoff + k * entsize) for k in range(count)]
    raw = [Section("", h[1], h[4], h[5], h[6], h[7], h[9]) for h in headers]
    table = raw[names].data(cubin) if count else b""
    out = []
    for (name, *_), sec in zip(headers, raw):
        if sec.type != SHT_NOBITS and sec.offset + sec.size > len(cubin):
            raise CubinError(f"section {_cstring(table, name)!r} lies outside the file")
        out.append(Section(_cstring(table, name), sec.type, sec.offset, sec.size, sec.link, sec.info, sec.entsize))
    return out


@dataclass(frozen=True)
class Symbol:
    name: str
    kind: int  # STT_*: 1 a data object, 2 a function
    section: int  # st_shndx
    value: int
    size: int


STT_OBJECT, STT_FUNC = 1, 2


def symbols(cubin: bytes, table: list[Section] | None = None) -> list[Symbol]:
    """Every symbol of the cubin's symbol tables (``table``: its ``sections``, when read)."""
    table = sections(cubin) if table is None else table
    out = []
    for sec in table:
        if sec.type != SHT_SYMTAB:
            continue
        if sec.entsize != _ELF64_SYMBOL.size or sec.link >= len(table):
            raise CubinError(f"symbol table {sec.name!r} is malformed")
        names = table[sec.link].data(cubin)
        data = sec.data(cubin)
        for name, info, _other, shndx, value, size in _ELF64_SYMBOL.iter_unpack(data[:len(data) - len(data) % 24]):
            out.append(Symbol(_cstring(names, name), info & 0xF, shndx, value, size))
    return out


class Cubin:
    """One cubin, read once: its sections (at once), its symbols and ``.nv.info`` records
    (when first asked). What a launch plan or a code generator asks of a cubin many times,
    a kernel or a probe at a time, is then a look-up, not another pass over the file."""

    def __init__(self, image: bytes):
        self.image = image
        self.sections = sections(image)

    @classmethod
    def of(cls, cubin: bytes | Cubin) -> Cubin:
        """``cubin`` itself, or its bytes read."""
        return cubin if isinstance(cubin, Cubin) else cls(cubin)

    @cached_property
    def symbols(self) -> list[Symbol]:
        return symbols(self.image, self.sections)

    @cached_property
    def kernels(self) -> set[str]:
        """Names of the kernels (function symbols with a ``.text.<name>`` section)."""
        texts = {sec.name[len(".text."):] for sec in self.sections if sec.name.startswith(".text.")}
        return {sym.name for sym in self.symbols if sym.kind == STT_FUNC and sym.name in texts}

    @cached_property
    def data_objects(self) -> dict[str, Symbol]:
        """The ``__device__`` / ``__constant__`` variables by name (the first of a name)."""
        out: dict[str, Symbol] = {}
        for sym in self.symbols:
            if sym.kind == STT_OBJECT:
                out.setdefault(sym.name, sym)
        return out

    @cached_property
    def nv_info(self) -> dict[str, bytes]:
        """Every kernel's ``.nv.info.<entry>`` section by entry."""
        prefix = ".nv.info."
        return {sec.name[len(prefix):]: sec.data(self.image) for sec in self.sections if sec.name.startswith(prefix)}

    def read_global(self, symbol: str) -> bytes:
        """Initial bytes of a ``__device__``/``__constant__`` variable."""
        sym = self.data_objects.get(symbol)
        if sym is None:
            raise CubinError(f"no data symbol {symbol!r} in cubin")
        if not 0 < sym.section < min(len(self.sections), 0xFF00):  # SHN_UNDEF, reserved (ABS, COMMON...)
            raise CubinError(f"{symbol} is not defined in a section ({sym.section})")
        target = self.sections[sym.section]
        if target.type == SHT_NOBITS:
            return bytes(sym.size)
        return target.data(self.image)[sym.value:sym.value + sym.size]  # relocatable: offset in its section

    def read_int_global(self, symbol: str) -> int:
        (v,) = struct.unpack("<i", self.read_global(symbol)[:4])
        return v


def kernel_symbols(cubin: bytes | Cubin) -> set[str]:
    """Names of the kernels (function symbols with a ``.text.<name>`` section)."""
    return Cubin.of(cubin).kernels


def global_symbols(cubin: bytes | Cubin) -> set[str]:
    """Names of the data objects (``__device__`` / ``__constant__`` variables)."""
    return set(Cubin.of(cubin).data_objects)


def nv_info_records(cubin: bytes | Cubin, entry: str) -> list[tuple[int, int, bytes]]:
    """``(format, attribute, payload)`` records of ``.nv.info.<entry>``."""
    data = Cubin.of(cubin).nv_info.get(entry)
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


def kernel_params(cubin: bytes | Cubin, entry: str) -> list[ParamInfo]:
    """Parameters of ``entry`` sorted by ordinal: ``ParamInfo(ordinal, offset, size)``."""
    params = {}
    for fmt, attr, payload in nv_info_records(cubin, entry):
        if fmt == 0x04 and attr == EIATTR_KPARAM_INFO and len(payload) >= 12:
            _index, ordinal, offset, flags = struct.unpack_from("<IHHI", payload, 0)
            params[ordinal] = ParamInfo(ordinal=ordinal, offset=offset, size=(flags >> 18) & 0x3FFF)
    return [params[k] for k in sorted(params)]


def read_global(cubin: bytes | Cubin, symbol: str) -> bytes:
    """Initial bytes of a ``__device__``/``__constant__`` variable."""
    return Cubin.of(cubin).read_global(symbol)


def read_int_global(cubin: bytes | Cubin, symbol: str) -> int:
    return Cubin.of(cubin).read_int_global(symbol)


def kernel_max_threads(cubin: bytes | Cubin, entry: str) -> int | None:
    """Threads per block ``entry`` was compiled for (its ``__launch_bounds__``), or None."""
    for fmt, attr, payload in nv_info_records(cubin, entry):
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


def sass_loops(body: str) -> list[list[str]]:
    """The loops of one function's SASS (a ``sass_by_function`` body): for each backward
    branch, the instructions from the label it jumps to through the branch itself."""
    code: list[str] = []
    labels: dict[str, int] = {}
    for line in body.splitlines():
        if label := re.match(r"\s*(\.L_x_\d+):", line):
            labels[label.group(1)] = len(code)
        elif re.match(r"\s+/\*[0-9a-f]{4}\*/", line):
            code.append(line)
    loops = []
    for k, line in enumerate(code):
        target = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        if target and target.group(1) in labels and labels[target.group(1)] <= k:
            loops.append(code[labels[target.group(1)]:k + 1])
    return loops
