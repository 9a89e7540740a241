"""Table-driven resolver cases across GPU generations, drivers, Pythons, torch versions and sources.

Each row states what a correct plan must be, from the KB facts (arch lists, driver tables, conda-forge
build matrices); the comment on a row says why where it is not obvious.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from packaging.version import Version

from envsolver.core import versions
from envsolver.kb import KnowledgeBase
from envsolver.kb.model import DeepSpeedRelease, Holding, Toolkit, TorchBuild
from envsolver.resolve import archs, candidates, deepspeed, driver, specs, ways_out
from envsolver.resolve.inputs import Options, build_target
from envsolver.resolve.plan import Plan
from envsolver.resolve.run import resolve
from tests.conftest import error_for, plan_for

# (id, options, expected: torch, torch CUDA build, toolkit CUDA, python, arch list, compatibility, deepspeed)
# deepspeed: "conda:X" (conda-forge build), "pip:X" (PyPI), None (not wanted)
OK = [
    # conda-forge's deepspeed 0.18.8 cuda130 needs cuda-version >= 13.2 (libcublas 13.3), which DeepSpeed's
    # op builder rejects against torch built with 13.0: the newest fully conda stack is CUDA 12.9.
    ("a100-default", dict(gpus=("a100",)), "2.13.0", "13.0", "13.0", "3.13", "8.0+PTX", "full", "pip:0.19.8"),
    (
        "a100-driver-535-minor",
        dict(gpus=("a100",), driver="535.104.05"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "8.0+PTX",
        "minor",
        "pip:0.19.8",
    ),
    # 535 fully supports CUDA <= 12.2: conda-forge's newest build at or below that is 2.5.1 cuda120.
    (
        "a100-driver-535-full",
        dict(gpus=("a100",), driver="535.104.05", driver_compat="full"),
        "2.5.1",
        "12.0",
        "12.0",
        "3.13",
        "8.0+PTX",
        "full",
        "conda:0.15.4",
    ),
    (
        "a100-driver-560-full",
        dict(gpus=("a100",), driver="560.35.03", driver_compat="full"),
        "2.7.1",
        "12.6",
        "12.6",
        "3.13",
        "8.0+PTX",
        "full",
        "conda:0.17.2",
    ),
    (
        "a100-driver-575-full",
        dict(gpus=("a100",), driver="575.51.03", driver_compat="full"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "8.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "a100-driver-580",
        dict(gpus=("a100",), driver="580.65.06"),
        "2.13.0",
        "13.0",
        "13.0",
        "3.13",
        "8.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    # Guide case 1: conda-forge has 2.3.1 with CUDA 12.0, and deepspeed 0.15.0 built for torch 2.3.
    (
        "a100-torch-2.3.1",
        dict(gpus=("a100",), torch="2.3.1"),
        "2.3.1",
        "12.0",
        "12.0",
        "3.12",
        "8.0+PTX",
        "full",
        "conda:0.15.0",
    ),
    # conda-forge cuda120 builds run with cuda-version >=12.0,<13; DeepSpeed accepts 12.1 vs 12.0.
    (
        "a100-torch-2.3.1-cuda-12.1",
        dict(gpus=("a100",), torch="2.3.1", cuda="12.1"),
        "2.3.1",
        "12.0",
        "12.1",
        "3.12",
        "8.0+PTX",
        "full",
        "conda:0.15.0",
    ),
    (
        "a100-torch-2.3.1-legacy",
        dict(gpus=("a100",), torch="2.3.1", source="pytorch"),
        "2.3.1",
        "12.1",
        "12.1",
        "3.12",
        "8.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "a100-torch-2.5-legacy",
        dict(gpus=("a100",), torch="2.5", source="pytorch"),
        "2.5.1",
        "12.4",
        "12.4",
        "3.12",
        "8.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "a100-torch-2.7",
        dict(gpus=("a100",), torch="2.7"),
        "2.7.1",
        "12.9",
        "12.9",
        "3.13",
        "8.0+PTX",
        "full",
        "conda:0.17.6",
    ),
    # conda-forge has no deepspeed for torch 2.13: an explicit --torch takes it from PyPI.
    (
        "a100-torch-2.13",
        dict(gpus=("a100",), torch="2.13"),
        "2.13.0",
        "13.0",
        "13.0",
        "3.13",
        "8.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "a100-torch-range",
        dict(gpus=("a100",), torch=">=2.4,<2.6"),
        "2.5.1",
        "12.6",
        "12.6",
        "3.13",
        "8.0+PTX",
        "full",
        "conda:0.16.3",
    ),
    (
        "a100-py3.9",
        dict(gpus=("a100",), python="3.9"),
        "2.7.1",
        "12.9",
        "12.9",
        "3.9",
        "8.0+PTX",
        "full",
        "conda:0.17.4",
    ),
    ("a100-py3.8", dict(gpus=("a100",), python="3.8"), "2.4.0", "12.0", "12.0", "3.8", "8.0+PTX", "full", "pip:0.19.8"),
    (
        "a100-py3.14",
        dict(gpus=("a100",), python="3.14"),
        "2.13.0",
        "13.0",
        "13.0",
        "3.14",
        "8.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "a100-no-deepspeed",
        dict(gpus=("a100",), deepspeed=False),
        "2.13.0",
        "13.0",
        "13.0",
        "3.13",
        "8.0+PTX",
        "full",
        None,
    ),
    (
        "a100-cuda-12.9",
        dict(gpus=("a100",), cuda="12.9"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "8.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "a100-cuda-12.4",
        dict(gpus=("a100",), cuda="12.4"),
        "2.5.1",
        "12.0",
        "12.4",
        "3.13",
        "8.0+PTX",
        "full",
        "conda:0.15.4",
    ),
    # conda-forge CUDA 13 builds need glibc 2.28.
    (
        "a100-glibc-2.17",
        dict(gpus=("a100",), glibc="2.17"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "8.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "a100-smi-name",
        dict(gpus=("NVIDIA A100-SXM4-80GB",), driver="550.90.07"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "8.0+PTX",
        "minor",
        "pip:0.19.8",
    ),
    # Volta: CUDA 13 builds and nvcc 13 have no sm_70; CUDA 12.9 keeps it.
    (
        "v100-driver-580",
        dict(gpus=("v100",), driver="580.65.06"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "7.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "v100-torch-2.13",
        dict(gpus=("v100",), torch="2.13"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "7.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    ("p100-default", dict(gpus=("p100",)), "2.13.0", "12.9", "12.9", "3.13", "6.0+PTX", "full", "pip:0.19.8"),
    # SASS 6.0 runs on 6.1: the GTX 1080 Ti is served by the 12.9 build's sm_60.
    ("gtx1080ti-default", dict(gpus=("gtx1080ti",)), "2.13.0", "12.9", "12.9", "3.13", "6.1+PTX", "full", "pip:0.19.8"),
    (
        "t4-driver-470-legacy",
        dict(gpus=("t4",), driver="470.82.01", source="pytorch"),
        "2.5.1",
        "11.8",
        "11.8",
        "3.12",
        "7.5+PTX",
        "minor",
        "pip:0.19.8",
    ),
    ("l4-default", dict(gpus=("l4",)), "2.13.0", "13.0", "13.0", "3.13", "8.9+PTX", "full", "pip:0.19.8"),
    (
        "l40s-driver-550",
        dict(gpus=("l40s",), driver="550.54.14"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "8.9+PTX",
        "minor",
        "pip:0.19.8",
    ),
    (
        "rtx3090-py3.10",
        dict(gpus=("rtx3090",), python="3.10"),
        "2.13.0",
        "13.0",
        "13.0",
        "3.10",
        "8.6+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "rtx4090-legacy",
        dict(gpus=("rtx4090",), source="pytorch"),
        "2.5.1",
        "12.4",
        "12.4",
        "3.12",
        "8.9+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "h100-driver-525-minor",
        dict(gpus=("h100",), driver="525.60.13"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "9.0+PTX",
        "minor",
        "pip:0.19.8",
    ),
    (
        "h100-driver-520-legacy",
        dict(gpus=("h100",), driver="520.61.05", source="pytorch"),
        "2.5.1",
        "11.8",
        "11.8",
        "3.12",
        "9.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "h200-driver-580",
        dict(gpus=("h200",), driver="580.159.04"),
        "2.13.0",
        "13.0",
        "13.0",
        "3.13",
        "9.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    # conda-forge builds no deepspeed for linux-aarch64: it comes from PyPI.
    ("gh200-default", dict(gpus=("gh200",)), "2.13.0", "13.0", "13.0", "3.13", "9.0+PTX", "full", "pip:0.19.8"),
    (
        "gh200-on-x86",
        dict(gpus=("gh200",), platform="linux-64"),
        "2.13.0",
        "13.0",
        "13.0",
        "3.13",
        "9.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "b200-driver-570-minor",
        dict(gpus=("b200",), driver="570.133.20"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "10.0+PTX",
        "minor",
        "pip:0.19.8",
    ),
    # SASS 10.0 runs on 10.3; nvcc 12.9 builds sm_103.
    ("b300-default", dict(gpus=("b300",)), "2.13.0", "13.0", "13.0", "3.13", "10.3+PTX", "full", "pip:0.19.8"),
    ("gb200-default", dict(gpus=("gb200",)), "2.13.0", "13.0", "13.0", "3.13", "10.0+PTX", "full", "pip:0.19.8"),
    (
        "rtx5090-driver-575",
        dict(gpus=("rtx5090",), driver="575.51.03"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "12.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    ("rtx-pro-6000", dict(gpus=("rtx-pro-6000",)), "2.13.0", "13.0", "13.0", "3.13", "12.0+PTX", "full", "pip:0.19.8"),
    # CUDA 13 aarch64 builds serve Jetson (tegra and sbsa are one platform from 13.0); 2.13 adds sm_87.
    ("jetson-orin", dict(gpus=("jetson-orin",)), "2.13.0", "13.0", "13.0", "3.13", "8.7+PTX", "full", "pip:0.19.8"),
    ("jetson-thor", dict(gpus=("jetson-thor",)), "2.13.0", "13.0", "13.0", "3.13", "11.0+PTX", "full", "pip:0.19.8"),
    ("gb10", dict(gpus=("gb10",)), "2.13.0", "13.0", "13.0", "3.13", "12.1+PTX", "full", "pip:0.19.8"),
    (
        "cluster-v100-a100-h100-535",
        dict(gpus=("v100", "a100", "h100"), driver="535.104.05"),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "7.0;8.0;9.0+PTX",
        "minor",
        "pip:0.19.8",
    ),
    (
        "cluster-v100-h100-b200",
        dict(gpus=("v100", "h100", "b200")),
        "2.13.0",
        "12.9",
        "12.9",
        "3.13",
        "7.0;9.0;10.0+PTX",
        "full",
        "pip:0.19.8",
    ),
    (
        "cluster-a100-l40s-h100-580",
        dict(gpus=("a100", "l40s", "h100"), driver="580.65.06"),
        "2.13.0",
        "13.0",
        "13.0",
        "3.13",
        "8.0;8.9;9.0+PTX",
        "full",
        "pip:0.19.8",
    ),
]


@pytest.mark.parametrize(
    ("options", "torch", "torch_cuda", "cuda", "python", "arch_list", "compat", "deepspeed"),
    [pytest.param(*row[1:], id=row[0]) for row in OK],
)
def test_plan(
    kb: KnowledgeBase,
    options: dict[str, object],
    torch: str,
    torch_cuda: str,
    cuda: str,
    python: str,
    arch_list: str,
    compat: str,
    deepspeed: str | None,
) -> None:
    plan = plan_for(kb, **options)
    assert plan.torch_version == torch
    assert str(plan.torch_cuda) == torch_cuda
    assert str(plan.cuda_version) == cuda
    assert str(plan.python_version) == python
    assert plan.torch_cuda_arch_list == arch_list
    assert plan.compatibility == compat
    if deepspeed is None:
        assert plan.deepspeed is None and not plan.pip
        assert not any(s.name == "deepspeed" for s in plan.specs)
    else:
        where, version = deepspeed.split(":")
        assert plan.deepspeed == version
        if where == "conda":
            assert any(s.name == "deepspeed" and s.version == f"=={version}" for s in plan.specs)
            assert not plan.pip
        else:
            assert plan.pip == (f"deepspeed=={version}",)


# (id, options, exit code, phrases the message must contain)
CONFLICTS = [
    (
        "rtx5090-driver-550",
        dict(gpus=("rtx5090",), driver="550.54.14"),
        1,
        [
            "sm_120",
            "needs CUDA >= 12.8",
            "driver >= 570.26",
            "driver 550.54.14 supports CUDA <= 12.4",
            "upgrade the driver",
        ],
    ),
    (
        "b200-driver-560",
        dict(gpus=("b200",), driver="560.35.03"),
        1,
        ["sm_100", "R570", "upgrade the driver to 570.26"],
    ),
    (
        "b200-driver-570-full",
        dict(gpus=("b200",), driver="570.133.20", driver_compat="full"),
        1,
        ["only through minor-version compatibility", "upgrade the driver to 575.51.03"],
    ),
    (
        "t4-driver-470",
        dict(gpus=("t4",), driver="470.82.01"),
        1,
        ["driver 470.82.01 supports CUDA <= 11.4", "upgrade the driver to 525.60.13", "`--source pytorch` gives"],
    ),
    # A branch older than every driver the KB records (450.51.05, CUDA 11.0's minimum) is refused as input.
    ("t4-driver-418", dict(gpus=("t4",), driver="418.67"), 2, ["older than every driver", "450.51.05"]),
    (
        "h100-driver-520",
        dict(gpus=("h100",), driver="520.61.05"),
        1,
        ["CUDA <= 11.8", "upgrade the driver to 525.60.13", "torch 2.5.1 cu118 (pytorch channel)"],
    ),
    ("v100-cuda-13", dict(gpus=("v100",), cuda="13.0"), 1, ["no sm_70", "CUDA 13.0 is outside", "`--cuda 12.9`"]),
    ("b200-legacy", dict(gpus=("b200",), source="pytorch"), 1, ["no sm_100", "`--source conda-forge` gives"]),
    ("b200-torch-2.6", dict(gpus=("b200",), torch="2.6"), 1, ["no sm_100", "arch list is"]),
    ("gh200-legacy", dict(gpus=("gh200",), source="pytorch"), 1, ["no linux-aarch64 CUDA builds"]),
    ("gh200-plus-h100", dict(gpus=("gh200", "h100")), 1, ["different platforms", "`--gpu h100` (", "`--gpu gh200` ("]),
    ("legacy-torch-2.6", dict(gpus=("a100",), torch="2.6", source="pytorch"), 1, ["stopped at 2.5.1"]),
    ("torch-2.2-conda-forge", dict(gpus=("a100",), torch="2.2"), 1, ["no conda-forge torch 2.2"]),
    ("python-3.7", dict(gpus=("a100",), python="3.7"), 1, ["no Python 3.7 build", "--python"]),
    ("unknown-gpu", dict(gpus=("a1000",)), 2, ["unknown GPU 'a1000'", "'a100'", "envsolver gpus"]),
    ("bad-driver", dict(gpus=("a100",), driver="abc"), 2, ["malformed driver version 'abc'", "--driver"]),
    ("bad-python", dict(gpus=("a100",), python="three"), 2, ["malformed Python version", "--python 3.11"]),
    ("bad-torch", dict(gpus=("a100",), torch="2.x"), 2, ["malformed torch version", "Pass --torch 2 (any 2.x"]),
    ("bad-cuda", dict(gpus=("a100",), cuda="12.x"), 2, ["malformed CUDA version '12.x'", "--cuda 12.4"]),
    ("no-gpu", dict(), 2, ["no target GPU", "--gpu"]),
]


@pytest.mark.parametrize(("options", "code", "phrases"), [pytest.param(*row[1:], id=row[0]) for row in CONFLICTS])
def test_conflict(kb: KnowledgeBase, options: dict[str, object], code: int, phrases: list[str]) -> None:
    error = error_for(kb, **options)
    assert error.exit_code == code
    for phrase in phrases:
        assert phrase in str(error)


def test_rtx5090_message_pinned(kb: KnowledgeBase) -> None:
    """The issue's example conflict, word for word."""
    error = error_for(kb, gpus=("rtx5090",), driver="550.54.14")
    assert str(error) == (
        "GeForce RTX 5090 (sm_120) needs CUDA >= 12.8, which needs driver >= 570.26 (Blackwell GPUs need driver "
        "branch R570 or newer); driver 550.54.14 supports CUDA <= 12.4. Fix: upgrade the driver to 570.26 or newer "
        "(`--driver 570.26` gives torch 2.13.0 cu129 with CUDA 12.9)."
    )


