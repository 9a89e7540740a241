"""GPU identity from what the driver knows (issue 24): the driver's whole "Compatible GPUs" table resolves, by name
and by PCI device ID, to the compute capability of its chip; `--gpu auto` reads the device ID and the compute
capability nvidia-smi reports, field by field."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.core.errors import UnknownGpuError
from envsolver.kb import KnowledgeBase
from envsolver.kb.driver_table import parse_pci_ids, parse_readme
from envsolver.kb.gpus import identify, lookup
from envsolver.resolve import detect
from tests.conftest import DATA

TABLE = DATA / "driver_table"
README = parse_readme((TABLE / "compatible-gpus-df1c9a3.md").read_text(encoding="utf-8"))
CHIPS = parse_pci_ids((TABLE / "pci-ids-nvidia-c1c1254.txt").read_text(encoding="utf-8"))


def chip_cc(kb: KnowledgeBase, device_id: str) -> str | None:
    chip = next(c for c in kb.chips if c.chip == CHIPS[device_id])
    return None if chip.compute_capability is None else str(chip.compute_capability)


def test_the_recorded_table_is_whole() -> None:
    assert len(README) == 825, len(README)
    assert README[0].name == "NVIDIA TITAN RTX" and README[-1].name == "NVIDIA GB300", (README[0], README[-1])
    assert {r.device_id for r in README} <= set(CHIPS), sorted({r.device_id for r in README} - set(CHIPS))


def test_the_kb_holds_the_driver_table_row_for_row(kb: KnowledgeBase) -> None:
    held = [(d.device_id, d.subsystem, d.name, d.chip) for d in kb.pci_devices]
    recorded = [(r.device_id, r.subsystem, r.name, CHIPS[r.device_id]) for r in README]
    assert held == recorded, [pair for pair in zip(held, recorded, strict=False) if pair[0] != pair[1]][:5]


@pytest.mark.parametrize("row", README, ids=lambda r: f"{r.device_id}-{r.subsystem or ''}-{r.name}")
def test_every_driver_row_resolves_by_name_and_by_id(kb: KnowledgeBase, row: object) -> None:
    assert hasattr(row, "device_id") and hasattr(row, "name")
    want = chip_cc(kb, row.device_id)
    for text in (row.name, f"0x{row.device_id}", f"0x{row.device_id.lower()}10de"):
        if want is None:
            with pytest.raises(UnknownGpuError, match="compute capability"):
                lookup(kb, text)
            continue
        gpu = lookup(kb, text)
        assert str(gpu.compute_capability) == want, f"{text!r} -> {gpu.key} {gpu.compute_capability}, chip {want}"
        assert lookup(kb, gpu.key) == gpu, f"{text!r} -> {gpu.key}, which gives {lookup(kb, gpu.key)}"


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        # names issue 24 lists among the 53 the KB lacked, each with the CC of its chip
        ("NVIDIA RTX A5500", "8.6"),
        ("NVIDIA RTX A5500 Laptop GPU", "8.6"),
        ("NVIDIA GeForce RTX 3080 Ti Laptop GPU", "8.6"),
        ("NVIDIA GeForce GTX 1630", "7.5"),
        ("NVIDIA T550 Laptop GPU", "7.5"),
        ("NVIDIA L2", "8.9"),
        ("NVIDIA GeForce RTX 3050 A Laptop GPU", "8.9"),  # AD106/AD107, not Ampere
        ("NVIDIA RTX 6000D", "12.0"),
        ("NVIDIA RTX PRO 500 Blackwell Embedded GPU", "12.0"),
        ("NVIDIA AX800", "8.0"),
    ],
)
def test_names_the_kb_lacked_resolve_through_their_device(kb: KnowledgeBase, name: str, cc: str) -> None:
    gpu = lookup(kb, name)
    assert str(gpu.compute_capability) == cc, (gpu.key, gpu.compute_capability)
    assert gpu.key.startswith("0x") and lookup(kb, gpu.key) == gpu, gpu.key  # the key --gpu round-trips
    assert {"DRV-NAMES", "PCI-IDS"} <= set(gpu.source), gpu.source


def test_a_device_of_a_chip_without_a_known_cc_stays_unknown(kb: KnowledgeBase) -> None:
    with pytest.raises(UnknownGpuError) as caught:
        lookup(kb, "NVIDIA DRIVE P2021")
    assert "0x29BB" in str(caught.value) and "GB102" in str(caught.value), str(caught.value)


def test_an_id_outside_the_table_is_unknown(kb: KnowledgeBase) -> None:
    with pytest.raises(UnknownGpuError, match="driver's table does not name") as caught:
        lookup(kb, "0x0001")
    assert caught.value.closest == [], caught.value.closest
    # the error's name is what was given (--json and cluster messages quote it), the reason beside it
    assert caught.value.name == "0x0001", caught.value.name
    assert str(caught.value).startswith("unknown GPU '0x0001' (a PCI device ID the driver's table does not name)."), (
        str(caught.value)
    )


def test_identifying_by_id_or_cc_does_not_search_for_close_names(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fuzzy search over every name (13 ms under load) is for a message; a GPU that its device ID or CC
    identifies needs none (cluster init identifies every node's GPUs)."""
    from envsolver.kb import gpus

    def searched(*_: object) -> list[str]:
        raise AssertionError("closest() was called for a GPU its device ID or CC identifies")

    monkeypatch.setattr(gpus, "closest", searched)
    assert identify(kb, "NVIDIA Mystery 3090", "0x220410DE", None).key == "rtx3090"
    assert identify(kb, "NVIDIA Mystery 9000", None, "8.9").key == "sm_89"


