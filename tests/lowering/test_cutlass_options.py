"""Every cutlass target option reaches cutlass-codegen; f32 GEMMs and convolutions run on
tensor cores in TF32 (default) or 3xTF32, and the cubin's SASS shows it. Compile-only
except the accuracy test marked gpu."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from partita.dialects import byoc, make_context
from partita.ir import PartitaError, parse_module
from partita.lowering import nvrtc
from partita.lowering.binaries import cubin_file
from partita.lowering.cutlass import KernelSpec, choose_config, emit_module
from partita.lowering.cutlass.codegen import CutlassCodegen
from partita.lowering.cutlass.options import CutlassOptions
from partita.target import Target


def test_every_tvm_option_is_declared_and_read() -> None:
    target = Target("cutlass -sm=90 -use_3xtf32=1 -split_k_slices=4 -use_fast_math=1 "
                    "-use_multiprocessing=1 -tmp_dir=/tmp/cutlass-x -find_first_valid=1 -profile_all_alignments=0")
    options = CutlassOptions.from_target(target)
    assert options == CutlassOptions(sm=90, use_tf32=True, use_3xtf32=True, split_k_slices=4,
                                     use_multiprocessing=True, tmp_dir="/tmp/cutlass-x", use_fast_math=True)
    assert options.f32_math == "3xtf32"
    assert CutlassOptions.from_target(Target("cutlass")).f32_math == "tf32"  # default on
    assert CutlassOptions.from_target(Target("cutlass -use_tf32=0")).f32_math == "ffma"


@pytest.mark.parametrize(
    ("math", "opclass", "inst", "name"),
    [
        ("tf32", "tensorop", (16, 8, 8), "cutlass_tensorop_s1688tf32gemm_128x64_16x3_tn_align4"),
        ("3xtf32", "tensorop", (16, 8, 8), "cutlass_tensorop_s1688gemm_128x64_16x3_tn_align4_3xtf32"),
        ("ffma", "simt", (1, 1, 1), "cutlass_simt_sgemm_128x64_8x4_tn_align1"),
    ],
)
def test_f32_math_chooses_the_kernel(math, opclass, inst, name) -> None:
    cfg = choose_config(KernelSpec.dense(256, 512, 1024, "float32"), 80, f32_math=math)
    assert (cfg.opcode_class, cfg.instruction_shape, cfg.math, cfg.name) == (opclass, inst, math, name)
    code = emit_module([("k", KernelSpec.dense(256, 512, 1024, "float32"), cfg)]).code
    assert ("OpMultiplyAddFastF32" in code) == (math == "3xtf32")
    assert ("OpClassTensorOp" in code) == (math != "ffma")


def test_tf32_needs_sm80_and_aligned_operands() -> None:
    # a GEMM takes TF32 at any alignment (cp.async moves single 4-byte elements) ...
    cfg = choose_config(KernelSpec.dense(256, 512, 1022, "float32"), 80, f32_math="tf32")
    assert (cfg.math, cfg.alignment_a) == ("tf32", 2)
    # ... a convolution only with channels a multiple of 4
    odd = KernelSpec.conv2d((2, 8, 8, 6), (32, 3, 3, 6), padding=(1, 1), dtype="float32")
    assert choose_config(odd, 80, f32_math="tf32").math == "ffma"
    assert choose_config(KernelSpec.dense(256, 512, 1024, "float32"), 75, f32_math="tf32").math == "ffma"
    conv = KernelSpec.conv2d((2, 8, 8, 16), (32, 3, 3, 16), padding=(1, 1), dtype="float32")
    assert choose_config(conv, 80, f32_math="tf32").math == "tf32"
    assert choose_config(KernelSpec.dense(256, 512, 1024), 80, f32_math="ffma").math == "f16"  # f16 unaffected


def test_split_k_slices_option() -> None:
    spec = KernelSpec.dense(64, 64, 8192, "float32")
    assert choose_config(spec, 80, f32_math="tf32", split_k_slices=4).split_k == 4
    dynamic = KernelSpec.dense(None, 64, 8192, "float32")
    assert choose_config(dynamic, 80, f32_math="tf32", split_k_slices=4).split_k == 1


DENSE = """
func.func private @dense_0(%a: tensor<64x128xf32>, %b: tensor<256x128xf32>) -> tensor<64x256xf32> attributes {{byoc.compiler = "cutlass", byoc.target = #byoc.target<"cutlass", {{{options}}}>}} {{
  %0 = nn.dense %a, %b : (tensor<64x128xf32>, tensor<256x128xf32>) -> tensor<64x256xf32>
  func.return %0 : tensor<64x256xf32>
}}
"""


def _compiled(options: str, cache: Path) -> byoc.BinaryOp:
    module = parse_module(DENSE.format(options=options), make_context(), "dense.mlir")
    CutlassCodegen(cache_dir=str(cache)).apply(make_context(), module)
    (binary,) = [op for op in module.ops if isinstance(op, byoc.BinaryOp)]
    return binary


def _nvdisasm() -> str | None:
    found = shutil.which("nvdisasm")
    if found:
        return found
    candidate = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
        "site-packages" / "nvidia" / "cu13" / "bin" / "nvdisasm"
    return str(candidate) if candidate.exists() else None


def _sass(binary: byoc.BinaryOp) -> str:
    tool = _nvdisasm()
    if tool is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm)")
    return subprocess.run([tool, str(cubin_file(binary))], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize(("options", "math", "hmma"), [
    ("sm = 80", "tf32", True),
    ("sm = 80, use_3xtf32 = true", "3xtf32", True),
    ("sm = 80, use_tf32 = false", "ffma", False),
])
def test_records_and_sass_say_which_math(tmp_path: Path, options: str, math: str, hmma: bool) -> None:
    binary = _compiled(options, tmp_path)
    record = binary.attributes["kernels"].data["dense_0"].data
    assert record["config"].data["math"].data == math
    assert binary.attributes["target"].to_target().get("use_3xtf32") == (math == "3xtf32")
    sass = _sass(binary)
    assert ("HMMA" in sass and ".TF32" in sass) == hmma
    if not hmma:
        assert "FFMA" in sass
    if math == "3xtf32":
        # three MMAs per product: the small parts of a and b, then the big parts
        assert sass.count("HMMA") >= 3 * _sass(_compiled("sm = 80", tmp_path)).count("HMMA") - 4


def test_fast_math_and_tmp_dir_reach_nvrtc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    real = nvrtc.compile_cuda

    def recording(source, **kwargs):
        seen.update(kwargs)
        return real(source, **kwargs)

    monkeypatch.setattr(nvrtc, "compile_cuda", recording)
    module = parse_module(DENSE.format(options=f'sm = 80, use_fast_math = true, tmp_dir = "{tmp_path}"'),
                          make_context(), "dense.mlir")
    CutlassCodegen().apply(make_context(), module)
    assert seen["fast_math"] is True and seen["cache_dir"] == str(tmp_path)
    assert list(tmp_path.glob("*.cubin"))
    assert "--use_fast_math" in nvrtc.build_options("sm_80", (), fast_math=True)


def test_profiling_options_are_a_located_error(tmp_path: Path) -> None:
    module = parse_module(DENSE.format(options="profile_all_alignments = true"), make_context(), "dense.mlir")
    with pytest.raises(PartitaError, match=r"dense.mlir:2:\d+: .*profile_all_alignments=1 .*cost=measure"):
        CutlassCodegen(cache_dir=str(tmp_path)).apply(make_context(), module)


# -- accuracy ---------------------------------------------------------------------------

#: Relative error bound per math of a K-long f32 dot product with operands of unit scale,
#: against an f64 reference: TF32 keeps 10 mantissa bits of each operand (unit roundoff
#: 2^-11), 3xTF32 about 21, FFMA is f32 (2^-24); sqrt(K) accumulation growth, generous.
def tolerance(math: str, k: int) -> float:
    unit = {"tf32": 2.0**-11, "3xtf32": 2.0**-20, "ffma": 2.0**-23}[math]
    return 4 * unit * np.sqrt(k)


def _round_tf32(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest f32 -> TF32 (10-bit mantissa), as the tensor cores read f32."""
    bits = x.astype(np.float32).view(np.uint32)
    bits = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return bits.view(np.float32)


