"""Issue 32's finding, end to end: with a `pip/` package and a `torch.py` in the working directory, `envsolver
install` ran the `pip/` (its `python -m pip` put the directory first on sys.path) and `verify` imported the
`torch.py`. Here both, and a `deepspeed.py`, are planted in the directory every command runs from; each writes a
canary file when imported. `install` (with its hook), `verify`, `verify --nccl` (the GPU count, and torchrun under
gloo), `hook` and `module` run from there against an environment with a real PyPI part (tests/pypisix.py), and no
canary may be written. The environment's torch is the one this test run has, if any (tests/envpython.py): every
torch import finds that one or none, never the planted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envsolver.install import pypi as pypi_install
from tests import httplab
from tests.pypisix import WHEEL, environ, envsolver, mirror_flag, python_channel, six_mirror, write_lock

__all__ = ["python_channel", "six_mirror"]  # the fixtures, used by name

PLANTED = ("pip", "torch", "deepspeed")


def plant(work: Path, canaries: Path) -> None:
    """A `pip/` package (with __main__, as `python -m pip` runs it), a torch.py and a deepspeed.py in WORK, each
    writing its name into CANARIES when imported."""
    work.mkdir(parents=True)
    code = "open({path!r}, 'a').write({name!r} + '\\n')\n"
    (work / "pip").mkdir()
    (work / "pip" / "__init__.py").write_text(code.format(path=str(canaries), name="pip"))
    (work / "pip" / "__main__.py").write_text(code.format(path=str(canaries), name="pip.__main__"))
    (work / "torch.py").write_text(code.format(path=str(canaries), name="torch"))
    (work / "deepspeed.py").write_text(code.format(path=str(canaries), name="deepspeed"))


def test_no_command_runs_what_the_working_directory_plants(
    python_channel: Path, six_mirror: httplab.Lab, tmp_path: Path
) -> None:
    canaries = tmp_path / "CANARIES"
    work = tmp_path / "work"
    plant(work, canaries)
    lock = write_lock(python_channel, tmp_path / "locks", WHEEL)
    prefix = tmp_path / "envs" / "train"
    env = environ(tmp_path)
    said = []

    def run(*args: str) -> tuple[int, str]:
        done = envsolver(args, env, work)
        said.append(f"$ envsolver {' '.join(args)}\nexit {done.returncode}\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
        assert not canaries.exists(), f"a planted module ran: {canaries.read_text()}\n" + "\n".join(said)
        return done.returncode, done.stdout

    # install, then its hook (the lock carries an arch list): pip, the probe and its torch child
    code, out = run("install", str(lock), "-p", str(prefix), "--json", *mirror_flag(six_mirror))
    assert code in (0, 1), said[-1]  # the hook's pre-flight fails here (no torch, no nvcc): exit 1 after installing
    assert json.loads(out)["pip"]["installed"] == ["six 1.17.0"], said[-1]
    assert pypi_install.installed_version(prefix, "six") == "1.17.0", said[-1]
    # verify: the probe, its torch and DeepSpeed children
    code, out = run("verify", "-p", str(prefix), "--lock", str(lock), "--json")
    checks = {c["id"]: c for c in json.loads(out)["checks"]}
    assert "planted" not in json.dumps(checks["torch_import"]), checks["torch_import"]
    assert checks["lock_drift"]["status"] == "pass", checks["lock_drift"]
    # verify --nccl: the GPU count (python -c 'import torch ...'), then torchrun (python -m torch.distributed.run);
    # the env's torch is this test run's (tests/envpython.py), if it has one: no GPU here, or no torch at all
    code, out = run("verify", "--nccl", "-p", str(prefix), "--json")
    assert code == 2 and ("could not count the GPUs" in out or "no GPU is visible" in out), said[-1]
    code, out = run("verify", "--nccl", "-p", str(prefix), "--backend", "gloo", "--gpus", "2", "--json")
    assert code in (0, 1, 2), said[-1]
    # the hook again, by itself (its probe; no op build: the env has no DeepSpeed)
    code, out = run("hook", "-p", str(prefix), "--lock", str(lock), "--json")
    assert code in (0, 1), said[-1]
    # module reads the hook's activation scripts (it starts no python at all)
    code, out = run("module", "train/1", "-p", str(prefix), "--out", str(tmp_path / "modules"), "--json")
    assert code == 0, said[-1]
    assert not canaries.exists()


@pytest.mark.parametrize("planted", PLANTED)
def test_the_planted_modules_do_run_where_the_directory_is_on_sys_path(tmp_path: Path, planted: str) -> None:
    """The canaries work: the same files, imported by a python that puts the working directory first (`-c`, no
    -I), write their names (so the test above would see one that ran)."""
    import subprocess
    import sys

    canaries = tmp_path / "CANARIES"
    plant(tmp_path / "work", canaries)
    subprocess.run([sys.executable, "-c", f"import {planted}"], cwd=tmp_path / "work", check=False)
    assert canaries.read_text().split()[0] == planted
