"""verify: every check in each of its states on canned facts (real captures from the H200 machine and this CPU
machine, in tests/data/verify), the probe against this interpreter, lock drift on a fake prefix, and the CLI."""

from __future__ import annotations

import copy
import itertools
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.kb import KnowledgeBase
from envsolver.lock.lockfile import LockEntry
from envsolver.lock.pypi.record import PipRecord
from envsolver.verify import checks, probe
from envsolver.verify import run as verify_run
from tests.conftest import DATA
from tests.dist import HAS_TORCH, python_without_torch

FACTS = DATA / "verify"


def facts(name: str = "h200-image-facts") -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FACTS / f"{name}.json").read_text())
    return doc


def healthy() -> dict[str, Any]:
    """The H200 image's facts with a plain arch list and a built DeepSpeed (from the DeepSpeed capture)."""
    doc = facts()
    doc["env"]["TORCH_CUDA_ARCH_LIST"] = "9.0+PTX"
    doc["deepspeed"] = {
        **facts("h200-deepspeed-facts")["deepspeed"],
        "fused_adam_loads": True,
        "fused_adam_load_seconds": 0.02,
    }
    doc["deepspeed"].pop("fused_adam_error", None)
    return doc


def result(kb: KnowledgeBase, check_id: str, doc: dict[str, Any], **ctx: Any) -> checks.Check:
    function = next(f for i, f, _ in checks.CHECKS if i == check_id)
    return function(checks.Context(doc, kb, **ctx))


def edit(path: str, value: Any) -> Any:
    def apply(doc: dict[str, Any]) -> dict[str, Any]:
        doc = copy.deepcopy(doc)
        target = doc
        keys = path.split(".")
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
        return doc

    return apply


def same(doc: dict[str, Any]) -> dict[str, Any]:
    return doc


# A conda prefix with CUDA 13.0's dev packages but no libcurand-dev (which holds libcurand.so).
CONDA_META = [
    {"name": "cuda-version", "version": "13.0", "build": "h0"},
    {"name": "libcublas-dev", "version": "13.0.2.14", "build": "h0"},
    {"name": "cuda-cudart-dev", "version": "13.0.96", "build": "h0"},
]
CURAND = {"name": "libcurand-dev", "version": "10.4.0.35", "build": "h0"}


# (check id, how to change the healthy facts, expected status, phrase in detail or fix)
TABLE = [
    ("driver", same, "pass", "driver 580.159.04"),
    ("driver", edit("driver", {"source": None, "version": None, "cuda": None, "gpus": []}), "fail", "no NVIDIA driver"),
    ("gpus", same, "pass", "NVIDIA H200: CC 9.0"),
    (
        "gpus",
        edit("driver.gpus", [{"name": "NVIDIA Quantum 9000", "compute_capability": "15.0"}]),
        "warn",
        "not in the knowledge base",
    ),
    ("gpus", edit("driver.gpus", []), "skip", "no GPU"),
    (  # issue 24: a name the KB lacks, known by the PCI device ID the driver reports (0x2233: RTX A5500, GA102)
        "gpus",
        edit("driver.gpus", [{"name": "NVIDIA Quantum 3000", "compute_capability": "8.6", "device_id": "0x223310DE"}]),
        "pass",
        "NVIDIA Quantum 3000: CC 8.6",
    ),
    ("torch_import", same, "pass", "torch 2.11.0+cu130"),
    (
        "torch_import",
        edit("torch", {"error": "ModuleNotFoundError: No module named 'torch'"}),
        "fail",
        "envsolver install",
    ),
    ("torch_cuda_build", same, "pass", "CUDA 13.0 build"),
    ("torch_cuda_build", edit("torch.cuda", None), "fail", "CPU-only"),
    ("driver_supports_torch_cuda", same, "pass", "fully supports CUDA 13.0"),
    ("driver_supports_torch_cuda", edit("driver.version", "580.0"), "warn", "minor-version compatibility"),
    ("driver_supports_torch_cuda", edit("driver.version", "550.54.14"), "fail", "upgrade the driver to 580.65.06"),
    ("driver_supports_torch_cuda", edit("torch.cuda", None), "skip", "needs"),
    ("cuda_available", same, "pass", "1 device"),
    ("cuda_available", edit("torch.available", False), "fail", "is_available() is False"),
    ("arch_coverage", same, "pass", "sm_90"),
    (
        "arch_coverage",
        edit("driver.gpus", [{"name": "Tesla V100-SXM2-32GB", "compute_capability": "7.0"}]),
        "fail",
        "no kernel image",
    ),
    ("arch_coverage", edit("torch.arch_list", []), "skip", "needs"),
    ("nvcc", same, "pass", "nvcc 13.0"),
    ("nvcc", edit("nvcc", {"path": "/x/bin/nvcc", "exists": False}), "fail", "cuda-nvcc cuda-version=13.0"),
    ("cuda_version_match", same, "pass", "nvcc 13.0 = torch.version.cuda"),
    ("cuda_version_match", edit("nvcc.version", "13.0"), "pass", "= torch.version.cuda 13.0"),
    ("cuda_version_match", edit("nvcc.version", "13.2"), "fail", "does not match the version torch was compiled with"),
    ("cuda_version_match", edit("nvcc.version", "12.9"), "fail", "differ in the major"),
    ("cuda_version_match", edit("nvcc.version", None), "skip", "needs"),
    ("headers", same, "pass", "all 8 headers"),
    ("headers", lambda d: {**d, "headers": {**d["headers"], "cusparse.h": None}}, "fail", "libcusparse-dev"),
    ("headers", edit("headers", {}), "skip", "no include"),
    ("headers", edit("headers_error", "TypeError: boom"), "fail", "could not look for headers"),
    ("libcudart", same, "pass", "libcudart.so.13"),
    (
        "libcudart",
        edit("ld_library_path_cudart", ["/usr/local/cuda-11.8/lib64/libcudart.so.11.0"]),
        "warn",
        "LD_LIBRARY_PATH",
    ),
    ("libcudart", edit("torch.loaded_libs", []), "warn", "loaded no libcudart"),
    ("libcudart", edit("torch.cuda", None), "skip", "needs"),
    ("cudnn", same, "pass", "cuDNN 91900"),
    ("cudnn", edit("torch.cudnn", None), "fail", "does not load"),
    ("nccl", same, "pass", "NCCL 2.28.9"),
    ("nccl", edit("torch.nccl", None), "warn", "unknown"),
    ("host_compiler", same, "pass", "GCC 13"),
    ("host_compiler", edit("compiler.major", 16), "fail", "gxx<16"),
    ("host_compiler", edit("compiler", {"path": None, "version": None}), "fail", "no C++ compiler"),
    ("torch_cuda_arch_list", same, "pass", "covers the GPUs"),
    ("torch_cuda_arch_list", edit("env.TORCH_CUDA_ARCH_LIST", "7.0;9.0"), "fail", "nvcc cannot build 7.0"),
    ("torch_cuda_arch_list", edit("env.TORCH_CUDA_ARCH_LIST", "8.0"), "fail", "does not cover NVIDIA H200"),
    ("torch_cuda_arch_list", edit("env.TORCH_CUDA_ARCH_LIST", "9.0a"), "warn", "cannot parse arch suffixes"),
    ("torch_cuda_arch_list", edit("env.TORCH_CUDA_ARCH_LIST", "nine"), "fail", "malformed"),
    # Unset: DeepSpeed's ahead-of-time builds fall back to its CUDA 13 default 6.0;6.1;7.0, which nvcc 13 cannot build.
    ("torch_cuda_arch_list", edit("env.TORCH_CUDA_ARCH_LIST", None), "warn", "defaults to 6.0;6.1;7.0"),
    ("torch_cuda_arch_list", edit("env.TORCH_CUDA_ARCH_LIST", None), "warn", "export TORCH_CUDA_ARCH_LIST='9.0+PTX'"),
    (
        "torch_cuda_arch_list",
        lambda d: edit("nvcc.archs", None)(edit("nvcc.version", "12.9")(edit("env.TORCH_CUDA_ARCH_LIST", None)(d))),
        "skip",
        "not set",
    ),
    ("op_libraries", same, "skip", "no conda packages"),
    ("op_libraries", lambda d: {**d, "conda_meta": CONDA_META}, "fail", "libcurand-dev cuda-version=13.0"),
    ("op_libraries", lambda d: {**d, "conda_meta": CONDA_META}, "fail", "-lcurand"),
    ("op_libraries", lambda d: {**d, "conda_meta": [*CONDA_META, CURAND]}, "pass", "libcurand-dev"),
    (
        "op_libraries",
        lambda d: edit("deepspeed.version", "0.19.8")({**d, "conda_meta": CONDA_META}),
        "pass",
        "links no CUDA library",
    ),
    ("op_libraries", lambda d: {**d, "conda_meta": CONDA_META, "deepspeed": None}, "skip", "DeepSpeed"),
    ("deepspeed_ops", same, "pass", "FusedAdam loads"),
    ("deepspeed_ops", edit("deepspeed.fused_adam_built", False), "fail", "not built"),
    ("deepspeed_ops", edit("deepspeed.accelerator", "cpu"), "fail", "DS_ACCELERATOR=cuda"),
    (
        "deepspeed_ops",
        edit("deepspeed", {"error": "ModuleNotFoundError: No module named 'deepspeed'"}),
        "skip",
        "not installed",
    ),
    ("extensions_cache", same, "pass", "empty"),
    (
        "extensions_cache",
        edit("extensions_cache", {"root": "/c", "entries": ["py312_cu126", "py312_cu130"]}),
        "warn",
        "rm -rf /c/py312_cu126",
    ),
    ("pip_conda_mix", same, "pass", "not a conda environment"),  # the H200 image: PyPI's torch in a plain python
    (  # a conda environment whose probe lists what no conda package installed: tests/test_pypi_over_conda.py
        "pip_conda_mix",
        edit("conda_meta", [{"name": "pytorch", "version": "2.12.0", "build": "cuda129_mkl_py311_h49b8cc7_300"}]),
        "skip",
        "older probe",
    ),
    ("shm", same, "pass", "128.0 GiB"),
    ("shm", edit("shm.bytes", 64 * 2**20), "warn", "DataLoader"),
]


@pytest.mark.parametrize(
    ("check_id", "change", "status", "phrase"),
    [pytest.param(*row, id=f"{row[0]}-{row[2]}-{i}") for i, row in enumerate(TABLE)],
)
def test_check_states(kb: KnowledgeBase, check_id: str, change: Any, status: str, phrase: str) -> None:
    check = result(kb, check_id, change(healthy()))
    assert check.status == status, check
    assert phrase in check.detail + " " + check.fix
    if status in ("fail", "warn") and check_id not in ("nccl",):
        assert check.fix


