"""CompilationConfig: TVM's host, ordering and default-device rules."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partita.target import (
    CompilationConfig,
    DeviceType,
    Target,
    TargetError,
    register_target_kind,
    split_target_list,
)

LLVM = Target("llvm")
HOST_LLVM = Target("llvm", host=LLVM)
"""A listed target that is the host gets the host too (TVM's CompilationConfig)."""


def fresh_name() -> str:
    return f"test_backend_{uuid.uuid4().hex[:12]}"


# -- accepted lists ------------------------------------------------------------------


def test_cuda_cutlass_llvm() -> None:
    config = CompilationConfig(["cuda -arch=sm_90", "cutlass", "llvm"])
    assert config.host_target == LLVM
    assert config.primitive_targets == (
        Target("cuda -arch=sm_90", host=LLVM),
        Target("cutlass", host=LLVM),
        HOST_LLVM,  # the host is also the cpu primitive target, and gets the host as TVM's does
    )
    assert config.default_device is DeviceType.CUDA  # the only non-host device type
    assert config.default_primary_target == Target("cuda -arch=sm_90", host=LLVM)
    assert config.primary_target(DeviceType.CUDA) == Target("cuda -arch=sm_90", host=LLVM)
    assert config.primary_target("cpu") == HOST_LLVM
    assert config.external_targets == (Target("cutlass", host=LLVM),)
    assert config.device_types == (DeviceType.CUDA, DeviceType.CPU)
    assert list(config) == list(config.primitive_targets) and len(config) == 3
    assert str(config) == "cuda -arch=sm_90,cutlass,llvm"


def test_llvm_only() -> None:
    config = CompilationConfig(["llvm"])
    assert config.host_target == LLVM
    assert config.primitive_targets == (HOST_LLVM,)
    assert config.default_device is DeviceType.CPU
    assert config.default_primary_target == HOST_LLVM
    assert config.external_targets == ()


def test_lone_external_target_is_its_devices_primary() -> None:
    config = CompilationConfig(["cutlass"])
    cutlass = Target("cutlass", host=LLVM)
    assert config.host_target == LLVM  # default host
    assert config.primitive_targets == (cutlass,)
    assert config.default_device is DeviceType.CUDA
    assert config.primary_target("cuda") == cutlass
    assert config.default_primary_target == cutlass
    assert config.external_targets == (cutlass,)
    # A lone external with the host is fine too.
    assert CompilationConfig(["cutlass", "llvm"]).primary_target("cuda") == cutlass


@pytest.mark.parametrize("targets", [["cutlass", "cublas"], ["llvm", "cudnn", "cublas"]])
def test_several_externals_need_the_primary_target(targets) -> None:
    # TVM rejects a device with external codegens only; Partita accepts one alone.
    with pytest.raises(TargetError, match=r"device type 'cuda' has only external targets \('cu.*'\): "
                                          r"add its primary target 'cuda' before them"):
        CompilationConfig(targets)


def test_several_external_codegens_for_one_device() -> None:
    config = CompilationConfig(["cuda", "cutlass", "cublas", "llvm"])
    assert [t.kind_name for t in config.external_targets] == ["cutlass", "cublas"]
    assert config.primary_target("cuda") == Target("cuda", host=LLVM)
    assert config.targets_for_device("cuda") == (
        Target("cuda", host=LLVM),
        Target("cutlass", host=LLVM),
        Target("cublas", host=LLVM),
    )
    assert config.targets_for_device(DeviceType.CPU) == (HOST_LLVM,)


def test_cpu_external_codegen_after_llvm() -> None:
    dnnl = register_target_kind(fresh_name(), "cpu", is_external_codegen=True)
    config = CompilationConfig(["llvm", Target(dnnl)])
    assert config.host_target == LLVM
    assert config.primitive_targets == (HOST_LLVM, Target(dnnl, host=LLVM))
    assert config.default_device is DeviceType.CPU


def test_targets_may_be_target_objects_or_strings() -> None:
    a = CompilationConfig([Target("cuda"), "cutlass"])
    b = CompilationConfig(["cuda", Target("cutlass")])
    assert a == b and hash(a) == hash(b)


# -- host rules ----------------------------------------------------------------------


def test_host_given_on_a_target() -> None:
    config = CompilationConfig([Target("cuda", host="llvm -mcpu=znver3"), "cutlass"])
    host = Target("llvm -mcpu=znver3")
    assert config.host_target == host
    assert all(t.host == host for t in config.primitive_targets)
    assert config.default_device is DeviceType.CUDA
    # The host is not listed, but cpu work can still run on it.
    assert config.primary_target("cpu") == host


def test_first_explicit_host_wins() -> None:
    config = CompilationConfig(
        ["metal", Target("cuda", host="c"), Target("cutlass", host="llvm")]
    )
    assert config.host_target == Target("c")
    # Every primitive target gets the chosen host, overriding a disagreeing one.
    assert config.primitive_targets == (
        Target("metal", host="c"),
        Target("cuda", host="c"),
        Target("cutlass", host="c"),
    )


def test_explicit_host_beats_listed_cpu_target() -> None:
    config = CompilationConfig(["c", Target("cuda", host="llvm")])
    assert config.host_target == LLVM
    assert config.primitive_targets == (Target("c", host=LLVM), Target("cuda", host=LLVM))
    assert config.primary_target("cpu") == Target("c", host=LLVM)


def test_first_cpu_target_is_the_host() -> None:
    config = CompilationConfig(["cuda", "llvm -mcpu=skylake"])
    host = Target("llvm -mcpu=skylake")
    assert config.host_target == host
    assert config.primitive_targets == (Target("cuda", host=host), host.with_host(host))
    config = CompilationConfig(["cuda", "c"])
    assert config.host_target == Target("c")


def test_listed_target_equal_to_the_host_gets_the_host() -> None:
    config = CompilationConfig([Target("cuda", host="llvm"), "llvm"])
    assert config.primitive_targets == (Target("cuda", host="llvm"), HOST_LLVM)
    assert config.primary_target("cpu").host == config.host_target


def test_default_llvm_host() -> None:
    config = CompilationConfig(["cuda", "metal"])
    assert config.host_target == LLVM
    assert config.default_device is DeviceType.CPU  # two device types -> cpu
    assert config.default_primary_target == LLVM  # the (unlisted) host


# -- default device rules ------------------------------------------------------------


@pytest.mark.parametrize(
    ("targets", "fallback", "device", "primary"),
    [
        (["cuda", "llvm"], None, DeviceType.CUDA, "cuda"),
        (["llvm", "cuda"], None, DeviceType.CUDA, "cuda"),
        (["cuda", "llvm"], "cpu", DeviceType.CPU, "llvm"),
        (["cuda", "llvm"], DeviceType.CPU, DeviceType.CPU, "llvm"),
        (["cuda", "metal", "llvm"], None, DeviceType.CPU, "llvm"),
        (["cuda", "metal", "llvm"], "METAL", DeviceType.METAL, "metal"),
        (["metal"], None, DeviceType.METAL, "metal"),
        (["llvm"], "cpu", DeviceType.CPU, "llvm"),
        (["cuda"], "cpu", DeviceType.CPU, "llvm"),  # the default host serves cpu
    ],
)
def test_default_device(targets, fallback, device, primary) -> None:
    config = CompilationConfig(targets, fallback_device=fallback)
    assert config.default_device is device
    assert config.default_primary_target.kind_name == primary


# -- rejected lists ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        ([], "a compilation config needs at least one target"),
        (["cuda", "llvm", "cuda -arch=sm_90"], "duplicate target kind 'cuda'"),
        (["cutlass", "cutlass -sm=90"], "duplicate target kind 'cutlass'"),
        (
            ["cutlass", "cuda"],
            "external target 'cutlass' is listed before the primary target 'cuda' of "
            "device type 'cuda'",
        ),
        (
            ["llvm", "cutlass", "cublas", "cuda"],
            "external target 'cutlass' is listed before the primary target 'cuda'",
        ),
        (
            ["llvm", "c"],
            "second primary target 'c' for device type 'cpu' \\(primary target is 'llvm'\\)",
        ),
    ],
)
def test_rejected_lists(targets, message) -> None:
    with pytest.raises(TargetError, match=message):
        CompilationConfig(targets)