def _relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))


def test_tolerances_tell_the_maths_apart() -> None:
    # The bounds the device test uses are tight enough to catch the wrong math: TF32
    # products meet the TF32 bound and miss the 3xTF32 one; splitting into big + small
    # TF32 parts (3xTF32) meets its bound.
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 512)), rng.standard_normal((512, 64))
    ref = a @ b
    tf32 = _round_tf32(a).astype(np.float64) @ _round_tf32(b).astype(np.float64)
    assert tolerance("3xtf32", 512) < _relative_error(tf32, ref) < tolerance("tf32", 512)
    big_a, big_b = _round_tf32(a), _round_tf32(b)
    small_a, small_b = _round_tf32(a - big_a), _round_tf32(b - big_b)
    three = (big_a.astype(np.float64) @ big_b + small_a.astype(np.float64) @ big_b
             + big_a.astype(np.float64) @ small_b)
    assert _relative_error(three, ref) < tolerance("3xtf32", 512)


@pytest.mark.gpu
@pytest.mark.parametrize("math", ["tf32", "3xtf32", "ffma"])
def test_f32_dense_accuracy_on_the_device(tmp_path: Path, math: str) -> None:
    import partita
    from partita.runtime.cuda import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA device")
    flag = {"tf32": "", "3xtf32": " -use_3xtf32=1", "ffma": " -use_tf32=0"}[math]
    model = """
func.func @main(%a: tensor<64x512xf32>, %b: tensor<64x512xf32>) -> tensor<64x64xf32> {
  %0 = nn.dense %a, %b : (tensor<64x512xf32>, tensor<64x512xf32>) -> tensor<64x64xf32>
  func.return %0 : tensor<64x64xf32>
}
"""
    from partita.runtime.cuda import CudaDevice

    # Compiled for the device's own arch: an sm_80 cubin does not run on an H100 (sm_90),
    # and the runtime would fall back to the simulated device, testing nothing.
    device = CudaDevice()
    arch = device.arch
    device.close()
    exe = partita.compile(model, [f"cuda -arch={arch}", f"cutlass -sm={arch[3:]}{flag}", "llvm"],
                          partitioner="eager", cache_dir=tmp_path)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((64, 512)).astype(np.float32) for _ in range(2))
    (out,) = exe.run(a, b)
    assert not getattr(exe.runtime.device, "simulated", False), exe.runtime.describe()
    err = _relative_error(out.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64).T)
    assert err < tolerance(math, 512)
    if math == "tf32":
        assert err > tolerance("3xtf32", 512)  # really TF32, not an f32 fallback
