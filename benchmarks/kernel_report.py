"""Per-kernel resources and instruction mix of a compiled model, read from its cubins.

Usage: python benchmarks/kernel_report.py MODEL [--partitioner eager|collage]
       [--targets "cuda -arch=sm_90,cutlass,llvm"]   (sm_90a: the CUTLASS 3 Hopper kernels)

For every GPU kernel of the compiled model (CUTLASS entries and ``cuda-codegen``'s fused
kernels), from its cubin alone (no GPU): registers per thread, static shared memory
(plus the dynamic shared memory the CUTLASS record asks for), spill traffic (STL / LDL),
the instruction mix from ``nvdisasm`` (HMMA: mma.sync tensor cores, HGMMA: Hopper wgmma,
their 8-bit forms IMMA (int8 mma.sync), IGMMA (int8 wgmma), QMMA (FP8 mma.sync, Ada) and
QGMMA (FP8 wgmma),
UTMALDG: TMA loads, LDGSTS: cp.async, 128-bit global / shared loads, FFMA), the
theoretical occupancy on an H100 (sm_90 limits) and an *estimate* of the share of the
H100's dense peak the kernel can reach, with the basis of that estimate:

* the ceiling of the pipe its main loop uses, relative to the dense tensor peak of its
  data type (989 TFLOP/s f16/bf16, 495 TF32, 1979 FP8 / int8): HGMMA, IGMMA and QGMMA ~0.8
  (cuBLAS-class Hopper GEMMs measure ~750-800 of 989), HMMA, IMMA and QMMA ~0.6 (mma.sync
  cannot keep Hopper's tensor cores fed: published sm_80-style CUTLASS kernels reach ~60%
  of the wgmma ones on H100; an FP8 kernel built for sm_90 without wgmma converts to f16
  for HMMA, half its type's rate on top), FFMA
  only the CUDA-core peak (67 of 495 TF32 TFLOP/s = 0.135); kernels that are not GEMMs
  (element-wise, row reductions, pools) are memory-bound: peak share not applicable;
* scaled down when occupancy is below 25% and when the main loop spills.

These are roofline-style estimates for large problems, not measurements; with a GPU,
time kernels with ``partita-run --profile`` or Collage's ``cost=measure``.
"""

from __future__ import annotations

import argparse
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from partita.lowering.cubin import Cubin, sass_by_function, sass_listing

EIATTR_REGCOUNT = 0x2F
# sm_90 limits per SM (CUDA occupancy calculator data)
H100 = {"regs": 65536, "threads": 2048, "blocks": 32, "smem": 228 * 1024, "smem_per_block_reserved": 1024,
        "reg_granularity": 256, "warps": 64}
PIPE_CEILING = {"HGMMA": 0.8, "IGMMA": 0.8, "QGMMA": 0.8, "HMMA": 0.6, "IMMA": 0.6, "QMMA": 0.6, "FFMA": 0.135}
COUNTED = ("HGMMA", "IGMMA", "QGMMA", "HMMA", "IMMA", "QMMA", "UTMALDG", "LDGSTS", "LDG128", "LDS128", "FFMA", "STL",
           "LDL")