def test_second_primary_for_registered_kind() -> None:
    other = register_target_kind(fresh_name(), "cuda")
    with pytest.raises(TargetError, match=f"second primary target '{other.name}' for device type 'cuda'"):
        CompilationConfig(["cuda", "cutlass", Target(other)])


def test_invalid_fallback_device() -> None:
    with pytest.raises(TargetError, match="invalid fallback device 'tpu'; valid device types: cpu, cuda, metal"):
        CompilationConfig(["cuda"], fallback_device="tpu")
    with pytest.raises(TargetError, match="invalid fallback device 2"):
        CompilationConfig(["cuda"], fallback_device=2)  # type: ignore[arg-type]


def test_fallback_device_without_a_target() -> None:
    with pytest.raises(TargetError, match="no target for device type 'metal'"):
        CompilationConfig(["cuda", "llvm"], fallback_device="metal")


def test_bad_target_text_in_list() -> None:
    with pytest.raises(TargetError, match="unknown option 'sm' for target kind 'cuda'"):
        CompilationConfig(["cuda -sm=90"])
    with pytest.raises(TargetError, match="empty target"):
        CompilationConfig.parse("cuda,,llvm")


# -- look-ups ------------------------------------------------------------------------


def test_target_for_kind_contains_and_canonical() -> None:
    config = CompilationConfig(["cuda -arch=sm_90", "cutlass -sm=90"])
    assert config.target_for_kind("cutlass") == Target("cutlass -sm=90", host=LLVM)
    assert config.target_for_kind("llvm") == LLVM  # the host counts
    assert config.find_target_for_kind("cublas") is None
    with pytest.raises(TargetError, match="no target of kind 'cublas' in the compilation config"):
        config.target_for_kind("cublas")

    assert Target("cutlass -sm=90") in config
    assert Target("cutlass -sm=90", host="c") in config  # hosts are ignored
    assert "cuda -arch=sm_90" in config
    assert Target("cutlass") not in config  # options differ
    assert Target("cublas") not in config
    assert LLVM in config
    assert "not a target" not in config and 3 not in config

    assert config.canonical(Target("cutlass -sm=90")) == Target("cutlass -sm=90", host=LLVM)
    assert config.canonical("cuda -arch=sm_90").host == LLVM
    with pytest.raises(TargetError, match="target 'cutlass -sm=80' is not in the compilation config \\(the config has 'cutlass -sm=90'\\)"):
        config.canonical("cutlass -sm=80")
    with pytest.raises(TargetError, match="target 'cublas' is not in the compilation config"):
        config.canonical("cublas")


