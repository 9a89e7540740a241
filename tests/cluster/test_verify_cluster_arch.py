"""`verify --cluster` on a partition of another architecture, in a Slurm lab of its own (tests/slurmlab.py): gh01
is an aarch64 stand-in (its steps' `uname -m` says aarch64), gpu01 an x86_64 V100 node. `cluster init` records
gh200 as linux-aarch64, `make --cluster` writes its lock, and `verify --cluster` of the linux-aarch64 prefix runs
on gh01 with the PREFIX's python only.

The proof that no node runs the login node's interpreter: envsolver itself runs under a wrapper interpreter (a
venv whose bin/python is a script that appends `$SLURM_JOB_ID` to a log, then execs the real python with that
name, so sys.executable is the wrapper); every run inside a Slurm step would log a job id. The prefix's python is
the base interpreter (another path), as an aarch64 environment's python is another binary."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.cluster import file as cluster_file
from envsolver.kb import default_kb
from envsolver.verify.run import PROBE
from tests.slurmlab import GH200, V100, Node, SlurmLab, missing_binaries, running, write_env

NODES = (
    Node("gh01", (("gh200", 1),), (GH200,), machine="aarch64"),
    Node("gpu01", (("v100", 1),), (V100,)),
    Node("cpu01"),
)
PARTITIONS = {"gh200": ("gh01",), "v100": ("gpu01",), "cpu": ("cpu01",)}
ONLY = ("driver", "gpus", "torch_import", "torch_cuda_build", "cuda_available", "arch_coverage", "host_vs_lock")
CHECKS = [word for check_id in ONLY for word in ("--check", check_id)]


@dataclass(frozen=True)
class Arm:
    lab: SlurmLab
    root: Path
    base_python: str  # the interpreter behind this venv: the prefixes' python, never envsolver's

    @property
    def file(self) -> Path:
        return self.root / "cluster.yaml"

    @property
    def prefix(self) -> Path:
        return self.root / "env-aarch64"


@pytest.fixture(scope="module")
def arm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Arm]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"Slurm is not installed here (missing {', '.join(missing)}); scripts/install_system_deps.sh")
    with running(lambda: tmp_path_factory.mktemp("armlab"), NODES, PARTITIONS) as lab:
        root = tmp_path_factory.mktemp("arm")
        base = os.path.realpath(sys.executable)
        made = Arm(lab, root, base)
        env = {"SLURM_CONF": str(lab.conf), "ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None}
        drafted = CliRunner(env=env).invoke(main, ["cluster", "init", "--out", str(made.file)])
        assert drafted.exit_code == 0, drafted.output
        locked = CliRunner(env=env).invoke(
            main, ["make", "--cluster", str(made.file), "--offline", "--out", str(root / "envs")]
        )
        assert locked.exit_code == 0, locked.output
        lock = yaml.safe_load((root / "envs" / "linux-aarch64" / "conda-lock.yml").read_text())
        write_env(made.prefix, "linux-aarch64", lock["metadata"]["custom_metadata"], base)
        yield made


def wrapper_venv(root: Path, log: Path) -> Path:
    """A venv-shaped directory whose bin/python logs each run's SLURM_JOB_ID, then runs this venv's python under
    its own name (exec -a): sys.executable is the wrapper, sys.prefix the wrapper's directory, envsolver the same.
    Outside a venv (envsolver installed into the interpreter), the directory is a venv over that interpreter."""
    venv = Path(sys.prefix)
    (root / "bin").mkdir(parents=True)
    if (venv / "pyvenv.cfg").is_file():
        shutil.copy(venv / "pyvenv.cfg", root / "pyvenv.cfg")
        (root / "lib").symlink_to(venv / "lib")
    else:  # envsolver installed into the interpreter itself: a venv over it that sees its packages
        home = os.path.dirname(os.path.realpath(sys.executable))
        (root / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = true\n")
    python = root / "bin" / "python"
    python.write_text(
        f'#!/bin/bash\nprintf "run job=%s node=%s\\n" "${{SLURM_JOB_ID:-}}" "${{SLURMD_NODENAME:-}}" >> {log}\n'
        f'exec -a "$0" {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    return python


def test_init_records_the_aarch64_partition_and_make_writes_its_lock(arm: Arm) -> None:
    cluster = cluster_file.load(arm.file, default_kb())
    platforms = {p.name: p.platform for p in cluster.partitions}
    assert platforms == {"gh200": "linux-aarch64", "v100": "linux-64"}, platforms
    gh200 = cluster.partition("gh200")
    assert gh200 is not None and "uname -m on gh01" in gh200.origin("platform"), gh200.origin("platform")
    assert (arm.root / "envs" / "linux-aarch64" / "conda-lock.yml").is_file()


def test_the_aarch64_partition_is_verified_by_the_prefixs_python_never_the_login_one(arm: Arm) -> None:
    log = arm.root / "wrapper.log"
    wrapper = wrapper_venv(arm.root / "login-venv", log)
    argv = [str(wrapper), "-m", "envsolver", "verify", "--cluster", str(arm.file), "-p", str(arm.prefix), "--json"]
    done = subprocess.run(
        [*argv, *CHECKS],
        capture_output=True,
        text=True,
        env={**os.environ, "SLURM_CONF": str(arm.lab.conf)},
        timeout=600,
        check=False,
    )
    said = f"exit {done.returncode}\nstdout: {done.stdout[-4000:]}\nstderr: {done.stderr[-4000:]}"
    runs = log.read_text().splitlines() if log.exists() else []
    # The wrapper did run envsolver on the login node (no job id): the log would catch a run on a node.
    assert runs and all(line == "run job= node=" for line in runs), f"runs of the login interpreter: {runs}; {said}"
    assert done.returncode == 0, said
    doc = json.loads(done.stdout)
    by_name = {p["name"]: p for p in doc["partitions"]}
    gh200 = by_name["gh200"]
    assert gh200["status"] in ("pass", "warn") and [n["node"] for n in gh200["nodes"]] == ["gh01"], said
    assert by_name["v100"]["status"] == "skipped", said
    node = gh200["nodes"][0]["verify"]
    assert node["target"]["python"] == f"{arm.prefix}/bin/python", node
    assert [c["id"] for c in node["checks"]] == list(ONLY), node
    assert {c["id"]: c["status"] for c in node["checks"]}["host_vs_lock"] == "pass", node
    # The step ran the prefix's python on the probe's source: the argv shows it, and no envsolver module.
    step_argv = by_name["gh200"]["argv"]
    tail = step_argv[step_argv.index("envsolver-verify") + 1 :]
    assert tail[:4] == [f"{arm.prefix}/bin/python", "-I", "-c", f"<the source of {PROBE}>"], tail[:4]
    assert str(wrapper) not in step_argv and sys.executable not in step_argv, tail[:3]
    assert gh200["nodes"][0]["probe"]["machine"] == "aarch64", gh200["nodes"][0]["probe"]


def test_a_prefix_whose_python_cannot_run_on_the_node_is_exit_2_naming_node_and_fix(arm: Arm, tmp_path: Path) -> None:
    """The prefix's bin/python is a binary for another machine (an x86-64 env on an aarch64 node says 'Exec format
    error'): a file of bytes that is no program, which the node's shell cannot execute either."""
    prefix = tmp_path / "env"
    shutil.copytree(arm.prefix, prefix, symlinks=True)
    (prefix / "bin" / "python").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(57))
    result = CliRunner(env={"SLURM_CONF": str(arm.lab.conf)}).invoke(
        main, ["verify", "--cluster", str(arm.file), "-p", str(prefix), "--json", *CHECKS]
    )
    assert result.exit_code == 2, result.output
    gh200 = next(p for p in json.loads(result.stdout)["partitions"] if p["name"] == "gh200")
    (node,) = gh200["nodes"]  # the step ran; the node gave no report: its error names it
    assert gh200["status"] == "error" and gh200["failing_nodes"] == ["gh01"], gh200
    message = node["error"]["message"] + " " + (node["error"].get("fix") or "")
    assert "gh01 (aarch64) cannot run the environment's python" in message, message
    assert "linux-aarch64 lock's environment" in message, message


def test_the_jobs_verify_step_on_the_aarch64_node_never_runs_the_login_interpreter(arm: Arm) -> None:
    """`cluster sbatch` run by the wrapper interpreter writes the job for gh200; the job (submitted with the real
    sbatch) checks gh01 with the prefix's python and envsolver's gate, then runs the command: the wrapper logged
    the one run on the login node and none inside the job."""
    log = arm.root / "sbatch-wrapper.log"
    wrapper = wrapper_venv(arm.root / "sbatch-venv", log)
    script, ran = arm.root / "gh200.sh", arm.root / "gh200-ran"
    argv = [str(wrapper), "-m", "envsolver", "cluster", "sbatch", "--cluster", str(arm.file), "--partition", "gh200"]
    argv += ["-p", str(arm.prefix), "--nodes", "1", "--time", "5", "--check", "driver", "--check", "host_vs_lock"]
    # The command runs as one task per GPU, not under torchrun: the stand-in environment's python is this venv's
    # base interpreter, which has no torch unless someone installed it there (it failed so on a fresh machine).
    argv += ["--launch", "per-gpu"]
    env = {**os.environ, "SLURM_CONF": str(arm.lab.conf)}
    written = subprocess.run(
        [*argv, "--out", str(script), "--", "touch", str(ran)], capture_output=True, text=True, env=env, timeout=300
    )
    assert written.returncode == 0, written.stderr
    assert str(wrapper) not in script.read_text(), script.read_text()
    output = arm.root / "gh200.out"
    done = arm.lab.batch([f"--output={output}", str(script)], arm.root, env)
    said = f"exit {done.returncode}: {done.stderr}\n{output.read_text() if output.exists() else ''}"
    runs = log.read_text().splitlines()
    assert runs == ["run job= node="], f"runs of the login interpreter: {runs}; {said}"
    assert done.returncode == 0 and ran.exists(), said
    assert "0:   pass host_vs_lock: gh01: meets the lock's driver, glibc and GPU targets" in said, said
    assert "0: 2 pass, 0 warn, 0 fail, 0 skip" in said, said
