"""cuDNN partitions: frontend graph records from ``cudnn-codegen``, the handle's graphs
checked through a recording cuDNN that evaluates them from their dims and strides, the
attention pattern, and (GPU) the real library."""

from __future__ import annotations

import numpy as np
import pytest
from support.recording_driver import RecordingDriver
from support.recording_libs import RecordingCudnn

import partita
from partita.backends import match_patterns
from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.lowering.cudnn.codegen import packed_strides
from partita.runtime.cuda import CudaDevice, cuda_available
from partita.runtime.extern import kernel_handles
from partita.runtime.plan import Runtime
from partita.runtime.reference import run

DT = {"f16": np.float16, "f32": np.float32}


def conv_ir(layout: str, dtype: str, groups: int = 1, dilation: int = 1, epilogue: str = "bias_relu") -> tuple[str, list]:
    n, c, h, w, k, r = 2, 4, 9, 8, 6, 3
    pad = (1, 0, 2, 1)  # top, left, bottom, right
    oh = (h + pad[0] + pad[2] - dilation * (r - 1) - 1) // 2 + 1
    ow = (w + pad[1] + pad[3] - dilation * (r - 1) - 1) // 2 + 1
    if layout == "NCHW":
        xs, ws, ys, axis, kl = (n, c, h, w), (k, c // groups, r, r), (n, k, oh, ow), 1, "OIHW"
    else:
        xs, ws, ys, axis, kl = (n, h, w, c), (k, r, r, c // groups), (n, oh, ow, k), 3, "OHWI"
    t = lambda s: f"tensor<{'x'.join(map(str, s))}x{dtype}>"  # noqa: E731
    args = [f"%x: {t(xs)}", f"%w: {t(ws)}"]
    shapes = [xs, ws]
    body = [f'%0 = nn.conv2d %x, %w {{data_layout = "{layout}", kernel_layout = "{kl}", strides = array<i64: 2, 2>, '
            f"padding = array<i64: {', '.join(map(str, pad))}>, dilation = array<i64: {dilation}, {dilation}>, "
            f"groups = {groups} : i64}} : ({t(xs)}, {t(ws)}) -> {t(ys)}"]
    last = "%0"
    if "bias" in epilogue:
        args.append(f"%b: {t((k,))}")
        shapes.append((k,))
        body.append(f"%1 = nn.bias_add %0, %b {{axis = {axis} : i64}} : ({t(ys)}, {t((k,))}) -> {t(ys)}")
        last = "%1"
    if "relu" in epilogue:
        body.append(f"%2 = nn.relu {last} : ({t(ys)}) -> {t(ys)}")
        last = "%2"
    text = (f"func.func @main({', '.join(args)}) -> {t(ys)} {{\n  " + "\n  ".join(body)
            + f"\n  func.return {last} : {t(ys)}\n}}\n")
    return text, shapes


def attention_ir(form: str, mask: bool, dtype: str = "f16", divide: bool = False) -> tuple[str, list]:
    """``form``: ``export4d`` (Q [B,H,S,D] @ transpose(K [B,H,S,D]), as ONNX and PyTorch
    export it), ``matmul4d`` (the same with Kᵀ given already stored [B,H,D,S]) or
    ``bmm3d`` (batch_matmul with transpose_b over [B*H, S, D])."""
    t = lambda s: f"tensor<{s}x{dtype}>"  # noqa: E731
    if form == "export4d":
        q, k, s, v, o = "?x2x12x16", "?x2x12x16", "?x2x12x12", "?x2x12x16", "?x2x12x16"
        kt = "?x2x16x12"
        qk = (f"%kt = nn.transpose %k {{perm = array<i64: 0, 1, 3, 2>}} : ({t(k)}) -> {t(kt)}\n  "
              f"%0 = nn.matmul %q, %kt : ({t(q)}, {t(kt)}) -> {t(s)}")
        pv = f"%4 = nn.matmul %3, %v : ({t(s)}, {t(v)}) -> {t(o)}"
        shapes = [(3, 2, 12, 16), (3, 2, 12, 16), (3, 2, 12, 16)]
        mask_shape, mask_type = (3, 1, 1, 12), t("?x1x1x12")
    elif form == "matmul4d":
        q, k, s, v, o = "?x2x12x16", "?x2x16x12", "?x2x12x12", "?x2x12x16", "?x2x12x16"
        qk = f"%0 = nn.matmul %q, %k : ({t(q)}, {t(k)}) -> {t(s)}"
        pv = f"%4 = nn.matmul %3, %v : ({t(s)}, {t(v)}) -> {t(o)}"
        shapes = [(3, 2, 12, 16), (3, 2, 16, 12), (3, 2, 12, 16)]
        mask_shape, mask_type = (3, 1, 1, 12), t("?x1x1x12")
    else:
        q, k, s, v, o = "4x12x16", "4x12x16", "4x12x12", "4x12x16", "4x12x16"
        qk = f"%0 = nn.batch_matmul %q, %k {{transpose_b = true}} : ({t(q)}, {t(k)}) -> {t(s)}"
        pv = f"%4 = nn.batch_matmul %3, %v {{transpose_b = false}} : ({t(s)}, {t(v)}) -> {t(o)}"
        shapes = [(4, 12, 16), (4, 12, 16), (4, 12, 16)]
        mask_shape, mask_type = (12, 12), t("12x12")
    op, value = ("divide", 4.0) if divide else ("multiply", 0.25)
    args = [f"%q: {t(q)}", f"%k: {t(k)}", f"%v: {t(v)}"] + ([f"%m: {mask_type}"] if mask else [])
    body = [
        f"%c = nn.constant dense<{value}> : {t('')[:-1].replace('tensor<x', 'tensor<')}>",
        qk,
        f"%1 = nn.{op} %0, %c : ({t(s)}, tensor<{dtype}>) -> {t(s)}",
        f"%2 = nn.add %1, %m : ({t(s)}, {mask_type}) -> {t(s)}" if mask else f"%2 = nn.relu %1 : ({t(s)}) -> {t(s)}",
        f"%3 = nn.softmax %2 : ({t(s)}) -> {t(s)}",
        pv,
    ]
    if not mask:  # no ReLU in attention: the scaled scores go straight into the softmax
        body[3] = ""
        body[4] = body[4].replace("%2", "%1")
    text = (f"func.func @main({', '.join(args)}) -> {t(o)} {{\n  " + "\n  ".join(b for b in body if b)
            + f"\n  func.return %4 : {t(o)}\n}}\n")
    return text, shapes + ([mask_shape] if mask else [])


def _args(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * 0.5).astype(DT[dtype]) for s in shapes]


def _check(out, ref, dtype):
    tol = 3e-2 if dtype == "f16" else 1e-2  # f32 convolutions may pick TF32 engines, as on a GPU
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref, np.float32), rtol=tol, atol=tol)


