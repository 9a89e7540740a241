"""The job's gate (envsolver/verify/gate.py, standard library only) and its demands (verify/demands.py): the gate
gives the verdict verify's own checks give on the same facts (driver vs torch's CUDA, the lock's promise, arch
coverage), names the node and the fix, runs as a file under `python -I` with nothing of envsolver importable, and
says why when it cannot judge (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envsolver.cluster import gate_step
from envsolver.install import prefixmeta
from envsolver.kb import KnowledgeBase
from envsolver.verify import demands, gate, run
from envsolver.verify.checks_base import Context
from envsolver.verify.checks_lock import check_host_vs_lock
from envsolver.verify.checks_torch import check_arch_coverage, check_driver_supports_torch_cuda
from tests.cluster.captures import ENV

NODE = "gpu07"


def lab_meta() -> dict[str, str]:
    kept = prefixmeta.load(ENV)
    assert kept is not None
    return dict(kept.custom)


def facts(driver: str | None = "550.54.15", cuda: str | None = "12.9", **more: Any) -> dict[str, Any]:
    gpus = more.pop("gpus", [{"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "memory": "81559 MiB"}])
    torch = {"version": "2.7.1", "cuda": cuda, "arch_list": more.pop("arch_list", ["sm_70", "sm_80", "sm_90"])}
    torch |= {"available": True, "device_count": len(gpus), "file": "/p/torch/__init__.py"}
    return {
        "probe_version": 2,
        "driver": {"version": driver, "gpus": gpus, "source": "nvidia-smi"},
        "torch": torch,
        "glibc": more.pop("glibc", "2.36"),
        **more,
    }


def verdicts(found: dict[str, Any], wanted: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {rule_id: (status, detail, fix) for rule_id, status, detail, fix in gate.judge(found, wanted, NODE)}


def test_host_vs_lock_passes_only_for_what_it_saw() -> None:
    """A node where no driver answers and no GPU is visible: the gate said "meets the lock's driver, glibc and GPU
    targets" (a pass for what it never compared). It says what it compared, and skips when it compared nothing."""
    wanted = {"lock": {"driver": "525.60.13", "solved_cuda": "12.4", "glibc": "2.28", "archs": ["8.0", "9.0"]}}
    status, detail, _ = verdicts(facts(None, gpus=[], glibc=None), wanted)["host_vs_lock"]
    assert status == "skip" and "nothing to compare" in detail, detail
    status, detail, _ = verdicts(facts(None, gpus=[]), wanted)["host_vs_lock"]
    assert (status, detail) == (
        "pass",
        f"{NODE}: meets the lock's glibc; not checked: driver and GPU targets (not seen on the node, or not "
        "recorded in the lock)",
    ), detail
    status, detail, _ = verdicts(facts("550.54.15"), wanted)["host_vs_lock"]
    assert (status, detail) == ("pass", f"{NODE}: meets the lock's driver, glibc and GPU targets"), detail


@pytest.mark.parametrize(
    ("entries", "cc", "covered"),
    [
        (["sm_80"], (8, 6), True),  # same major, lower minor: SASS runs
        (["sm_86"], (8, 0), False),
        (["sm_90"], (10, 0), False),
        (["compute_90"], (10, 0), True),  # PTX of a lower capability: JIT
        (["compute_90"], (8, 0), False),
        (["sm_90a"], (9, 0), True),  # arch-specific SASS: exactly its own capability
        (["sm_100a"], (10, 3), False),
        (["sm_100", "sm_120"], (12, 0), True),
        (["sm_x", "compute_", "weird"], (8, 0), False),
    ],
)
def test_covers(entries: list[str], cc: tuple[int, int], covered: bool) -> None:
    assert gate.covers(entries, cc) is covered