def test_rejected_candidates_say_why(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("a100",), driver="580.65.06", deepspeed_from="conda-forge")
    why = {r.candidate: r.because for r in plan.rejected}
    assert "no deepspeed build for torch 2.13" in why["torch 2.13.0 cu130"]
    assert "needs cuda-version >= 13.2" in why["torch 2.10.0 cu130"]
    assert next(iter(why)) == "torch 2.13.0 cu130"  # newest first


def test_driver_absent_warns_with_the_driver_the_plan_needs(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("a100",))
    assert any("the plan assumes a driver that runs CUDA 13.0" in w and "580.65.06" in w for w in plan.warnings), (
        plan.warnings
    )
    older = plan_for(kb, gpus=("a100",), deepspeed_from="conda-forge")
    assert any("the plan assumes a driver that runs CUDA 12.9" in w and "575.51.03" in w for w in older.warnings), (
        older.warnings
    )


def test_minor_compatibility_warns_about_ptx_jit(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("h100",), driver="535.104.05")
    assert plan.compatibility == "minor"
    assert any("PTX JIT" in w and "575.51.03" in w for w in plan.warnings)


def test_cuda12_plans_keep_cudnn_below_9_11(kb: KnowledgeBase) -> None:
    """conda-forge keeps CUDA 12 at cuDNN 9.10; CUDA 13 plans take any cuDNN."""
    assert next(s for s in plan_for(kb, gpus=("v100",)).specs if s.name == "cudnn").version == "<9.11"
    assert next(s for s in plan_for(kb, gpus=("a100",), torch="2.13").specs if s.name == "cudnn").version is None