@dataclass
class KernelStats:
    name: str
    function: str
    registers: int
    static_smem: int
    dynamic_smem: int
    threads: int
    mix: dict[str, int]
    kind: str = "cutlass"

    @property
    def smem(self) -> int:
        return self.static_smem + self.dynamic_smem

    def occupancy(self) -> float:
        """Resident warps / 64 on one H100 SM."""
        warps = -(-self.threads // 32)
        regs_per_warp = -(-max(self.registers, 1) * 32 // H100["reg_granularity"]) * H100["reg_granularity"]
        by_regs = H100["regs"] // (regs_per_warp * warps)
        by_threads = H100["threads"] // (warps * 32)
        by_smem = H100["smem"] // (self.smem + H100["smem_per_block_reserved"]) if self.smem else H100["blocks"]
        blocks = min(by_regs, by_threads, by_smem, H100["blocks"])
        return blocks * warps / H100["warps"]

    def estimate(self) -> tuple[str, str]:
        """(share of H100 dense peak, basis)."""
        pipe = next((p for p in PIPE_CEILING if self.mix.get(p)), None)
        if pipe is None or self.kind not in ("cutlass", "cutlass_sm90", "gemm"):
            return "n/a", "no multiply pipe: memory-bound, judge by bytes moved"
        share = PIPE_CEILING[pipe]
        basis = [f"{pipe} ceiling {PIPE_CEILING[pipe]:.0%}"]
        occupancy = self.occupancy()
        if pipe.endswith("GMMA"):
            # warp-specialized wgmma kernels are built for one CTA per SM (TMA keeps the
            # stages full), so low occupancy is their design, not a loss
            basis.append("1 CTA/SM by design")
        elif occupancy < 0.25:
            share *= occupancy / 0.25
            basis.append(f"x occupancy {occupancy:.0%}/25%")
        if self.mix.get("STL") or self.mix.get("LDL"):
            share *= 0.5
            basis.append("x0.5 spills")
        return f"~{share:.0%}", ", ".join(basis)


def registers(cubin: Cubin) -> dict[str, int]:
    """Registers per thread of each function: EIATTR_REGCOUNT records of ``.nv.info``
    (symbol index, count); the ``.text`` section's ``sh_info`` top byte as a fallback."""
    names = dict(enumerate(sym.name for sym in cubin.symbols))
    out: dict[str, int] = {}
    info = next((sec for sec in cubin.sections if sec.name == ".nv.info"), None)
    if info is not None:
        data, i = info.data(cubin.image), 0
        while i + 4 <= len(data):
            fmt, attr = data[i], data[i + 1]
            (operand,) = struct.unpack_from("<H", data, i + 2)
            i += 4
            if fmt == 0x04:
                if attr == EIATTR_REGCOUNT and operand >= 8:
                    sym, count = struct.unpack_from("<II", data, i)
                    out[names.get(sym, str(sym))] = count
                i += operand
    for sec in cubin.sections:
        if sec.name.startswith(".text."):
            out.setdefault(sec.name[len(".text."):], sec.info >> 24)
    return out


def static_smem(cubin: Cubin) -> dict[str, int]:
    return {sec.name[len(".nv.shared."):]: sec.size for sec in cubin.sections if sec.name.startswith(".nv.shared.")}


def instruction_mix(cubin: Path) -> dict[str, dict[str, int]]:
    """Per function (``.text.<name>``): counts of the instructions in :data:`COUNTED`,
    with the bodies of the device functions it calls added (CUTLASS runners)."""
    try:
        bodies = sass_by_function(sass_listing(cubin))
    except FileNotFoundError as err:
        raise SystemExit(f"error: {err}") from None

    def count(body: str) -> dict[str, int]:
        return {
            **{op: len(re.findall(rf"\b{op}\b", body)) for op in ("HGMMA", "IGMMA", "QGMMA", "HMMA", "IMMA", "QMMA")},
            "UTMALDG": len(re.findall(r"\bUTMALDG\b", body)),
            "LDGSTS": len(re.findall(r"\bLDGSTS\b", body)),
            "LDG128": len(re.findall(r"\bLDG\.E\.128\b|\bLDG\.E\.\S*128\b", body)),
            "LDS128": len(re.findall(r"\bLDS(?:\.U)?\.128\b", body)),
            "FFMA": len(re.findall(r"\bFFMA\b", body)),
            "STL": len(re.findall(r"\bSTL\b", body)),
            "LDL": len(re.findall(r"\bLDL\b", body)),
        }

    own = {name: count(body) for name, body in bodies.items()}
    mixes = {}
    for name, body in bodies.items():
        total = dict(own[name])
        for callee in set(re.findall(r"CALL\.REL\.NOINC\s+`\((\S+?)\)", body)):
            for k, v in own.get(callee, {}).items():
                total[k] += v
        mixes[name] = total
    return mixes


def model_kernels(module) -> list[tuple[Path, str, str, int, int, str]]:
    """``(cubin, function, entry, threads, dynamic smem, kind)`` of every kernel a
    compiled module launches, from its ``byoc.binary`` records."""
    from xdsl.dialects.builtin import DictionaryAttr

    from partita.dialects import byoc
    from partita.lowering.binaries import cubin_file
    from partita.lowering.records import from_attr

    out = []
    for op in module.ops:
        if not isinstance(op, byoc.BinaryOp) or from_attr(op.attributes["format"]) != "cubin":
            continue
        path = cubin_file(op)  # where the cubin cache keeps it, by digest
        if path is None:
            continue
        kernels = op.attributes["kernels"]
        assert isinstance(kernels, DictionaryAttr)
        for function, record in kernels.data.items():
            data = record.data  # type: ignore[attr-defined]
            entry = from_attr(data["entry"])
            block = from_attr(data["block"])
            threads = block if isinstance(block, int) else int(block[0]) * int(block[1]) * int(block[2])
            if "tile" in data and from_attr(data["block"]) == from_attr(data["tile"]) ** 2:
                threads = from_attr(data["tile"]) ** 2
            smem = from_attr(data["smem"]) if "smem" in data else 0
            out.append((path, function, entry, threads, smem, from_attr(data["kind"]) if "kind" in data else "cutlass"))
    return out


def report(module) -> list[KernelStats]:
    stats = []
    by_cubin: dict[Path, tuple[dict, dict, dict]] = {}
    for path, function, entry, threads, smem, kind in model_kernels(module):
        if path not in by_cubin:
            cubin = Cubin(path.read_bytes())
            by_cubin[path] = (registers(cubin), static_smem(cubin), instruction_mix(path))
        regs, shared, mixes = by_cubin[path]
        stats.append(KernelStats(entry, function, regs.get(entry, 0), shared.get(entry, 0), smem, threads,
                                 mixes.get(entry, {}), kind))
    return stats


def format_table(stats: list[KernelStats]) -> str:
    head = ["kernel", "regs", "smem", "threads", "occ", *COUNTED, "est. H100 peak", "basis"]
    rows = []
    for s in stats:
        share, basis = s.estimate()
        rows.append([s.name, str(s.registers), str(s.smem), str(s.threads), f"{s.occupancy():.0%}",
                     *(str(s.mix.get(k, 0)) for k in COUNTED), share, basis])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--partitioner", default="eager", choices=("eager", "collage", "none"))
    parser.add_argument("--targets", default="cuda -arch=sm_90,cutlass,llvm")
    args = parser.parse_args(argv)

    import partita

    exe = partita.compile(args.model, args.targets.split(","), partitioner=args.partitioner)
    stats = report(exe.module)
    print(format_table(stats))
    print(f"\n{len(stats)} kernels from their cubins (no GPU needed); occupancy and peak shares are "
          "H100 (sm_90) estimates, not measurements")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