def test_primary_target_missing_device() -> None:
    config = CompilationConfig(["cuda"])
    with pytest.raises(TargetError, match="no target for device type 'metal'.*available device types: cuda"):
        config.primary_target("metal")


def test_repr_and_describe() -> None:
    config = CompilationConfig(["cuda", "cutlass"])
    assert repr(config) == "CompilationConfig('cuda,cutlass', host='llvm', default_device='cuda')"
    assert config.describe() == {
        "host": "llvm",
        "targets": ["cuda", "cutlass"],
        "default_device": "cuda",
        "default_primary_target": "cuda",
    }


# -- parsing -------------------------------------------------------------------------


def test_parse_comma_separated_string() -> None:
    config = CompilationConfig.parse("cuda -arch=sm_90,cutlass,llvm")
    assert config == CompilationConfig(["cuda -arch=sm_90", "cutlass", "llvm"])
    assert CompilationConfig.parse(" cuda -arch=sm_90 , cutlass , llvm ") == config
    assert CompilationConfig("cuda -arch=sm_90,cutlass,llvm") == config
    assert CompilationConfig.parse(str(config)) == config


def test_parse_sequence_of_strings() -> None:
    expected = CompilationConfig(["cuda -arch=sm_90", "cutlass", "llvm"])
    assert CompilationConfig.parse(("cuda -arch=sm_90", "cutlass", "llvm")) == expected
    assert CompilationConfig.parse(["cuda -arch=sm_90,cutlass", "llvm"]) == expected
    assert CompilationConfig.parse([Target("cuda -arch=sm_90"), "cutlass,llvm"]) == expected
    config = CompilationConfig.parse(("cuda", "llvm"), fallback_device="cpu")
    assert config.default_device is DeviceType.CPU


def test_split_respects_quotes_and_list_options() -> None:
    kind = register_target_kind(fresh_name(), "cuda", {"libs": list[str], "note": str}, is_external_codegen=True)
    assert split_target_list(f"cuda,{kind.name} -libs=a,b,llvm") == [
        "cuda",
        f"{kind.name} -libs=a,b",
        "llvm",
    ]
    # The pass-option form: the list value arrives split into separate strings.
    assert split_target_list(("cuda", f"{kind.name} -libs=a", "b", "llvm")) == [
        "cuda",
        f"{kind.name} -libs=a,b",
        "llvm",
    ]
    # A registered kind name after a list option starts a new target.
    assert split_target_list(f"cuda,{kind.name} -libs=a,cublas") == [
        "cuda",
        f"{kind.name} -libs=a",
        "cublas",
    ]
    assert split_target_list(f"cuda,{kind.name} -note='x, y',llvm") == [
        "cuda",
        f"{kind.name} -note='x, y'",
        "llvm",
    ]
    config = CompilationConfig.parse(f"cuda,{kind.name} -libs=a,b -note='x, y',llvm")
    ext = config.target_for_kind(kind.name)
    assert ext.get("libs") == ("a", "b") and ext.get("note") == "x, y"
    assert CompilationConfig.parse(str(config)) == config


_ITEM = st.text(alphabet="abcxyz_ ,'\"", min_size=1, max_size=5).filter(lambda s: "," not in s)
_CFG_KIND = register_target_kind(
    fresh_name(), "cuda", {"libs": list[str], "note": str, "n": int}, is_external_codegen=True
)


@settings(max_examples=150, deadline=None)
@given(
    libs=st.none() | st.lists(_ITEM, max_size=3),
    note=st.none() | st.text(alphabet="ab ,'\"\\-=", max_size=8),
    n=st.none() | st.integers(),
    arch=st.none() | st.sampled_from(["sm_80", "sm_90", "sm_90a"]),
)
def test_config_print_parse_round_trip(libs, note, n, arch) -> None:
    options = {k: v for k, v in {"libs": libs, "note": note, "n": n}.items() if v is not None}
    cuda = Target("cuda", {"arch": arch} if arch else {})
    config = CompilationConfig([cuda, Target(_CFG_KIND, options), "llvm"])
    assert CompilationConfig.parse(str(config)) == config