def test_unset_arch_list_fix_takes_the_locks_arch_list(kb: KnowledgeBase) -> None:
    doc = edit("env.TORCH_CUDA_ARCH_LIST", None)(healthy())
    meta = {"envsolver_torch_cuda_arch_list": "8.0;9.0+PTX"}
    check = result(kb, "torch_cuda_arch_list", doc, lock_meta=meta)
    assert check.status == "warn" and check.fix.startswith("export TORCH_CUDA_ARCH_LIST='8.0;9.0+PTX'")


def test_real_cpu_machine_with_deepspeed_and_nvcc_13_but_no_arch_list(kb: KnowledgeBase) -> None:
    """The captured CPU venv: DeepSpeed 0.19.5, nvcc 13.0, no GPU, TORCH_CUDA_ARCH_LIST unset."""
    check = result(kb, "torch_cuda_arch_list", facts("cpu-venv-facts"))
    assert check.status == "warn" and "nvcc 13.0 cannot build 6.0, 6.1, 7.0" in check.detail
    assert "export TORCH_CUDA_ARCH_LIST=" in check.fix


def test_probe_default_headers_are_the_knowledge_base_list(kb: KnowledgeBase) -> None:
    """The probe is stdlib-only and cannot read the KB; its default (used when run by hand) must not drift from
    the list verify passes with --headers."""
    assert tuple(probe.HEADERS) == tuple(h.header for h in (*kb.extra_headers, *kb.op_headers))


def test_gpu_test_mismatch_fails(kb: KnowledgeBase) -> None:
    doc = healthy()
    doc["gpu_test"] = {"max_abs_diff": 0.5}
    assert result(kb, "deepspeed_ops", doc, gpu_test=True).status == "fail"
    doc["gpu_test"] = {"max_abs_diff": 1.9e-6}
    assert "match AdamW" in result(kb, "deepspeed_ops", doc, gpu_test=True).detail


LOCK = (
    LockEntry("pytorch", "2.11.0", "cuda130_x", "linux-64", "linux-64", "u", None, None),
    LockEntry("python", "3.12.3", "h0", "linux-64", "linux-64", "u", None, None),
)


@pytest.mark.parametrize(
    ("installed", "status", "phrase"),
    [
        ([("pytorch", "2.11.0", "cuda130_x"), ("python", "3.12.3", "h0")], "pass", "match the lock"),
        ([("pytorch", "2.11.0", "cuda130_x")], "fail", "missing: python"),
        ([("pytorch", "2.11.0", "cpu_x"), ("python", "3.12.3", "h0"), ("pip", "25", "h0")], "fail", "extra: pip"),
        ([("pytorch", "2.10.0", "cuda130_x"), ("python", "3.12.3", "h0")], "fail", "pytorch 2.10.0 (lock 2.11.0)"),
    ],
)
def test_lock_drift(kb: KnowledgeBase, installed: list[tuple[str, str, str]], status: str, phrase: str) -> None:
    doc = healthy()
    doc["conda_meta"] = [{"name": n, "version": v, "build": b} for n, v, b in installed]
    check = result(kb, "lock_drift", doc, lock_entries=LOCK)
    assert check.status == status and phrase in check.detail
    assert result(kb, "lock_drift", doc).status == "skip"


def test_lock_drift_reads_a_fake_prefix(kb: KnowledgeBase, tmp_path: Path) -> None:
    meta = tmp_path / "conda-meta"
    meta.mkdir()
    for name, version, build in (("pytorch", "2.11.0", "cuda130_x"), ("python", "3.12.3", "h0")):
        (meta / f"{name}-{version}-{build}.json").write_text(
            json.dumps({"name": name, "version": version, "build": build})
        )
    code = (
        "import json, sys; sys.prefix = sys.argv[1]; sys.path.insert(0, sys.argv[2]); import probe;"
        " print(json.dumps(probe.conda_meta()))"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), str(Path(probe.__file__).parent)],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = healthy()
    doc["conda_meta"] = json.loads(out.stdout)
    assert result(kb, "lock_drift", doc, lock_entries=LOCK).status == "pass"


LOCK_META = {
    "envsolver_compute_capabilities": "9.0",
    "envsolver_driver_min_minor_compat": "580",
    "envsolver_virtual_linux-64_cuda": "13.0",
    "envsolver_virtual_linux-64_glibc": "2.28",
}


@pytest.mark.parametrize(
    ("change", "meta", "status", "phrase"),
    [
        (same, LOCK_META, "pass", "meets the lock"),
        (edit("driver.version", "575.51.03"), LOCK_META, "fail", "older than the lock's floor 580"),
        (edit("glibc", "2.17"), LOCK_META, "fail", "glibc 2.17 is older"),
        (same, {**LOCK_META, "envsolver_compute_capabilities": "8.0"}, "fail", "not a target of the lock"),
        (same, {}, "skip", "no lock metadata"),
    ],
)
def test_host_vs_lock(kb: KnowledgeBase, change: Any, meta: dict[str, str], status: str, phrase: str) -> None:
    check = result(kb, "host_vs_lock", change(healthy()), lock_meta=meta)
    assert check.status == status and phrase in check.detail


def test_failed_prerequisites_skip_dependents(kb: KnowledgeBase) -> None:
    results = {c.id: c for c in checks.run(checks.Context(facts("cpu-venv-facts"), kb))}
    assert results["torch_cuda_build"].status == "fail"
    for dependent in ("driver_supports_torch_cuda", "cuda_available", "cuda_version_match", "cudnn", "nccl"):
        assert results[dependent].status == "skip" and "did not pass" in results[dependent].detail


def test_a_crashing_check_is_reported_not_raised(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ctx: checks.Context) -> checks.Check:
        raise KeyError("surprise")

    table = tuple((i, boom if i == "shm" else f, n) for i, f, n in checks.CHECKS)
    monkeypatch.setattr(checks, "CHECKS", table)
    shm = next(c for c in checks.run(checks.Context(healthy(), kb)) if c.id == "shm")
    assert shm.status == "fail" and "KeyError" in shm.detail


def test_real_cpu_machine_report(kb: KnowledgeBase) -> None:
    """This CPU machine, captured: torch 2.13.0+cpu in a venv, nvcc 13.0 without cusparse.h, no driver."""
    results = {c.id: c for c in checks.run(checks.Context(facts("cpu-venv-facts"), kb))}
    assert results["torch_cuda_build"].status == "fail" and "envsolver install" in results["torch_cuda_build"].fix
    assert results["headers"].status == "fail" and "cusparse.h" in results["headers"].detail
    assert results["driver"].status == "fail"
    assert results["gpus"].status == "skip"


def test_real_h200_reports(kb: KnowledgeBase) -> None:
    image = checks.run(checks.Context(facts("h200-image-facts"), kb))
    assert not [c for c in image if c.status == "fail"]
    arch = {c.id: c for c in checks.run(checks.Context(facts("h200-archlist-7.0-9.0-facts"), kb))}
    assert arch["torch_cuda_arch_list"].status == "fail"
    assert "compute_70" in arch["deepspeed_ops"].detail
    ds = {c.id: c for c in checks.run(checks.Context(facts("h200-deepspeed-facts"), kb))}
    assert "invalid literal for int() with base 10: '0a'" in ds["deepspeed_ops"].detail


def test_h200_cli_runs_recorded() -> None:
    text = (FACTS / "h200-verify-image-cli.txt").read_text()
    assert "17 pass, 2 warn, 0 fail, 2 skip" in text
    doc = json.loads((FACTS / "h200-verify-archlist-cli.json").read_text())
    assert doc["ok"] is False
    assert {c["id"]: c["status"] for c in doc["checks"]}["torch_cuda_arch_list"] == "fail"


@pytest.mark.parametrize(
    ("refuse", "cc"),
    [("", "8.6"), ("compute_cap", "[N/A]")],  # a driver older than R510 refuses compute_cap
)
def test_probe_reads_the_device_id_field_by_field(tmp_path: Path, refuse: str, cc: str) -> None:
    """The probe's nvidia-smi queries, against a stand-in that answers any --query-gpu field list by name (and
    refuses the fields in REFUSE as an old driver does). The probe runs in a python without torch: its torch
    child is not what this reads."""
    tool = tmp_path / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\n"
        'echo "$*" >> "$CALLS"\n'
        'fields=""; for a in "$@"; do case "$a" in --query-gpu=*) fields="${a#--query-gpu=}" ;; esac; done\n'
        'row=""; for f in $(echo "$fields" | tr , " "); do\n'
        '  case " $REFUSE " in *" $f "*) echo "Field \\"$f\\" is not a valid field to query." >&2; exit 2 ;; esac\n'
        '  case "$f" in name) c="NVIDIA Quantum 3000" ;; compute_cap) c=8.6 ;; memory.total) c="24564 MiB" ;;\n'
        '    driver_version) c=550.54.15 ;; pci.device_id) c=0x223310DE ;; *) c="[N/A]" ;; esac\n'
        '  row="${row:+$row, }$c"; done\n'
        '[ -n "$fields" ] && echo "$row" || echo "Driver Version: 550.54.15  CUDA Version: 12.4"\n',
        encoding="utf-8",
    )
    tool.chmod(0o755)
    calls = tmp_path / "calls"
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "REFUSE": refuse, "CALLS": str(calls)}
    python = python_without_torch(tmp_path / "env")
    doc = verify_run.probe(python, deepspeed=False, gpu_test=False, timeout=60, environ=env)
    want = {"name": "NVIDIA Quantum 3000", "compute_capability": cc, "memory": "24564 MiB", "device_id": "0x223310DE"}
    assert doc["driver"]["gpus"] == [want], doc["driver"]
    assert doc["driver"]["version"] == "550.54.15", doc["driver"]
    assert doc["driver"]["cuda"] == "12.4", doc["driver"]
    # one query per field list the driver refuses, one it answers, then the banner (for the CUDA version)
    asked = calls.read_text().splitlines()
    assert len(asked) == (3 if refuse else 2), asked


def test_probe_reads_the_h200s_own_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's query and the banner, answered with what a real H200 printed for them (tests/data/nvidia_smi)."""
    smi = DATA / "nvidia_smi"
    tool = tmp_path / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  --query-gpu=name,pci.device_id,compute_cap,memory.total,driver_version)"
        f" cat {smi / 'h200-query-probe-noheader.txt'} ;;\n"
        f"  '') cat {smi / 'h200-default.txt'} ;;\n"
        f"  *) cat {smi / 'h200-query-unknown-field.txt'}; exit 2 ;;\n"
        "esac\n",
        encoding="utf-8",
    )
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert probe.driver() == {
        "source": "nvidia-smi",
        "version": "580.159.04",
        "cuda": "13.0",
        "gpus": [
            {"name": "NVIDIA H200", "compute_capability": "9.0", "memory": "143771 MiB", "device_id": "0x233510DE"}
        ],
    }


