"""Detection parsers on captured real output (tests/data/nvidia_smi, see SOURCES.md), and detect() order."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

import pytest

from envsolver.kb import KnowledgeBase
from envsolver.kb.gpus import lookup
from envsolver.resolve import detect
from tests.conftest import DATA

SMI = DATA / "nvidia_smi"


def read(name: str) -> str:
    return (SMI / name).read_text(encoding="utf-8")


def test_query_csv_with_header_h200() -> None:
    rows = detect.parse_smi_csv(read("h200-query-gpu.csv.txt"))
    assert rows == [
        {
            "name": "NVIDIA H200",
            "compute_cap": "9.0",
            "driver_version": "580.159.04",
            "memory.total": "143771 MiB",
            "pci.bus_id": "00000000:00:06.0",
        }
    ]


def test_query_csv_without_header_h200() -> None:
    fields = ("name", "compute_cap", "driver_version", "memory.total")
    rows = detect.parse_smi_csv(read("h200-query-gpu-noheader.txt"), fields)
    assert rows == [
        {"name": "NVIDIA H200", "compute_cap": "9.0", "driver_version": "580.159.04", "memory.total": "143771"}
    ]


def test_query_csv_other_field_order() -> None:
    rows = detect.parse_smi_csv(read("titanv-rtx5880ada-query-gpu.txt"))
    assert [(r["name"], r["compute_cap"], r["driver_version"]) for r in rows] == [
        ("NVIDIA TITAN V", "7.0", "570.86.15"),
        ("NVIDIA RTX 5880 Ada Generation", "8.9", "570.86.15"),
    ]


def test_list_gpus_skips_mig_devices() -> None:
    names = detect.parse_smi_list(read("h100-8x-mig-list-gpus.txt"))
    assert names == ["NVIDIA H100 80GB HBM3"] * 8
    assert detect.parse_smi_list(read("h200-list-gpus.txt")) == ["NVIDIA H200"]


@pytest.mark.parametrize(
    ("name", "driver", "cuda"),
    [
        ("h200-default.txt", "580.159.04", "13.0"),
        ("h100-sxm-8x-default.txt", "550.90.07", "12.4"),
        ("a100-sxm4-80gb-4x-default.txt", "555.42.02", "12.5"),
        ("geforce-truncated-name-525-default.txt", "525.125.06", "12.0"),
    ],
)
def test_banner(name: str, driver: str, cuda: str) -> None:
    assert detect.parse_smi_banner(read(name)) == (driver, cuda)


@pytest.mark.parametrize(
    ("name", "driver"),
    [
        ("h200-proc-driver-nvidia-version.txt", "580.159.04"),
        ("proc-driver-nvidia-version-550.txt", "550.144.03"),
    ],
)
def test_proc_version(name: str, driver: str) -> None:
    assert detect.parse_proc_version(read(name)) == driver


def test_proc_version_proprietary_module() -> None:
    # The proprietary-module sample from the same uv test as proc-driver-nvidia-version-550.txt.
    text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  375.74  Wed Jun 14 01:39:39 PDT 2017\n"
    assert detect.parse_proc_version(text) == "375.74"


@pytest.mark.parametrize("name", ["h200-list-gpus.txt", "h100-8x-mig-list-gpus.txt"])
def test_detected_names_resolve_in_the_kb(kb: KnowledgeBase, name: str) -> None:
    for gpu_name in detect.parse_smi_list(read(name)):
        assert lookup(kb, gpu_name).compute_capability.sm == 90


def _no_probe(*_: object) -> None:
    return None


def test_overrides_win_and_say_so() -> None:
    facts = detect.detect(
        {"ENVSOLVER_GPUS": "a100, h100", "ENVSOLVER_DRIVER": "535.104.05"},
        run=_no_probe,
        read=_no_probe,
        nvml=_no_probe,
    )
    assert [(f.value, f.origin) for f in facts.gpus] == [("a100", "ENVSOLVER_GPUS"), ("h100", "ENVSOLVER_GPUS")]
    assert facts.driver == detect.Found("535.104.05", "ENVSOLVER_DRIVER")


def test_nvml_first() -> None:
    facts = detect.detect({}, run=_no_probe, read=_no_probe, nvml=lambda: (["NVIDIA H200"], "580.159.04"))
    assert facts.gpus == (detect.Found("NVIDIA H200", "NVML"),)
    assert facts.driver == detect.Found("580.159.04", "NVML")


def test_nvidia_smi_when_nvml_is_missing() -> None:
    calls: list[list[str]] = []

    def run(argv: list[str]) -> str:
        calls.append(argv)
        return read("h200-query-gpu.csv.txt")

    facts = detect.detect({}, run=run, read=_no_probe, nvml=_no_probe)
    assert calls == [detect.SMI_QUERY]
    # the capture holds no pci.device_id column; its compute_cap is read
    assert facts.gpus == (detect.Found("NVIDIA H200", "nvidia-smi", None, "9.0"),)
    assert facts.driver == detect.Found("580.159.04", "nvidia-smi")


def test_proc_for_the_driver_when_nothing_else_answers() -> None:
    files = {detect.PROC_VERSION: read("proc-driver-nvidia-version-550.txt")}
    facts = detect.detect({}, run=_no_probe, read=files.get, nvml=_no_probe)
    assert facts.gpus == ()
    assert facts.driver == detect.Found("550.144.03", detect.PROC_VERSION)


def test_sys_module_before_proc() -> None:
    files = {
        detect.SYS_MODULE_VERSION: read("h200-sys-module-nvidia-version.txt"),
        detect.PROC_VERSION: read("proc-driver-nvidia-version-550.txt"),
    }
    facts = detect.detect({}, run=_no_probe, read=files.get, nvml=_no_probe)
    assert facts.driver == detect.Found("580.159.04", detect.SYS_MODULE_VERSION)


def test_nothing_on_a_login_node() -> None:
    facts = detect.detect({}, run=_no_probe, read=_no_probe, nvml=_no_probe, machine=lambda: "x86_64")
    assert facts == detect.HostFacts((), None, detect.Found("linux-64", "uname -m: x86_64"))


@pytest.mark.gpu
def test_real_detection_on_a_gpu_machine() -> None:
    import os

    facts = detect.detect(os.environ)
    assert facts.gpus and facts.driver is not None
    assert facts.gpus[0].origin in ("NVML", "nvidia-smi")


@pytest.mark.parametrize(
    ("machine", "platform"),
    [
        ("x86_64", "linux-64"),
        ("AMD64", "linux-64"),
        ("aarch64", "linux-aarch64"),
        ("arm64", "linux-aarch64"),
        ("ppc64le", None),
    ],
)
def test_host_platform(machine: str, platform: str | None) -> None:
    assert detect.host_platform(machine) == platform


# nvidia-smi as a process: the stand-ins below are shell scripts put first on PATH (no GPU here). Each appends a
# line to `calls` when it starts, so a test sees how often detection asked.
_HANGS = '#!/bin/sh\necho asked >> "$CALLS"\nexec sleep 30\n'
_FLOODS = '#!/bin/sh\necho asked >> "$CALLS"\nexec yes "NVIDIA H200, 0x233510DE, 9.0, 580.159.04"\n'
_ANSWERS = (
    '#!/bin/sh\necho asked >> "$CALLS"\n'
    "echo 'name, pci.device_id, compute_cap, driver_version'\n"
    "echo 'NVIDIA H200, 0x233510DE, 9.0, 580.159.04'\n"
)


def _smi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(script)
    tool.chmod(0o755)
    calls = tmp_path / "calls"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    monkeypatch.setenv("CALLS", str(calls))
    return calls


def _asked(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def test_a_hung_nvidia_smi_is_asked_once_and_stopped_at_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _smi_on_path(tmp_path, monkeypatch, _HANGS)
    start = time.monotonic()
    found = detect._smi(functools.partial(detect._run, timeout=0.5))
    took = time.monotonic() - start
    assert found is None, found
    # asking again with fewer fields would wait the whole deadline again, once per query
    assert _asked(calls) == 1, f"nvidia-smi was asked {_asked(calls)} times after it hung"
    assert took < 5, f"detection took {took:.1f} s against a 0.5 s deadline"


def test_an_nvidia_smi_that_floods_is_cut_off_at_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _smi_on_path(tmp_path, monkeypatch, _FLOODS)
    start = time.monotonic()
    out = detect._run(detect.SMI_QUERY, timeout=10)
    took = time.monotonic() - start
    # `yes` never ends: only the bound (SMI_MAX_BYTES) can end the read, well before the deadline
    assert out is None, f"an endless answer was read as {len(out)} characters"
    assert took < 8, f"the flood was read for {took:.1f} s"
    assert _asked(calls) == 1


def test_run_reads_nvidia_smis_answer_through_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _smi_on_path(tmp_path, monkeypatch, _ANSWERS)
    facts = detect.detect({}, read=_no_probe, nvml=_no_probe)
    assert facts.gpus == (detect.Found("NVIDIA H200", "nvidia-smi", "0x233510DE", "9.0"),), facts
    assert facts.driver == detect.Found("580.159.04", "nvidia-smi")
    assert _asked(calls) == 1
