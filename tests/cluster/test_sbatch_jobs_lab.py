"""The jobs `envsolver cluster sbatch` writes, SUBMITTED to the real Slurm lab (tests/slurmlab.py): each launch
style (torchrun per node, one task per GPU, DeepSpeed's launcher) runs a gloo all_reduce across the ranks on
the lab's nodes with the job options users set; the script starts from a clean environment (a PYTHONPATH in the
submit shell does not reach the command); and the partition's limits, node states and features are read before
writing: a job sbatch would reject or that could never start is refused (exit 1) with a fix that works.

The environment is a stand-in prefix whose bin/python runs this test's python (the CPU torch, and DeepSpeed
when it is installed). The verify step is left out (--no-verify): test_sbatch_lab.py runs it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from tests.cluster.test_sbatch_lab import init_cluster, stand_in_env, submit
from tests.dist import needs_deepspeed, needs_torch
from tests.slurmlab import SlurmLab

# The command: joins the group its launcher set up (env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), all-reduces
# rank+1, and writes what it saw as one JSON line (one os.write: the ranks of a node share one pipe). It also says
# whether the submit shell's PYTHONPATH reached it (the module `shadow` lies only there).
TRAIN = """\
import datetime, importlib.util, json, os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
os.write(1, ("RANK " + json.dumps({
    "rank": dist.get_rank(), "world": dist.get_world_size(), "sum": total.item(),
    "local_rank": os.environ.get("LOCAL_RANK"), "node": os.environ.get("SLURMD_NODENAME"), "argv": sys.argv[1:],
    "pythonpath": os.environ.get("PYTHONPATH"), "ld_library_path": os.environ.get("LD_LIBRARY_PATH"),
    "shadow": importlib.util.find_spec("shadow") is not None, "cpus": os.environ.get("SLURM_CPUS_PER_TASK"),
    "nousersite": os.environ.get("PYTHONNOUSERSITE"),
}) + "\\n").encode())
dist.destroy_process_group()
os._exit(0)  # what it had to say is written: no interpreter teardown (0.55 s of CPU with torch)
"""


def ranks(output: str) -> list[dict[str, Any]]:
    rows = [json.loads(line.split("RANK ", 1)[1]) for line in output.splitlines() if line.startswith("RANK ")]
    return sorted(rows, key=lambda row: row["rank"])


def sbatch_cli(args: list[str]) -> tuple[int, dict[str, Any]]:
    """`cluster sbatch --json ARGS`: (exit code, its JSON document)."""
    result = CliRunner().invoke(main, ["cluster", "sbatch", "--json", *args])
    try:
        doc: dict[str, Any] = json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {result.exit_code}): {result.output}") from None
    return result.exit_code, doc


def job_dir(lab: SlurmLab, tmp_path: Path) -> tuple[list[str], Path]:
    """The cluster file (init on `mixed`), a stand-in environment with DeepSpeed's command, the training script,
    and the shadow package that only the submit shell's PYTHONPATH can find."""
    cluster = init_cluster(lab, tmp_path)
    prefix = stand_in_env(tmp_path)
    deepspeed = prefix / "bin" / "deepspeed"
    deepspeed.write_text(f'#!/bin/sh\nexec {Path(sys.executable).parent / "deepspeed"} "$@"\n')
    deepspeed.chmod(0o755)
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "elsewhere").mkdir()  # not named `shadow`: the script's directory would find it as a package
    (tmp_path / "elsewhere" / "shadow.py").write_text("SHADOWED = True\n")
    return ["--cluster", str(cluster), "--partition", "mixed", "-p", str(prefix)], tmp_path / "elsewhere"


def submit_dirty(lab: SlurmLab, script: Path, name: str, shadow: Path) -> tuple[int, str]:
    """sbatch and wait (test_sbatch_lab.submit) from a shell whose PYTHONPATH finds `shadow` and whose
    LD_LIBRARY_PATH names another directory; (the job's exit code, its output)."""
    env = {**lab.env, "PYTHONPATH": str(shadow), "LD_LIBRARY_PATH": str(shadow), "PYTHONNOUSERSITE": ""}
    return submit(lab, script, name, env)