def test_probe_runs_in_this_interpreter() -> None:
    doc = verify_run.probe(
        Path(sys.executable), deepspeed=False, gpu_test=False, timeout=60, environ={"PATH": "/usr/bin:/bin"}
    )
    assert doc["python"]["executable"] == sys.executable
    assert set(doc) >= {"driver", "torch", "nvcc", "headers", "compiler", "shm", "env", "conda_meta"}
    if HAS_TORCH:  # the torch child's facts arrive whole, though it leaves without the interpreter's teardown
        assert doc["torch"]["version"] == metadata.version("torch") and "error" not in doc["torch"], doc["torch"]
    else:  # an error text, not a crash
        assert doc["torch"]["error"] == "ModuleNotFoundError: No module named 'torch'", doc["torch"]


def test_cli_json_golden_for_the_cpu_venv(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify_run, "probe", lambda *a, **k: facts("cpu-venv-facts"))
    result_ = CliRunner().invoke(main, ["verify", "--python", sys.executable, "--json"])
    assert result_.exit_code == 1, result_.output
    doc = json.loads(result_.output)
    golden = FACTS / "cpu-venv-verify.golden.json"
    doc["target"]["python"] = "PYTHON"
    if os.environ.get("ENVSOLVER_UPDATE_GOLDEN") == "1":
        golden.write_text(json.dumps(doc, indent=2) + "\n")
    assert doc == json.loads(golden.read_text())
    ids = {c["id"]: c["status"] for c in doc["checks"]}
    assert ids["torch_cuda_build"] == "fail" and list(ids) == list(checks.IDS)


