"""`envsolver cluster sbatch` and the Slurm launcher on the real Slurm lab (tests/slurmlab.py): the cluster file
drafted by `cluster init`, the script written by `cluster sbatch` and SUBMITTED with the real sbatch to two lab
nodes of one partition (`mixed`: gpu02 and gpu03), the GPUs per node read from the real sinfo.

The environment is a stand-in prefix whose bin/python runs this test's python (the CPU torch): the user's command
joins a gloo process group under torchrun on both nodes. The verify step is envsolver's gate run by the prefix's
python on each node (cluster/gate_step.py: verify's probe against what the login node derived from the knowledge
base and the prefix's lock metadata): narrowed to `--check torch_import`, it passes; with every check, it fails on
these nodes (no CUDA torch), and the job ends before the command; a node whose driver is older than the lock's
floor fails it, named, while its partner passes.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.cluster import gate_step, nccl_nodes, slurm_launch
from envsolver.install import prefixmeta
from tests.cluster.captures import ENV
from tests.cluster.test_sbatch_launch import TRAIN, trained
from tests.dist import needs_torch
from tests.slurmlab import H100, Gpu, SlurmLab


def stand_in_env(root: Path) -> Path:
    """A prefix whose python is this test's python (a directory name the shell must not expand)."""
    prefix = root / "envs" / "train $(touch CANARY) `touch CANARY`"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (prefix / "bin" / "python").chmod(0o755)
    return prefix


def init_cluster(lab: SlurmLab, where: Path) -> Path:
    """`envsolver cluster init` against the lab, as a user runs it on a login node."""
    out = where / "cluster.yaml"
    result = CliRunner().invoke(main, ["cluster", "init", "--out", str(out), "--partition", "mixed"])
    assert result.exit_code == 0, result.output
    return out


def cluster_sbatch(args: list[str]) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["cluster", "sbatch", "--json", *args])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def two_nodes_one_gpu(cluster: Path, prefix: Path) -> list[str]:
    """cluster sbatch's words for a job on both nodes of `mixed`, one GPU each."""
    return [
        "--cluster",
        str(cluster),
        "--partition",
        "mixed",
        "-p",
        str(prefix),
        "--nodes",
        "2",
        "--gpus-per-node",
        "1",
    ]