@needs_torch
def test_one_task_per_gpu_with_the_users_options_from_a_clean_environment(lab: SlurmLab, tmp_path: Path) -> None:
    """--launch per-gpu on both nodes of `mixed`: four Slurm tasks, each one rank (RANK, LOCAL_RANK, WORLD_SIZE from
    Slurm), one group meeting at gpu02; the job options reach #SBATCH lines sbatch accepts; the submit shell's
    PYTHONPATH and LD_LIBRARY_PATH never reach the command (issue 21, item 4)."""
    base, shadow = job_dir(lab, tmp_path)
    script = tmp_path / "per-gpu.sh"
    options = ["--exclusive", "--mem-per-gpu", "100M", "--error", "per-gpu-%j.err", "--signal", "B:USR1@60"]
    options += ["--requeue", "--exclude", "gpu01", "--sbatch-line=--comment=envsolver-lab", "--cpus-per-gpu", "1"]
    args = [*base, "--nodes", "2", "--time", "5", "--no-verify", "--launch", "per-gpu", *options]
    code, doc = sbatch_cli([*args, "--out", str(script), "--", "python", "train.py", "--lr", "3e-4; touch CANARY"])
    assert code == 0, doc
    directives = ("--ntasks-per-node=2", "--cpus-per-task=1", "--exclusive", "--mem-per-gpu=100M", "--requeue")
    for line in (*directives, "--error=per-gpu-%j.err", "--signal=B:USR1@60", "--exclude=gpu01"):
        assert f"#SBATCH {line}\n" in doc["script"], doc["script"]
    assert "#SBATCH --comment=envsolver-lab\n" in doc["script"] and "--gpus-per-task=1 --gpu-bind=none" in doc["script"]
    code, output = submit_dirty(lab, script, "envsolver-per-gpu", shadow)
    assert code == 0, output
    rows = ranks(output)
    assert [row["rank"] for row in rows] == [0, 1, 2, 3], output
    assert {row["world"] for row in rows} == {4} and {row["sum"] for row in rows} == {10.0}, output
    assert [(row["node"], row["local_rank"]) for row in rows] == [
        ("gpu02", "0"),
        ("gpu02", "1"),
        ("gpu03", "0"),
        ("gpu03", "1"),
    ], output
    assert all(row["argv"] == ["--lr", "3e-4; touch CANARY"] and row["cpus"] == "1" for row in rows), output
    assert {(row["pythonpath"], row["ld_library_path"], row["shadow"]) for row in rows} == {(None, None, False)}, output
    assert {row["nousersite"] for row in rows} == {"1"}, output
    [errors] = tmp_path.glob("per-gpu-*.err")  # --error's pattern: the job's stderr, named by its job id
    said = errors.read_text(errors="replace")
    assert said.count("(gpu02, the step's first host)") == 4 and "rank 3 of 4 (local 1 of 2)" in said, said
    assert not list(tmp_path.rglob("CANARY"))


def test_the_dirty_submit_shell_does_reach_a_job_that_does_not_clean(lab: SlurmLab, tmp_path: Path) -> None:
    """The control for the test above: the same submit shell, a plain batch script: PYTHONPATH arrives (so the
    clean start is what keeps it out, not the lab)."""
    _, shadow = job_dir(lab, tmp_path)
    script = tmp_path / "plain.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --partition=mixed\n#SBATCH --time=2\nsrun --ntasks=1 sh -c 'echo \"PP=$PYTHONPATH\"'\n"
    )
    code, output = submit_dirty(lab, script, "envsolver-dirty", shadow)
    assert code == 0 and f"PP={shadow}" in output, output


@needs_torch
@needs_deepspeed
def test_deepspeeds_launcher_on_every_node_from_a_hostfile_of_the_allocation(lab: SlurmLab, tmp_path: Path) -> None:
    """--launch deepspeed: DeepSpeed's own runner on each node (--no_ssh, its node rank, the hostfile of the
    step's nodes with slots=2), which starts two ranks per node and passes --local_rank; one group of four."""
    base, shadow = job_dir(lab, tmp_path)
    script = tmp_path / "deepspeed.sh"
    args = [*base, "--nodes", "2", "--time", "5", "--no-verify", "--launch", "deepspeed"]
    code, doc = sbatch_cli([*args, "--out", str(script), "--", "train.py", "--lr", "3e-4"])
    assert code == 0, doc
    assert "--style=deepspeed -- train.py --lr 3e-4" in doc["script"] and doc["cpus_per_task"] == 2, doc["script"]
    code, output = submit_dirty(lab, script, "envsolver-deepspeed", shadow)
    assert code == 0, output
    rows = ranks(output)
    assert [row["rank"] for row in rows] == [0, 1, 2, 3], output
    assert {row["world"] for row in rows} == {4} and {row["sum"] for row in rows} == {10.0}, output
    assert sorted((row["node"], row["argv"][0]) for row in rows) == [
        ("gpu02", "--local_rank=0"),
        ("gpu02", "--local_rank=1"),
        ("gpu03", "--local_rank=0"),
        ("gpu03", "--local_rank=1"),
    ], output
    assert "WORLD INFO DICT: {'gpu02': [0, 1], 'gpu03': [0, 1]}" in output, output
    assert {row["shadow"] for row in rows} == {False}, output
    for node_id, node in enumerate(("gpu02", "gpu03")):
        assert f"{node} (node {node_id} of 2): DeepSpeed's launcher with 2 process(es)" in output, output