def test_cli_check_filter_and_exit_codes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(verify_run, "probe", lambda *a, **k: healthy())
    ok = CliRunner().invoke(main, ["verify", "--python", sys.executable, "--check", "shm", "--check", "nvcc"])
    assert ok.exit_code == 0 and "pass shm" in ok.output and "torch_import" not in ok.output, ok.output
    missing = CliRunner().invoke(main, ["verify", "-p", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "has no bin/python" in missing.output, missing.output


def test_host_checks_arrive_before_torch_has_imported(kb: KnowledgeBase, tmp_path: Path) -> None:
    """The probe streams the host facts first; verify reports the host-only checks from them at once."""
    full = facts("h200-image-facts")
    host = {k: v for k, v in full.items() if k not in ("torch", "deepspeed", "gpu_test")}
    stamp = tmp_path / "stamps"
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\n"
        f"echo '{json.dumps({'partial': host})}'\n"
        f"sleep 1; date +%s.%N >> {stamp}\n"
        f"echo '{json.dumps(full)}'\n"
    )
    script.chmod(0o755)
    seen: list[tuple[str, bool]] = []

    def record(check: checks.Check) -> None:
        seen.append((check.id, stamp.exists()))

    _, _, results = verify_run.verify(kb, None, script, None, False, (), {"PATH": "/usr/bin:/bin"}, on_check=record)
    early = [i for i, after in seen if not after]
    leading = list(itertools.takewhile(lambda i: i in checks.HOST_ONLY, checks.IDS))
    assert early == leading == ["driver", "gpus"], seen  # in --help's order: the host checks before torch_import
    assert [i for i, _ in seen] == [c.id for c in results] == list(checks.IDS), seen


NO_DEEPSPEED = {"error": "ModuleNotFoundError: No module named 'deepspeed'"}
CPU_NO_DEEPSPEED = {**facts("cpu-venv-facts"), "deepspeed": NO_DEEPSPEED}


def _streaming_python(tmp_path: Path, full: dict[str, Any]) -> Path:
    host = {k: v for k, v in full.items() if k not in checks.LATE_FACTS}
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\necho '{json.dumps({'partial': host})}'\necho '{json.dumps(full)}'\n")
    script.chmod(0o755)
    return script


def test_the_text_the_summary_and_the_json_say_the_same(tmp_path: Path) -> None:
    """Issue 22: on a CPU-torch venv without DeepSpeed, the text printed `warn torch_cuda_arch_list` (judged on
    the probe's first line, before DeepSpeed's facts) while the summary and --json counted the final `skip`; the
    text's order was not --help's; --json's fix was "" where the README says null."""
    script = _streaming_python(tmp_path, CPU_NO_DEEPSPEED)
    for only in ((), ("--check", "torch_cuda_arch_list")):
        text = CliRunner().invoke(main, ["verify", "--python", str(script), *only])
        doc = CliRunner().invoke(main, ["verify", "--python", str(script), *only, "--json"])
        listed = json.loads(doc.output)["checks"]
        lines = [line for line in text.output.splitlines()[1:-1] if not line.startswith("     fix: ")]
        said = [(line.split()[1].rstrip(":"), line.split()[0].lower()) for line in lines]
        assert said == [(c["id"], c["status"]) for c in listed], text.output
        assert [i for i, _ in said] == [i for i in checks.IDS if not only or i in only], text.output
        counts = {s: sum(1 for c in listed if c["status"] == s) for s in ("pass", "warn", "fail", "skip")}
        assert text.output.splitlines()[-1] == ", ".join(f"{n} {s}" for s, n in counts.items()), text.output
        assert all(c["fix"] is None for c in listed if c["status"] in ("pass", "skip")), listed
    assert said == [("torch_cuda_arch_list", "skip")] and "\nwarn " not in text.output, text.output


def test_verify_names_the_interpreter_it_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 22: with no env active it said "verify the active environment" while it ran python3 from PATH."""
    monkeypatch.setattr(verify_run, "probe", lambda *a, **k: healthy())
    env = {"CONDA_PREFIX": None, "PATH": str(Path(sys.executable).parent)}
    done = CliRunner().invoke(main, ["verify", "--check", "shm"], env=env)
    first = done.output.splitlines()[0]
    assert first.startswith(f"verify {Path(sys.executable).parent}/python") and "on PATH" in first, done.output
    assert "active environment" not in done.output, done.output
    given = CliRunner().invoke(main, ["verify", "--python", sys.executable, "--check", "shm"])
    assert given.output.splitlines()[0] == f"verify {sys.executable} (given by --python)", given.output


def test_verify_python_takes_a_name_on_path_as_a_shell_does(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`--python python3` (a name, not a path) said "no python at 'python3'" on a host where python3 is on PATH (seen
    on the H200); a name no directory of PATH holds is still refused, and its fix runs."""
    monkeypatch.setattr(verify_run, "probe", lambda *a, **k: healthy())
    monkeypatch.chdir(tmp_path)  # no ./python3 here
    env = {"CONDA_PREFIX": None, "PATH": str(Path(sys.executable).parent)}
    done = CliRunner().invoke(main, ["verify", "--python", Path(sys.executable).name, "--check", "shm"], env=env)
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[0].startswith(f"verify {Path(sys.executable).parent}/"), done.output
    missing = CliRunner().invoke(main, ["verify", "--python", "nosuchpython9", "--check", "shm"], env=env)
    assert missing.exit_code == 2 and "nor on PATH" in missing.output, missing.output
    fixed = CliRunner().invoke(main, ["verify", "--python", "python3", "--check", "shm"], env=env)
    assert fixed.exit_code == 0, fixed.output


def test_a_crashing_probe_is_exit_2(tmp_path: Path) -> None:
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\necho 'Traceback: boom' >&2\nexit 3\n")
    script.chmod(0o755)
    result_ = CliRunner().invoke(main, ["verify", "--python", str(script)])
    assert result_.exit_code == 2 and "the probe crashed" in result_.output and "boom" in result_.output, result_.output


def test_check_filter_with_streaming(kb: KnowledgeBase, tmp_path: Path) -> None:
    """--check with a torch check prints only that check, never host checks on partial facts."""
    full = facts("cpu-venv-facts")
    host = {k: v for k, v in full.items() if k not in ("torch", "deepspeed")}
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\necho '{json.dumps({'partial': host})}'\necho '{json.dumps(full)}'\n")
    script.chmod(0o755)
    seen: list[str] = []
    _, _, results = verify_run.verify(
        kb,
        None,
        script,
        None,
        False,
        ("torch_cuda_build",),
        {"PATH": "/usr/bin:/bin"},
        on_check=lambda c: seen.append(c.id),
    )
    assert seen == ["torch_cuda_build"] and [c.id for c in results] == ["torch_cuda_build"]
    assert results[0].status == "fail"


def test_probe_output_in_one_read_is_not_lost(tmp_path: Path) -> None:
    """The partial line and the final facts arrive in one write (as they do when torch fails to import at once):
    both are read, in order."""
    fake = tmp_path / "python"
    partial = json.dumps({"partial": {"python": {"version": "3.11"}}})
    final = json.dumps({"python": {"version": "3.11"}, "torch": {"error": "No module named torch"}})
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n%s\\n' '{partial}' '{final}'\n")
    fake.chmod(0o755)
    seen: list[dict[str, object]] = []
    for _ in range(20):
        facts = verify_run.probe(fake, True, False, 10.0, {"PATH": "/usr/bin:/bin"}, (), seen.append)
        assert facts["torch"] == {"error": "No module named torch"}
    assert seen == [{"python": {"version": "3.11"}}] * 20


def test_op_libraries_reads_deepspeeds_version_from_conda_or_the_lock(kb: KnowledgeBase) -> None:
    """DeepSpeed not probed: its conda package, else the lock's PyPI part, tells which ops link what."""
    doc = {**healthy(), "deepspeed": None, "conda_meta": [*CONDA_META, {"name": "deepspeed", "version": "0.18.8"}]}
    assert result(kb, "op_libraries", doc).status == "fail"
    doc = {**healthy(), "deepspeed": None, "conda_meta": CONDA_META}
    assert result(kb, "op_libraries", doc, lock_pip=(_pip_record("0.19.8"),)).status == "pass"


def _pip_record(version: str) -> PipRecord:
    return PipRecord(
        "deepspeed", version, f"deepspeed-{version}.tar.gz", f"https://files.pythonhosted.org/deepspeed-{version}.tar.gz",
        "0" * 64,
    )  # fmt: skip


def test_the_shipped_no_driver_lock_fits_the_h200_it_was_made_for(kb: KnowledgeBase) -> None:
    """locks/h200 was made without --driver; the H200 capture's driver (580.159.04) fully supports its CUDA 12.9.
    The lock used to record __cuda 13.3 (the newest CUDA known), which made verify fail on this very host."""
    from conda_lock.lockfile import parse_conda_lock_file

    lock = Path(__file__).parent.parent / "locks" / "h200" / "conda-lock.yml"
    meta = parse_conda_lock_file(lock).metadata.custom_metadata or {}
    check = result(kb, "host_vs_lock", healthy(), lock_meta=meta)
    assert check.status == "pass", check.detail


def test_a_cuda_whose_full_support_driver_is_unknown_is_not_called_unsupported(kb: KnowledgeBase) -> None:
    """CUDA 13.4 publishes no full-support minimum: a 615 driver is not said to fall short, and no fix names
    a driver version the knowledge base does not have."""
    doc = edit("driver.version", "615.71.09")(edit("torch.cuda", "13.4")(healthy()))
    check = result(kb, "driver_supports_torch_cuda", doc)
    assert check.status == "warn" and "None" not in f"{check.detail} {check.fix}"
    assert "13.4" in check.detail and "does not know" in check.detail
    meta = {**LOCK_META, "envsolver_virtual_linux-64_cuda": "13.4"}
    check = result(kb, "host_vs_lock", edit("driver.version", "615.71.09")(healthy()), lock_meta=meta)
    assert check.status == "warn" and "does not know which driver fully supports CUDA 13.4" in check.detail
    assert check.fix


# --- boundaries both ways and the exact words where the message is the product (issue 14) ------------------------

FLOOR_META = {
    "envsolver_compute_capabilities": "9.0",
    "envsolver_driver_min_minor_compat": "575.51.03",
    "envsolver_virtual_linux-64_cuda": "12.9",
    "envsolver_virtual_linux-64_glibc": "2.28",
}
REMAKE = "remake the lock for this host: envsolver make --gpu auto"
MEETS = "this host meets the lock's assumptions for its driver "  # then the driver's version, glibc's, the GPUs


@pytest.mark.parametrize(
    ("change", "meta", "status", "detail"),
    [
        # A driver exactly at the lock's floor meets it; one patch below does not.
        (edit("driver.version", "575.51.03"), FLOOR_META, "pass", MEETS),
        (
            edit("driver.version", "575.51.02"),
            FLOOR_META,
            "fail",
            "driver 575.51.02 is older than the lock's floor 575.51.03",
        ),
        # Above the floor, but the lock was solved for a CUDA the driver runs only through minor-version compatibility.
        (
            edit("driver.version", "575.51.03"),
            {**FLOOR_META, "envsolver_driver_min_minor_compat": "525.60.13", "envsolver_virtual_linux-64_cuda": "13.0"},
            "fail",
            "the lock was solved for __cuda=13.0; driver 575.51.03 fully supports CUDA <= 12.9",
        ),
        # glibc: the lock's own version meets it, one minor below does not.
        (edit("glibc", "2.28"), FLOOR_META | {"envsolver_driver_min_minor_compat": "575"}, "pass", MEETS),
        (edit("glibc", "2.27"), FLOOR_META, "fail", "host glibc 2.27 is older than the lock's 2.28"),
        (
            same,
            {**FLOOR_META, "envsolver_compute_capabilities": "8.0;8.6"},
            "fail",
            "NVIDIA H200 (CC 9.0) is not a target of the lock (8.0, 8.6)",
        ),
        # The lock's arch list, under the one coverage rule (verify/gate.covering): an H200 (9.0) runs an 8.x lock's
        # kernels never, a 9.0a build's, and only the PTX of an 8.0+PTX one (compiled at first launch: a warning).
        (same, {**FLOOR_META, "envsolver_torch_cuda_arch_list": "9.0a"}, "pass", MEETS),
        (
            same,
            {**FLOOR_META, "envsolver_torch_cuda_arch_list": "8.0;8.6+PTX"},
            "warn",
            "NVIDIA H200 (CC 9.0) has no kernels in the lock's arch list, only the PTX of 8.6+PTX, compiled at first "
            "launch (slow, and PTX JIT fails on a driver older than the toolkit)",
        ),
        (
            same,
            {**FLOOR_META, "envsolver_torch_cuda_arch_list": "8.0;8.6", "envsolver_compute_capabilities": "9.0"},
            "fail",
            "NVIDIA H200 (CC 9.0) is not a target of the lock (8.0, 8.6)",
        ),
        (
            same,
            {**FLOOR_META, "envsolver_compute_capabilities": ""},
            "pass",
            MEETS + "580.159.04, glibc 2.39; not checked: the GPUs (the lock records no compute capabilities)",
        ),
    ],
)
def test_host_vs_lock_says_exactly_what_falls_short(
    kb: KnowledgeBase, change: Any, meta: dict[str, str], status: str, detail: str
) -> None:
    check = result(kb, "host_vs_lock", change(healthy()), lock_meta=meta)
    if status == "pass":  # what it compared, by name: the driver first, its version
        assert check.status == "pass" and check.detail.startswith(detail) and "glibc" in check.detail, check
    else:
        assert (check.status, check.detail) == (status, detail)
    assert check.fix == ("" if status == "pass" else REMAKE)


@pytest.mark.parametrize(
    ("cc", "arch_list", "status"),
    [
        ("10.0", ["sm_80", "sm_90", "compute_90"], "pass"),  # PTX only: compute_90 JIT-compiles for sm_100
        ("9.0", ["sm_80", "compute_90"], "pass"),  # PTX of its very CC
        ("8.6", ["sm_80"], "pass"),  # SASS of a lower minor of its major runs
        ("8.0", ["sm_86"], "fail"),  # SASS of a higher minor does not
        ("8.6", ["sm_90", "compute_90"], "fail"),  # PTX of a higher CC does not
        ("9.0", ["sm_80", "sm_86"], "fail"),  # SASS of another major does not
    ],
)
def test_arch_coverage_takes_sass_of_a_lower_minor_or_ptx_of_a_lower_cc(
    kb: KnowledgeBase, cc: str, arch_list: list[str], status: str
) -> None:
    doc = edit("torch.arch_list", arch_list)(
        edit("driver.gpus", [{"name": "GPU X", "compute_capability": cc}])(healthy())
    )
    check = result(kb, "arch_coverage", doc)
    archs = " ".join(arch_list)
    if status == "pass":
        assert (check.status, check.detail, check.fix) == ("pass", f"every visible GPU has SASS or PTX in {archs}", "")
    else:
        sm = cc.replace(".", "")
        assert (check.status, check.detail, check.fix) == (
            "fail",
            f"torch has no kernel for GPU X (sm_{sm}) (its archs: {archs}): 'no kernel image is available for "
            "execution on the device'",
            "install a torch build with SASS for these GPUs: envsolver make --gpu auto",
        )


def test_arch_coverage_names_only_the_gpus_without_a_kernel(kb: KnowledgeBase) -> None:
    gpus = [
        {"name": "NVIDIA A100", "compute_capability": "8.0"},
        {"name": "NVIDIA H200", "compute_capability": "9.0"},
        {"name": "odd", "compute_capability": "unknown"},
    ]
    doc = edit("torch.arch_list", ["sm_90"])(edit("driver.gpus", gpus)(healthy()))
    assert "no kernel for NVIDIA A100 (sm_80) (its archs: sm_90)" in result(kb, "arch_coverage", doc).detail


NO_DEEPSPEED = {"error": "ModuleNotFoundError: No module named 'deepspeed'", "distribution": None}
PY = "/opt/torch/.venv/bin/python3"  # the H200 capture's interpreter


@pytest.mark.parametrize(
    ("deepspeed", "ctx", "status", "detail", "fix"),
    [
        pytest.param(None, {}, "skip", "not probed (pass --deepspeed, or --gpu-test)", "", id="not-probed"),
        pytest.param(
            NO_DEEPSPEED,
            {},
            "skip",
            "DeepSpeed is not installed in this python (nothing asks for it: no lock, no envsolver install)",
            "",
            id="absent-not-wanted",
        ),
        pytest.param(
            NO_DEEPSPEED,
            {
                "lock_meta": {
                    "envsolver_pip_not_locked": "einops deepspeed==0.19.8",
                    "envsolver_torch_cuda_arch_list": "8.0;9.0+PTX",
                }
            },
            "fail",
            "DeepSpeed is not installed in this python; the lock takes DeepSpeed 0.19.8 from PyPI",
            f"{PY} -m pip install --no-deps deepspeed==0.19.8 && envsolver hook -p /opt/torch/.venv "
            "--arch-list '8.0;9.0+PTX' (DeepSpeed builds no ops when pip installs it on Linux; the hook builds and "
            "registers them)",
            id="absent-pip",
        ),
        pytest.param(
            NO_DEEPSPEED,
            {
                "lock_meta": {"envsolver_torch_cuda_arch_list": "9.0"},
                "lock_entries": LOCK,
                "lock_pip": (
                    PipRecord(
                        "deepspeed",
                        "0.19.8",
                        "deepspeed-0.19.8.tar.gz",
                        "https://files.pythonhosted.org/packages/bc/d8/x/deepspeed-0.19.8.tar.gz",
                        "9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af",
                    ),
                ),
            },
            "fail",
            "DeepSpeed is not installed in this python; the lock takes DeepSpeed 0.19.8 from PyPI "
            "(deepspeed-0.19.8.tar.gz, sha256 9e491abd0827…)",
            "envsolver install conda-lock.yml -p /opt/torch/.venv (installs the lock's PyPI part by its sha256, then "
            "runs the hook, which builds and registers the ops)",
            id="absent-locked-pypi",
        ),
        pytest.param(
            NO_DEEPSPEED,
            {
                "lock_meta": {"envsolver_torch_cuda_arch_list": "9.0"},
                "lock_entries": (
                    LockEntry("deepspeed", "0.18.8", "cuda130_py312_h0", "linux-64", "linux-64", "u", None, None),
                ),
            },
            "fail",
            "DeepSpeed is not installed in this python; the lock holds deepspeed 0.18.8",
            "envsolver install conda-lock.yml -p /opt/torch/.venv (installs what the lock holds and is missing)",
            id="absent-conda",
        ),
        pytest.param(
            NO_DEEPSPEED,
            {"lock_meta": {"envsolver_torch_cuda_arch_list": "9.0"}},
            "warn",
            "DeepSpeed is not installed in this python; the environment's metadata does not say whether its lock "
            "holds DeepSpeed",
            "envsolver install conda-lock.yml -p /opt/torch/.venv (installs DeepSpeed if the lock holds it)",
            id="absent-meta-only",
        ),
        pytest.param(
            NO_DEEPSPEED,
            {"lock_meta": {"envsolver_torch_cuda_arch_list": "9.0"}, "lock_entries": LOCK},
            "skip",
            "DeepSpeed is not installed in this python, and the lock holds none",
            "",
            id="absent-not-in-lock",
        ),
    ],
)
def test_deepspeed_ops_without_deepspeed(
    kb: KnowledgeBase, deepspeed: dict[str, Any] | None, ctx: dict[str, Any], status: str, detail: str, fix: str
) -> None:
    wanted = bool(ctx.get("lock_meta"))
    check = result(kb, "deepspeed_ops", {**healthy(), "deepspeed": deepspeed}, deepspeed_wanted=wanted, **ctx)
    assert (check.status, check.detail, check.fix) == (status, detail, fix)


def _missing(names: list[str], conda: bool) -> dict[str, Any]:
    doc = healthy()
    doc["deepspeed"] = {
        "error": f"ModuleNotFoundError: No module named '{names[0]}'",
        "distribution": "0.19.8",
        "requires_missing": names,
    }
    if conda:
        doc["conda_meta"] = CONDA_META
    return doc


def test_deepspeed_that_lacks_its_requirements_is_fixed_by_installing_them(kb: KnowledgeBase) -> None:
    """DeepSpeed installed but its import fails on a requirement pip never installed (pip install --no-deps): the fix
    installs exactly those, with conda-forge's names in a conda env and PyPI's in any other."""
    in_venv = result(kb, "deepspeed_ops", _missing(["hjson", "py-cpuinfo"], conda=False))
    assert in_venv.status == "warn"
    assert in_venv.detail == (
        "DeepSpeed 0.19.8 does not import: ModuleNotFoundError: No module named 'hjson'; "
        "its requirements hjson, py-cpuinfo are not installed"
    )
    assert in_venv.fix == f"{PY} -m pip install hjson py-cpuinfo"
    in_conda = result(kb, "deepspeed_ops", _missing(["hjson", "msgpack", "leftpad"], conda=True), deepspeed_wanted=True)
    assert in_conda.status == "fail"
    assert in_conda.fix == (
        f"conda install -p /opt/torch/.venv -c conda-forge hjson-py msgpack-python && {PY} -m pip install leftpad"
    )


def test_deepspeed_that_does_not_import_for_another_reason_is_reinstalled(kb: KnowledgeBase) -> None:
    doc = healthy()
    doc["deepspeed"] = {"error": "ImportError: boom", "distribution": "0.19.8", "requires_missing": []}
    check = result(kb, "deepspeed_ops", doc)
    assert check.detail == "DeepSpeed 0.19.8 does not import: ImportError: boom"
    assert check.fix == f"{PY} -m pip install --no-deps --force-reinstall deepspeed==0.19.8"
    doc["conda_meta"] = [*CONDA_META, {"name": "deepspeed", "version": "0.18.8", "build": "cuda130_h0"}]
    doc["deepspeed"]["distribution"] = "0.18.8"
    check = result(kb, "deepspeed_ops", doc)
    assert check.fix == "conda install -p /opt/torch/.venv -c conda-forge --force-reinstall deepspeed=0.18.8"


def test_deepspeed_ops_with_a_cpu_torch_says_torch_is_the_problem(kb: KnowledgeBase) -> None:
    """A CPU-only torch: DeepSpeed's CUDA ops can be neither built nor used, whatever DeepSpeed's accelerator; the
    fix is torch_cuda_build's, never `envsolver hook` (whose pre-flight refuses a CPU torch)."""
    for accelerator in ("cpu", "cuda"):
        doc = edit("torch.cuda", None)(edit("deepspeed.accelerator", accelerator)(healthy()))
        check = result(kb, "deepspeed_ops", doc)
        assert check.status == "fail"
        assert check.detail == (
            f"DeepSpeed 0.19.5 ({accelerator!r} accelerator) cannot build or use its CUDA ops: "
            f"torch {doc['torch']['version']} is a CPU-only build"
        )
        assert check.fix == result(kb, "torch_cuda_build", doc).fix and "envsolver hook" not in check.fix


@pytest.mark.parametrize(
    ("ds_accelerator", "fix"),
    [
        ("cpu", "export DS_ACCELERATOR=cuda (DS_ACCELERATOR=cpu is set; envsolver hook's activation sets cuda)"),
        (
            None,
            "export DS_ACCELERATOR=cuda (DeepSpeed picks its CPU accelerator where it sees no GPU; envsolver hook's "
            "activation sets it)",
        ),
    ],
)
def test_deepspeed_on_its_cpu_accelerator_with_a_cuda_torch(
    kb: KnowledgeBase, ds_accelerator: str | None, fix: str
) -> None:
    doc = edit("env.DS_ACCELERATOR", ds_accelerator)(edit("deepspeed.accelerator", "cpu")(healthy()))
    check = result(kb, "deepspeed_ops", doc)
    assert (check.status, check.fix) == ("fail", fix)
    assert check.detail == "DeepSpeed 0.19.5 selected its 'cpu' accelerator, so its CUDA ops are not used"


def test_a_deepspeed_fact_the_probe_could_not_read_does_not_hide_the_rest(kb: KnowledgeBase) -> None:
    """One try per fact: installed_ops unreadable (null with its error) still leaves FusedAdam's verdict."""
    doc = healthy()
    doc["deepspeed"]["installed_ops"] = None
    doc["deepspeed"]["installed_ops_error"] = "ImportError: cannot import name 'installed_ops'"
    check = result(kb, "deepspeed_ops", doc)
    assert check.status == "pass" and "FusedAdam loads" in check.detail


def test_op_libraries_without_any_deepspeed_version_is_skipped(kb: KnowledgeBase) -> None:
    doc = {**healthy(), "deepspeed": {"error": "No module named 'deepspeed'"}, "conda_meta": CONDA_META}
    check = result(kb, "op_libraries", doc)
    assert (check.status, check.detail) == ("skip", "DeepSpeed's version is unknown (pass --deepspeed, or --lock)")


def test_extensions_cache_marks_only_other_builds_stale_and_the_fix_removes_exactly_them(kb: KnowledgeBase) -> None:
    entries = ["py312_cu130", "py312_cu126", "py311_cpu", "fused_adam"]
    doc = edit("extensions_cache", {"root": "/home/a b/.cache/torch_extensions", "entries": entries})(healthy())
    check = result(kb, "extensions_cache", doc)
    assert check.status == "warn"
    assert check.detail == (
        "/home/a b/.cache/torch_extensions holds ops built for another Python, torch or CUDA: py312_cu126, "
        "py311_cpu (this env is py312_cu130)"
    )
    assert check.fix == (
        "rm -rf '/home/a b/.cache/torch_extensions/py312_cu126' '/home/a b/.cache/torch_extensions/py311_cpu'"
    )


@pytest.mark.parametrize(
    ("cuda", "entries", "status"),
    [
        ("13.0", ["py312_cu130"], "pass"),
        (None, ["py312_cpu"], "pass"),
        (None, ["py312_cu130"], "warn"),
        ("12.6", ["py312_cu130"], "warn"),
    ],
)
def test_extensions_cache_knows_the_envs_own_build(
    kb: KnowledgeBase, cuda: str | None, entries: list[str], status: str
) -> None:
    doc = edit("torch.cuda", cuda)(edit("extensions_cache", {"root": "/c", "entries": entries})(healthy()))
    check = result(kb, "extensions_cache", doc)
    assert check.status == status
    if status == "pass":
        assert check.detail == f"/c: {', '.join(entries)}"


@pytest.mark.parametrize(
    ("size", "status", "detail"),
    [
        (2**30, "pass", "/dev/shm is 1.0 GiB"),
        (3 * 2**29, "pass", "/dev/shm is 1.5 GiB"),
        (2**30 - 2**24, "warn", "/dev/shm is 0.98 GiB: DataLoader workers can fail ('bus error')"),
        (2**29, "warn", "/dev/shm is 0.50 GiB: DataLoader workers can fail ('bus error')"),
        (None, "skip", "/dev/shm not readable"),
    ],
)
def test_shm_below_one_gib_warns(kb: KnowledgeBase, size: int | None, status: str, detail: str) -> None:
    check = result(kb, "shm", edit("shm.bytes", size)(healthy()))
    assert (check.status, check.detail) == (status, detail)
    fix = "give the job more shared memory (e.g. docker --shm-size=8g, or num_workers=0)"
    assert check.fix == (fix if status == "warn" else "")


# A lock's metadata as make writes it (sorted; locks/h200): only envsolver_virtual_<platform>_cuda is __cuda.
REAL_META = {
    "envsolver_compute_capabilities": "9.0",
    "envsolver_cuda_version": "12.9",
    "envsolver_driver_min_full": "575.51.03",
    "envsolver_driver_min_minor_compat": "525.60.13",
    "envsolver_torch_cuda_arch_list": "9.0+PTX",
    "envsolver_virtual_linux-64_archspec": "1 x86_64",
    "envsolver_virtual_linux-64_cuda": "12.9",
    "envsolver_virtual_linux-64_cuda_arch": "9.0",
    "envsolver_virtual_linux-64_glibc": "2.28",
}


def test_host_vs_lock_reads_the_virtual_cuda_among_the_locks_other_keys(kb: KnowledgeBase) -> None:
    check = result(kb, "host_vs_lock", edit("driver.version", "550.54.14")(healthy()), lock_meta=REAL_META)
    assert (check.status, check.detail) == (
        "fail",
        "the lock was solved for __cuda=12.9; driver 550.54.14 fully supports CUDA <= 12.4",
    )


def test_host_vs_lock_claims_only_what_it_compared(kb: KnowledgeBase) -> None:
    """Issue 22: on a host with no driver and no GPU it passed with "this host meets the lock's driver, glibc and
    GPU assumptions" while only glibc was compared. It says what it compared and what not; nothing: skip."""
    no_driver = edit("driver", {"source": None, "version": None, "cuda": None, "gpus": []})(healthy())
    check = result(kb, "host_vs_lock", no_driver, lock_meta=REAL_META)
    assert check.status == "pass" and "driver, glibc and GPU" not in check.detail, check
    assert check.detail == (
        "this host meets the lock's assumptions for its glibc 2.39; not checked: the driver (none found), "
        "the GPUs (none visible)"
    ), check.detail
    nothing = edit("glibc", None)(no_driver)
    check = result(kb, "host_vs_lock", nothing, lock_meta=REAL_META)
    assert check.status == "skip" and check.detail.startswith("nothing to compare with the lock: "), check
    assert "the driver (none found)" in check.detail and "glibc (its version is unknown)" in check.detail, check


def _installed(names: list[str]) -> list[dict[str, str]]:
    return [{"name": n, "version": "1", "build": "h0"} for n in names]


def _lock(names: list[str]) -> tuple[LockEntry, ...]:
    return tuple(LockEntry(n, "1", "h0", "linux-64", "linux-64", "u", None, None) for n in names)


@pytest.mark.parametrize(
    ("locked", "installed", "detail"),
    [
        ([f"p{i}" for i in range(9)], [], "missing: p0, p1, p2, p3, p4, p5, p6, p7 …"),
        ([f"p{i}" for i in range(8)], [], "missing: p0, p1, p2, p3, p4, p5, p6, p7"),
        ([], [f"x{i}" for i in range(9)], "extra: x0, x1, x2, x3, x4, x5, x6, x7 …"),
        ([], [f"x{i}" for i in range(8)], "extra: x0, x1, x2, x3, x4, x5, x6, x7"),
    ],
)
def test_lock_drift_lists_eight_names_then_an_ellipsis(
    kb: KnowledgeBase, locked: list[str], installed: list[str], detail: str
) -> None:
    doc = {**healthy(), "conda_meta": _installed(installed)}
    check = result(kb, "lock_drift", doc, lock_entries=_lock(locked) or _lock(["zz"]))
    assert check.detail.replace("; missing: zz", "").replace("missing: zz; ", "") == detail


def test_lock_drift_names_at_most_eight_changed_packages(kb: KnowledgeBase) -> None:
    names = [f"c{i}" for i in range(9)]
    doc = {**healthy(), "conda_meta": [{"name": n, "version": "2", "build": "h0"} for n in names]}
    check = result(kb, "lock_drift", doc, lock_entries=_lock(names))
    assert check.detail == "changed: " + ", ".join(f"c{i} 2 (lock 1)" for i in range(8))


def test_activation_resolve_gives_what_the_shell_would(tmp_path: Path) -> None:
    from envsolver.hook import activation

    parts = activation.settings("9.0;8.0+PTX", "x86_64-linux")
    env = {"CONDA_PREFIX": "/p", "CPATH": "/opt/include"}
    assert {name: activation.resolve(value, env) for name, value in parts.items()} == {
        "CUDA_HOME": "/p",
        "CPATH": "/p/targets/x86_64-linux/include:/opt/include",
        "TORCH_CUDA_ARCH_LIST": "9.0;8.0+PTX",
        "DS_ACCELERATOR": "cuda",
        "TORCH_EXTENSIONS_DIR": "/p/var/cache/torch_extensions",
    }
    assert activation.resolve(parts["CPATH"], {"CONDA_PREFIX": "/p", "CPATH": ""}) == "/p/targets/x86_64-linux/include"
    assert activation.resolve(parts["CPATH"], {}) == "/targets/x86_64-linux/include"


def _unset(doc: dict[str, Any]) -> dict[str, Any]:
    return edit("env.TORCH_CUDA_ARCH_LIST", None)(doc)


def test_unset_arch_list_is_quiet_when_deepspeed_is_absent(kb: KnowledgeBase) -> None:
    """The H200 image has no DeepSpeed (its probe says so, and no package or lock names one): nothing builds ops."""
    check = result(kb, "torch_cuda_arch_list", _unset(facts()))
    assert (check.status, check.detail) == ("skip", "TORCH_CUDA_ARCH_LIST is not set")


@pytest.mark.parametrize(
    ("archs", "gpus", "fix"),
    [
        (
            None,
            [],
            "export TORCH_CUDA_ARCH_LIST='<the compute nodes' compute capabilities, e.g. 8.0;9.0+PTX>' (nvcc builds "
            "sm_75 and newer)",
        ),
        (
            [80, 90, 100],
            [],
            "export TORCH_CUDA_ARCH_LIST='<the compute nodes' compute capabilities, e.g. 8.0;9.0+PTX>' (nvcc builds "
            "sm_80 and newer)",
        ),
        (
            None,
            [
                {"name": "NVIDIA A100", "compute_capability": "8.0"},
                {"name": "NVIDIA H200", "compute_capability": "9.0"},
            ],
            "export TORCH_CUDA_ARCH_LIST='8.0;9.0+PTX' (this node's GPUs)",
        ),
        (
            [90, 100],
            [
                {"name": "NVIDIA A100", "compute_capability": "8.0"},
                {"name": "NVIDIA H200", "compute_capability": "9.0"},
            ],
            "export TORCH_CUDA_ARCH_LIST='9.0+PTX' (this node's GPUs)",
        ),
    ],
)
def test_unset_arch_list_with_deepspeed_not_probed_takes_the_newest_releases_defaults(
    kb: KnowledgeBase, archs: list[int] | None, gpus: list[dict[str, str]], fix: str
) -> None:
    """DeepSpeed's version unknown (not probed, no package, no lock): the newest release's defaults for nvcc 13
    (6.0;6.1;7.0), which nvcc 13 cannot build; the fix takes what this nvcc builds, from the probe or the KB."""
    doc = edit("nvcc.archs", archs)(edit("driver.gpus", gpus)(_unset({**facts(), "deepspeed": None})))
    check = result(kb, "torch_cuda_arch_list", doc)
    assert check.status == "warn"
    assert check.detail.startswith("TORCH_CUDA_ARCH_LIST is not set: DeepSpeed 0.16.4-0.19.8's op builder then ")
    assert check.fix == fix


@pytest.mark.parametrize(
    "change",
    [
        edit("nvcc.version", "12.9"),  # no default-CC row for CUDA 12 in the KB
        edit("nvcc.version", None),  # nvcc unknown
        lambda d: edit("nvcc.archs", None)(edit("nvcc.version", "13.9")(d)),  # an nvcc the KB does not know
    ],
)
def test_unset_arch_list_is_skipped_without_what_it_needs(kb: KnowledgeBase, change: Any) -> None:
    check = result(kb, "torch_cuda_arch_list", change(_unset({**facts(), "deepspeed": None})))
    assert (check.status, check.detail) == ("skip", "TORCH_CUDA_ARCH_LIST is not set")


def test_deepspeed_version_skips_a_malformed_version() -> None:
    from envsolver.kb import default_kb
    from envsolver.verify.checks_deepspeed import deepspeed_version

    def version(pip: str) -> str | None:
        found = deepspeed_version(checks.Context({}, default_kb(), lock_pip=(_pip_record(pip),)))
        return str(found) if found else None

    assert version("0.19.8") == "0.19.8"
    assert version("0.19.8==1") is None
    assert version("latest") is None


def test_op_libraries_names_the_first_library_the_build_stops_at(kb: KnowledgeBase) -> None:
    doc = {**healthy(), "conda_meta": [{"name": "cuda-version", "version": "13.0", "build": "h0"}]}
    check = result(kb, "op_libraries", doc)
    assert check.detail == (
        "DeepSpeed 0.19.5: cpu_adam links -lcurand (libcurand.so is in libcurand-dev), cpu_adam links -lcublas "
        "(libcublas.so is in libcublas-dev), cpu_adam links -lcudart (libcudart.so is in cuda-cudart-dev); not "
        "installed, so the build stops with 'cannot find -lcurand'"
    )
    assert check.fix == (
        "conda install -p /opt/torch/.venv -c conda-forge libcurand-dev libcublas-dev cuda-cudart-dev cuda-version=13.0"
    )


def test_driver_and_host_compiler_details_word_for_word(kb: KnowledgeBase) -> None:
    assert result(kb, "driver", healthy()).detail == (
        "driver 580.159.04 (from nvidia-smi) supports CUDA <= 13.0; nvidia-smi says CUDA 13.0"
    )
    assert result(kb, "driver", edit("driver.cuda", None)(healthy())).detail == (
        "driver 580.159.04 (from nvidia-smi) supports CUDA <= 13.0"
    )
    check = result(kb, "host_compiler", edit("nvcc.version", None)(healthy()))
    assert (check.status, check.detail) == (
        "skip",
        "/opt/gcc/bin/g++: g++-real (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0 (no nvcc to compare with)",
    )
    # A compiler that gives no GCC version is no compiler for the build (main's be95b95): a fail with the
    # packages below nvcc 13.0's GCC limit (15), for this machine's conda arch.
    where = "(CXX, the env's conda c++, c++ or g++ on PATH)"
    for change, found, arch in (
        (edit("compiler.major", None), "/opt/gcc/bin/g++ gives no GCC version", "64"),
        (edit("compiler.path", None), "no C++ compiler found", "64"),
        (
            lambda d: edit("python.machine", "aarch64")(edit("compiler.path", None)(d)),
            "no C++ compiler found",
            "aarch64",
        ),
    ):
        check = result(kb, "host_compiler", change(healthy()))
        assert (check.status, check.detail, check.fix) == (
            "fail",
            f"{found} {where}",
            f"conda install -p /opt/torch/.venv -c conda-forge 'gxx<16' 'gxx_linux-{arch}<16'",
        )


def test_a_gcc_too_new_is_fixed_in_the_env_for_its_machines_platform(kb: KnowledgeBase) -> None:
    """The fix for a GCC newer than nvcc accepts names the environment (-p) and the compiler package of its
    platform: before, it was `conda install -c conda-forge 'gxx<16' 'gxx_linux-64<16'` on every machine, into
    whatever environment was active."""
    for machine, arch in (("x86_64", "64"), ("aarch64", "aarch64")):
        check = result(kb, "host_compiler", edit("python.machine", machine)(edit("compiler.major", 16)(healthy())))
        assert (check.status, check.fix) == (
            "fail",
            f"conda install -p /opt/torch/.venv -c conda-forge 'gxx<16' 'gxx_linux-{arch}<16'",
        ), check


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        ("7.0;9.0", "export TORCH_CUDA_ARCH_LIST='9.0+PTX' (envsolver hook sets it from the lock)"),
        # nothing in it is buildable: another toolkit, not an export (main's be95b95)
        ("7.0", "use a toolkit that builds these GPUs: regenerate the env with envsolver make --gpu <your GPUs>"),
    ],
)
def test_a_bad_arch_list_is_fixed_with_what_nvcc_can_build(kb: KnowledgeBase, value: str, fix: str) -> None:
    check = result(kb, "torch_cuda_arch_list", edit("env.TORCH_CUDA_ARCH_LIST", value)(healthy()))
    assert (check.status, check.fix) == ("fail", fix)
    unknown = edit("nvcc.archs", None)(edit("env.TORCH_CUDA_ARCH_LIST", "8.0")(healthy()))
    assert result(kb, "torch_cuda_arch_list", unknown).fix == (
        "export TORCH_CUDA_ARCH_LIST='8.0+PTX' (envsolver hook sets it from the lock)"
    )


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        (
            same,
            "torch 2.11.0+cu130 at /opt/torch/.venv/lib/python3.12/site-packages/torch/__init__.py (installed by uv)",
        ),
        (  # the torch that imports says who installed it, though conda-meta has pytorch (pip_conda_mix says more)
            lambda d: {**d, "conda_meta": [{"name": "pytorch", "version": "2.11.0", "build": "h0"}]},
            "torch 2.11.0+cu130 at /opt/torch/.venv/lib/python3.12/site-packages/torch/__init__.py (installed by uv)",
        ),
        (  # a conda package's torch without an INSTALLER file
            lambda d: {
                **{k: v for k, v in d.items() if k != "torch_installer"},
                "conda_meta": [{"name": "pytorch", "version": "2.11.0", "build": "h0"}],
            },
            "torch 2.11.0+cu130 at /opt/torch/.venv/lib/python3.12/site-packages/torch/__init__.py (installed by "
            "conda)",
        ),
        (
            lambda d: {k: v for k, v in d.items() if k != "torch_installer"},
            "torch 2.11.0+cu130 at /opt/torch/.venv/lib/python3.12/site-packages/torch/__init__.py (installed by "
            "unknown)",
        ),
        (edit("torch", {"error": "ImportError: libcudnn.so.9"}), "torch does not import: ImportError: libcudnn.so.9"),
        (
            lambda d: {**edit("torch", None)(d), "torch_error": "the probe timed out"},
            "torch does not import: the probe timed out",
        ),
    ],
)
def test_torch_import_says_where_torch_came_from_or_why_it_failed(kb: KnowledgeBase, change: Any, detail: str) -> None:
    assert result(kb, "torch_import", change(healthy())).detail == detail


