"""The target in PyPI's terms (envsolver.lock.pypi.target): the wheel tags CPython X.Y on Linux with glibc 2.N
takes (packaging.tags' order), uv's --python-platform for it, and the PEP 508 marker environment."""

from __future__ import annotations

import pytest

from envsolver.core.versions import MajorMinor
from envsolver.lock.pypi.target import Target

X86 = Target(MajorMinor(3, 12), "linux-64", MajorMinor(2, 28))
ARM = Target(MajorMinor(3, 11), "linux-aarch64", MajorMinor(2, 17))


@pytest.mark.parametrize(
    ("target", "filename", "taken"),
    [
        (X86, "accelerate-1.16.0-py3-none-any.whl", True),
        (X86, "pyyaml-6.0.4-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl", True),
        (X86, "safetensors-0.8.0-cp310-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        (X86, "psutil-7.2.2-cp36-abi3-manylinux2010_x86_64.manylinux_2_12_x86_64.manylinux_2_28_x86_64.whl", True),
        (X86, "numpy-2.3.5-cp312-cp312-manylinux_2_31_x86_64.whl", False),  # needs a newer glibc
        (X86, "numpy-2.3.5-cp311-cp311-manylinux_2_28_x86_64.whl", False),  # another Python
        (X86, "numpy-2.3.5-cp312-cp312-musllinux_1_2_x86_64.whl", False),
        (X86, "numpy-2.3.5-cp312-cp312-manylinux_2_28_aarch64.whl", False),
        (X86, "numpy-2.3.5-cp313-cp313t-manylinux_2_28_x86_64.whl", False),
        (X86, "numpy-2.3.5-cp312-cp312-linux_x86_64.whl", False),  # not portable: PyPI refuses such uploads
        (X86, "accelerate-1.16.0.tar.gz", False),
        (ARM, "pyyaml-6.0.4-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.whl", True),
        (ARM, "hf_xet-1.8.0-cp38-abi3-manylinux_2_28_aarch64.whl", False),
        (ARM, "hf_xet-1.8.0-cp38-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", False),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_the_wheels_a_target_takes(target: Target, filename: str, taken: bool) -> None:
    assert (target.rank(filename) is not None) == taken, (target, filename)


def test_a_more_specific_wheel_ranks_first() -> None:
    cp = X86.rank("regex-2026.11.19-cp312-cp312-manylinux_2_28_x86_64.whl")
    abi3 = X86.rank("regex-2026.11.19-cp310-abi3-manylinux_2_28_x86_64.whl")
    pure = X86.rank("regex-2026.11.19-py3-none-any.whl")
    old = X86.rank("regex-2026.11.19-cp312-cp312-manylinux_2_17_x86_64.whl")
    assert cp is not None and abi3 is not None and pure is not None and old is not None
    assert cp < old < abi3 < pure, (cp, old, abi3, pure)


@pytest.mark.parametrize(
    ("glibc", "platform", "uv"),
    [
        ((2, 28), "linux-64", "x86_64-manylinux_2_28"),
        ((2, 30), "linux-64", "x86_64-manylinux_2_28"),  # uv knows no 2_29 or 2_30: the next lower level
        ((2, 34), "linux-aarch64", "aarch64-manylinux_2_34"),
        ((2, 45), "linux-64", "x86_64-manylinux_2_40"),
        ((2, 17), "linux-64", "x86_64-manylinux_2_17"),
        ((2, 12), "linux-64", None),
    ],
)
def test_uvs_platform_for_the_target(glibc: tuple[int, int], platform: str, uv: str | None) -> None:
    target = Target(MajorMinor(3, 12), platform, MajorMinor(*glibc))  # type: ignore[arg-type]
    assert target.uv_platform() == uv, target


def test_the_marker_environment_is_the_targets_not_the_hosts() -> None:
    env = ARM.environment()
    assert env["platform_machine"] == "aarch64" and env["python_version"] == "3.11", env
    assert env["sys_platform"] == "linux" and env["implementation_name"] == "cpython", env
    assert env["platform_release"] == "" and env["python_full_version"] == "3.11.0", env
