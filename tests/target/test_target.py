"""Target kinds and targets: registry, option validation, parsing/printing, dict form."""

from __future__ import annotations

import pickle
import subprocess
import sys
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partita.target import (
    DeviceType,
    Target,
    TargetError,
    TargetKind,
    TargetOption,
    get_target_kind,
    is_external_codegen_for,
    is_registered,
    list_target_kinds,
    register_target_kind,
)


def fresh_name() -> str:
    return f"test_backend_{uuid.uuid4().hex[:12]}"


# -- kinds ---------------------------------------------------------------------------


def test_builtin_kinds_registered_with_device_types_and_flags() -> None:
    expected = {
        "llvm": (DeviceType.CPU, False, True, True),
        "c": (DeviceType.CPU, False, True, True),
        "cuda": (DeviceType.CUDA, False, False, True),
        "metal": (DeviceType.METAL, False, False, False),
        "cutlass": (DeviceType.CUDA, True, False, True),
        "cublas": (DeviceType.CUDA, True, False, True),
        "cudnn": (DeviceType.CUDA, True, False, True),
        "tensorrt": (DeviceType.CUDA, True, False, True),
    }
    names = list_target_kinds()
    assert names == sorted(names)
    for name, (device, external, host, subroutines) in expected.items():
        kind = get_target_kind(name)
        assert is_registered(name) and name in names
        assert kind.name == name
        assert kind.device_type is device
        assert kind.is_external_codegen is external
        assert kind.host_capable is host
        assert kind.can_call_subroutines is subroutines


def test_builtin_option_schemas() -> None:
    cuda = get_target_kind("cuda")
    assert cuda.options["arch"] == TargetOption(str, "sm_80")
    assert cuda.options["max_threads"] == TargetOption(int, 1024)
    assert cuda.options["max_shared_memory_per_block"] == TargetOption(int, 49152)
    cutlass = get_target_kind("cutlass")
    assert cutlass.defaults() == {
        "sm": 80,
        "use_tf32": True,
        "use_3xtf32": False,
        "split_k_slices": 1,
        "profile_all_alignments": False,
        "find_first_valid": True,
        "use_multiprocessing": False,
        "tmp_dir": "",
        "use_fast_math": False,
    }
    llvm = get_target_kind("llvm")
    assert set(llvm.options) == {"mcpu", "mtriple", "num_cores"}
    assert llvm.options["num_cores"].type is int and llvm.options["num_cores"].default is None
    trt = get_target_kind("tensorrt")
    assert trt.options["max_workspace_size"].type is int
    assert trt.options["use_fp16"] == TargetOption(bool, False)
    assert get_target_kind("cublas").options == {}
    assert "max_threads" in get_target_kind("metal").options


def test_unknown_kind_error_lists_known_kinds() -> None:
    with pytest.raises(TargetError, match=r"unknown target kind 'nope'.*cublas.*cutlass.*llvm"):
        get_target_kind("nope")
    assert not is_registered("nope")
    with pytest.raises(TargetError, match="unknown target kind 'nope'"):
        Target("nope -x=1")


def test_register_new_kind_and_add_option() -> None:
    name = fresh_name()
    kind = register_target_kind(
        name,
        "cuda",
        {"tile": (int, 128), "mode": str, "libs": list[str], "scale": TargetOption(float, 1.0)},
        is_external_codegen=True,
    )
    assert isinstance(kind, TargetKind)
    assert get_target_kind(name) is kind and is_registered(name)
    assert kind.device_type is DeviceType.CUDA and kind.is_external_codegen
    kind.add_option("flag", bool, True)
    t = Target(f"{name} -tile=64 -flag=false -libs=a,b")
    assert t.get("tile") == 64 and t.get("flag") is False and t.get("scale") == 1.0
    assert t.get("libs") == ("a", "b") and t.get("mode") is None
    assert is_external_codegen_for(t, Target("cuda"))


def test_register_kind_twice_is_an_error() -> None:
    name = fresh_name()
    register_target_kind(name, DeviceType.CPU)
    with pytest.raises(TargetError, match=f"target kind '{name}' is already registered"):
        register_target_kind(name, DeviceType.CPU)
    with pytest.raises(TargetError, match="target kind 'cuda' is already registered"):
        register_target_kind("cuda", DeviceType.CUDA)