def test_a_torch_cuda_the_knowledge_base_lacks_is_judged_by_its_major(kb: KnowledgeBase) -> None:
    check = result(
        kb, "driver_supports_torch_cuda", edit("driver.version", "535.104.05")(edit("torch.cuda", "12.7")(healthy()))
    )
    assert (check.status, check.detail, check.fix) == (
        "warn",
        "driver 535.104.05 runs CUDA 12.7 only through minor-version compatibility: PTX JIT of code built with a "
        "newer toolkit fails",
        "upgrade the driver to one that fully supports CUDA 12.7",
    )


@pytest.mark.parametrize(
    ("loaded", "offered", "status", "detail"),
    [
        (["/env/lib/libcudart.so.12"], ["/env/lib/libcudart.so"], "pass", "torch loaded /env/lib/libcudart.so.12"),
        (
            ["/env/lib/libcudart.so.12"],
            ["/env/lib64/libcudart.so.11.0"],
            "warn",
            "torch loaded /env/lib/libcudart.so.12; LD_LIBRARY_PATH also offers /env/lib64/libcudart.so.11.0",
        ),
        (["/a/libcudart.so.12", "/b/libcudart.so.13"], [], "pass", "torch loaded /a/libcudart.so.12"),
        (
            ["/a/libcudart.so.12", "/b/libcudart.so.13"],
            ["/c/libcudart.so.12"],
            "warn",
            "torch loaded /a/libcudart.so.12; LD_LIBRARY_PATH also offers /c/libcudart.so.12",
        ),
    ],
)
def test_libcudart_shadowing_is_judged_by_directory(
    kb: KnowledgeBase, loaded: list[str], offered: list[str], status: str, detail: str
) -> None:
    doc = {**edit("torch.loaded_libs", loaded)(healthy()), "ld_library_path_cudart": offered}
    check = result(kb, "libcudart", doc)
    assert (check.status, check.detail) == (status, detail)