def test_legacy_channels_are_the_seeds_recipe(kb: KnowledgeBase) -> None:
    """pytorch, then nvidia (where every real record of the legacy CUDA stack comes from), then conda-forge;
    the CUDA minor is chosen by pytorch-cuda, nvcc is pinned, and the build glob is one rattler accepts."""
    plan = plan_for(kb, gpus=("a100",), torch="2.3.1", source="pytorch")
    assert plan.channels == ("pytorch", "nvidia", "conda-forge")
    specs = [str(s) for s in plan.specs]
    assert {"pytorch ==2.3.1 *cuda12*", "pytorch-cuda 12.1.*", "cuda-nvcc 12.1.*"} <= set(specs)
    assert plan.torch_build == "*cuda12.1*"  # the KB glob, which lockcheck matches the solved build against


@pytest.mark.parametrize(
    ("glob", "spec"),
    [("*cuda12.1*", "*cuda12*"), ("*cuda11.8*", "*cuda11*"), ("cuda129*", "cuda129*"), ("cuda130_*", "cuda130_*")],
)
def test_spec_glob_is_strict_and_wider(glob: str, spec: str) -> None:
    from fnmatch import fnmatchcase

    from envsolver.resolve.specs import spec_glob

    assert spec_glob(glob) == spec
    for build in ("py3.10_cuda12.1_cudnn8.9.2_0", "py3.10_cuda11.8_cudnn8.7.0_0", "cuda129_mkl_py313_h1_0"):
        assert not fnmatchcase(build, glob) or fnmatchcase(build, spec)


def test_legacy_nvcc_may_be_a_newer_minor_of_the_same_major(kb: KnowledgeBase) -> None:
    """pytorch-cuda fixes the runtime; nvcc is its own package, and torch and DeepSpeed accept 12.6 for 12.1."""
    plan = plan_for(kb, gpus=("a100",), torch="2.3.0", source="pytorch", cuda="12.6")
    assert str(plan.cuda_version) == "12.6" and str(plan.torch_cuda) == "12.1"
    assert "cuda-nvcc 12.6.*" in [str(s) for s in plan.specs]
    error = error_for(kb, gpus=("a100",), torch="2.3.0", source="pytorch", cuda="13.0")
    assert "takes an nvcc of CUDA 12.1 to 12.x" in str(error)


def test_gxx_is_capped_by_nvcc(kb: KnowledgeBase) -> None:
    assert "gxx <15" in [str(s) for s in plan_for(kb, gpus=("a100",), cuda="12.9").specs]  # nvcc 12.9: GCC <= 14
    assert "gxx <16" in [str(s) for s in plan_for(kb, gpus=("a100",)).specs]  # nvcc 13.0 accepts GCC <= 15
    legacy = [str(s) for s in plan_for(kb, gpus=("a100",), torch="2.3.1", source="pytorch").specs]
    assert "gxx_linux-64 <13" in legacy  # nvcc 12.1 accepts GCC <= 12
    assert not any(s.startswith("gxx ") for s in legacy)  # nvidia's nvcc depends on gxx_linux-64 only


def test_env_for_the_hook(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("gh200",))
    assert plan.env == {
        "CUDA_HOME": "${CONDA_PREFIX}",
        "CPATH": "${CONDA_PREFIX}/targets/sbsa-linux/include",
        "TORCH_CUDA_ARCH_LIST": "9.0+PTX",
        "DS_ACCELERATOR": "cuda",
    }


def _specs(plan: object) -> list[str]:
    return [str(s) for s in plan.specs]  # type: ignore[attr-defined]


def test_jetson_orin_gets_the_tegra_build_with_its_variant_and_headers(kb: KnowledgeBase) -> None:
    """With CUDA 12.9, conda-forge's tegra build (8.7+PTX, glibc 2.34) serves Orin, selected with
    `arm-variant * tegra`, its headers under targets/aarch64-linux (sbsa's are under targets/sbsa-linux)."""
    plan = plan_for(kb, gpus=("jetson-orin",), torch="2.12", cuda="12.9", glibc="2.35")
    assert (plan.torch_version, str(plan.torch_cuda), plan.platform) == ("2.12.1", "12.9", "linux-aarch64")
    assert "arm-variant * tegra" in _specs(plan)
    assert plan.env["CPATH"] == "${CONDA_PREFIX}/targets/aarch64-linux/include"
    assert plan.torch_cuda_arch_list == "8.7+PTX"


def test_tegra_builds_need_glibc_2_34(kb: KnowledgeBase) -> None:
    error = error_for(kb, gpus=("jetson-orin",), torch="2.12", cuda="12.9")
    assert "`--glibc 2.34` gives torch 2.12.1 cu129 with CUDA 12.9" in str(error)
    assert any("needs glibc >= 2.34" in because for _, because in error.rejected)  # type: ignore[attr-defined]


def test_tegra_builds_never_serve_arm_servers(kb: KnowledgeBase) -> None:
    """A tegra build carries SASS for 8.7, which the CC rule would let an 8.9 GPU use: the variant decides."""
    sbsa_less = replace(kb, torch_builds=tuple(b for b in kb.torch_builds if b.arm_variant != "sbsa"))
    error = error_for(sbsa_less, gpus=("l4",), platform="linux-aarch64", torch="2.12", cuda="12.9", glibc="2.35")
    assert "tegra" in str(error) and "Jetson" in str(error)
    plan = plan_for(kb, gpus=("l4",), platform="linux-aarch64", torch="2.12", cuda="12.9", glibc="2.35")
    assert "arm-variant * tegra" not in _specs(plan)
    assert plan.env["CPATH"].endswith("/targets/sbsa-linux/include")


def test_cuda_13_4_plans_though_its_full_support_driver_is_unknown(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("h100",), cuda="13.4", deepspeed=False)
    assert str(plan.cuda_version) == "13.4" and plan.virtual_packages["__cuda"] == "13.4"
    text = " ".join([*plan.warnings, *(r.because for r in plan.reasons)])
    assert "None" not in text
    assert any("does not know the driver that fully supports CUDA 13.4" in w for w in plan.warnings)
    minor = plan_for(kb, gpus=("h100",), cuda="13.4", deepspeed=False, driver="615.71.09")
    assert minor.compatibility == "minor"
    error = error_for(kb, gpus=("h100",), cuda="13.4", deepspeed=False, driver="615.71.09", driver_compat="full")
    assert "only through minor-version compatibility" in str(error) and "None" not in str(error)


def test_every_plan_holds_the_libraries_cpu_adam_links(kb: KnowledgeBase) -> None:
    names = {s.name for s in plan_for(kb, gpus=("a100",)).specs}
    assert {"libcurand-dev", "libcublas-dev", "cuda-cudart-dev"} <= names


# --- rules no test decided before (issue 14's mutation run) ----------------------------------------------------


def test_full_support_ranks_before_minor_compatibility_within_a_torch_version(kb: KnowledgeBase) -> None:
    """torch 2.7.1 has a cu126 build, which driver 560.35.03 fully supports, and newer CUDA builds that it runs
    only through minor-version compatibility: the fully supported build is chosen, nothing is rejected."""
    plan = plan_for(kb, gpus=("a100",), driver="560.35.03", torch="2.7")
    assert (plan.torch_version, str(plan.torch_cuda), plan.compatibility) == ("2.7.1", "12.6", "full")
    assert plan.rejected == ()
    assert not any(w.startswith("compatibility: minor") for w in plan.warnings)


def test_a_minor_compatibility_plan_names_the_driver_that_fully_supports_it(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("a100",), driver="560.35.03")
    assert plan.warnings == (
        "compatibility: minor. Driver 560.35.03 runs CUDA 12.9 only through minor-version compatibility: every "
        "target GPU has SASS in this torch build, but PTX JIT of code built with a newer toolkit fails. Upgrade the "
        "driver to 575.51.03 for full support; where the driver cannot change (a cluster's nodes), "
        "`--driver-compat full` gives torch 2.7.1 cu126 with CUDA 12.6, which driver 560.35.03 fully supports.",
    ), plan.warnings
    unknown = plan_for(kb, gpus=("h100",), cuda="13.4", deepspeed=False, driver="615.71.09")
    assert (
        "PTX JIT of code built with a newer toolkit fails. Use a driver that fully supports CUDA 13.4 for full "
        in (unknown.warnings[-1])
    ), unknown.warnings


