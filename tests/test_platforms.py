"""The target's platform (envsolver/resolve/platforms.py): a GPU known only by its PCI device ID or by the compute
capability its driver reports records no platform, so --platform, the host detection saw, or the stated default
decides; the rows of GPUs that only run on Arm hosts (GH200, GB200, GB300, GB10) keep linux-aarch64, by name and by
device ID."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.kb import KnowledgeBase
from envsolver.kb.gpus import lookup
from envsolver.resolve import detect
from envsolver.resolve.detect import Found, HostFacts
from envsolver.resolve.inputs import Options, build_target
from envsolver.resolve.plan import Plan
from envsolver.resolve.run import resolve
from tests.conftest import plan_for

DEFAULT_A5500 = (
    "the default (a PCI card's host): the knowledge base records no platform for NVIDIA RTX A5500, known only by "
    "its PCI device ID, and none was given (--platform) or detected (--gpu auto); pass --platform linux-aarch64 "
    "for an Arm host"
)


def platform_reason(plan: Plan) -> str:
    reason = next(r for r in plan.reasons if r.decision.startswith("platform "))
    return f"{reason.decision}: {reason.because}"


@pytest.mark.parametrize("gpu", ["0x2233", "sm_86"])
def test_rows_from_an_id_or_a_cc_record_no_platform(kb: KnowledgeBase, gpu: str) -> None:
    assert lookup(kb, gpu).platform is None, lookup(kb, gpu)


def test_without_platform_the_default_is_stated(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("0x2233",), driver="580.65.06")
    assert plan.platform == "linux-64", plan.platform
    assert platform_reason(plan) == f"platform linux-64: {DEFAULT_A5500}", platform_reason(plan)


def test_a_reported_cc_gets_the_default_named_as_such(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("sm_89",), driver="580.65.06")
    assert plan.platform == "linux-64", plan.platform
    assert "GPU of compute capability 8.9, known only by the compute capability its driver reports" in (
        platform_reason(plan)
    ), platform_reason(plan)


@pytest.mark.parametrize("gpu", ["0x2233", "sm_86", "0x2335"])
def test_platform_given_is_planned_without_a_guessed_warning(kb: KnowledgeBase, gpu: str) -> None:
    plan = plan_for(kb, gpus=(gpu,), platform="linux-aarch64", driver="580.65.06")
    assert plan.platform == "linux-aarch64", plan.platform
    assert platform_reason(plan) == "platform linux-aarch64: given with --platform", platform_reason(plan)
    warned = [w for w in plan.warnings if w.startswith("--platform")]
    # 0x2335 is the H200 (a named row that records linux-64): only it is warned about
    assert warned == (
        ["--platform linux-aarch64: NVIDIA H200 usually run(s) on another platform (linux-64)."]
        if gpu == "0x2335"
        else []
    ), warned


def explain(args: list[str]) -> dict[str, object]:
    result = CliRunner().invoke(main, ["explain", *args, "--json"])
    assert result.exit_code == 0, f"{args}: {result.output}"
    doc: dict[str, object] = json.loads(result.stdout)
    return doc


@pytest.mark.parametrize("gpu", ["0x2335", "0x2233", "sm_89"])
def test_explain_plans_aarch64_when_given(gpu: str) -> None:
    doc = explain(["--gpu", gpu, "--platform", "linux-aarch64", "--driver", "580.65.06"])
    assert doc["platform"] == "linux-aarch64", doc["platform"]


def test_explain_without_platform_says_where_it_came_from() -> None:
    result = CliRunner().invoke(main, ["explain", "--gpu", "0x2233", "--driver", "580.65.06"])
    assert result.exit_code == 0, result.output
    assert "; linux-64" in result.stdout.splitlines()[0], result.stdout
    assert f"platform linux-64: {DEFAULT_A5500}" in " ".join(result.stdout.split()), result.stdout


def no_probe(_: object = None) -> None:
    return None


def detected(gpus: tuple[Found, ...], machine: str) -> object:
    """A detect() for build_target: these GPUs, a driver, and the platform detect() reads from `machine`."""

    def probe(environ: Mapping[str, str]) -> HostFacts:
        host = detect.detect(environ, run=no_probe, read=no_probe, nvml=no_probe, machine=lambda: machine)
        return HostFacts(gpus, Found("580.65.06", "nvidia-smi"), host.platform)

    return probe


def test_detect_reads_the_host_platform() -> None:
    facts = detect.detect({}, run=no_probe, read=no_probe, nvml=no_probe, machine=lambda: "aarch64")
    assert facts.platform == Found("linux-aarch64", "uname -m: aarch64"), facts
    facts = detect.detect({}, run=no_probe, read=no_probe, nvml=no_probe, machine=lambda: "ppc64le")
    assert facts.platform is None, facts


@pytest.mark.parametrize(
    ("gpu", "machine", "want"),
    [
        (Found("NVIDIA RTX A5500 Rev2", "nvidia-smi", "0x223310DE"), "aarch64", "linux-aarch64"),
        (Found("NVIDIA Mystery 9000", "nvidia-smi", "0x000110DE", "8.9"), "aarch64", "linux-aarch64"),
        (Found("NVIDIA RTX A5500 Rev2", "nvidia-smi", "0x223310DE"), "x86_64", "linux-64"),
    ],
    ids=["id-on-aarch64", "cc-on-aarch64", "id-on-x86_64"],
)
def test_gpu_auto_plans_an_unrecorded_gpu_for_the_host(kb: KnowledgeBase, gpu: Found, machine: str, want: str) -> None:
    inputs = build_target(Options(gpus=("auto",)), kb, detect=detected((gpu,), machine))
    plan = resolve(inputs.target, kb)
    assert plan.platform == want, plan.platform
    assert platform_reason(plan).endswith(f"(uname -m: {machine}), where {plan.gpus[0].name} was detected"), (
        platform_reason(plan)
    )
    assert inputs.detected[f"platform {want}"] == f"uname -m: {machine}", inputs.detected
    # the command that replans it names the platform (its GPU is written by key: 0x2233 or sm_89)
    assert f"--platform {want}" in inputs.command, inputs.command


def test_gpu_auto_leaves_a_given_platform_alone(kb: KnowledgeBase) -> None:
    gpu = Found("NVIDIA RTX A5500 Rev2", "nvidia-smi", "0x223310DE")
    inputs = build_target(Options(gpus=("auto",), platform="linux-64"), kb, detect=detected((gpu,), "aarch64"))
    assert resolve(inputs.target, kb).platform == "linux-64"
    assert not any(k.startswith("platform") for k in inputs.detected), inputs.detected


def test_an_unrecorded_gpu_goes_with_a_recorded_one(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("0x2233", "gh200"), driver="580.65.06")
    assert plan.platform == "linux-aarch64", plan.platform
    assert platform_reason(plan) == (
        "platform linux-aarch64: NVIDIA GH200 Grace Hopper Superchip (GPU) run(s) on linux-aarch64 hosts; "
        "NVIDIA RTX A5500 (no platform recorded) goes with the others"
    ), platform_reason(plan)


def test_a_detected_host_that_clashes_with_a_recorded_platform_is_a_conflict(kb: KnowledgeBase) -> None:
    gpu = Found("NVIDIA RTX A5500 Rev2", "nvidia-smi", "0x223310DE")
    inputs = build_target(Options(gpus=("auto", "gh200")), kb, detect=detected((gpu,), "x86_64"))
    with pytest.raises(Exception, match="different platforms") as caught:
        resolve(inputs.target, kb)
    assert "NVIDIA RTX A5500 on linux-64" in str(caught.value), str(caught.value)


# The driver table's devices of GPUs that only run on Arm hosts (Grace: GH200, GB200, GB300; DGX Spark: GB10):
# by device ID they resolve to their named row, which records linux-aarch64, so no --platform is needed.
ARM_ONLY = {"2342": "gh200", "2348": "gh200", "2941": "gb200", "31C2": "gb300", "2E12": "gb10"}


@pytest.mark.parametrize(("device", "key"), sorted(ARM_ONLY.items()))
def test_arm_only_gpus_by_device_id_keep_aarch64(kb: KnowledgeBase, device: str, key: str) -> None:
    gpu = lookup(kb, f"0x{device}")
    assert (gpu.key, gpu.platform) == (key, "linux-aarch64"), gpu
    plan = plan_for(kb, gpus=(f"0x{device}",), driver="580.65.06")
    assert plan.platform == "linux-aarch64", plan.platform
    assert platform_reason(plan).endswith("run(s) on linux-aarch64 hosts"), platform_reason(plan)


def test_every_arm_only_driver_row_is_held(kb: KnowledgeBase) -> None:
    known = {c.chip for c in kb.chips if c.compute_capability is not None}  # the others do not resolve
    ids = {d.device_id for d in kb.pci_devices if d.chip in known}
    arm = {i for i in ids if lookup(kb, f"0x{i}").platform == "linux-aarch64"}
    assert arm == set(ARM_ONLY), sorted(arm ^ set(ARM_ONLY))


def test_an_arm_only_gpu_given_an_x86_platform_is_warned(kb: KnowledgeBase) -> None:
    plan = plan_for(kb, gpus=("0x2342", "0x2233"), platform="linux-64", driver="580.65.06")
    assert plan.platform == "linux-64", plan.platform
    warned = [w for w in plan.warnings if w.startswith("--platform")]
    assert warned == [
        "--platform linux-64: NVIDIA GH200 Grace Hopper Superchip (GPU) usually run(s) on another platform "
        "(linux-aarch64)."
    ], warned