@pytest.mark.parametrize("check_id", ["cudnn", "nccl", "libcudart"])
def test_cuda_library_checks_skip_a_cpu_torch(kb: KnowledgeBase, check_id: str) -> None:
    check = result(kb, check_id, edit("torch.cuda", None)(healthy()))
    assert (check.status, check.detail) == ("skip", "needs a CUDA torch")


@pytest.mark.parametrize(
    ("gpu_test", "gpu", "status", "detail"),
    [
        (False, {"max_abs_diff": 0.5}, "pass", "DeepSpeed 0.19.5: FusedAdam loads in 0.020 s; prebuilt: fused_adam"),
        (
            True,
            {"max_abs_diff": 1e-5},
            "pass",
            "DeepSpeed 0.19.5: FusedAdam loads in 0.020 s; prebuilt: fused_adam; 5 FusedAdam steps match AdamW "
            "(max |diff| 1.0e-05)",
        ),
        (True, {"max_abs_diff": 1.1e-5}, "fail", "FusedAdam vs torch.optim.AdamW: 1.1e-05"),
        (
            True,
            {"max_abs_diff": None, "error": "CUDA error: out of memory"},
            "fail",
            "FusedAdam vs torch.optim.AdamW: CUDA error: out of memory",
        ),
    ],
)
def test_deepspeed_ops_judges_the_gpu_test_only_when_asked(
    kb: KnowledgeBase, gpu_test: bool, gpu: dict[str, Any], status: str, detail: str
) -> None:
    doc = healthy()
    doc["deepspeed"]["installed_ops"] = {"fused_adam": True, "cpu_adam": False}
    doc["gpu_test"] = gpu
    check = result(kb, "deepspeed_ops", doc, gpu_test=gpu_test)
    assert (check.status, check.detail) == (status, detail)