@pytest.mark.parametrize("driver", ["418.40.04", "450.80.02", "525.60.13", "535.104.05", "575.51.03", "580.65.06"])
@pytest.mark.parametrize("cuda", ["11.8", "12.2", "12.9", "13.0", "13.4"])
def test_driver_vs_torch_cuda_is_verifys_verdict(kb: KnowledgeBase, driver: str, cuda: str) -> None:
    """The same facts through verify's check (the KB) and the gate (the demands derived from the KB)."""
    found = facts(driver, cuda)
    check = check_driver_supports_torch_cuda(Context(found, kb))
    status, detail, fix = verdicts(found, demands.derive(kb, None))["driver_supports_torch_cuda"]
    assert status == check.status, (detail, check)
    if status == "fail":
        assert f"{NODE}: driver {driver} is too old for torch's CUDA {cuda}" in detail, detail
        assert f"upgrade the driver on {NODE} to" in fix and f"sbatch --exclude={NODE}" in fix, fix


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"driver": "450.80.02"},  # below the lab lock's floor 525.60.13
        {"driver": "530.30.02"},  # above the floor, below what fully supports the __cuda=12.2 it was solved for
        {"glibc": "2.28"},  # older than the lock's 2.36
        {"gpus": [{"name": "NVIDIA A10", "compute_capability": "8.6"}]},  # not a target of the lock
        {"driver": "450.80.02", "glibc": "2.17"},
        # solved for a CUDA whose full-support driver NVIDIA does not publish (13.4): the unknown is a warning
        {"driver": "595.45.04", "meta": {"envsolver_virtual_linux-64_cuda": "13.4"}},
        {"driver": "575.51.03", "meta": {"envsolver_virtual_linux-64_cuda": "13.4"}},
        {"driver": "610.43.02", "meta": {"envsolver_virtual_linux-64_cuda": "12.9"}},
        # a driver before R510 prints [N/A] for compute_cap: unknown, a warning, whose fix is the node left out
        {"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "[N/A]"}]},
        # an A10 (8.6) runs an 8.0 lock's kernels: sm_80 machine code runs on 8.6
        {
            "gpus": [{"name": "NVIDIA A10", "compute_capability": "8.6"}],
            "meta": {"envsolver_torch_cuda_arch_list": "8.0"},
        },
    ],
)
def test_the_locks_promise_is_verifys_verdict(kb: KnowledgeBase, change: dict[str, Any]) -> None:
    meta = lab_meta() | change.pop("meta", {})
    found = facts(**change)
    check = check_host_vs_lock(Context(found, kb, meta))
    status, detail, fix = verdicts(found, demands.derive(kb, meta))["host_vs_lock"]
    assert status == check.status, (detail, check)
    if status != "pass":
        assert detail.startswith(f"{NODE}: ") and f"leave {NODE} out of the job" in fix, (detail, fix)
        assert not fix.startswith((",", "or ")), fix  # a fix of the node alone reads as a sentence
        for part in check.detail.replace("host glibc", "glibc").split("; "):  # the same problems, named alike
            assert part in detail, (part, detail)


@pytest.mark.parametrize(
    ("arch_list", "cc"),
    [(["sm_80", "sm_90"], "9.0"), (["sm_70", "sm_80"], "9.0"), (["sm_80", "compute_80"], "9.0"), (["sm_90a"], "9.0")],
)
def test_arch_coverage_is_verifys_verdict(kb: KnowledgeBase, arch_list: list[str], cc: str) -> None:
    found = facts(arch_list=arch_list, gpus=[{"name": "GPU", "compute_capability": cc}])
    check = check_arch_coverage(Context(found, kb))
    status, detail, _ = verdicts(found, demands.derive(kb, None))["arch_coverage"]
    assert status == check.status, (detail, check)


def test_a_cpu_torch_fails_its_build_and_skips_what_needs_cuda(kb: KnowledgeBase) -> None:
    found = verdicts(facts(cuda=None), demands.derive(kb, lab_meta()) | {"prefix": "/shared/envs/my env"})
    assert found["torch_cuda_build"][0] == "fail" and "CPU-only" in found["torch_cuda_build"][1]
    assert found["torch_cuda_build"][2].endswith("envsolver install conda-lock.yml -p '/shared/envs/my env'")
    assert found["cuda_available"][0] == "skip" and found["driver_supports_torch_cuda"][0] == "skip"


def test_the_demands_hold_the_kbs_driver_minimums_and_the_locks_promise(kb: KnowledgeBase) -> None:
    wanted = demands.derive(kb, lab_meta())
    assert wanted["version"] == gate.DEMANDS_VERSION
    assert wanted["lock"] == {
        "driver": "525.60.13",
        "solved_cuda": "12.2",
        "glibc": "2.36",
        "ccs": ["8.0", "9.0", "7.0"],
        "archs": ["7.0", "8.0", "9.0+PTX"],
        "torch_cuda": "12.9",
    }
    for toolkit in kb.toolkits:
        row = wanted["cuda_drivers"][str(toolkit.version)]
        assert row["full"] == (str(toolkit.driver) if toolkit.driver else None), (toolkit, row)
        major = kb.cuda_major(toolkit.version.major)
        assert row["minor"] == (str(major.mvc_driver) if major else None), (toolkit, row)
    assert demands.derive(kb, None)["lock"] is None


def run_gate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The gate as the job runs it: a file, under -I, from a directory where nothing of envsolver imports."""
    return subprocess.run(
        [sys.executable, "-I", str(Path(gate.__file__)), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "SLURMD_NODENAME": NODE, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        timeout=300,
        check=False,
    )


def test_the_gate_runs_as_a_file_with_the_real_probe_and_names_the_node(kb: KnowledgeBase, tmp_path: Path) -> None:
    """This python (CPU torch), a stand-in nvidia-smi on PATH saying driver 450.80.02 (to the probe's query: name,
    pci.device_id, compute_cap, memory.total, driver_version): the lock's floor fails."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "NVIDIA H100 80GB HBM3, 0x233010DE, 9.0, 81559 MiB, 450.80.02"\n')
    smi.chmod(0o755)
    wanted = json.dumps(demands.derive(kb, lab_meta()))
    words = gate_step.argv("/shared/envs/train", 1, ["host_vs_lock"], {}, 15)  # the job's probe options: no torch
    options = words[words.index("--") + 1 :]
    done = run_gate(tmp_path, "--probe", str(run.PROBE), "--demands", wanted, "--check", "host_vs_lock", "--", *options)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{gate.PROG}: {NODE} ({os.uname().machine}): {sys.executable} on verify's probe", done.stdout
    assert f"  FAIL host_vs_lock: {NODE}: driver 450.80.02 is older than the lock's floor 525.60.13" in lines
    assert lines[-1] == "0 pass, 0 warn, 1 fail, 0 skip", done.stdout