# Issue 22: cluster users cannot upgrade the driver; the warning names what `--driver-compat full` plans
# (planned before it is named), or says plainly that no plan has full support.
@pytest.mark.parametrize(
    ("options", "named", "gives"),
    [
        (dict(gpus=("l40s",), driver="535.104.05"), "`--driver-compat full`", "torch 2.5.1 cu120 with CUDA 12.0"),
        (dict(gpus=("a100",), driver="550.54.14"), "`--driver-compat full`", "torch 2.5.1 cu120 with CUDA 12.0"),
        (dict(gpus=("l40s",), driver="550.54.14"), "`--driver-compat full`", "torch 2.5.1 cu120 with CUDA 12.0"),
        # the pinned torch has no fully supported build: the way out frees it and names the torch it gives
        (
            dict(gpus=("a100",), driver="535.104.05", torch="2.10"),
            "`--driver-compat full --torch 2.5.1`",
            "torch 2.5.1 cu120 with CUDA 12.0",
        ),
        (
            dict(gpus=("h100",), driver="615.71.09", cuda="13.4", deepspeed=False),
            "`--driver-compat full --cuda 13.0`",
            "with CUDA 13.0",
        ),
    ],
    ids=["l40s-535", "a100-550", "l40s-550", "a100-535-torch-2.10", "h100-615-cuda-13.4"],
)
def test_a_minor_compatibility_warning_names_what_driver_compat_full_gives(
    kb: KnowledgeBase, options: dict[str, object], named: str, gives: str
) -> None:
    plan = plan_for(kb, **options)
    warning = next(w for w in plan.warnings if w.startswith("compatibility: minor"))
    assert f"{named} gives " in warning and gives in warning, warning
    full = plan_for(kb, **{**options, **_options_of(named)})
    assert full.compatibility == "full" and gives in ways_out.describe(full), (warning, ways_out.describe(full))


def _options_of(named: str) -> dict[str, object]:
    words = named.strip("`").split()
    return {
        flag.removeprefix("--").replace("-", "_"): value for flag, value in zip(words[::2], words[1::2], strict=True)
    }


def test_a_minor_compatibility_warning_says_when_no_plan_has_full_support(kb: KnowledgeBase) -> None:
    """Driver 470 fully supports CUDA <= 11.4: the pytorch channel's P100 builds need 11.8 (minor), and conda-forge
    has no nvcc before 12.0, so no change of torch, CUDA or Python gives full support."""
    plan = plan_for(kb, gpus=("p100",), driver="470.82.01", source="pytorch")
    warning = next(w for w in plan.warnings if w.startswith("compatibility: minor"))
    assert "`" not in warning, warning
    assert warning.endswith(
        "Upgrade the driver to 520.61.05 for full support: no plan within the knowledge base has full support on "
        "driver 470.82.01, even with torch, CUDA and Python left to the planner."
    ), warning
    error = error_for(kb, gpus=("p100",), driver="470.82.01", source="pytorch", driver_compat="full")
    assert "minor-version compatibility" in str(error), str(error)


def _cc(text: str) -> versions.MajorMinor:
    return versions.cc(text)


@pytest.mark.parametrize(
    ("cc", "cuda", "name"),
    [
        ("11.0", "12.9", "10.1"),  # Jetson Thor before CUDA 13.0 ...
        ("11.0", "13.0", "11.0"),  # ... and from it
        ("11.0", "13.1", "11.0"),
        ("10.1", "13.0", "11.0"),
        ("10.1", "12.8", "10.1"),
        ("9.0", "13.0", "9.0"),
        ("10.0", "12.9", "10.0"),
    ],
)
def test_jetson_thor_is_cc_10_1_before_cuda_13_and_11_0_from_it(
    kb: KnowledgeBase, cc: str, cuda: str, name: str
) -> None:
    assert archs.cc_for_toolkit(kb, _cc(cc), versions.cuda(cuda)) == _cc(name)


def test_arch_lists_and_buildability_take_each_toolkits_name_for_thor(kb: KnowledgeBase) -> None:
    def toolkit(cuda: str) -> Toolkit:
        found = kb.toolkit(versions.cuda(cuda))
        assert found is not None
        return found

    thor = (_cc("11.0"),)
    assert archs.arch_list(kb, thor, toolkit("12.9")) == "10.1+PTX"
    assert archs.arch_list(kb, thor, toolkit("13.0")) == "11.0+PTX"
    assert archs.unbuildable(kb, toolkit("12.6"), thor) == [_cc("11.0")]  # sm_101 arrived with 12.8
    assert archs.unbuildable(kb, toolkit("12.8"), (_cc("8.0"), *thor)) == []
    assert archs.unbuildable(kb, toolkit("13.0"), (_cc("7.0"), _cc("8.0"))) == [_cc("7.0")]
    assert archs.first_toolkit_for(kb, _cc("11.0")) == toolkit("12.8")
    assert archs.first_toolkit_for(kb, _cc("8.9")) == toolkit("11.8")
    assert archs.first_toolkit_for(kb, _cc("3.0")) is None
    # ascending, +PTX on the highest only, CCs the toolkit cannot build dropped, empty when none is left
    assert archs.arch_list(kb, (_cc("9.0"), _cc("7.0"), _cc("8.7"), _cc("9.0")), toolkit("13.0")) == "8.7;9.0+PTX"
    assert archs.arch_list(kb, (_cc("7.0"),), toolkit("13.0")) == ""


def _release(kb: KnowledgeBase, since: str) -> DeepSpeedRelease:
    return next(r for r in kb.deepspeed_releases if str(r.since) == since)


@pytest.mark.parametrize(
    ("since", "torch", "ccs", "nvcc", "torch_cuda", "why"),
    [
        ("0.19.1", "1.13.1", ("8.0",), "12.9", "12.9", "needs torch >= 2.0"),
        ("0.19.1", "2.0.0", ("8.0",), "12.9", "12.9", None),  # its min_torch itself fits
        ("0.15.3", "2.5.1", ("10.0",), "12.6", "12.6", "builds only compute capability < 10.0"),
        ("0.15.3", "2.5.1", ("9.0", "10.0"), "12.6", "12.6", "builds only compute capability < 10.0"),
        ("0.15.3", "2.5.1", ("9.0",), "12.6", "12.6", None),
        ("0.19.1", "2.9.1", ("12.0",), "12.9", "12.9", None),  # no cc_below: any CC
        (
            "0.19.1",
            "2.10.0",
            ("9.0",),
            "13.1",
            "13.0",
            "its op builder rejects nvcc 13.1 with torch built for CUDA 13.0",
        ),
    ],
)
def test_a_deepspeed_release_fits_by_torch_then_cc_then_nvcc(
    kb: KnowledgeBase, since: str, torch: str, ccs: tuple[str, ...], nvcc: str, torch_cuda: str, why: str | None
) -> None:
    found = deepspeed._fits(
        _release(kb, since), Version(torch), tuple(map(_cc, ccs)), versions.cuda(nvcc), versions.cuda(torch_cuda)
    )
    assert found == why


@pytest.mark.parametrize(
    ("version", "since"),
    [
        ("0.14.0", "0.14.0"),
        ("0.15.2", "0.14.3"),
        ("0.15.3", "0.15.3"),
        ("0.19.8", "0.19.1"),
        ("0.19.9", None),
        ("0.13.1", None),
    ],
)
def test_release_of_finds_the_row_whose_range_holds_the_version(
    kb: KnowledgeBase, version: str, since: str | None
) -> None:
    row = deepspeed.release_of(kb, Version(version))
    assert (str(row.since) if row else None) == since


def test_when_no_deepspeed_release_fits_the_newest_releases_reason_is_named(kb: KnowledgeBase) -> None:
    """RTX 5090 with nvcc 13.1 against torch built with CUDA 13.0: DeepSpeed 0.19.x, the release pip would
    install, rejects that nvcc; its older releases' other reasons (no CC >= 10.0) are not the ones to fix."""
    error = error_for(kb, gpus=("rtx5090",), cuda="13.1")
    rejected = dict(error.rejected)  # type: ignore[attr-defined]
    assert rejected["torch 2.13.0 cu130"] == (
        "DeepSpeed 0.19.1-0.19.8: its op builder rejects nvcc 13.1 with torch built for CUDA 13.0"
    )
    assert str(error).endswith(
        "Ways out: `--cuda 13.0` gives torch 2.13.0 cu130 with CUDA 13.0; `--no-deepspeed` gives torch 2.13.0 cu130 "
        "with CUDA 13.1."
    )
    empty = replace(kb, deepspeed_releases=())
    assert "no DeepSpeed release in the knowledge base" in str(error_for(empty, gpus=("a100",)))


def _ds_reason(plan: Plan) -> str:
    return next(f"{r.decision}: {r.because}" for r in plan.reasons if r.decision.startswith("deepspeed"))