def test_deepspeed_ops_pass_without_prebuilt_ops_or_a_load_time(kb: KnowledgeBase) -> None:
    doc = healthy()
    doc["deepspeed"]["installed_ops"] = {"fused_adam": False}
    doc["deepspeed"].pop("fused_adam_load_seconds")
    assert result(kb, "deepspeed_ops", doc).detail == "DeepSpeed 0.19.5: FusedAdam loads in 0.000 s"


def test_verify_gains_the_hooks_prefix_toolkit_rule(tmp_path: Path) -> None:
    """The rule the hook's activation follows is a verify check too: a conda prefix without nvcc is named, with
    the packages to install (from the KB) and the hook to run again."""
    from tests.test_hook import fake_prefix

    prefix = fake_prefix(tmp_path, nvcc=None, headers=("cuda_runtime_api.h",))
    result = CliRunner().invoke(main, ["verify", "-p", str(prefix), "--check", "prefix_toolkit", "--json"])
    check = json.loads(result.stdout)["checks"][0]
    assert check["id"] == "prefix_toolkit" and check["status"] == "warn"
    assert "no nvcc in" in check["detail"] and "cusparse.h" in check["detail"]
    packages = "cuda-nvcc cuda-cudart-dev cuda-profiler-api libcublas-dev libcurand-dev libcusolver-dev libcusparse-dev"
    assert check["fix"].startswith(f"conda install -p {prefix} -c conda-forge {packages} ")  # verify also wants cuda.h
    assert check["fix"].endswith(f"cuda-version=13.0, then envsolver hook -p {prefix}")


def test_the_headers_fix_installs_nvcc_too_when_the_prefix_has_none(kb: KnowledgeBase) -> None:
    """The hook's activation adds the prefix's include dir to CPATH only when the prefix holds nvcc as well
    (prefix_toolkit): a fix that installed the headers alone would leave them unfound."""
    missing = {**healthy(), "headers": {**healthy()["headers"], "cusparse.h": None}}
    for has_nvcc, wanted in ((False, True), (True, False)):
        doc = {**missing, "prefix_toolkit": {"prefix": "/envs/t", "conda": True, "nvcc": {"exists": has_nvcc}}}
        fix = result(kb, "headers", doc).fix
        assert fix.startswith("conda install -p ")
        assert (f" {kb.nvcc_package.value} " in fix) is wanted
        assert "libcusparse-dev" in fix
    no_probe = result(kb, "headers", missing).fix
    assert kb.nvcc_package.value not in no_probe


# --- the hook's rules as verify checks (main's be95b95), word for word (issue 14) ---------------------------------

INCOMPLETE = {
    "prefix": "/opt/my env",
    "conda": True,
    "nvcc": {"exists": False},
    "missing": ["cusparse.h", "cuda_runtime_api.h", "curand.h"],
    "include_dir": None,
    "complete": False,
}
NO_TOOLKIT = (
    "/opt/my env holds no complete CUDA toolkit (no nvcc in /opt/my env/bin; no cusparse.h, cuda_runtime_api.h, "
    "curand.h in /opt/my env/targets/<target>/include): the hook's activation leaves CUDA_HOME and CPATH as they "
    "are, so "
)
ALL_PACKAGES = "cuda-nvcc cuda-cudart-dev libcurand-dev libcusparse-dev"


@pytest.mark.parametrize(
    ("toolkit", "status", "detail"),
    [
        (None, "skip", "not probed"),
        ({"prefix": ""}, "skip", "not probed"),
        ({"prefix": "/p", "conda": False}, "skip", "/p is not a conda prefix (no conda-meta/)"),
        (
            {"prefix": "/p", "conda": True, "complete": True, "nvcc": {"version": "13.0", "exists": True}},
            "pass",
            "/p holds nvcc 13.0 and the op headers in /p/targets/<target>/include: the hook's activation sets "
            "CUDA_HOME and CPATH to them",
        ),
        (
            {"prefix": "/p", "conda": True, "complete": True, "nvcc": {"version": "13.0"}, "include_dir": "/p/inc"},
            "pass",
            "/p holds nvcc 13.0 and the op headers in /p/inc: the hook's activation sets CUDA_HOME and CPATH to them",
        ),
    ],
)
def test_prefix_toolkit_skips_and_passes_word_for_word(
    kb: KnowledgeBase, toolkit: dict[str, Any] | None, status: str, detail: str
) -> None:
    check = result(kb, "prefix_toolkit", edit("prefix_toolkit", toolkit)(healthy()))
    assert (check.status, check.detail, check.fix) == (status, detail, "")


@pytest.mark.parametrize(
    ("change", "detail", "fix"),
    [
        (
            same,
            NO_TOOLKIT + "op builds use CUDA_HOME=/usr/local/cuda (from CUDA_HOME)",
            f"conda install -p '/opt/my env' -c conda-forge {ALL_PACKAGES} cuda-version=13.0, "
            "then envsolver hook -p '/opt/my env'",
        ),
        (  # nvcc there, headers not: only the headers' packages, where the probe looked
            lambda d: edit("prefix_toolkit.nvcc", {"exists": True})(edit("prefix_toolkit.include_dir", "/p/inc")(d)),
            "/opt/my env holds no complete CUDA toolkit (no cusparse.h, cuda_runtime_api.h, curand.h in /p/inc): the "
            "hook's activation leaves CUDA_HOME and CPATH as they are, so op builds use CUDA_HOME=/usr/local/cuda "
            "(from CUDA_HOME)",
            "conda install -p '/opt/my env' -c conda-forge cuda-cudart-dev libcurand-dev libcusparse-dev "
            "cuda-version=13.0, then envsolver hook -p '/opt/my env'",
        ),
        (  # headers there, nvcc not: nvcc's package only
            edit("prefix_toolkit.missing", []),
            "/opt/my env holds no complete CUDA toolkit (no nvcc in /opt/my env/bin): the hook's activation leaves "
            "CUDA_HOME and CPATH as they are, so op builds use CUDA_HOME=/usr/local/cuda (from CUDA_HOME)",
            "conda install -p '/opt/my env' -c conda-forge cuda-nvcc cuda-version=13.0, then envsolver hook -p "
            "'/opt/my env'",
        ),
        (
            edit("cuda_home", {}),
            NO_TOOLKIT + "op builds find no CUDA toolkit",
            f"conda install -p '/opt/my env' -c conda-forge {ALL_PACKAGES} cuda-version=13.0, "
            "then envsolver hook -p '/opt/my env'",
        ),
        (  # the env's cuda-version package pins the toolkit before torch's CUDA does
            edit("conda_meta", [{"name": "cuda-version", "version": "12.9", "build": "h0"}]),
            NO_TOOLKIT + "op builds use CUDA_HOME=/usr/local/cuda (from CUDA_HOME)",
            f"conda install -p '/opt/my env' -c conda-forge {ALL_PACKAGES} cuda-version=12.9, "
            "then envsolver hook -p '/opt/my env'",
        ),
        (  # no CUDA known at all: no pin rather than a wrong one
            edit("torch.cuda", None),
            NO_TOOLKIT + "op builds use CUDA_HOME=/usr/local/cuda (from CUDA_HOME)",
            f"conda install -p '/opt/my env' -c conda-forge {ALL_PACKAGES}, then envsolver hook -p '/opt/my env'",
        ),
    ],
)
def test_prefix_toolkit_names_what_is_missing_and_the_packages_word_for_word(
    kb: KnowledgeBase, change: Any, detail: str, fix: str
) -> None:
    doc = change(edit("prefix_toolkit", copy.deepcopy(INCOMPLETE))(healthy()))
    check = result(kb, "prefix_toolkit", doc)
    assert (check.status, check.detail, check.fix) == ("warn", detail, fix)