@pytest.mark.parametrize(
    ("demands_text", "phrase"),
    [
        ("", "Expecting value"),
        ('{"version": 99}', "not this gate's demands"),
        ("[1]", "not this gate's demands"),
    ],
)
def test_the_gate_that_cannot_judge_says_why_and_exits_2(tmp_path: Path, demands_text: str, phrase: str) -> None:
    done = run_gate(tmp_path, "--probe", str(run.PROBE), "--demands", demands_text)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{gate.PROG}: {NODE}: cannot check this node: " in done.stderr and phrase in done.stderr, done.stderr
    assert f"Run `{sys.executable} -I {run.PROBE}` on {NODE} to see what it prints, then submit the job again." in (
        done.stderr
    ), done.stderr


def test_a_probe_that_prints_no_facts_is_exit_2(tmp_path: Path) -> None:
    fake = tmp_path / "probe.py"
    fake.write_text("print('\\x1b]0;title\\x07 no facts here')\n")
    done = run_gate(tmp_path, "--probe", str(fake), "--demands", json.dumps({"version": gate.DEMANDS_VERSION}))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the probe printed no facts (exit 0)" in done.stderr and "\\x1b]0;title\\x07" in done.stderr, done.stderr
    assert "\x1b" not in done.stderr, done.stderr


def test_a_probe_that_floods_keeps_the_gate_bounded_and_finds_the_facts(tmp_path: Path) -> None:
    """64 MB before the facts: the gate keeps the last MAX_OUTPUT bytes only (peak RSS under 48 MB: about 27 MB
    measured; keeping the flood would pass 64 MB)."""
    fake = tmp_path / "probe.py"
    fake.write_text(
        "import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * 65535 + '\\n')\n"
        'print(\'{"probe_version": 2, "driver": {"version": "550.54.15"}}\')\n'
    )
    wanted = json.dumps({"version": gate.DEMANDS_VERSION})
    script = (
        "import sys\nsys.argv[0] = 'gate'\n"
        f"sys.path.insert(0, {str(Path(gate.__file__).parent)!r})\nimport gate\n"
        "code = gate.main(sys.argv[1:])\n"
        # VmHWM: this process image's own peak (ru_maxrss keeps the forking pytest's across exec on Linux)
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
        "print('peak_kb', hwm)\nsys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script, "--probe", str(fake), "--demands", wanted, "--check", "driver"],
        capture_output=True,
        text=True,
        env={**os.environ, "SLURMD_NODENAME": NODE},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"  pass driver: {NODE}: driver 550.54.15 (from None)" in done.stdout, done.stdout[-2000:]
    peak = int(done.stdout.split("peak_kb ")[1].split()[0])
    assert peak < 48 * 1024, f"peak RSS {peak} kB"


@settings(max_examples=300, deadline=None)
@given(
    found=st.dictionaries(
        st.sampled_from(["driver", "torch", "glibc", "python", "probe_version", "junk"]),
        st.recursive(
            st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20)),
            lambda inner: st.one_of(
                st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=12), inner, max_size=3)
            ),
            max_leaves=10,
        ),
        max_size=6,
    )
)
def test_facts_of_any_shape_are_judged_into_printable_lines(found: dict[str, Any]) -> None:
    wanted = {"version": gate.DEMANDS_VERSION, "cuda_drivers": {"12.9": {"full": "575.51.03", "minor": "525.60.13"}}}
    wanted["lock"] = {"driver": "525.60.13", "glibc": "2.28", "ccs": ["9.0"], "solved_cuda": "12.9"}
    for rule_id, status, detail, fix in gate.judge(found, wanted, NODE):
        assert status in ("pass", "warn", "fail", "skip") and rule_id in gate.IDS
        assert "the rule failed" not in detail, (rule_id, detail, found)
        assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in detail + fix), (rule_id, detail)


@pytest.mark.parametrize("module", [gate.__file__, str(run.PROBE)], ids=["gate.py", "probe.py"])
def test_what_runs_on_a_node_imports_the_standard_library_only(module: str) -> None:
    """The node runs these with the environment's python, where envsolver and its dependencies are not: every
    module their code imports is the standard library's (the probe's torch and DeepSpeed children are source
    strings run in child processes, which may fail on their own: each is one fact)."""
    import ast

    tree = ast.parse(Path(module).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    assert names and names <= set(sys.stdlib_module_names), sorted(names - set(sys.stdlib_module_names))