def test_pypi_deepspeed_beside_conda_forge_torch_is_a_reason_naming_the_conda_forge_alternative(
    kb: KnowledgeBase,
) -> None:
    """DeepSpeed from PyPI is locked by its sha256 like any package, so it is no warning: the reason says why
    conda-forge's build was not taken and what `--deepspeed-from conda-forge` plans instead (planned)."""
    plan = plan_for(kb, gpus=("jetson-thor",))
    assert len(plan.warnings) == 1, plan.warnings  # only the missing --driver
    assert _ds_reason(plan).startswith(
        "deepspeed 0.19.8 from PyPI, locked by its sha256; its Python dependencies from conda: conda-forge has no "
        "deepspeed build for torch 2.13 with CUDA 13.0 (conda-forge has no deepspeed CUDA builds for linux-aarch64)."
    )
    a100 = plan_for(kb, gpus=("a100",), driver="580.65.06")
    assert (a100.torch_version, a100.pip) == ("2.13.0", ("deepspeed==0.19.8",))
    assert (
        "; `--deepspeed-from conda-forge` plans torch 2.10.0 cu129 with conda-forge's deepspeed 0.18.8 instead. "
        in _ds_reason(a100)
    )
    older = plan_for(kb, gpus=("a100",), driver="580.65.06", deepspeed_from="conda-forge")
    assert (older.torch_version, older.deepspeed, older.pip) == ("2.10.0", "0.18.8", ())
    forced = plan_for(kb, gpus=("a100",), driver="580.65.06", torch="2.10", deepspeed_from="pypi")
    assert (forced.torch_version, forced.pip) == ("2.10.0", ("deepspeed==0.19.8",))
    assert "from PyPI, locked by its sha256; its Python dependencies from conda: --deepspeed-from pypi." in (
        _ds_reason(forced)
    )
    legacy = plan_for(kb, gpus=("a100",), torch="2.3.1", source="pytorch", python="3.11")
    assert legacy.pip == ("deepspeed==0.19.8",) and len(legacy.warnings) == 1  # the pytorch channel: no warning
    rejected = dict(
        (r.candidate, r.because)
        for r in plan_for(kb, gpus=("a100",), driver="580.65.06", deepspeed_from="conda-forge").rejected
    )
    assert rejected["torch 2.13.0 cu129"] == (
        "conda-forge has no deepspeed build for torch 2.13 with CUDA 12.9 (the newest is deepspeed 0.18.8, built for "
        "torch 2.10)"
    )


def test_only_newer_candidates_than_the_chosen_one_are_listed_as_rejected(kb: KnowledgeBase) -> None:
    assert plan_for(kb, gpus=("a100",), driver="580.65.06").rejected == ()
    plan = plan_for(kb, gpus=("a100",), driver="580.65.06", deepspeed_from="conda-forge")
    assert [r.candidate for r in plan.rejected] == [
        "torch 2.13.0 cu130",
        "torch 2.13.0 cu129",
        "torch 2.12.1 cu130",
        "torch 2.12.1 cu129",
        "torch 2.12.0 cu130",
        "torch 2.12.0 cu129",
        "torch 2.11.0 cu130",
        "torch 2.11.0 cu129",
        "torch 2.10.0 cu130",
    ]
    assert (plan.torch_version, str(plan.torch_cuda)) == ("2.10.0", "12.9")


def test_the_chosen_candidate_is_labelled_as_resolve_names_it(kb: KnowledgeBase) -> None:
    target = build_target(Options(gpus=("a100",)), kb).target
    chosen, _, _ = candidates.pick(kb, target, "linux-64")
    assert chosen is not None and chosen.label == "torch 2.13.0 cu130"
    legacy = build_target(Options(gpus=("a100",), source="pytorch"), kb).target
    chosen, _, _ = candidates.pick(kb, legacy, "linux-64")
    assert chosen is not None and chosen.label == "torch 2.5.1 cu124 (pytorch channel)"


@pytest.mark.parametrize(
    ("options", "candidate", "because"),
    [
        (dict(gpus=("a100",), cuda="12.7"), "torch 2.7.1 cu126", "CUDA 12.7 is not in the knowledge base"),
        (
            dict(gpus=("rtx5090",), cuda="13.1"),
            "torch 2.5.1 cu118",
            "built for CUDA 11.8, needs CUDA 11.8; the requested CUDA 13.1 is outside",
        ),
        (
            dict(gpus=("rtx5090",), cuda="13.1"),
            "torch 2.5.1 cu120",
            "built for CUDA 12.0, runs with cuda-version >=12.0,<13; the requested CUDA 13.1 is outside",
        ),
        (
            dict(gpus=("v100", "h100"), cuda="13.0"),
            "torch 2.13.0 cu130",
            "no sm_70, needed by NVIDIA V100 (its arch list is 7.5;8.0;8.6;9.0;10.0;11.0;12.0+PTX)",
        ),
    ],
)
def test_a_rejected_candidate_says_why_word_for_word(
    kb: KnowledgeBase, options: dict[str, object], candidate: str, because: str
) -> None:
    assert dict(error_for(kb, **options).rejected)[candidate] == because  # type: ignore[attr-defined]


def test_a_toolkit_whose_sm_list_is_unknown_is_not_used(kb: KnowledgeBase) -> None:
    unknown = replace(kb, toolkits=tuple(replace(t, sm=None) if str(t.version) == "12.9" else t for t in kb.toolkits))
    plan = plan_for(unknown, gpus=("v100",))  # CUDA 13 has no sm_70: every build V100 can use needs nvcc 12.x
    rejected = dict((r.candidate, r.because) for r in plan.rejected)
    assert rejected["torch 2.13.0 cu129"] == "the SM targets of nvcc 12.9 are not confirmed in the knowledge base"


def test_the_conflict_names_the_channel_and_each_rejected_build_once_under_its_reason(kb: KnowledgeBase) -> None:
    """Three arch lists, one reason: the reason is said once, each build's arch list beside it (it used to show
    the first two builds' texts, the same reason twice, and no build)."""
    error = error_for(kb, gpus=("b200",), source="pytorch")
    assert len({because for _, because in error.rejected}) == 3  # type: ignore[attr-defined]
    assert str(error).split("\nWays out")[0] == (
        "no pytorch-channel torch build fits NVIDIA B200 on linux-64:\n"
        "  - torch 2.5.1, 2.5.0, 2.4.1, 2.4.0 cu124 (pytorch channel) (its arch list is "
        "5.0;6.0;6.1;7.0;7.5;8.0;8.6;9.0), torch 2.5.1, 2.5.0, 2.4.1, 2.4.0, 2.3.1, 2.3.0, 2.2.2, 2.2.1, 2.2.0, "
        "2.1.2, 2.1.1, 2.1.0 cu121 (pytorch channel) (its arch list is 5.0;6.0;6.1;7.0;7.5;8.0;8.6;9.0), torch "
        "2.5.1, 2.5.0, 2.4.1, 2.4.0, 2.3.1, 2.3.0, "
        "2.2.2, 2.2.1, 2.2.0, 2.1.2, 2.1.1, 2.1.0, 2.0.1, 2.0.0 cu118 (pytorch channel) (its arch list is "
        "3.7+PTX;5.0;6.0;6.1;7.0;7.5;8.0;8.6;9.0), torch 2.0.1, 2.0.0 cu117 (pytorch channel) (its arch list is "
        "3.7+PTX;5.0;6.0;6.1;7.0;7.5;8.0;8.6): no sm_100, needed by NVIDIA B200."
    )


def test_platforms_a_gpu_does_not_run_on(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("l4",), platform="linux-aarch64", torch="2.12", cuda="12.9", glibc="2.35")
    assert plan.warnings[0] == "--platform linux-aarch64: NVIDIA L4 usually run(s) on another platform (linux-64)."
    assert not any(w.startswith("--platform") for w in plan_for(kb, gpus=("gh200",), platform="linux-aarch64").warnings)
    assert str(error_for(kb, gpus=("gh200", "h100"))) == (
        "the target GPUs need different platforms (NVIDIA H100 on linux-64; NVIDIA GH200 Grace Hopper Superchip (GPU) "
        "on linux-aarch64); one conda environment serves one platform. Fix: make one environment for each platform, "
        "`--gpu h100` (torch 2.13.0 cu130 with CUDA 13.0 on linux-64) and `--gpu gh200` (torch 2.13.0 cu130 with "
        "CUDA 13.0 on linux-aarch64)."
    )
    assert str(error_for(kb, gpus=("l4",), platform="linux-aarch64", source="pytorch")) == (
        "the pytorch channel has no linux-aarch64 CUDA builds. Ways out: `--source conda-forge` gives torch 2.13.0 "
        "cu130 with CUDA 13.0; `--platform linux-64` gives torch 2.5.1 cu124 (pytorch channel) with CUDA 12.4."
    )


def test_the_driver_reason_and_the_virtual_packages_follow_the_given_driver(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("v100", "a100"), driver="535.104.05")
    driver_reason = next(r for r in plan.reasons if r.decision.startswith("driver"))
    assert (driver_reason.decision, driver_reason.because, driver_reason.source) == (
        "driver 535.104.05",
        "supports CUDA <= 12.2 fully",
        ("NV-RN-132",),
    )
    assert plan.virtual_packages == {"__cuda": "12.2", "__glibc": "2.28", "__cuda_arch": "7.0"}
    assert not any(r.decision.startswith("driver") for r in plan_for(kb, gpus=("a100",)).reasons)


def _because(plan: object, start: str) -> str:
    return next(r.because for r in plan.reasons if r.decision.startswith(start))  # type: ignore[attr-defined]