def test_identify_uses_name_then_id_then_reported_cc(kb: KnowledgeBase) -> None:
    assert identify(kb, "NVIDIA H200", "0x233510DE", "9.0").key == "h200"
    assert identify(kb, "NVIDIA Mystery 3090", "0x220410DE", None).key == "rtx3090"
    reported = identify(kb, "NVIDIA Mystery 9000", "0x0001", "8.9")
    assert str(reported.compute_capability) == "8.9" and reported.key == "sm_89", reported
    assert lookup(kb, reported.key).compute_capability == reported.compute_capability
    with pytest.raises(UnknownGpuError):
        identify(kb, "NVIDIA Mystery 9000", "[N/A]", "[N/A]")


def test_orin_as_jetpack_6_nvidia_smi_names_it(kb: KnowledgeBase) -> None:
    assert lookup(kb, "Orin (nvgpu)").key == "jetson-orin"


def explain(args: list[str], env: dict[str, str | None] | None = None) -> dict[str, object]:
    result = CliRunner().invoke(main, ["explain", *args, "--json"], env=env)
    assert result.exit_code == 0, f"{args}: {result.output}"
    doc: dict[str, object] = json.loads(result.stdout)
    return doc


def test_explain_orin_nvgpu_plans_for_8_7() -> None:
    doc = explain(["--gpu", "Orin (nvgpu)", "--platform", "linux-aarch64"])
    assert doc["gpus"] == [{"name": "Jetson AGX Orin / Orin NX / Orin Nano", "compute_capability": "8.7"}], doc
    assert "8.7" in str(doc["torch_cuda_arch_list"]).replace("+PTX", "").split(";"), doc["torch_cuda_arch_list"]


def test_explain_by_device_id() -> None:
    doc = explain(["--gpu", "0x2233", "--driver", "580.65.06"])
    assert doc["gpus"] == [{"name": "NVIDIA RTX A5500", "compute_capability": "8.6"}], doc


def test_explain_by_compute_capability() -> None:
    doc = explain(["--gpu", "sm_89", "--driver", "580.65.06"])
    assert doc["gpus"] == [{"name": "GPU of compute capability 8.9", "compute_capability": "8.9"}], doc
    assert "8.9" in str(doc["torch_cuda_arch_list"]).replace("+PTX", "").split(";"), doc["torch_cuda_arch_list"]


# A stand-in nvidia-smi that answers `--query-gpu=FIELDS --format=csv` with a header and one row, cell by field
# name; a field in REFUSE is refused as an old driver refuses one it does not know.
FAKE_SMI = """#!/bin/sh
fields=""
for arg in "$@"; do case "$arg" in --query-gpu=*) fields="${arg#--query-gpu=}" ;; esac; done
header=""; row=""
for field in $(echo "$fields" | tr ',' ' '); do
  case " $REFUSE " in *" $field "*) echo "Field \\"$field\\" is not a valid field to query." >&2; exit 2 ;; esac
  case "$field" in
    name) cell=%(name)s ;; pci.device_id) cell=%(device)s ;; compute_cap) cell=%(cc)s ;;
    driver_version) cell=550.54.15 ;; *) cell="[N/A]" ;;
  esac
  header="${header:+$header, }$field"; row="${row:+$row, }$cell"
done
echo "$header"; echo "$row"
"""


def fake_smi(tmp_path: Path, name: str, device: str, cc: str, refuse: str = "") -> dict[str, str | None]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "nvidia-smi"
    tool.write_text(FAKE_SMI % {"name": shlex.quote(name), "device": shlex.quote(device), "cc": shlex.quote(cc)})
    tool.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "REFUSE": refuse,
        "ENVSOLVER_GPUS": None,
        "ENVSOLVER_DRIVER": None,
    }


