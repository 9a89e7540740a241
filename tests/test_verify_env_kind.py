"""verify in an environment that is no conda environment (a pip venv): every fix it suggests works there, never
`conda install -p VENV` or `envsolver install LOCK -p VENV`; the fixes that install conda packages name a new
prefix, and that fix is run here. The environment's kind comes from the probe (envkind.of_facts)."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.install import envkind
from envsolver.kb import KnowledgeBase
from envsolver.lock import lockfile
from envsolver.verify import checks, checks_base
from envsolver.verify import run as verify_run
from tests.conftest import DATA
from tests.httplab import channel_with_big, write_lock

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "locks" / "a100" / "conda-lock.yml"
VENV = "/tmp/h4v"  # where cpu-pip-venv-facts.json was captured


def _captured() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / "verify" / "cpu-pip-venv-facts.json").read_text())
    return doc


def _as_conda(doc: dict[str, Any]) -> dict[str, Any]:
    """The same facts, as a conda environment's probe would give them."""
    doc = copy.deepcopy(doc)
    doc["python"].update(conda_meta=True, pyvenv_cfg=False)
    return doc


def _edit(**changes: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def apply(doc: dict[str, Any]) -> dict[str, Any]:
        doc = copy.deepcopy(doc)
        for key, value in changes.items():
            section, _, field = key.partition("__")
            if field:
                doc[section][field] = value
            else:
                doc[section] = value
        return doc

    return apply


def _with_lock(doc: dict[str, Any], kb: KnowledgeBase) -> checks.Context:
    lock = lockfile.read(LOCK, None)
    return checks.Context(doc, kb, lock.metadata, tuple(lock.entries), deepspeed_wanted=True, lock_pip=lock.pip)


# (id, edit of the captured venv facts, with the a100 lock?, the check whose fix must name a new prefix)
SCENARIOS = [
    ("cpu-torch", _edit(), False, "torch_cuda_build"),
    ("cpu-torch-lock", _edit(), True, "torch_cuda_build"),
    ("headers", _edit(), False, "headers"),
    ("no-torch", _edit(torch={"error": "No module named 'torch'"}), False, "torch_import"),
    ("no-nvcc", _edit(nvcc={"exists": False}), False, "nvcc"),
    ("no-compiler", _edit(compiler={}), False, "host_compiler"),
    (
        "gcc-too-new",
        _edit(compiler={"path": "/usr/bin/g++-99", "version": "g++ 99.1", "major": 99, "how": "c++ on PATH"}),
        False,
        "host_compiler",
    ),
    ("nvcc-vs-torch", _edit(torch__cuda="12.9", torch__version="2.10.0"), False, "cuda_version_match"),
    ("deepspeed-from-lock", _edit(deepspeed={"error": "No module named 'deepspeed'"}), True, "deepspeed_ops"),
    ("lock-drift", _edit(), True, "lock_drift"),
]


def _context(kb: KnowledgeBase, doc: dict[str, Any], lock: bool) -> checks.Context:
    return _with_lock(doc, kb) if lock else checks.Context(doc, kb)


def _fixes(ctx: checks.Context) -> dict[str, str]:
    return {c.id: c.shown_fix for c in checks.run(ctx) if c.shown_fix}


def test_the_capture_is_a_venv() -> None:
    assert envkind.of_facts(_captured()) == "venv"
    assert envkind.of_facts(_as_conda(_captured())) == "conda"
    assert envkind.of_facts({"python": {"prefix": "/x"}}) is None  # an older probe's facts do not say


@pytest.mark.parametrize(("change", "lock", "check_id"), [s[1:] for s in SCENARIOS], ids=[s[0] for s in SCENARIOS])
def test_no_fix_puts_conda_packages_into_a_venv(
    kb: KnowledgeBase, change: Callable[[dict[str, Any]], dict[str, Any]], lock: bool, check_id: str
) -> None:
    fixes = _fixes(_context(kb, change(_captured()), lock))
    assert check_id in fixes, f"{check_id} gave no fix: {fixes}"
    for name, fix in fixes.items():
        assert "conda install" not in fix, f"{name}: {fix}"
        installs = re.findall(r"envsolver install \S+ -p (\S+)", fix)
        assert VENV not in installs, f"{name} installs the lock into the venv: {fix}"
    assert "envsolver install conda-lock.yml -p NEW_PREFIX" in fixes[check_id], fixes[check_id]
    assert "Python virtual environment" in fixes[check_id], fixes[check_id]


@pytest.mark.parametrize(("change", "lock", "check_id"), [s[1:] for s in SCENARIOS], ids=[s[0] for s in SCENARIOS])
def test_a_conda_environment_keeps_its_conda_fixes(
    kb: KnowledgeBase, change: Callable[[dict[str, Any]], dict[str, Any]], lock: bool, check_id: str
) -> None:
    fix = _fixes(_context(kb, _as_conda(change(_captured())), lock))[check_id]
    assert "NEW_PREFIX" not in fix, fix
    assert f"-p {VENV}" in fix or "conda install -c conda-forge" in fix, fix


def test_a_pip_cuda_torchs_missing_libraries_are_its_pip_wheels(kb: KnowledgeBase) -> None:
    """A CUDA torch from pip whose cuDNN does not load and whose NCCL is unknown: its nvidia-* wheels, not the lock."""
    cuda_torch = {"version": "2.10.0", "cuda": "13.0", "cudnn_error": "libcudnn.so.9: cannot open", "nccl_error": "x"}
    found = {c.id: c for c in checks.run(checks.Context(_edit(torch=cuda_torch)(_captured()), kb))}
    assert found["cudnn"].status == "fail" and "nvidia-cudnn-cu* wheel" in found["cudnn"].fix, found["cudnn"]
    assert found["nccl"].status == "warn" and "nvidia-nccl-cu* wheel" in found["nccl"].fix, found["nccl"]
    conda = {c.id: c for c in checks.run(checks.Context(_as_conda(_edit(torch=cuda_torch)(_captured())), kb))}
    assert "from its lock" in conda["cudnn"].fix and "from its lock" in conda["nccl"].fix


def test_a_job_nodes_remake_fix_installs_into_a_new_prefix(kb: KnowledgeBase) -> None:
    doc = _edit(env={"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "gpu01"})(_captured())
    fix = checks_base.remake_fix(checks.Context(doc, kb))
    assert fix.endswith("envsolver install linux-64/conda-lock.yml -p NEW_PREFIX (a new directory: this environment "
                        "is no conda one)"), fix  # fmt: skip
    assert f"-p {VENV}" in checks_base.remake_fix(checks.Context(_as_conda(doc), kb))


def _new_prefix_command(fix: str) -> list[str]:
    return shlex.split(fix.split("in a new directory: ", 1)[1])


def _envsolver(argv: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENVSOLVER_CACHE_DIR": str(cache)}
    env.pop("CONDA_PREFIX", None)
    return subprocess.run(
        [sys.executable, "-m", "envsolver", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_new_prefix_fix_is_run(kb: KnowledgeBase, tmp_path: Path) -> None:
    """lock_drift's fix, with a real lock of tiny packages (a local channel) in place of conda-lock.yml."""
    fix = _fixes(_with_lock(_captured(), kb))["lock_drift"]
    argv = _new_prefix_command(fix)
    assert argv == ["envsolver", "install", "conda-lock.yml", "-p", "NEW_PREFIX"], fix
    write_lock(channel_with_big(tmp_path / "channel-root"), tmp_path)  # tmp_path/conda-lock.yml
    new = tmp_path / "new"
    done = _envsolver([*argv[1:4], str(new), "--no-hook"], tmp_path, tmp_path / "cache")
    assert done.returncode == 0, f"the fix {fix!r} failed: {done.stderr}"
    assert envkind.of_path(new) == "conda", done.stdout


def test_the_remake_and_new_prefix_fix_is_run(kb: KnowledgeBase, tmp_path: Path) -> None:
    """torch_cuda_build's fix without a lock: make for a GPU (A100 here; offline, make falls back to the bundled
    snapshot), then install into a new prefix; the install part runs with --dry-run (no conda channel here)."""
    fix = _fixes(checks.Context(_captured(), kb))["torch_cuda_build"]
    make, install = fix.split("in a new directory: ", 1)[1].split(" && ")
    assert make == "envsolver make --gpu <your GPU>", fix
    made = _envsolver(shlex.split(make.replace("<your GPU>", "a100"))[1:], tmp_path, tmp_path / "cache")
    assert made.returncode == 0, made.stderr
    argv = shlex.split(install.replace("NEW_PREFIX", str(tmp_path / "new")))
    planned = _envsolver([*argv[1:], "--dry-run"], tmp_path, tmp_path / "cache")
    assert planned.returncode == 0 and "would link" in planned.stdout, planned.stderr
    assert not (tmp_path / "new").exists()


def _venv(path: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return path


def test_the_probe_says_what_its_environment_is(tmp_path: Path) -> None:
    venv = _venv(tmp_path / "venv")
    env = {"PATH": "/usr/bin:/bin"}
    facts = verify_run.probe(venv / "bin" / "python", False, False, 60, env)
    assert envkind.of_facts(facts) == "venv", facts["python"]
    (venv / "conda-meta").mkdir()  # conda-meta/ makes it a conda environment, pyvenv.cfg or not
    facts = verify_run.probe(venv / "bin" / "python", False, False, 60, env)
    assert envkind.of_facts(facts) == "conda", facts["python"]


def test_verify_of_a_real_venv_suggests_no_conda_install(tmp_path: Path) -> None:
    """The whole command on a fresh venv (no torch): its fixes are for a venv."""
    venv = _venv(tmp_path / "venv")
    result = CliRunner().invoke(main, ["verify", "-p", str(venv), "--json"], env={"CONDA_PREFIX": None})
    assert result.exit_code == 1, result.output
    doc = json.loads(result.output)
    fixes = {c["id"]: c["fix"] for c in doc["checks"] if c["fix"]}
    assert "NEW_PREFIX" in fixes["torch_import"], fixes
    assert not [f for f in fixes.values() if "conda install" in f or f"-p {venv} " in f + " "], fixes