def submit(lab: SlurmLab, script: Path, name: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """sbatch the script from its directory (with `env`, default the lab's) and wait for the job, as `sbatch
    --wait` does (SlurmLab.batch); (the job's exit code, its output). A job still running at the timeout is
    cancelled."""
    output = script.with_suffix(".out")
    done = lab.batch([f"--job-name={name}", f"--output={output}", str(script)], script.parent, env)
    text = output.read_text(errors="replace") if output.exists() else ""
    return done.returncode, f"{text}\n[sbatch] {done.stdout}{done.stderr}"


@needs_torch
def test_the_job_verifies_every_node_then_meets_at_the_first_host(lab: SlurmLab, tmp_path: Path) -> None:
    """init -> sbatch -> the real sbatch: the verify step ran on both nodes before the command; the command ran
    under torchrun on both nodes, 2 processes each (sinfo: gpu:a100:2 and gpu:h100:2), all four ranks in one
    group that met at gpu02 (the first host; its NodeAddr is this host); the hostile prefix and argument were
    never expanded."""
    cluster = init_cluster(lab, tmp_path)
    prefix = stand_in_env(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    script = tmp_path / "job.sh"
    args = ["--cluster", str(cluster), "--partition", "mixed", "-p", str(prefix), "--nodes", "2", "--time", "5"]
    args += ["--check", "torch_import", "--out", str(script), "--", "python", "train.py", "--lr", "3e-4; touch CANARY"]
    doc = cluster_sbatch(args)
    assert doc["gpus_per_node"] == 2 and doc["gpus_per_node_from"].startswith("sinfo GRES gpu:a100:2(S:0) on gpu02")
    assert "#SBATCH --partition=mixed\n" in doc["script"] and "#SBATCH --gres=gpu:2\n" in doc["script"]
    code, output = submit(lab, script, "envsolver-sbatch-ok")
    assert code == 0, output
    rows = trained(output)
    assert [row["rank"] for row in rows] == [0, 1, 2, 3], output
    assert {row["world"] for row in rows} == {4} and {row["sum"] for row in rows} == {10.0}
    assert sorted(row["node"] for row in rows) == ["gpu02", "gpu02", "gpu03", "gpu03"]
    assert all(row["argv"] == ["--lr", "3e-4; touch CANARY"] and row["conda_prefix"] == str(prefix) for row in rows)
    for node_id, node in enumerate(("gpu02", "gpu03")):
        met = f"envsolver-launch: {node} (node {node_id} of 2): torchrun with 2 process(es), rendezvous at "
        assert met in output and "(gpu02, the step's first host)" in output.split(met, 1)[1].splitlines()[0]
    verified = [line for line in output.splitlines() if "pass torch_import" in line]
    assert sorted(line.split(":", 1)[0] for line in verified) == ["0", "1"]  # srun's --label: both nodes
    assert output.index("1 pass, 0 warn, 0 fail") < output.index("envsolver: starting the command")
    assert output.index("envsolver: starting the command") < output.index("TRAIN ")
    assert not list(tmp_path.rglob("CANARY")) and not Path("CANARY").exists()


@needs_torch  # the failing check is the CPU torch's torch_cuda_build
def test_a_node_that_fails_verify_ends_the_job_before_the_command(lab: SlurmLab, tmp_path: Path) -> None:
    """Every check: the CPU torch fails torch_cuda_build on both nodes, so the command never runs."""
    cluster = init_cluster(lab, tmp_path)
    prefix = stand_in_env(tmp_path)
    ran = tmp_path / "command-ran"
    script = tmp_path / "job.sh"
    args = two_nodes_one_gpu(cluster, prefix)
    args += ["--time", "5", "--out", str(script), "--", "touch", str(ran)]
    cluster_sbatch(args)
    code, output = submit(lab, script, "envsolver-sbatch-fail")
    assert code == 1, output
    assert "FAIL torch_cuda_build" in output
    assert "srun: error: gpu0" in output and "Exited with exit code 1" in output  # srun names the failing node
    assert "failed verify on a node of this job" in output and "the command was not run" in output
    assert "envsolver: starting the command" not in output and not ran.exists()


def test_a_node_whose_driver_is_below_the_locks_floor_ends_the_job_named(lab: SlurmLab, tmp_path: Path) -> None:
    """The prefix keeps the lab lock's metadata (driver floor 525.60.13) and gpu03's nvidia-smi says 450.80.02: the
    gate fails gpu03 naming it, its driver, the floor and the fix; gpu02 passes; the command never runs; and the
    verify step ran the prefix's python, never this interpreter."""
    cluster = init_cluster(lab, tmp_path)
    prefix = stand_in_env(tmp_path)
    kept = prefixmeta.load(ENV)
    assert kept is not None
    prefixmeta.save(prefix, kept.platform, kept.custom)
    ran = tmp_path / "command-ran"
    script = tmp_path / "job.sh"
    args = two_nodes_one_gpu(cluster, prefix)
    args += ["--check", "driver", "--check", "host_vs_lock", "--check", "shm"]
    doc = cluster_sbatch([*args, "--time", "5", "--out", str(script), "--", "touch", str(ran)])
    verify_line = next(line for line in doc["script"].splitlines() if line.startswith("if ! srun"))
    words = shlex.split(verify_line[5:-6])
    assert words[words.index("--label") + 2 : words.index("--label") + 5] == [
        f"{prefix}/bin/python", "-I", str(gate_step.GATE)
    ], words  # fmt: skip
    assert sys.executable not in doc["script"], verify_line
    old = Gpu(H100.name, "450.80.02", H100.compute_cap, H100.memory)
    with lab.node_gpus("gpu03", (old, old)):
        code, output = submit(lab, script, "envsolver-sbatch-old-driver")
    assert code == 1, output
    failed = [line for line in output.splitlines() if "FAIL host_vs_lock" in line]
    assert len(failed) == 1 and failed[0].endswith(
        "FAIL host_vs_lock: gpu03: driver 450.80.02 is older than the lock's floor 525.60.13"
    ), output
    assert "fix: upgrade the driver on gpu03 (driver >= 525.60.13), or leave gpu03 out of the job " in output
    assert "(sbatch --exclude=gpu03)" in output
    assert "pass host_vs_lock: gpu02: meets the lock's driver, glibc and GPU targets" in output, output
    assert "(not checked in the job: shm; envsolver verify --cluster checks them)" in output, output
    assert "srun: error: gpu03: task 1: Exited with exit code 1" in output, output
    assert "srun: error: gpu02" not in output, output
    assert "the command was not run" in output and not ran.exists(), output


def test_the_launcher_meets_at_the_first_host_of_the_step_not_of_the_job(lab: SlurmLab, tmp_path: Path) -> None:
    """A job on gpu02 and gpu03 with a step on each node and one on gpu03 alone: the launcher (--dry-run prints
    the torchrun command) puts each rendezvous on its step's first host; the job's first host (gpu02) does not
    run the second step, so meeting there would hang."""
    launch = slurm_launch.task_argv(sys.executable, 1, ["true"], launcher=str(nccl_nodes.LAUNCHER))
    launch[3:3] = ["--dry-run"]  # after PYTHON -I LAUNCHER
    script = tmp_path / "steps.sh"
    both = shlex.join(launch)
    script.write_text(
        "#!/bin/bash\n#SBATCH --partition=mixed\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=2\n"
        f"srun --nodes=2 --ntasks-per-node=1 --label {both}\n"
        f"srun --nodes=1 --ntasks=1 --nodelist=gpu03 --label {both}\n"
    )
    code, output = submit(lab, script, "envsolver-launch-steps")
    assert code == 0, output
    lines = [line for line in output.splitlines() if "rendezvous at" in line]
    assert len(lines) == 3, output
    assert sum("(gpu02, the step's first host)" in line for line in lines) == 2
    assert any("gpu03 (node 0 of 1)" in line and "(gpu03, the step's first host)" in line for line in lines)
    commands = [json.loads(line.split(": ", 1)[1]) for line in output.splitlines() if ': ["' in line]
    # each is PYTHON -I -m torch.distributed.run --nnodes=N ...
    assert sorted(c[4] for c in commands) == ["--nnodes=1", "--nnodes=2", "--nnodes=2"]