def test_detect_reads_device_id_and_cc(tmp_path: Path) -> None:
    env = fake_smi(tmp_path, "NVIDIA Mystery", "0x223310DE", "[N/A]")
    facts = detect.detect({}, read=lambda _: None, nvml=lambda: None, run=_with_env(env))
    assert facts.gpus == (detect.Found("NVIDIA Mystery", "nvidia-smi", "0x223310DE", None),), facts
    assert facts.driver == detect.Found("550.54.15", "nvidia-smi")


def test_detect_drops_a_field_an_old_driver_refuses(tmp_path: Path) -> None:
    env = fake_smi(tmp_path, "NVIDIA Mystery", "0x223310DE", "8.6", refuse="compute_cap")
    facts = detect.detect({}, read=lambda _: None, nvml=lambda: None, run=_with_env(env))
    assert facts.gpus == (detect.Found("NVIDIA Mystery", "nvidia-smi", "0x223310DE", None),), facts
    env = fake_smi(tmp_path, "NVIDIA H200", "0x233510DE", "9.0", refuse="compute_cap pci.device_id")
    facts = detect.detect({}, read=lambda _: None, nvml=lambda: None, run=_with_env(env))
    assert facts.gpus == (detect.Found("NVIDIA H200", "nvidia-smi"),), facts


def _with_env(env: dict[str, str | None]) -> detect.Runner:
    import subprocess

    def run(argv: list[str]) -> str | None:
        merged = {**os.environ, **{k: v for k, v in env.items() if v is not None}}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False, env=merged)
        return done.stdout if done.returncode == 0 else None

    return run


@pytest.mark.parametrize(
    ("name", "device", "cc", "refuse", "want"),
    [
        # done-when: an unknown name with a known device ID, [N/A] for compute_cap
        ("NVIDIA RTX A5500 Rev2", "0x223310DE", "[N/A]", "", "8.6"),
        ("NVIDIA GeForce RTX 3050 A Laptop GPU", "0x28A310DE", "[N/A]", "", "8.9"),
        # the same on a driver that refuses compute_cap
        ("NVIDIA RTX A5500 Rev2", "0x223310DE", "8.6", "compute_cap", "8.6"),
        # done-when: an unknown name and ID, but a compute_cap
        ("NVIDIA Mystery 9000", "0x000110DE", "8.9", "", "8.9"),
    ],
)
def test_gpu_auto_plans_from_what_the_driver_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, device: str, cc: str, refuse: str, want: str
) -> None:
    monkeypatch.setattr(detect, "_nvml", lambda: None)
    doc = explain(["--gpu", "auto"], fake_smi(tmp_path, name, device, cc, refuse))
    gpus = doc["gpus"]
    assert isinstance(gpus, list) and [g["compute_capability"] for g in gpus] == [want], doc
    assert want in str(doc["torch_cuda_arch_list"]).replace("+PTX", "").split(";"), doc["torch_cuda_arch_list"]
    assert doc["driver"] == "550.54.15", doc


def test_gpu_auto_with_nothing_known_names_the_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detect, "_nvml", lambda: None)
    env = fake_smi(tmp_path, "NVIDIA Mystery 9000", "0x000110DE", "[N/A]")
    result = CliRunner().invoke(main, ["explain", "--gpu", "auto"], env=env)
    assert result.exit_code == 2, result.output
    assert "NVIDIA Mystery 9000" in result.output and "Traceback" not in result.output, result.output


def update_script(readme: Path, *extra: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    argv = [sys.executable, "scripts/update_pci_devices.py", str(readme), str(TABLE / "pci-ids-nvidia-c1c1254.txt")]
    argv += ["--readme-at", "df1c9a3de2be4b130f4fc7680f7198193d8ac6ad"]
    argv += ["--pci-ids-at", "c1c12547d626ebf05fd0223144ad87fab5e95d06", "--check", *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    return done.returncode, done.stdout, done.stderr


def test_the_update_script_regenerates_the_data_file_from_the_recorded_inputs() -> None:
    code, out, err = update_script(TABLE / "compatible-gpus-df1c9a3.md")
    assert (code, out) == (0, ""), (code, out, err)


def test_the_update_script_prints_a_changed_row_as_a_diff(tmp_path: Path) -> None:
    text = (TABLE / "compatible-gpus-df1c9a3.md").read_text(encoding="utf-8")
    changed = tmp_path / "README.md"
    changed.write_text(text.replace("| NVIDIA RTX A5500        ", "| NVIDIA RTX A5500 Pro    ", 1), encoding="utf-8")
    code, out, err = update_script(changed)
    assert code == 1, (code, out, err)
    assert '+  - {id: "2233", subsystem: "1028 165A", name: "NVIDIA RTX A5500 Pro"' in out, out