def _compile(text: str):
    return partita.compile(text, ["cuda -arch=sm_90", "cudnn", "llvm"], partitioner="eager", layout="NCHW")


def _recorded_runtime(exe, graphs: bool = False) -> tuple[Runtime, RecordingCudnn]:
    """The launch plan on a recording CUDA device with a recording cuDNN frontend, which
    evaluates each graph from its tensors' dims and strides in the plan's memory."""
    drv = RecordingDriver()
    lib = RecordingCudnn(drv)
    return Runtime(exe.module, CudaDevice(driver=drv), graphs=graphs, libraries={"cudnn": lib}), lib


def _run_recorded(exe, args):
    runtime, lib = _recorded_runtime(exe)
    return runtime.run(*args), lib, runtime


def test_packed_strides() -> None:
    assert packed_strides((2, 4, 9, 8), "NHWC", "NCHW") == (288, 1, 32, 4)
    assert packed_strides((2, 4, 9, 8), "NCHW", "NCHW") == (288, 72, 8, 1)
    assert packed_strides((3, 2, 12, 16), "BHDS", "BHSD") == (384, 192, 1, 12)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("groups,dilation,epilogue", [(1, 1, "bias_relu"), (2, 2, "bias"), (1, 1, "relu"), (1, 1, "none")])
