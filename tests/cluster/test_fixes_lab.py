"""Issue 21 item 6 in the Slurm lab, each suggested fix run as suggested: a node whose driver is older than the
one the cluster's lock was made for, checked inside a job step, is told to remake the cluster's lock from a login
node (not `make --gpu auto`), and doing that (cluster init, make --cluster, install) makes it pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.slurmlab import V100, Gpu, SlurmLab, write_env

OLDER = Gpu(V100.name, "530.30.02", V100.compute_cap, V100.memory)  # above the lock's floor, below what it needs


def _envsolver(lab: SlurmLab, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envsolver", *args],
        capture_output=True,
        text=True,
        env={k: v for k, v in lab.env.items() if k not in ("ENVSOLVER_GPUS", "ENVSOLVER_DRIVER")},
        cwd=cwd,
        timeout=600,
        check=False,
    )


def _install(lab: SlurmLab, root: Path, prefix: Path) -> None:
    """`envsolver install linux-64/conda-lock.yml -p PREFIX` as far as verify sees it: the lab's stand-in
    environment with the lock's metadata (no conda channel is reachable here to install from)."""
    lock = yaml.safe_load((root / "linux-64" / "conda-lock.yml").read_text())
    write_env(prefix, "linux-64", lock["metadata"]["custom_metadata"], sys.executable)


def _host_vs_lock_on_gpu01(lab: SlurmLab, prefix: Path) -> dict[str, str]:
    """The node's own verify, inside a job step on gpu01 (SLURM_JOB_ID set there), as the job script runs it."""
    argv = ["srun", "--partition=v100", "--gres=gpu:1", "--job-name=h3-fix", sys.executable, "-m", "envsolver"]
    done = lab.run([*argv, "verify", "-p", str(prefix), "--json", "--check", "host_vs_lock"], timeout=300)
    assert done.stdout.strip(), done.stderr
    check = json.loads(done.stdout)["checks"][0]
    assert check["id"] == "host_vs_lock", done.stdout
    return {"status": check["status"], "detail": check["detail"], "fix": check.get("fix") or ""}


def _ran(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, (done.args, done.stdout[-2000:], done.stderr[-2000:])


def test_inside_a_job_the_fix_for_a_node_the_lock_does_not_fit_works(lab: SlurmLab, tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    _ran(_envsolver(lab, tmp_path, "cluster", "init"))
    _ran(_envsolver(lab, tmp_path, "make", "--cluster", "cluster.yaml", "--offline"))
    _install(lab, tmp_path, prefix)
    with lab.node_gpus("gpu01", (OLDER, OLDER)):
        before = _host_vs_lock_on_gpu01(lab, prefix)
        assert before["status"] == "fail" and "530.30.02" in before["detail"], before
        assert "make --gpu auto" not in before["fix"], before
        assert before["fix"].startswith("node gpu01 of partition v100 does not have"), before
        assert "sbatch --exclude=gpu01" in before["fix"], before
        # The suggestion, word for word (make --cluster with --offline: no conda channel is reachable here).
        steps = before["fix"].split(": ", 2)[2].split(", then ")
        assert steps == [
            "envsolver cluster init",
            "envsolver make --cluster cluster.yaml",
            f"envsolver install linux-64/conda-lock.yml -p {prefix}",
        ], before["fix"]
        _ran(_envsolver(lab, tmp_path, *steps[0].split()[1:]))
        _ran(_envsolver(lab, tmp_path, *steps[1].split()[1:], "--offline"))
        _install(lab, tmp_path, prefix)
        after = _host_vs_lock_on_gpu01(lab, prefix)
    assert after["status"] == "pass", (before, after)


def test_verify_cluster_without_an_environment_names_a_fix_that_works_with_cluster(
    lab: SlurmLab, tmp_path: Path
) -> None:
    """It said "Pass an environment prefix (-p) or --python PATH", and --cluster refuses --python."""
    _ran(_envsolver(lab, tmp_path, "cluster", "init"))
    _ran(_envsolver(lab, tmp_path, "make", "--cluster", "cluster.yaml", "--offline"))
    missing = _envsolver(lab, tmp_path, "verify", "--cluster", "cluster.yaml", "-p", "env", "--json")
    assert missing.returncode == 2, (missing.stdout, missing.stderr)
    fix = json.loads(missing.stdout)["error"]["fix"]
    assert "--python" not in fix and "--python" not in missing.stderr, missing.stderr
    install = fix.split(" wrote: ")[1].rstrip(".")
    assert install == "envsolver install linux-64/conda-lock.yml -p PREFIX", fix
    # The install itself (no conda channel is reachable here): the lab's stand-in environment from that lock.
    assert install.split()[2] == "linux-64/conda-lock.yml"
    _install(lab, tmp_path, tmp_path / "env")
    again = _envsolver(lab, tmp_path, "verify", "--cluster", "cluster.yaml", "-p", "env", "--check", "driver")
    assert again.returncode == 0, (again.stdout[-2000:], again.stderr[-2000:])