@pytest.mark.parametrize(
    ("requested", "value", "status", "detail", "fix"),
    [
        (
            "6.0;7.0;9.0",
            "9.0+PTX",
            "warn",
            "TORCH_CUDA_ARCH_LIST=9.0+PTX: the lock's 6.0;7.0;9.0 without 6.0, 7.0, which nvcc 13.0 cannot build (it "
            "would stop with 'nvcc fatal : Unsupported gpu architecture')",
            "leave those GPUs out of the target list (envsolver make --gpu ...), or use an older toolkit for them",
        ),
        (
            "9.0a",
            "9.0+PTX",
            "warn",
            "TORCH_CUDA_ARCH_LIST=9.0+PTX: the lock's 9.0a built as plain archs: DeepSpeed's op builder cannot parse "
            "arch suffixes (seen with DeepSpeed 0.19.5)",
            "use plain major.minor entries in the target list",
        ),
        # the lock's list, buildable as it is; another list than the plan's; a lock list of nothing buildable
        ("9.0", "9.0+PTX", "pass", "TORCH_CUDA_ARCH_LIST=9.0+PTX is buildable and covers the GPUs", ""),
        ("7.0;9.0", "9.0", "pass", "TORCH_CUDA_ARCH_LIST=9.0 is buildable and covers the GPUs", ""),
        ("7.0", "9.0+PTX", "pass", "TORCH_CUDA_ARCH_LIST=9.0+PTX is buildable and covers the GPUs", ""),
    ],
)
def test_an_arch_list_the_hook_made_buildable_from_the_lock_is_named_as_such(
    kb: KnowledgeBase, requested: str, value: str, status: str, detail: str, fix: str
) -> None:
    meta = {**LOCK_META, "envsolver_torch_cuda_arch_list": requested}
    check = result(kb, "torch_cuda_arch_list", edit("env.TORCH_CUDA_ARCH_LIST", value)(healthy()), lock_meta=meta)
    assert (check.status, check.detail, check.fix) == (status, detail, fix)


def test_an_arch_list_with_nothing_buildable_says_what_nvcc_builds(kb: KnowledgeBase) -> None:
    check = result(kb, "torch_cuda_arch_list", edit("env.TORCH_CUDA_ARCH_LIST", "7.0")(healthy()))
    assert check.detail == (
        "TORCH_CUDA_ARCH_LIST=7.0: nvcc cannot build 7.0 ('nvcc fatal : Unsupported gpu architecture'); it does not "
        "cover NVIDIA H200 (9.0) (it builds sm_75 to sm_121)"
    )


def test_host_compiler_against_an_nvcc_whose_gcc_limit_the_kb_does_not_know(kb: KnowledgeBase) -> None:
    check = result(kb, "host_compiler", edit("nvcc.version", "99.0")(healthy()))
    assert (check.status, check.detail, check.fix) == (
        "warn",
        "/opt/gcc/bin/g++ is GCC 13; the newest GCC nvcc 99.0 accepts is not in the knowledge base",
        "check nvcc's host compiler range in NVIDIA's installation guide for this CUDA release",
    )


# --- the probe's DeepSpeed facts across DeepSpeed's layouts (issue 19). The real releases run in
# tests/test_ds_matrix.py (marker deepspeed_matrix); here, stand-in packages with each release's layout. ---

OLD_INFO = """
from .git_version_info_installed import *
compatible_ops = {"fused_adam": True, "async_io": False}  # computed at import, as DeepSpeed 0.14.1-0.19.7 do
"""
NEW_INFO = "from .git_version_info_installed import *\n"  # 0.19.8: no compatible_ops here
NEW_OPS = """
def __getattr__(name):  # 0.19.8: the probe runs on first access
    if name == "__compatible_ops__":
        globals()["__compatible_ops__"] = {"fused_adam": True, "async_io": False}
        return globals()["__compatible_ops__"]
    raise AttributeError(name)
"""
INSTALLED = "version = '{v}'\ninstalled_ops = {{'fused_adam': False, 'cpu_adam': True}}\naccelerator_name = 'cpu'\n"


def stand_in_deepspeed(
    site: Path, version: str, info: str, ops: str = "", init: str = "", requires: tuple[str, ...] = ()
) -> Path:
    ds = site / "deepspeed"
    (ds / "ops").mkdir(parents=True)
    (ds / "accelerator").mkdir()
    (ds / "__init__.py").write_text(f"{init}__version__ = {version!r}\n")
    (ds / "ops" / "__init__.py").write_text(ops)
    (ds / "accelerator" / "__init__.py").write_text(
        "class _A:\n    _name = 'cpu'\ndef get_accelerator():\n    return _A()\n"
    )
    (ds / "git_version_info.py").write_text(info)
    (ds / "git_version_info_installed.py").write_text(INSTALLED.format(v=version))
    meta = site / f"deepspeed-{version}.dist-info"
    meta.mkdir()
    lines = [f"Metadata-Version: 2.1\nName: deepspeed\nVersion: {version}\n"]
    lines += [f"Requires-Dist: {r}\n" for r in requires]
    (meta / "METADATA").write_text("".join(lines))
    return site


# Registered before a probe's child runs: printed at the interpreter's teardown, which the children skip (os._exit
# once their JSON line is out: the teardown took 0.6 s of CPU once torch was imported).
TEARDOWN = "import atexit; atexit.register(print, 'TEARDOWN RAN'); "


def child_facts(code: str, site: Path, tmp_path: Path, *args: str) -> dict[str, Any]:
    """A probe child in a python that sees only `site` (-S: no site-packages), which leaves without the
    interpreter's teardown."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    argv = [sys.executable, "-S", "-c", TEARDOWN + f"exec({code!r})", *args]
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "TEARDOWN RAN" not in done.stdout, done.stdout
    doc: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return doc


def ds_facts(site: Path, tmp_path: Path) -> dict[str, Any]:
    """The probe's DeepSpeed child in a python that sees only `site`."""
    return child_facts(probe.DS_CHILD, site, tmp_path)


STAND_IN_TORCH = "__version__ = '2.13.0+stand-in'\nclass version:\n    cuda = None\n"


@pytest.mark.parametrize("torch", [False, True], ids=["no-torch", "torch"])
@pytest.mark.parametrize("devices", [False, True], ids=["no-devices", "devices"])
def test_the_probes_torch_child_prints_its_facts_and_skips_the_teardown(
    tmp_path: Path, torch: bool, devices: bool
) -> None:
    """Each way out of the torch child (torch missing; --no-devices; every GPU query) prints the facts, then
    leaves through os._exit (a stand-in torch here; the real one in test_probe_runs_in_this_interpreter)."""
    site = tmp_path / "site"
    site.mkdir()
    if torch:
        (site / "torch.py").write_text(STAND_IN_TORCH)
    doc = child_facts(probe.TORCH_CHILD, site, tmp_path, *([] if devices else ["--no-devices"]))
    if not torch:
        assert doc == {"error": "ModuleNotFoundError: No module named 'torch'"}, doc
        return
    assert doc["version"] == "2.13.0+stand-in" and doc["cuda"] is None, doc
    assert ("cuda_error" in doc) is devices, doc  # the stand-in has no torch.cuda: the GPU queries' error


@pytest.mark.parametrize(
    ("version", "info", "ops", "where"),
    [
        pytest.param("0.19.7", OLD_INFO, "", "deepspeed.git_version_info", id="0.14-0.19.7"),
        pytest.param("0.19.8", NEW_INFO, NEW_OPS, "deepspeed.ops.__compatible_ops__", id="0.19.8"),
    ],
)
def test_probe_reads_compatible_ops_where_each_release_keeps_them(
    tmp_path: Path, version: str, info: str, ops: str, where: str
) -> None:
    site = stand_in_deepspeed(tmp_path / "site", version, info, ops)
    doc = ds_facts(site, tmp_path)
    assert "error" not in doc, doc
    assert doc["version"] == version and doc["accelerator"] == "cpu" and doc["distribution"] == version
    assert doc["installed_ops"] == {"fused_adam": False, "cpu_adam": True}
    assert doc["compatible_ops"] == {"fused_adam": True, "async_io": False}
    assert doc["compatible_ops_from"] == where
    assert doc["fused_adam_built"] is False and doc["requires_missing"] == []


def test_probe_keeps_the_other_deepspeed_facts_when_one_fails(tmp_path: Path) -> None:
    site = stand_in_deepspeed(tmp_path / "site", "0.19.8", "", NEW_OPS)  # a git_version_info with nothing in it
    doc = ds_facts(site, tmp_path)
    assert "error" not in doc and doc["version"] == "0.19.8" and doc["accelerator"] == "cpu"
    assert doc["installed_ops"] is None and "installed_ops" in doc["installed_ops_error"]
    assert doc["compatible_ops"] == {"fused_adam": True, "async_io": False}
    assert doc["fused_adam_built"] is False


def test_probe_names_the_requirements_a_deepspeed_that_does_not_import_lacks(tmp_path: Path) -> None:
    site = stand_in_deepspeed(
        tmp_path / "site",
        "0.19.8",
        NEW_INFO,
        NEW_OPS,
        init="import hjson\n",
        requires=("hjson", "Packaging>=20.0", "nvidia-ml-py", 'xgboost; extra == "all"'),
    )
    (site / "packaging-26.0.dist-info").mkdir()
    meta = "Metadata-Version: 2.1\nName: packaging\nVersion: 26.0\n"
    (site / "packaging-26.0.dist-info" / "METADATA").write_text(meta)
    doc = ds_facts(site, tmp_path)
    assert doc["error"] == "ModuleNotFoundError: No module named 'hjson'"
    assert doc["distribution"] == "0.19.8" and doc["requires_missing"] == ["hjson", "nvidia-ml-py"]


def test_probe_without_deepspeed(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    doc = ds_facts(tmp_path / "site", tmp_path)
    assert doc["error"] == "ModuleNotFoundError: No module named 'deepspeed'"
    assert doc["distribution"] is None and "deepspeed" in doc["distribution_error"]


def test_host_vs_lock_takes_a_gpu_that_runs_the_locks_kernels(kb: KnowledgeBase) -> None:
    """An RTX 3090 (8.6) on a lock made for an A100 (8.0): sm_80 machine code runs on 8.6, as covering (and
    arch_coverage, and `verify --cluster`'s lock_arch) say; host_vs_lock used to want the exact CC."""
    doc = edit("driver.gpus", [{"name": "NVIDIA GeForce RTX 3090", "compute_capability": "8.6"}])(healthy())
    meta = {**FLOOR_META, "envsolver_compute_capabilities": "8.0", "envsolver_torch_cuda_arch_list": "8.0"}
    check = result(kb, "host_vs_lock", doc, lock_meta=meta)
    assert check.status == "pass" and "1 GPU(s)" in check.detail, check