@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_conv2d_graph_and_result(layout: str, groups: int, dilation: int, epilogue: str, dtype: str) -> None:
    text, shapes = conv_ir(layout, dtype, groups, dilation, epilogue)
    exe = _compile(text)
    (handle,) = [h for h in kernel_handles(exe.module).values() if h.kind == "cudnn"]
    r = handle.record
    # an NCHW convolution's ReLU without a bias is left out of the graph (no engine runs it)
    fused = "none" if (layout, epilogue) == ("NCHW", "relu") else epilogue
    assert (r.graph, r.layout, r.groups, r.epilogue) == ("conv2d", layout, groups, fused)
    assert r.x == (2, 4, 9, 8) and r.w == (6, 4 // groups, 3, 3)
    assert (r.pre_padding, r.post_padding, r.stride, r.dilation) == ((1, 0), (2, 1), (2, 2), (dilation, dilation))
    args = _args(shapes, dtype)
    (out,), lib, runtime = _run_recorded(exe, args)
    if fused == epilogue:
        _check(out, run(parse_module(text, make_context()), *args)[0], dtype)
    else:  # the ReLU is a native kernel, which the recording driver does not run
        assert {h.kind for h in kernel_handles(exe.module).values()} == {"cudnn", "fused"}
    (graph,) = lib.graphs
    x, w = graph.tensors[:2]
    assert x.dim == [2, 4, 9, 8] and x.stride == list(packed_strides((2, 4, 9, 8), layout, "NCHW"))
    assert w.dim == [6, 4 // groups, 3, 3]
    assert w.stride == list(packed_strides(w.dim, "KRSC" if layout == "NHWC" else "KCRS", "KCRS"))
    assert graph.options["io_data_type"].name == ("HALF" if dtype == "f16" else "FLOAT")
    assert graph.options["compute_data_type"].name == "FLOAT"
    assert [n[0] for n in graph.nodes] == ["conv_fprop"] + (["bias"] if "bias" in fused else []) + (
        ["relu"] if "relu" in fused else [])
    assert graph.built == [lib.heur_mode.A, lib.heur_mode.FALLBACK]
    (_, _, workspace, _) = lib.executed[0]
    assert lib.memory.buffer(workspace + lib.workspace - 1) and lib.streams == [runtime.stream]


@pytest.mark.parametrize("form", ["export4d", "bmm3d"])
@pytest.mark.parametrize("mask", [False, True])
def test_attention_is_one_cudnn_sdpa(form: str, mask: bool) -> None:
    text, shapes = attention_ir(form, mask)
    func = next(iter(parse_module(text, make_context()).ops))
    assert [m.name for m in match_patterns(func, "cudnn") if m.name == "cudnn.sdpa"] == ["cudnn.sdpa"]
    exe = _compile(text)
    (handle,) = kernel_handles(exe.module).values()
    r = handle.record
    assert (r.graph, r.attn_scale, r.k_storage) == ("sdpa", 0.25, "BHSD")
    args = _args(shapes, "f16")
    (out,), lib, _ = _run_recorded(exe, args)
    _check(out, run(parse_module(text, make_context()), *args)[0], "f16")
    (graph,) = lib.graphs
    (node,) = graph.nodes
    assert node[0] == "sdpa" and node[4] == {"attn_scale": 0.25, "generate_stats": False}
    q, k, _v = graph.tensors[:3]
    if form == "export4d":  # K read as stored, before the transpose that made Kᵀ
        assert k.dim == [3, 2, 12, 16] and k.stride == [384, 192, 16, 1]
    else:
        assert q.dim == [4, 1, 12, 16] and k.stride == [192, 192, 16, 1]
    assert (node[2][3] is not None) == mask


TORCH_SDPA = """
func.func @main(%q: tensor<2x2x12x16xf16>, %k: tensor<2x2x12x16xf16>, %v: tensor<2x2x12x16xf16>) -> tensor<2x2x12x16xf16> {
  %c = nn.constant dense<0.5> : tensor<f16>
  %0 = nn.multiply %q, %c : (tensor<2x2x12x16xf16>, tensor<f16>) -> tensor<2x2x12x16xf16>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x2x12x16xf16>) -> tensor<2x2x16x12xf16>
  %1 = nn.multiply %kt, %c : (tensor<2x2x16x12xf16>, tensor<f16>) -> tensor<2x2x16x12xf16>
  %2 = nn.matmul %0, %1 : (tensor<2x2x12x16xf16>, tensor<2x2x16x12xf16>) -> tensor<2x2x12x12xf16>
  %3 = nn.softmax %2 : (tensor<2x2x12x12xf16>) -> tensor<2x2x12x12xf16>
  %4 = nn.matmul %3, %v : (tensor<2x2x12x12xf16>, tensor<2x2x12x16xf16>) -> tensor<2x2x12x16xf16>
  func.return %4 : tensor<2x2x12x16xf16>
}
"""


def test_pytorchs_split_scale_is_one_sdpa() -> None:
    """PyTorch exports scaled_dot_product_attention with sqrt(scale) multiplied into Q and
    into Kᵀ, made by a transpose: the partition takes the transpose and reads K as stored."""
    exe = _compile(TORCH_SDPA)
    (handle,) = kernel_handles(exe.module).values()
    assert (handle.record.graph, handle.record.attn_scale, handle.record.k_storage) == ("sdpa", 0.25, "BHSD")
    # One constant feeds both multiplies: the partition takes it once.
    assert sorted(handle.record.roles) == ["k", "q", "scale_k", "v"]
    args = _args([(2, 2, 12, 16), (2, 2, 12, 16), (2, 2, 12, 16)], "f16")
    (out,), lib, _ = _run_recorded(exe, args)
    _check(out, run(parse_module(TORCH_SDPA, make_context()), *args)[0], "f16")
    assert [n[0] for n in lib.graphs[0].nodes] == ["sdpa"]
    assert lib.graphs[0].tensors[1].stride[-1] == 1  # K's head dim unit-strided, as the frontend requires


@pytest.mark.parametrize("text", ["matmul4d", "matmul4d_mask", "torch"])
def test_attention_with_k_given_transposed_stays_off_cudnn(text: str) -> None:
    """Kᵀ given already stored (B,H,D,S), with no transpose in the function to read K
    before: the real frontend rejects a K whose head dim is not unit-strided at build(),
    and so does the stand-in. Such attention is not offered to cuDNN (it runs elsewhere,
    correctly)."""
    if text == "torch":  # sqrt(scale) multiplied into Q and Kᵀ
        text = TORCH_SDPA.replace("%kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x2x12x16xf16>) -> "
                                  "tensor<2x2x16x12xf16>\n", "")
        text = text.replace("%k: tensor<2x2x12x16xf16>", "%kt: tensor<2x2x16x12xf16>")
        shapes = [(2, 2, 12, 16), (2, 2, 16, 12), (2, 2, 12, 16)]
    else:
        text, shapes = attention_ir("matmul4d", text.endswith("mask"))
    func = next(iter(parse_module(text, make_context()).ops))
    assert not [m for m in match_patterns(func, "cudnn") if m.name == "cudnn.sdpa"]
    exe = _compile(text)
    assert not [h for h in kernel_handles(exe.module).values() if getattr(h, "kind", None) == "cudnn"]
    args = _args(shapes, "f16")
    _check(exe.run(*args)[0], run(parse_module(text, make_context()), *args)[0], "f16")


def test_the_cudnn_stand_in_rejects_a_transposed_k_as_the_frontend_does() -> None:
    from support.recording_libs import RecordingCudnn

    drv = RecordingDriver()
    CudaDevice(driver=drv)
    lib = RecordingCudnn(drv)
    graph = lib.pygraph(handle=lib.create_handle())
    q = graph.tensor(name="q", dim=[1, 1, 12, 16], stride=[192, 192, 16, 1], data_type=lib.data_type.HALF)
    k = graph.tensor(name="k", dim=[1, 1, 12, 16], stride=[192, 192, 1, 12], data_type=lib.data_type.HALF)
    graph.sdpa(q=q, k=k, v=q, attn_scale=0.25, generate_stats=False, name="sdpa")
    with pytest.raises(RuntimeError, match="should be 1 for K"):
        graph.build([lib.heur_mode.A])


@pytest.mark.parametrize("layout,bias_type", [("NCHW", "6x1x1"), ("NHWC", "6"), ("NCHW", "1x6x1x1")])
def test_a_broadcast_add_is_the_conv_bias(layout: str, bias_type: str) -> None:
    text, shapes = conv_ir(layout, "f32", epilogue="bias")
    bias_shape = tuple(map(int, bias_type.split("x")))
    text = text.replace("%b: tensor<6xf32>", f"%b: tensor<{bias_type}xf32>")
    text = text.replace(f"nn.bias_add %0, %b {{axis = {1 if layout == 'NCHW' else 3} : i64}}", "nn.add %0, %b")
    text = text.replace(", tensor<6xf32>) ->", f", tensor<{bias_type}xf32>) ->")
    exe = _compile(text)
    (handle,) = kernel_handles(exe.module).values()
    assert handle.record.epilogue == "bias"
    args = _args([*shapes[:2], bias_shape], "f32")
    (out,), _, _ = _run_recorded(exe, args)
    _check(out, run(parse_module(text, make_context()), *args)[0], "f32")


def test_static_plans_are_made_at_load() -> None:
    text, shapes = conv_ir("NHWC", "f16")  # static shapes: planned when the runtime loads
    exe = _compile(text)
    runtime, lib = _recorded_runtime(exe, graphs=True)
    (graph,) = lib.graphs
    assert graph.built and not lib.executed
    args = _args(shapes, "f16")
    for _ in range(3):  # eager once (the engine is made at the first execute), then captured and replayed
        _check(runtime.run(*args)[0], run(parse_module(text, make_context()), *args)[0], "f16")
    assert len(lib.graphs) == 1 and len(lib.executed) == 2  # the call reused the plan


def test_a_divided_scale_is_inverted() -> None:
    text, shapes = attention_ir("bmm3d", False, divide=True)
    exe = _compile(text)
    (handle,) = kernel_handles(exe.module).values()
    assert handle.record.attn_scale == 0.25
    args = _args(shapes, "f16")
    (out,), _, _ = _run_recorded(exe, args)
    _check(out, run(parse_module(text, make_context()), *args)[0], "f16")


def test_an_attention_with_a_run_time_scale_is_not_matched() -> None:
    text, _ = attention_ir("bmm3d", False)
    text = text.replace("%c = nn.constant dense<0.25> : tensor<f16>\n  ", "").replace(
        "func.func @main(", "func.func @main(%c: tensor<f16>, ")
    func = next(iter(parse_module(text, make_context()).ops))
    assert not [m for m in match_patterns(func, "cudnn") if m.name == "cudnn.sdpa"]


def test_f32_attention_is_not_offered_to_cudnn() -> None:
    text, _ = attention_ir("bmm3d", False, dtype="f32")
    func = next(iter(parse_module(text, make_context()).ops))
    assert not [m for m in match_patterns(func, "cudnn") if m.name == "cudnn.sdpa"]


def test_collage_takes_the_attention_whole_when_cudnn_is_fastest() -> None:
    text, shapes = attention_ir("export4d", True)
    exe = partita.compile(text, ["cuda -arch=sm_90", "cudnn", "llvm"], partitioner="collage")
    placed = [g for g in exe.collage.partitions if g.target == "cudnn"]
    assert [g.label for g in placed] == ["cudnn.sdpa"]
    args = _args(shapes, "f16")
    _check(exe.run(*args)[0], run(parse_module(text, make_context()), *args)[0], "f16")


class DeclareOnlyCudnn:
    """The real cuDNN frontend for declaring graphs; building needs the driver, so
    ``build`` and the workspace query are all that is stubbed."""

    def __init__(self) -> None:
        import cudnn

        self.module, self.graphs = cudnn, []

    def __getattr__(self, name: str):
        return getattr(self.module, name)

    def create_handle(self) -> None:
        return None

    def pygraph(self, **options):
        graph = self.module.pygraph(**options)
        graph.build = lambda modes: None
        graph.get_workspace_size = lambda: 0
        self.graphs.append(graph)
        return graph


@pytest.mark.parametrize("case", ["conv_nhwc", "conv_nchw_groups", "sdpa_mask", "sdpa_bmm"])
def test_the_real_cudnn_frontend_accepts_the_declared_graphs(case: str) -> None:
    pytest.importorskip("cudnn", reason="nvidia-cudnn-frontend (the cudnn extra) is not installed")
    if case.startswith("conv"):
        text, shapes = conv_ir("NHWC" if case == "conv_nhwc" else "NCHW", "f16", groups=2 if "groups" in case else 1)
    else:
        text, shapes = attention_ir("export4d" if case == "sdpa_mask" else "bmm3d", case == "sdpa_mask")
    exe = _compile(text)
    (handle,) = kernel_handles(exe.module).values()
    lib = DeclareOnlyCudnn()
    declaration = next(f for f in exe.module.ops if getattr(f, "sym_name", None) and f.sym_name.data == handle.function)
    arg_shapes = [tuple(d if d >= 0 else shapes[0][0] for d in t.get_shape()) for t in declaration.function_type.inputs]
    plan = handle.make_plan(lib, arg_shapes, ["float16"] * len(arg_shapes))
    (graph,) = lib.graphs
    y = plan.tensors["y"]
    want = run(parse_module(text, make_context()), *_args(shapes, "f16"))[0].shape
    if case.startswith("conv"):
        assert y.dim == [want[0], want[3], want[1], want[2]] if case == "conv_nhwc" else list(want)
        assert sorted(t.name for t in graph.get_inputs()) == ["bias", "w", "x"]
    else:
        assert y.dim == ([*want] if case == "sdpa_mask" else [want[0], 1, want[1], want[2]])
    assert y.data_type == lib.data_type.HALF


def test_a_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "cudnn", None)
    text, shapes = conv_ir("NCHW", "f32")
    exe = _compile(text)
    with pytest.raises(PartitaError, match=r"pip install 'partita\[cudnn\]'"):
        Runtime(exe.module, CudaDevice(driver=RecordingDriver()))  # the library is loaded with the plan


def _gpu_cases() -> list[tuple[str, list, str]]:
    cases = [(*conv_ir(layout, dtype, groups, dilation, epilogue), dtype)
             for layout in ("NCHW", "NHWC") for dtype in ("f16", "f32")
             for groups, dilation, epilogue in ((1, 1, "bias_relu"), (2, 2, "bias"), (1, 1, "relu"), (1, 1, "none"))]
    cases += [(*attention_ir(form, mask), "f16") for form in ("export4d", "bmm3d") for mask in (False, True)]
    return cases


def test_bindings_without_their_library_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    def missing():
        raise RuntimeError("Unable to find symbol cudnnGetVersion")

    monkeypatch.setitem(sys.modules, "cudnn", types.SimpleNamespace(backend_version=missing))
    text, _ = conv_ir("NCHW", "f32")
    (handle,) = kernel_handles(_compile(text).module).values()
    with pytest.raises(PartitaError, match=r"cudnnGetVersion\); install it with: pip install 'partita\[cudnn\]'"):
        handle.load_library()


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", range(len(_gpu_cases())))
def test_on_a_gpu_cudnn_matches_numpy(case: int) -> None:  # pragma: no cover
    pytest.importorskip("cudnn", reason="the cudnn extra is not installed")
    text, shapes, dtype = _gpu_cases()[case]
    exe = _compile(text)
    args = _args(shapes, dtype)
    runtime = exe.load("cuda")
    _check(runtime.run(*args)[0], run(parse_module(text, make_context()), *args)[0], dtype)
    assert "1 library call(s) (cudnn)" in runtime.describe() and not runtime.plan.host_ops