def test_register_option_twice_is_an_error() -> None:
    kind = register_target_kind(fresh_name(), "cpu", {"x": int})
    with pytest.raises(TargetError, match=f"option 'x' is already registered for target kind '{kind.name}'"):
        kind.add_option("x", str)
    with pytest.raises(TargetError, match="option 'sm' is already registered for target kind 'cutlass'"):
        get_target_kind("cutlass").add_option("sm", int, 90)


def test_register_kind_validation() -> None:
    with pytest.raises(TargetError, match="invalid device type 'tpu'"):
        register_target_kind(fresh_name(), "tpu")
    with pytest.raises(TargetError, match="invalid target kind name"):
        register_target_kind("bad name", "cpu")
    with pytest.raises(TargetError, match="invalid target kind name"):
        register_target_kind("a,b", "cpu")
    with pytest.raises(TargetError, match="unsupported target option type"):
        register_target_kind(fresh_name(), "cpu", {"x": dict})
    with pytest.raises(TargetError, match="expects int, got str"):
        register_target_kind(fresh_name(), "cpu", {"x": (int, "3")})
    kind = register_target_kind(fresh_name(), "cpu")
    with pytest.raises(TargetError, match="invalid option name"):
        kind.add_option("-x", int)


def test_device_type_parse() -> None:
    assert DeviceType.parse("CUDA") is DeviceType.CUDA
    assert DeviceType.parse(DeviceType.METAL) is DeviceType.METAL
    assert str(DeviceType.CPU) == "cpu"
    with pytest.raises(TargetError, match="valid device types: cpu, cuda, metal"):
        DeviceType.parse("gpu")


@pytest.mark.parametrize(
    ("ext", "target", "expected"),
    [
        ("cutlass", "cuda", True),
        ("cublas", "cuda", True),
        ("tensorrt", "cuda -arch=sm_90", True),
        ("cuda", "cutlass", False),  # roles swapped
        ("cuda", "cuda", False),  # not external
        ("cutlass", "cublas", False),  # both external
        ("cutlass", "llvm", False),  # other device type
        ("cutlass", "metal", False),
        ("llvm", "c", False),
    ],
)
def test_is_external_codegen_for(ext: str, target: str, expected: bool) -> None:
    assert is_external_codegen_for(Target(ext), Target(target)) is expected


def test_is_external_codegen_for_cpu_backend() -> None:
    dnnl = Target(register_target_kind(fresh_name(), "cpu", is_external_codegen=True))
    assert is_external_codegen_for(dnnl, Target("llvm"))
    assert not is_external_codegen_for(dnnl, Target("cuda"))


# -- targets -------------------------------------------------------------------------


def test_explicit_options_are_separate_from_defaults() -> None:
    t = Target("cutlass")
    assert t.options == {}
    assert t.get("sm") == 80
    assert t.attrs == {
        "sm": 80,
        "use_tf32": True,
        "use_3xtf32": False,
        "split_k_slices": 1,
        "profile_all_alignments": False,
        "find_first_valid": True,
        "use_multiprocessing": False,
        "tmp_dir": "",
        "use_fast_math": False,
    }
    t90 = Target("cutlass", {"sm": 90})
    assert t90.options == {"sm": 90} and t90.attrs["sm"] == 90
    assert Target("llvm").get("mcpu") is None
    assert Target("llvm").get("mcpu", "generic") == "generic"
    # Setting an option to its default value is still an explicit choice.
    assert Target("cutlass -sm=80") != Target("cutlass")
    assert str(Target("cutlass -sm=80")) == "cutlass -sm=80"


def test_parse_tvm_style_strings() -> None:
    t = Target("cutlass -sm=90 -use_fast_math=1")
    assert t.kind is get_target_kind("cutlass")
    assert t.options == {"sm": 90, "use_fast_math": True}
    assert type(t.options["sm"]) is int and type(t.options["use_fast_math"]) is bool
    assert Target("cuda --arch=sm_90") == Target("cuda -arch=sm_90") == Target.parse("cuda -arch=sm_90")
    assert Target("  cuda   -arch=sm_90  ").options == {"arch": "sm_90"}
    assert Target("cutlass -use_fast_math").get("use_fast_math") is True  # bare bool flag
    for text, value in [("true", True), ("TRUE", True), ("1", True), ("false", False), ("0", False)]:
        assert Target(f"cutlass -use_fast_math={text}").get("use_fast_math") is value
    assert Target("llvm -mtriple=x86_64-linux-gnu -num_cores=8").options == {
        "mtriple": "x86_64-linux-gnu",
        "num_cores": 8,
    }