def test_the_torch_reason_says_where_the_python_comes_from(kb: KnowledgeBase) -> None:
    assert "Python 3.11 (given with --python) allow" in _because(plan_for(kb, gpus=("a100",), python="3.11"), "pytorch")
    assert "Python 3.13 (the newest this build offers, at most 3.13) allow" in _because(
        plan_for(kb, gpus=("a100",)), "pytorch"
    )


@pytest.mark.parametrize(
    ("options", "decision", "because", "extra_source"),
    [
        (
            dict(gpus=("a100",), deepspeed_from="conda-forge"),
            "CUDA 12.9 (nvcc, runtime and headers)",
            "nvcc 12.9 is the same major.minor as torch.version.cuda, which torch's and DeepSpeed's extension checks "
            "accept.",
            False,
        ),
        (
            dict(gpus=("a100",), cuda="12.6", torch="2.5"),
            "CUDA 12.6 (nvcc, runtime and headers)",
            "nvcc 12.6 is within the build's range (>=12.0,<13) and accepted by DeepSpeed's op builder for torch "
            "built with 12.0.",
            False,
        ),
        (
            dict(gpus=("h100",), cuda="13.4", deepspeed=False),
            "CUDA 13.4 (nvcc, runtime and headers)",
            "nvcc 13.4 is within the build's range (>=13.0,<14) for torch built with 13.0.",
            False,
        ),
        (
            dict(gpus=("a100",), torch="2.3.0", source="pytorch", cuda="12.6"),
            "CUDA 12.6 (nvcc and headers; the runtime is pytorch-cuda's 12.1)",
            "nvcc 12.6 is a package of its own beside pytorch-cuda=12.1, which keeps the 12.1 runtime; torch's "
            "extension builder accepts an nvcc of the same major as torch.version.cuda, and DeepSpeed's op builder "
            "has both in its allow-list.",
            True,
        ),
        (
            dict(gpus=("a100",), torch="2.3.0", source="pytorch", cuda="12.6", deepspeed=False),
            "CUDA 12.6 (nvcc and headers; the runtime is pytorch-cuda's 12.1)",
            "nvcc 12.6 is a package of its own beside pytorch-cuda=12.1, which keeps the 12.1 runtime; torch's "
            "extension builder accepts an nvcc of the same major as torch.version.cuda.",
            True,
        ),
    ],
)
def test_the_cuda_reason_says_why_this_nvcc_serves_this_torch(
    kb: KnowledgeBase, options: dict[str, object], decision: str, because: str, extra_source: bool
) -> None:
    plan = plan_for(kb, **options)
    reasons = {r.decision: r for r in plan.reasons}
    toolkit = kb.toolkit(plan.cuda_version)
    assert toolkit is not None
    assert reasons[decision].because == because
    arch = reasons[f"TORCH_CUDA_ARCH_LIST={plan.torch_cuda_arch_list}"]
    assert arch.because == (
        f"the target GPUs' compute capabilities that nvcc {plan.cuda_version} and this torch build both support, "
        "+PTX on the highest"
    )
    assert arch.source == toolkit.source
    ds_source = tuple(r for r in reasons[decision].source if r.startswith("DS-"))
    if extra_source:
        assert reasons[decision].source[: len(toolkit.source) + 1] == (*toolkit.source, "PT-CUDA-CHECK")
        assert bool(ds_source) == (plan.deepspeed is not None)
    else:
        assert reasons[decision].source == toolkit.source


def test_the_environment_reason_names_what_the_hook_sets(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("gh200",))
    env = next(r for r in plan.reasons if r.decision.startswith("environment"))
    assert (
        env.decision
        == "environment set by the post-install hook: CUDA_HOME, CPATH, TORCH_CUDA_ARCH_LIST, DS_ACCELERATOR"
    )
    assert env.source[:4] == ("PT-CPPEXT", "PT-144690", "DS-BUILDER-NVCC", "DS-5553")


def test_a_fix_that_needs_the_newest_driver_floor_is_found(kb: KnowledgeBase) -> None:
    """Bisection over the driver floors above 580.65.06 down to the one that plans: here the newest, 610.43.02."""
    error = error_for(kb, gpus=("h100",), cuda="13.3", driver="580.65.06", driver_compat="full", deepspeed=False)
    assert str(error).split(".\n", 1)[1] == (
        "Fix: upgrade the driver to 610.43.02 or newer (`--driver 610.43.02` gives torch 2.13.0 cu130 with CUDA "
        "13.3); or `--driver-compat minor` gives torch 2.13.0 cu130 with CUDA 13.3; or `--cuda 13.0` gives torch "
        "2.13.0 cu130 with CUDA 13.0."
    )


def test_ways_out_of_two_and_three_options_are_named_nearest_first(kb: KnowledgeBase) -> None:
    error = error_for(kb, gpus=("jetson-orin",), torch="2.12", cuda="12.9", driver="540.4.0", driver_compat="full")
    assert str(error).split("Ways out: ", 1)[1] == (
        "`--driver 580.65.06 --cuda 13.0` gives torch 2.12.1 cu130 with CUDA 13.0; `--glibc 2.34 --driver 575.51.03` "
        "gives torch 2.12.1 cu129 with CUDA 12.9; `--driver-compat minor --glibc 2.34` gives torch 2.12.1 cu129 with "
        "CUDA 12.9."
    )


def test_bisection_names_the_oldest_driver_floor_that_plans(kb: KnowledgeBase) -> None:
    """Nine floors lie above 550.54.14; CUDA 13.0 with full support needs the sixth, 580.65.06 (580 itself is
    only CUDA 13's minor-version-compatibility floor)."""
    error = error_for(kb, gpus=("h100",), cuda="13.0", driver="550.54.14", driver_compat="full", deepspeed=False)
    assert str(error).split(".\nFix: ", 1)[1] == (
        "upgrade the driver to 580.65.06 or newer (`--driver 580.65.06` gives torch 2.13.0 cu130 with CUDA 13.0); "
        "or `--cuda 12.0` gives torch 2.5.1 cu120 with CUDA 12.0."
    )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        # 2.6.0, 2.4.x, 2.3.x and 2.7.0 have no sm_120; 2.7.1 (cu129) is as near as 2.3.1 and newer.
        (dict(gpus=("rtx5090",), torch="2.5"), ["--torch 2.7.1", "--torch 2.13.0"]),
        (dict(gpus=("rtx5090",), torch=">=2.4,<2.6"), ["--torch 2.7.1", "--torch 2.13.0"]),
        # The pytorch channel stopped at 2.5.1: the nearest is the newest, named once (a patch difference counts
        # within one major.minor only, so 2.5.0 is not nearer to 2.13 than 2.5.1).
        (dict(gpus=("v100",), driver="450.80.02", torch="2.13", source="pytorch"), ["--torch 2.5.1"]),
    ],
    ids=["rtx5090-2.5", "rtx5090-range", "pytorch-channel-2.13"],
)
def test_the_torch_release_nearest_to_the_one_asked_is_offered_before_the_newest(
    kb: KnowledgeBase, options: dict[str, object], named: list[str]
) -> None:
    target = build_target(Options(**options), kb).target  # type: ignore[arg-type]
    assert [w.text for w in ways_out.find(kb, target, lambda t: resolve(t, kb))] == named


def test_no_way_out_is_said_plainly(kb: KnowledgeBase) -> None:
    empty = replace(kb, torch_builds=())
    target = build_target(Options(gpus=("a100",)), kb).target
    assert ways_out.find(empty, target, lambda t: resolve(t, empty)) == []
    assert str(error_for(empty, gpus=("a100",))) == (
        "the knowledge base has no conda-forge torch CUDA build for linux-64. No change of up to three options "
        "plans this target within the knowledge base."
    )


def test_apply_sets_each_option_as_the_command_line_would(kb: KnowledgeBase) -> None:
    target = build_target(Options(gpus=("a100",)), kb).target
    changed = ways_out.apply(
        target,
        (
            ("--driver", "570.26"),
            ("--driver-compat", "full"),
            ("--cuda", "12.8"),
            ("--torch", "2.7"),
            ("--python", "3.12"),
            ("--source", "pytorch"),
            ("--glibc", "2.34"),
            ("--platform", "linux-aarch64"),
            ("--no-deepspeed", None),
        ),
    )
    assert (
        str(changed.driver),
        changed.driver_compat,
        str(changed.cuda),
        changed.torch_text,
        str(changed.python),
        changed.source,
        str(changed.glibc),
        changed.platform,
        changed.deepspeed,
    ) == ("570.26", "full", "12.8", "2.7", "3.12", "pytorch", "2.34", "linux-aarch64", False)
    assert changed.torch is not None and changed.torch.contains("2.7.1") and not changed.torch.contains("2.8.0")
    back = ways_out.apply(
        changed, (("--driver-compat", "minor"), ("--source", "conda-forge"), ("--platform", "linux-64"))
    )
    assert (back.driver_compat, back.source, back.platform) == ("minor", "conda-forge", "linux-64")
    with pytest.raises(ValueError, match="no such target option '--gpu'"):
        ways_out.apply(target, (("--gpu", "h100"),))


