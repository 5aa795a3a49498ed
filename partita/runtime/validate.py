"""Load-time checks of what a lowered module asks of a device, against the cubin it
names and the device's limits, so that a GPU never sees a launch the simulated device
would have run blind (it ignores geometry and argument layout).

A compiled-model file is untrusted input, as a wasm module is to a browser: its records
are checked before anything reaches the driver.

* ``CubinInterface``: what a cubin declares (kernel symbols, per kernel its parameters
  from ``EIATTR_KPARAM_INFO`` and its ``__launch_bounds__``), read once per cubin;
* ``CheckedModule.kernel``: a kernel name must be a kernel of the cubin, its dynamic
  shared memory within the device's opt-in limit;
* ``CheckedModule.check_contract``: a generated kernel's launch contract (a digest in
  its cubin) must be that of the record launching it, so kernels of identical parameter
  layouts cannot be swapped;
* ``CheckedDevice.admit`` (at load, per kernel and parameter-kind list): the packed
  arguments laid out exactly as the kernel's parameters (count, offsets, sizes), so
  swapped or missing parameters are refused before any bind;
* ``CheckedDevice.prepare_launch`` (at bind): grid and block within CUDA's limits and the
  kernel's launch bounds.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from math import prod
from typing import Any

from partita.ir import PartitaError
from partita.lowering.contracts import contract_symbol
from partita.lowering.cubin import (
    Cubin,
    ParamInfo,
    kernel_max_threads,
    kernel_params,
    read_global,
)
from partita.runtime.arguments import ArgumentLayout, ArgumentLayouts
from partita.target.arch import max_dynamic_smem

__all__ = ["CheckedDevice", "CheckedModule", "CubinInterface", "as_checked"]

MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)


@dataclass
class CubinInterface:
    """What one cubin declares; ``None`` symbols for an image that is not an ELF cubin
    (PTX text, recorded test images), which is then checked by the driver alone."""

    binary: str
    image: bytes
    symbols: set[str] | None = None
    cubin: Cubin | None = None  # the image read once (None: not an ELF cubin)
    _params: dict[str, list[ParamInfo]] = field(default_factory=dict)
    _threads: dict[str, int | None] = field(default_factory=dict)

    @classmethod
    def read(cls, binary: str, image: bytes) -> CubinInterface:
        if image[:4] != b"\x7fELF":
            return cls(binary, image)
        try:
            cubin = Cubin(image)
            symbols = cubin.kernels
        except Exception as err:  # noqa: BLE001 - CubinError, or anything a damaged ELF raises
            raise PartitaError(f"the cubin of @{binary} is not a readable ELF file ({err})") from None
        return cls(binary, image, symbols, cubin)

    def params(self, name: str) -> list[ParamInfo]:
        if name not in self._params:
            try:
                self._params[name] = kernel_params(self.cubin or self.image, name)
            except Exception as err:  # noqa: BLE001 - CubinError, or anything a damaged section raises
                raise PartitaError(f"kernel '{name}' of @{self.binary}: unreadable parameter info ({err})") from None
        return self._params[name]

    def max_threads(self, name: str) -> int | None:
        if name not in self._threads:
            try:
                self._threads[name] = kernel_max_threads(self.cubin or self.image, name)
            except Exception:  # noqa: BLE001 - no .nv.info: no bound recorded
                self._threads[name] = None
        return self._threads[name]


@dataclass
class _Kernel:
    name: str
    cubin: CubinInterface


class CheckedModule:
    """A loaded module whose ``kernel`` look-ups are checked against the cubin."""

    def __init__(self, module: Any, cubin: CubinInterface, arch: str | None, registry: dict[int, tuple[Any, _Kernel]]):
        self._module, self._cubin, self._arch, self._registry = module, cubin, arch, registry
        self._contracts: set[tuple[str, str]] = set()  # (entry, function) whose contract matched

    def kernel(self, name: str, smem: int = 0, emulation=None):
        cubin = self._cubin
        if cubin.symbols is not None and name not in cubin.symbols:
            known = ", ".join(sorted(cubin.symbols)[:8]) or "none"
            raise PartitaError(f"kernel '{name}' is not in the cubin of @{cubin.binary} (its kernels: {known})")
        limit = max_dynamic_smem(self._arch)
        if not isinstance(smem, int) or not 0 <= smem <= limit:
            raise PartitaError(f"kernel '{name}' of @{cubin.binary} asks for {smem} bytes of shared memory; "
                               f"a block may have 0..{limit}")
        function = self._module.kernel(name, smem, emulation)
        if cubin.symbols is not None:
            self._registry[id(function)] = (function, _Kernel(name, cubin))
        return function

    def check_contract(self, entry: str, symbol: str, expected: bytes | Callable[[], bytes], function: str) -> None:
        """The launch contract the cubin holds for kernel ``entry`` (``symbol``, see
        ``partita.lowering.contracts``) must be ``expected`` (or what it returns), the
        digest of the record ``@function`` launches it with: a record naming another kernel
        of the same parameter layout is refused. Checked once per kernel and function (a
        record does not change between the binds of its shape signatures)."""
        cubin = self._cubin
        if cubin.symbols is None or (entry, function) in self._contracts:  # not ELF: the driver alone checks it
            return
        if callable(expected):
            expected = expected()
        try:
            held = read_global(cubin.cubin or cubin.image, symbol)
        except Exception as err:  # noqa: BLE001 - CubinError, or anything a damaged section raises
            raise PartitaError(f"kernel '{entry}' of @{cubin.binary} carries no launch contract ({err}); "
                               "recompile the model") from None
        if held != expected:
            raise PartitaError(f"kernel '{entry}' of @{cubin.binary} was not generated for the launch the record "
                               f"of @{function} describes (its launch contract differs): the record names the "
                               "wrong kernel")
        self._contracts.add((entry, function))

    def __getattr__(self, attr: str) -> Any:  # global_int, unload, ...
        return getattr(self._module, attr)


class CheckedDevice:
    """``device`` whose launches are checked against the kernels ``registry`` knows (those
    of checked cubins). ``admit`` runs at load, once per kernel and parameter-kind list a
    prepared call reports: the layout is built into ``layouts`` and checked against the
    kernel's parameters. ``prepare_launch`` (at bind) then only checks the geometry and
    packs with the layout already built."""

    def __init__(self, device: Any, registry: dict[int, tuple[Any, _Kernel]], layouts: ArgumentLayouts):
        self._device, self._registry, self.layouts = device, registry, layouts
        self._admitted: set[tuple[int, tuple[str, ...]]] = set()

    def _where(self, function: Any) -> str:
        entry = self._registry.get(id(function))
        return f"kernel '{entry[1].name}' of @{entry[1].cubin.binary}" if entry is not None else "a kernel"

    def admit(self, function: Any, kinds: tuple[str, ...]) -> ArgumentLayout:
        """The layout of ``kinds`` (built once per plan), refused when ``function`` is a
        checked kernel whose cubin declares other parameters."""
        try:
            layout = self.layouts.add(kinds)
        except ValueError as err:
            raise PartitaError(f"{self._where(function)}: cannot pack its arguments ({err})") from None
        entry = self._registry.get(id(function))
        if entry is not None and entry[0] is function:
            check_layout(entry[1], layout)
            self._admitted.add((id(function), layout.kinds))
        return layout

    def prepare_launch(self, function, grid, block, smem, args, operands=(), cluster=None):
        kinds = tuple(kind for kind, _ in args)
        layout = self.layouts[kinds]
        entry = self._registry.get(id(function))
        if entry is not None and entry[0] is function:
            assert (id(function), kinds) in self._admitted, f"{kinds} of kernel '{entry[1].name}' not checked at load"
            check_geometry(entry[1], tuple(grid), tuple(block))
        extra = {} if cluster is None else {"cluster": cluster}  # a Hopper kernel's cluster launch
        try:
            return self._device.prepare_launch(function, grid, block, smem, args, operands, layout=layout, **extra)
        except (ValueError, TypeError, struct.error) as err:  # a value its kind cannot hold
            raise PartitaError(f"{self._where(function)}: cannot pack its arguments ({err})") from None

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._device, attr)


def check_geometry(kernel: _Kernel, grid: tuple, block: tuple) -> None:
    where = f"kernel '{kernel.name}' of @{kernel.cubin.binary}"
    if len(block) != 3 or any(not isinstance(b, int) or not 1 <= b <= m for b, m in zip(block, MAX_BLOCK)):
        raise PartitaError(f"{where}: block {block} is outside 1..{MAX_BLOCK} per dimension")
    threads = prod(block)
    bound = kernel.cubin.max_threads(kernel.name) or MAX_THREADS
    if threads > min(bound, MAX_THREADS):
        raise PartitaError(f"{where}: a block of {threads} threads exceeds the {min(bound, MAX_THREADS)} "
                           "it was compiled for")
    if len(grid) != 3 or any(not isinstance(g, int) or not 1 <= g <= m for g, m in zip(grid, MAX_GRID)):
        raise PartitaError(f"{where}: grid {grid} is outside 1..{MAX_GRID} per dimension")


def check_layout(kernel: _Kernel, layout: ArgumentLayout) -> None:
    """The packed arguments must sit exactly where the kernel's parameters are (count,
    offsets, sizes from ``EIATTR_KPARAM_INFO``)."""
    where = f"kernel '{kernel.name}' of @{kernel.cubin.binary}"
    packed = list(zip(layout.offsets, layout.sizes))
    declared = [(p.offset, p.size) for p in kernel.cubin.params(kernel.name)]
    if layout.by_value:
        # pieces of one struct passed by value (a Hopper kernel's Params); the cubin places
        # it where its alignment falls in the constant bank, so the size is what must agree
        packed = [(declared[0][0] if declared else 0, layout.size)]
    if packed != declared:
        raise PartitaError(f"{where}: its record packs arguments as (offset, size) {packed}, but the kernel "
                           f"takes {declared}")


def as_checked(module: Any) -> CheckedModule | None:
    """``module`` when it is a checked cubin (loaded through a launch plan), else None (a
    module loaded directly, whose kernels nothing checks)."""
    return module if isinstance(module, CheckedModule) else None


def check_cutlass_contract(module: CheckedModule | None, entry: Any, function: str) -> None:
    """A CUTLASS entry (2.x or Hopper) must carry the launch contract of the kernel type
    and ABI its record states (``entry.contract``, see ``partita.lowering.contracts``): a
    stale cubin, or an entry of another epilogue with the same parameters named by an
    edited record, is refused before it runs. ``module`` is None for a cubin the loader
    could not check (not an ELF image)."""
    if module is not None:
        module.check_contract(entry.name, contract_symbol(entry.name), entry.contract, function)