def test_str_is_canonical_sorted_by_option_name() -> None:
    t = Target("cuda -max_threads=512 -arch=sm_90")
    assert str(t) == "cuda -arch=sm_90 -max_threads=512"
    assert str(Target("cutlass -use_fast_math=true -sm=90")) == "cutlass -sm=90 -use_fast_math=1"
    assert str(Target("cutlass -use_fast_math=0")) == "cutlass -use_fast_math=0"
    assert Target(str(t)) == t
    assert list(t.options) == ["arch", "max_threads"]


def test_host_printing_and_equality() -> None:
    t = Target("cuda -arch=sm_90", host="llvm")
    assert t.host == Target("llvm")
    assert str(t) == "cuda -arch=sm_90"
    assert repr(t) == "Target('cuda -arch=sm_90', host=Target('llvm'))"
    assert t != Target("cuda -arch=sm_90")
    assert t.without_host() == Target("cuda -arch=sm_90")
    assert Target("cuda -arch=sm_90").with_host(Target("llvm")) == t
    assert t.with_host(None).host is None
    assert t.same_as(Target("cuda -arch=sm_90"))
    assert hash(t) == hash(Target("cuda", {"arch": "sm_90"}, Target("llvm")))


def test_host_validation() -> None:
    with pytest.raises(TargetError, match="'cuda' cannot be a host target"):
        Target("cutlass", host="cuda")
    with pytest.raises(TargetError, match="must not have a host itself"):
        Target("cuda", host=Target("llvm", host="c"))


def test_targets_are_immutable_and_hashable() -> None:
    t = Target("cuda -arch=sm_90")
    with pytest.raises(AttributeError):
        t.foo = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        t.options["arch"] = "sm_80"  # type: ignore[index]
    assert len({t, Target("cuda", {"arch": "sm_90"}), Target("cuda")}) == 2
    assert Target(get_target_kind("cuda"), {"arch": "sm_90"}) == t
    assert pickle.loads(pickle.dumps(Target("cuda", host="llvm"))) == Target("cuda", host="llvm")


def test_unknown_option_error_names_option_and_valid_options() -> None:
    with pytest.raises(
        TargetError,
        match=r"unknown option 'smm' for target kind 'cutlass'; valid options: "
        r"find_first_valid, profile_all_alignments, sm, split_k_slices, tmp_dir, use_3xtf32, "
        r"use_fast_math, use_multiprocessing, use_tf32",
    ):
        Target("cutlass -smm=90")
    with pytest.raises(TargetError, match="unknown option 'arch' for target kind 'llvm'"):
        Target("llvm", {"arch": "x"})
    with pytest.raises(TargetError, match="unknown option 'x' for target kind 'cublas'; valid options: \\(none\\)"):
        Target("cublas").get("x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cutlass -sm=abc", "option 'sm' of target kind 'cutlass' expects int, got 'abc'"),
        ("cutlass -sm=9.5", "expects int"),
        ("cutlass -use_fast_math=yes", "expects true/false/1/0, got 'yes'"),
        ("cutlass -sm", "option 'sm' of target kind 'cutlass' needs a value"),
        ("cuda arch=sm_90", "expected -key=value"),
        ("cuda -", "expected -key=value"),
        ("cuda -arch=sm_90 -arch=sm_80", "option 'arch' given twice"),
        ("-arch=sm_90", "must start with a target kind name"),
        ("", "empty target string"),
        ("cuda -arch='sm_90", "cannot parse target string"),
    ],
)
def test_text_parse_errors(text: str, message: str) -> None:
    with pytest.raises(TargetError, match=message):
        Target(text)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sm": "90"}, "option 'sm' of target kind 'cutlass' expects int, got str '90'"),
        ({"sm": True}, "expects int, got bool"),
        ({"sm": 9.0}, "expects int, got float"),
        ({"use_fast_math": 1}, "expects bool, got int"),
        ({"use_fast_math": "true"}, "expects bool, got str"),
    ],
)
def test_typed_option_errors(options: dict, message: str) -> None:
    with pytest.raises(TargetError, match=message):
        Target("cutlass", options)


def test_string_and_dict_options_merge_and_conflict() -> None:
    t = Target("cutlass -sm=90", {"split_k_slices": 4})
    assert t.options == {"sm": 90, "split_k_slices": 4}
    assert Target("cutlass -sm=90", {"sm": 90}) == Target("cutlass -sm=90")
    with pytest.raises(TargetError, match="option 'sm' of target 'cutlass' given twice"):
        Target("cutlass -sm=90", {"sm": 80})