def test_a_deepspeed_release_the_conda_build_belongs_to_must_fit_too(kb: KnowledgeBase) -> None:
    """conda-forge's deepspeed 0.18.8 cuda130 build wants cuda-version >= 13.2; DeepSpeed's op builder rejects
    nvcc 13.2 against torch built with 13.0, so that build is not chosen even where --cuda 13.2 allows it."""
    error = error_for(kb, gpus=("a100",), cuda="13.2", torch="2.10")
    assert dict(error.rejected)["torch 2.10.0 cu130"] == (  # type: ignore[attr-defined]
        "DeepSpeed 0.19.1-0.19.8: its op builder rejects nvcc 13.2 with torch built for CUDA 13.0"
    )


def _build(kb: KnowledgeBase, cuda: str, torch: str) -> TorchBuild:
    return next(
        b
        for b in kb.torch_builds
        if b.channel == "conda-forge"
        and b.platform == "linux-64"
        and str(b.cuda) == cuda
        and Version(torch) in b.versions
    )


@pytest.mark.parametrize(
    ("cuda", "torch", "nvcc", "python", "text"),
    [
        (
            "13.0",
            "2.13.0",
            "13.0",
            "3.13",
            "conda-forge has no deepspeed build for torch 2.13 with CUDA 13.0 (the newest is deepspeed 0.18.8, built "
            "for torch 2.10)",
        ),
        (
            "13.0",
            "2.10.0",
            "13.0",
            "3.13",
            "conda-forge's deepspeed 0.18.8 cuda130 build needs cuda-version >= 13.2, whose nvcc DeepSpeed's op "
            "builder rejects against torch built with CUDA 13.0 (it has no CUDA 13 minor allow-list)",
        ),
        ("13.0", "2.10.0", "13.2", "3.13", "conda-forge's deepspeed 0.18.8 cuda130 build does not fit the target GPUs"),
        (
            "12.9",
            "2.10.0",
            "12.9",
            "3.9",
            "conda-forge's deepspeed 0.18.8 cuda129 build has no Python 3.9 build "
            "(it has 3.10, 3.11, 3.12, 3.13, 3.14)",
        ),
        ("12.9", "2.10.0", "12.9", "3.13", "conda-forge's deepspeed 0.18.8 cuda129 build does not fit the target GPUs"),
    ],
)
def test_why_conda_forge_has_no_deepspeed_build_for_a_candidate(
    kb: KnowledgeBase, cuda: str, torch: str, nvcc: str, python: str, text: str
) -> None:
    build = _build(kb, cuda, torch)
    found = deepspeed.no_conda_text(kb, build, Version(torch), versions.cuda(nvcc), versions.python(python))
    assert found == text
    assert (
        deepspeed.newest_conda_text(kb, "linux-aarch64") == "conda-forge has no deepspeed CUDA builds for linux-aarch64"
    )


@pytest.mark.parametrize(
    ("version", "major", "text"),
    [
        ("0.14.0", 13, "6.0;6.1;7.0;8.0;8.6"),
        ("0.15.3", 13, "6.0;6.1;7.0;8.0;8.6"),
        ("0.15.4", 13, "6.0;6.1;7.0;8.0;8.6;9.0"),
        ("0.19.8", 13, "6.0;6.1;7.0"),
        ("0.19.9", 13, None),
        ("0.13.1", 13, None),
        ("0.19.8", 12, None),
    ],
)
def test_deepspeeds_default_ccs_per_release_and_nvcc_major(
    kb: KnowledgeBase, version: str, major: int, text: str | None
) -> None:
    row = deepspeed.default_ccs(kb, Version(version), major)
    assert (row.text if row else None) == text


def test_the_libraries_deepspeeds_ops_link_per_release(kb: KnowledgeBase) -> None:
    cpu_adam = [("cpu_adam", "curand"), ("cpu_adam", "cublas"), ("cpu_adam", "cudart")]
    assert [(lib.op, lib.library) for lib in deepspeed.op_libraries(kb, Version("0.14.0"))] == cpu_adam
    assert [(lib.op, lib.library) for lib in deepspeed.op_libraries(kb, Version("0.19.7"))] == cpu_adam
    assert deepspeed.op_libraries(kb, Version("0.19.8")) == ()
    assert deepspeed.op_libraries(kb, Version("0.13.1")) == ()
    assert deepspeed.op_libraries(kb) == kb.op_libraries


def test_within_a_snapshot_the_oldest_nvcc_it_holds_that_serves_the_build_is_used(kb: KnowledgeBase) -> None:
    nvcc = {("conda-forge", "linux-64"): (versions.cuda("12.8"), versions.cuda("12.9"), versions.cuda("13.0"))}
    held = replace(kb, holding=Holding("the test snapshot", nvcc))
    plan = plan_for(held, gpus=("a100",), torch="2.6", deepspeed=False)  # 2.6.0 has only a cu126 build
    assert (str(plan.torch_cuda), str(plan.cuda_version)) == ("12.6", "12.8")
    own = replace(kb, holding=Holding("the test snapshot", {("conda-forge", "linux-64"): (versions.cuda("12.6"),)}))
    assert str(plan_for(own, gpus=("a100",), torch="2.6", deepspeed=False).cuda_version) == "12.6"
    # A build without a CUDA range (conda-forge's CUDA 11 builds) is served by its own CUDA only.
    cu118 = tuple(b for b in kb.torch_builds if b.channel == "conda-forge" and str(b.cuda) == "11.8")
    legacy = {("conda-forge", "linux-64"): (versions.cuda("11.8"), versions.cuda("12.0"))}
    only_cu118 = replace(kb, torch_builds=cu118, holding=Holding("the test snapshot", legacy))
    error = error_for(only_cu118, gpus=("a100",), torch="2.5.1", deepspeed=False)
    assert dict(error.rejected)["torch 2.5.1 cu118"].startswith(  # type: ignore[attr-defined]
        "conda-forge has no nvcc or CUDA header packages for CUDA 11.8"
    )


def test_within_a_snapshot_a_toolkit_it_does_not_hold_is_named(kb: KnowledgeBase) -> None:
    nvcc = {("conda-forge", "linux-64"): (versions.cuda("12.8"), versions.cuda("12.9"))}
    held = replace(kb, holding=Holding("the test snapshot", nvcc))
    plan = plan_for(held, gpus=("a100",), driver="580.65.06", deepspeed=False)
    assert dict((r.candidate, r.because) for r in plan.rejected)["torch 2.13.0 cu130"] == (
        "the test snapshot holds no conda-forge-channel nvcc 13.0 for linux-64 (its conda-forge nvcc: 12.8, 12.9)"
    )
    error = error_for(replace(kb, holding=Holding("the test snapshot", {})), gpus=("gh200",), deepspeed=False)
    assert dict(error.rejected)["torch 2.13.0 cu130"] == (  # type: ignore[attr-defined]
        "the test snapshot holds no conda-forge-channel nvcc 13.0 for linux-aarch64 (its conda-forge nvcc: none)"
    )


@pytest.mark.parametrize(
    ("options", "specs"),
    [
        (
            dict(gpus=("a100",), deepspeed_from="conda-forge"),
            "python 3.13.*|pytorch ==2.10.0 cuda129*|cuda-version 12.9.*|cuda-nvcc|cuda-cudart-dev|libcusparse-dev|"
            "libcublas-dev|libcusolver-dev|libcurand-dev|cuda-profiler-api|gxx <15|gxx_linux-64 <15|ninja|"
            "cudnn <9.11|nccl|deepspeed ==0.18.8 cuda129*",
        ),
        (
            dict(gpus=("a100",), torch="2.3.1", source="pytorch", python="3.11"),
            "python 3.11.*|pytorch ==2.3.1 *cuda12*|pytorch-cuda 12.1.*|cuda-nvcc 12.1.*|cuda-cudart-dev|"
            "libcusparse-dev|libcublas-dev|libcusolver-dev|libcurand-dev|cuda-profiler-api|gxx_linux-64 <13|ninja|"
            "einops|hjson-py|msgpack-python|numpy|packaging >=20.0|psutil|py-cpuinfo|pydantic >=2.0.0|tqdm|"
            "nvidia-ml-py|pip|setuptools >=70.1",
        ),
        (
            dict(gpus=("jetson-thor",)),
            "python 3.13.*|pytorch ==2.13.0 cuda130*|cuda-version 13.0.*|cuda-nvcc|cuda-cudart-dev|libcusparse-dev|"
            "libcublas-dev|libcusolver-dev|libcurand-dev|cuda-profiler-api|gxx <16|gxx_linux-aarch64 <16|ninja|cudnn|"
            "nccl|einops|hjson-py|msgpack-python|numpy|packaging >=20.0|psutil|py-cpuinfo|pydantic >=2.0.0|tqdm|"
            "nvidia-ml-py|pip|setuptools >=70.1",
        ),
    ],
)
def test_the_specs_of_a_plan_word_for_word(kb: KnowledgeBase, options: dict[str, object], specs: str) -> None:
    assert "|".join(str(s) for s in plan_for(kb, **options).specs) == specs