@needs_torch
@pytest.mark.slow
def test_torchrun_array_on_the_nodes_with_a_feature(lab: SlurmLab, tmp_path: Path) -> None:
    """--launch torchrun (the default) with --constraint ib (only gpu02 has it) and --array 0-1: two array tasks,
    each on gpu02, each a group of two ranks; --output's pattern names each task's file."""
    base, _ = job_dir(lab, tmp_path)
    script = tmp_path / "array.sh"
    args = [*base, "--time", "5", "--no-verify", "--constraint", "ib", "--array", "0-1"]
    args += ["--output", f"{tmp_path}/array-%A_%a.log"]
    code, doc = sbatch_cli([*args, "--out", str(script), "--", "python", "train.py"])
    assert code == 0, doc
    assert "#SBATCH --constraint=ib\n" in doc["script"] and "#SBATCH --array=0-1\n" in doc["script"]
    assert not [n for n in doc["notes"] if "different GPUs" in n], doc["notes"]  # a constraint: no mixed warning
    done = lab.batch([str(script)], tmp_path, timeout=400)  # both array tasks waited for, as sbatch --wait does
    logs = sorted(tmp_path.glob("array-*_*.log"))
    said = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')}" for log in logs)
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{said}"
    assert [log.name.rsplit("_", 1)[1] for log in logs] == ["0.log", "1.log"], said
    for log in logs:
        rows = ranks(log.read_text())
        assert [(row["rank"], row["world"], row["node"]) for row in rows] == [(0, 2, "gpu02"), (1, 2, "gpu02")], said


def test_jobs_the_partition_cannot_run_are_refused_with_a_fix_that_works(lab: SlurmLab, tmp_path: Path) -> None:
    """Before writing: MaxTime (10 min in the lab), the nodes' GPUs (2 each), the partition's features (gpu02: ib,
    rack1) and node states (gpu03 taken DOWN) are read; each refusal exits 1 and names the fix, and the fix runs."""
    base, _ = job_dir(lab, tmp_path)
    base += ["--no-verify", "--", "python", "train.py"]

    def refused(extra: list[str], *words: str) -> str:
        code, doc = sbatch_cli([*extra, *base])
        message = f"{doc.get('error', {}).get('message')} {doc.get('error', {}).get('fix')}"
        assert code == 1 and doc["exit_code"] == 1 and doc["error"]["kind"] == "conflict", doc
        assert all(word in message for word in words), message
        return message

    refused(["--time", "20"], "--time 20 is above the partition's MaxTime=00:10:00", "pass --time 00:10:00 or less")
    assert sbatch_cli(["--time", "00:10:00", *base])[0] == 0
    refused(["--gpus-per-node", "16"], "no node of mixed has more than 2 GPUs", "pass --gpus-per-node 2 or less")
    assert sbatch_cli(["--gpus-per-node", "2", *base])[0] == 0
    refused(["--cpus-per-gpu", "4"], "asks 8 CPUs per node, but a node of mixed gives a job at most 2")
    assert sbatch_cli(["--cpus-per-gpu", "1", *base])[0] == 0  # the fix: pass --cpus-per-gpu 1 or less
    refused(["--constraint", "nvlink"], "names nvlink, a feature no node of mixed has (its features: ib, rack1)")
    refused(["--constraint", "ib", "--nodes", "2"], "mixed has 1 usable node(s)", "pass --nodes 1 or less")
    assert sbatch_cli(["--constraint", "ib", "--nodes", "1", *base])[0] == 0
    with lab.node_down("gpu03"):
        message = refused(["--nodes", "2"], "gpu03 (down", "pass --nodes 1 or less")
        assert "mixed has 1 usable node(s)" in message, message
        code, doc = sbatch_cli(["--nodes", "1", *base])
        assert code == 0 and any("gpu03 (down" in note for note in doc["notes"]), doc
    code, doc = sbatch_cli(["--nodes", "2", "--time", "20", "--gpus-per-node", "4", *base])
    assert code == 1 and doc["error"]["message"].count("\n  - ") == 2, doc  # every reason at once


def test_cpus_per_gpu_come_from_the_nodes_and_mixed_gpus_are_warned_about(lab: SlurmLab, tmp_path: Path) -> None:
    """The lab's nodes have 2 CPUs and 2 GPUs: 1 CPU per GPU, so torchrun's one task per node gets 2 CPUs and
    per-gpu's tasks 1 each; `mixed` holds a100 and h100 nodes and the file asks for untyped GPUs: a warning."""
    base, _ = job_dir(lab, tmp_path)
    base += ["--no-verify", "--", "python", "train.py"]
    code, doc = sbatch_cli(base)
    assert code == 0 and doc["cpus_per_task"] == 2 and "CPUs / GPUs of mixed" in doc["cpus_from"], doc
    assert "#SBATCH --cpus-per-task=2\n" in doc["script"], doc["script"]
    assert any("different GPUs (a100, h100)" in note for note in doc["notes"]), doc["notes"]
    code, doc = sbatch_cli(["--launch", "per-gpu", *base])
    assert code == 0 and doc["cpus_per_task"] == 1, doc
    code, doc = sbatch_cli(["--cpus-per-task", "1", "--cpus-per-gpu", "1", *base])  # --cpus-per-task wins
    assert code == 0 and doc["cpus_per_task"] == 1 and doc["cpus_from"] == "--cpus-per-task", doc
    code, doc = sbatch_cli(["--cpus-per-task", "2", "--launch", "per-gpu", *base])  # 2 tasks x 2 CPUs > 2
    assert code == 1 and "asks 4 CPUs per node" in doc["error"]["message"], doc