def test_with_options() -> None:
    t = Target("cutlass -sm=90", host="llvm").with_options(use_fast_math=True)
    assert t == Target("cutlass -sm=90 -use_fast_math=1", host="llvm")
    with pytest.raises(TargetError, match="unknown option 'nope'"):
        t.with_options(nope=1)


def test_float_and_list_options() -> None:
    kind = register_target_kind(
        fresh_name(), "cpu", {"scale": float, "libs": list[str], "name": str}
    )
    t = Target(kind.name, {"scale": 2, "libs": ["x", "y"]})
    assert t.options["scale"] == 2.0 and type(t.options["scale"]) is float
    assert t.options["libs"] == ("x", "y")
    assert Target(str(t)) == t
    assert str(t) == f"{kind.name} -libs='x,y' -scale=2.0"
    assert Target(f"{kind.name} -libs=a").get("libs") == ("a",)
    assert Target(f"{kind.name} -libs=").get("libs") == ()
    assert Target(f"{kind.name} -scale=1e-3").get("scale") == 0.001
    with pytest.raises(TargetError, match="must not be NaN"):
        Target(kind.name, {"scale": float("nan")})
    with pytest.raises(TargetError, match="expects list\\[str\\], got str"):
        Target(kind.name, {"libs": "x"})
    with pytest.raises(TargetError, match="must not contain ','"):
        Target(kind.name, {"libs": ["a,b"]})
    with pytest.raises(TargetError, match="expects float, got 'fast'"):
        Target(f"{kind.name} -scale=fast")
    quoted = Target(kind.name, {"name": "a b 'c', d"})
    assert Target(str(quoted)) == quoted


def test_dict_round_trip_keeps_types() -> None:
    t = Target("cutlass -sm=90 -use_fast_math=1", host="llvm -num_cores=4")
    d = t.to_dict()
    assert d == {
        "kind": "cutlass",
        "options": {"sm": 90, "use_fast_math": True},
        "host": {"kind": "llvm", "options": {"num_cores": 4}, "host": None},
    }
    assert type(d["options"]["sm"]) is int and type(d["options"]["use_fast_math"]) is bool
    assert Target.from_dict(**d) == t
    assert Target.from_dict("cutlass", {"sm": 90, "use_fast_math": True}, Target("llvm -num_cores=4")) == t
    assert Target.from_dict("cuda", {}) == Target("cuda")
    assert Target.from_dict("cuda") == Target("cuda")
    assert Target.from_dict("cuda", host="llvm") == Target("cuda", host="llvm")
    with pytest.raises(TargetError, match="unknown target kind 'cuda -arch=sm_90'"):
        Target.from_dict("cuda -arch=sm_90", {})
    with pytest.raises(TargetError, match="expects int, got str"):
        Target.from_dict("cutlass", {"sm": "90"})


def test_module_does_not_import_xdsl() -> None:
    code = "import sys, partita.target; print(any(m.startswith('xdsl') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- property tests ------------------------------------------------------------------

_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12
)
_ITEM = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters=","),
    min_size=1,
    max_size=6,
)
_PROP_KIND = register_target_kind(
    fresh_name(),
    "cuda",
    {"i": int, "s": str, "b": bool, "f": float, "l": list[str]},
    is_external_codegen=True,
)


@settings(max_examples=200, deadline=None)
@given(
    i=st.none() | st.integers(min_value=-(2**70), max_value=2**70),
    s=st.none() | _TEXT,
    b=st.none() | st.booleans(),
    f=st.none() | st.floats(allow_nan=False),
    lst=st.none() | st.lists(_ITEM, max_size=4),
    with_host=st.booleans(),
)
def test_print_parse_and_dict_round_trips(i, s, b, f, lst, with_host) -> None:
    options = {
        k: v for k, v in {"i": i, "s": s, "b": b, "f": f, "l": lst}.items() if v is not None
    }
    host = Target("llvm -mcpu=znver3") if with_host else None
    t = Target(_PROP_KIND, options, host)
    assert Target(str(t), host=host) == t
    assert Target(str(t)) == t.without_host()
    assert Target.from_dict(**t.to_dict()) == t
    for key, value in t.to_dict()["options"].items():
        assert type(value) is type(options[key]) or (key == "l" and type(value) is list)