def test_gcc_max_is_the_toolkits_own_or_the_nearest_older_known_one(kb: KnowledgeBase) -> None:
    def toolkit(cuda: str) -> Toolkit:
        found = kb.toolkit(versions.cuda(cuda))
        assert found is not None
        return found

    assert specs.gcc_max(kb, toolkit("12.4")) == (13, toolkit("12.4"))  # 12.3's is 12
    assert specs.gcc_max(kb, toolkit("11.5")) == (10, toolkit("11.3"))  # 11.4 and 11.5 are unknown
    older = replace(toolkit("11.0"), version=versions.cuda("10.2"))
    assert specs.gcc_max(kb, older) == (None, None)


@pytest.mark.parametrize(
    ("cuda", "requirement", "floor"),
    [
        (
            "12.9",
            "CUDA 12.9 needs driver >= 575.51.03 (>= 525.60.13 through minor-version compatibility)",
            "driver >= 575.51.03 (fully supports CUDA 12.9)",
        ),
        (
            "13.4",
            "CUDA 13.4 needs a driver that fully supports CUDA 13.4, whose version the knowledge base does not know "
            "(>= 580 through minor-version compatibility)",
            "a driver that fully supports CUDA 13.4 (the knowledge base does not know its version; >= 580 runs it "
            "through minor-version compatibility)",
        ),
        (
            "14.1",
            "CUDA 14.1 needs a driver the knowledge base does not list",
            "a driver that fully supports CUDA 14.1 (the knowledge base does not know its version)",
        ),
    ],
)
def test_driver_texts_say_what_the_knowledge_base_knows(
    kb: KnowledgeBase, cuda: str, requirement: str, floor: str
) -> None:
    assert driver.requirement_text(kb, versions.cuda(cuda)) == requirement
    assert driver.floor_text(kb, versions.cuda(cuda)) == floor


@pytest.mark.parametrize(
    ("version", "cuda", "level"),
    [
        ("575.51.03", "12.9", "full"),
        ("575.51.02", "12.9", "minor"),
        ("525.60.13", "12.9", "minor"),
        ("525.60.12", "12.9", "none"),
        ("580", "13.4", "minor"),
        ("579.99", "13.4", "none"),
        ("999", "14.0", "none"),
    ],
)
def test_driver_support_at_each_floor(kb: KnowledgeBase, version: str, cuda: str, level: str) -> None:
    assert driver.support(kb, versions.driver(version), versions.cuda(cuda)) == level


def test_what_a_driver_supports_fully(kb: KnowledgeBase) -> None:
    assert driver.supports_text(kb, versions.driver("575.51.03")) == "supports CUDA <= 12.9"
    assert driver.supports_text(kb, versions.driver("575.51.02")) == "supports CUDA <= 12.8"
    assert driver.supports_text(kb, versions.driver("440.33")) == "supports no CUDA 11+ toolkit"


def test_a_build_with_sass_for_the_gpu_still_needs_an_nvcc_that_builds_it(kb: KnowledgeBase) -> None:
    """torch 2.0.0 cu117 runs on an L4 through its sm_86 SASS, but nvcc 11.7 cannot build sm_89 (11.8 can)."""
    error = error_for(kb, gpus=("l4",), source="pytorch", torch="2.0.0", cuda="11.7")
    assert dict(error.rejected)["torch 2.0.0 cu117 (pytorch channel)"] == (  # type: ignore[attr-defined]
        "nvcc 11.7 cannot build sm_89, needed by NVIDIA L4"
    )
    assert str(error).endswith("Ways out: `--cuda 11.8` gives torch 2.0.0 cu117 (pytorch channel) with CUDA 11.8.")


def test_at_most_three_ways_out_are_named(kb: KnowledgeBase) -> None:
    error = error_for(kb, gpus=("a100",), driver="535.104.05", driver_compat="full", torch="2.7", python="3.14")
    assert str(error).split("Ways out: ", 1)[1] == (
        "`--driver 575.51.03 --torch 2.13.0` gives torch 2.13.0 cu129 with CUDA 12.9; `--driver 560.28.03 --python "
        "3.13` gives torch 2.7.1 cu126 with CUDA 12.6; `--driver-compat minor --torch 2.13.0` gives torch 2.13.0 cu129 "
        "with CUDA 12.9."
    )


def test_gpus_of_two_platforms_with_one_given_are_never_offered_the_other(kb: KnowledgeBase) -> None:
    error = error_for(kb, gpus=("gh200", "h100"), platform="linux-aarch64", source="pytorch")
    assert str(error) == (
        "the pytorch channel has no linux-aarch64 CUDA builds. Ways out: `--source conda-forge` gives torch 2.13.0 "
        "cu130 with CUDA 13.0."
    )


# Issue 22: `--torch ==2.4.1` took DeepSpeed from PyPI because the default Python (3.13) has no conda-forge DeepSpeed
# build for torch 2.4; conda-forge's deepspeed 0.15.3 cuda120 build has Python 3.9-3.12. With no --python, the
# Python is the newest the build offers (at most 3.13) that keeps DeepSpeed on conda-forge.
def test_the_default_python_keeps_deepspeed_on_conda_forge(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("a100",), torch="==2.4.1")
    assert (str(plan.python_version), plan.deepspeed, plan.pip) == ("3.12", "0.15.3", ()), (
        plan.python_version,
        plan.deepspeed,
        plan.pip,
    )
    torch = next(r for r in plan.reasons if r.decision.startswith("pytorch 2.4.1"))
    assert "Python 3.12 (the newest this build offers, at most 3.13, that keeps DeepSpeed on conda-forge)" in (
        torch.because
    ), torch.because
    python = next(r for r in plan.reasons if r.decision == "Python 3.12, not 3.13")
    assert python.because == (
        "conda-forge's deepspeed 0.15.3 cuda120 build has no Python 3.13 build (it has 3.9, 3.10, 3.11, 3.12): with "
        "Python 3.13 DeepSpeed would come from PyPI, and a plan that keeps every part on conda-forge comes before a "
        "newer Python. `--python 3.13` plans Python 3.13 with deepspeed 0.19.8 from PyPI instead."
    ), python.because
    # the way back works as named
    back = plan_for(kb, gpus=("a100",), torch="==2.4.1", python="3.13")
    assert (str(back.python_version), back.pip) == ("3.13", ("deepspeed==0.19.8",)), (back.python_version, back.pip)


@pytest.mark.parametrize(
    "options",
    [
        dict(gpus=("a100",), torch="==2.4.1", python="3.13"),  # given: kept, DeepSpeed from PyPI
        dict(gpus=("a100",), torch="==2.4.1", deepspeed_from="pypi"),  # PyPI asked for: the newest Python
        dict(gpus=("a100",), torch="==2.4.1", deepspeed=False),  # no DeepSpeed: the newest Python
    ],
    ids=["python-given", "deepspeed-from-pypi", "no-deepspeed"],
)
def test_the_python_is_lowered_only_to_keep_conda_forge_deepspeed(
    kb: KnowledgeBase, options: dict[str, object]
) -> None:
    plan = plan_for(kb, **options)
    assert str(plan.python_version) == "3.13", plan.python_version
    assert not any("keeps DeepSpeed on conda-forge" in r.because or ", not " in r.decision for r in plan.reasons), (
        plan.reasons
    )


# Issue 22: a plan-time note for GeForce cards whose multi-GPU nodes run NCCL without GPU peer-to-peer (the KB's
# gpus.yaml multi_gpu rows, each sourced); it is worded to stay true for a node with one GPU.
@pytest.mark.parametrize(
    ("gpu", "name", "nvlink"),
    [("rtx4090", "GeForce RTX 4090", True), ("rtx5090", "GeForce RTX 5090", False)],
    ids=["rtx4090", "rtx5090"],
)
def test_geforce_multi_gpu_nodes_get_a_plan_time_nccl_note(
    kb: KnowledgeBase, gpu: str, name: str, nvlink: bool
) -> None:
    plan = plan_for(kb, gpus=(gpu,), driver="580.65.06")
    notes = [w for w in plan.warnings if w.startswith("multi-GPU nodes:")]
    assert len(notes) == 1, plan.warnings
    note = notes[0]
    assert name in note and "NCCL_P2P_DISABLE=1" in note and "With one GPU per node this does not apply" in note, note
    # NVLink is said only where the KB knows it (the RTX 5090's is not recorded: unknown stays unknown)
    assert ("has no NVLink" in note) is nvlink, note


def test_no_nccl_note_for_cards_the_knowledge_base_records_nothing_about(kb: KnowledgeBase) -> None:
    for options in (dict(gpus=("a100",)), dict(gpus=("h100",)), dict(gpus=("rtx4080",)), dict(gpus=("rtx3090",))):
        plan = plan_for(kb, **options)
        assert not any(w.startswith("multi-GPU nodes:") for w in plan.warnings), (options, plan.warnings)


def test_a_mixed_target_names_only_the_geforce_cards_in_its_note(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("rtx4090", "a100"), driver="580.65.06")
    note = next(w for w in plan.warnings if w.startswith("multi-GPU nodes:"))
    assert "GeForce RTX 4090" in note and "A100" not in note, note
