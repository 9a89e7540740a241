"""`envsolver cluster sbatch` (envsolver/cluster/sbatch.py, cli/cluster.py) without Slurm: the golden script for one
partition, the GPU request per node, hostile values refused or quoted (the script is run by bash with a stand-in
srun that records its argv: every value arrives as one word, nothing is expanded, no canary file appears), the
GPUs per node read from sinfo's output, and the command's refusals and --json. The script submitted to the real
Slurm lab is in test_sbatch_lab.py."""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.cluster import file as cluster_file
from envsolver.cluster import gate_step, parse, sbatch
from envsolver.cluster.job_options import JobOptions
from envsolver.cluster.model import Partition, SlurmOptions
from envsolver.core.errors import BadInputError
from envsolver.kb import KnowledgeBase
from envsolver.lock.writers import files
from tests.conftest import DATA

CLUSTER = """\
format: 1
cluster: hpc
partitions:
  - name: v100
    gpus: [v100]
    driver: '535.104.05'
    platform: linux-64
    glibc: '2.28'
    slurm: {gres: 'gpu:v100:1', account: ml-team}
  - name: a100
    gpus: [a100]
    driver: '550.54.15'
    platform: linux-64
    glibc: '2.28'
    slurm: {partition: gpu, constraint: 'a100&ib', gpus: 'a100:1'}
  - name: h100
    gpus: [h100]
    driver: '570.133.20'
    platform: linux-64
    glibc: null
  - name: gh200
    gpus: [gh200]
    driver: '570.133.20'
    platform: linux-aarch64
    glibc: '2.34'
"""

GOLDEN_A100 = """\
#!/bin/bash
# envsolver cluster sbatch: partition a100 of cluster hpc, 2 node(s) x 4 GPU(s).
# The environment: /shared/envs/train. Submit this script with sbatch; it runs the command on every node under
# torchrun (one process per GPU), meeting at the first host of the step (envsolver's Slurm launcher).
#SBATCH --job-name=train
#SBATCH --partition=gpu
#SBATCH --constraint=a100&ib
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=a100:4
#SBATCH --time=04:00:00
set -euo pipefail

# A clean start: no module, and nothing of the submit shell's Python, libraries, conda or rendezvous.
if type module >/dev/null 2>&1; then
  set +u; module purge >&2 || echo 'envsolver: module purge failed; the job goes on with the modules it has' >&2; \
set -u
fi
unset PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTHONUSERBASE LD_LIBRARY_PATH LD_PRELOAD LD_AUDIT CONDA_PREFIX \
CONDA_DEFAULT_ENV CONDA_SHLVL CONDA_EXE CONDA_PYTHON_EXE VIRTUAL_ENV VIRTUAL_ENV_PROMPT CUDA_HOME CUDA_PATH \
TORCH_CUDA_ARCH_LIST TORCH_EXTENSIONS_DIR MASTER_ADDR MASTER_PORT RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE \
NODE_RANK GROUP_RANK  # by name too, where bash has no compgen
for envsolver_variable in $(compgen -e 2>/dev/null); do
  case "$envsolver_variable" in PYTHON*|LD_*|CONDA*|_CE_*|VIRTUAL_ENV|VIRTUAL_ENV_PROMPT|CUDA_HOME|CUDA_PATH|\
TORCH_CUDA_ARCH_LIST|TORCH_EXTENSIONS_DIR|MASTER_ADDR|MASTER_PORT|RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|\
NODE_RANK|GROUP_RANK) unset "$envsolver_variable" ;; esac
done
unset envsolver_variable
export PYTHONNOUSERSITE=1  # no packages from ~/.local
export SLURM_EXPORT_ENV=ALL  # every srun below gets this environment, even under sbatch --export=NONE

# The environment, as activating it sets it (no conda needed on the nodes); srun passes it to every step.
export CONDA_PREFIX=/shared/envs/train
export PATH=/shared/envs/train/bin:"${PATH}"
export PYTHONUNBUFFERED=1
set +eu
for envsolver_script in /shared/envs/train/etc/conda/activate.d/*.sh; do
  if [ -r "$envsolver_script" ]; then . "$envsolver_script"; fi
done
set -eu

# Verify the environment on every node before the command: a node that fails ends the job here.
echo "envsolver: verifying the environment on every node of job ${SLURM_JOB_ID:-} (${SLURM_JOB_NODELIST:-})" >&2
if ! srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=0 --label --time=15 /shared/envs/train/bin/python -I \
GATE --python /shared/envs/train/bin/python --probe PROBE --demands DEMANDS -- --timeout 120.0; then
  echo 'envsolver: the environment failed verify on a node of this job (srun names the node above); the command \
was not run. Fix what the failing checks say (each names its fix), then submit the job again.' >&2
  exit 1
fi

# The command: torchrun (one process per GPU), rendezvous on the step's first host (the launcher finds it).
echo 'envsolver: starting the command on 2 node(s) x 4 GPU(s)' >&2
srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 /shared/envs/train/bin/python -I \
/shared/envsolver/envsolver/cluster/slurm_launch.py --nproc-per-node=4 -- python train.py --lr 3e-4
""".replace("\\\n", "")


@pytest.fixture
def cluster(kb: KnowledgeBase) -> Any:
    return cluster_file.parse(CLUSTER, kb, "cluster.yaml")


def job_for(partition: Partition, **changes: Any) -> sbatch.Job:
    base: dict[str, Any] = {
        "cluster": "hpc",
        "partition": partition,
        "prefix": "/shared/envs/train",
        "command": ("python", "train.py", "--lr", "3e-4"),
        "nodes": 2,
        "gpus_per_node": 4,
        "launcher": "/shared/envsolver/envsolver/cluster/slurm_launch.py",
    }
    return sbatch.Job(**{**base, **changes})


def test_golden_script_for_a_partition(cluster: Any, kb: KnowledgeBase) -> None:
    job = job_for(cluster.partition("a100"), time="04:00:00", job_name="train")
    # The verify step's files are envsolver's own (where it is installed) and its demands the KB's (no lock kept).
    wanted = json.dumps(gate_step.demands_for("/shared/envs/train", kb), sort_keys=True, separators=(",", ":"))
    golden = GOLDEN_A100.replace("GATE", str(gate_step.GATE)).replace("PROBE", str(gate_step.PROBE))
    assert sbatch.render(job) == golden.replace("DEMANDS", shlex.quote(wanted))


def test_the_script_is_valid_bash(cluster: Any, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(sbatch.render(job_for(cluster.partition("v100"), checks=("driver", "gpus"))))
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


REQUESTS = [
    (SlurmOptions(gres="gpu:a100:1"), ["--gres=gpu:a100:4"]),
    (SlurmOptions(gres="gpu:1"), ["--gres=gpu:4"]),
    (SlurmOptions(gres="gpu"), ["--gres=gpu:4"]),
    (SlurmOptions(gres="gpu:nvidia_h100_80gb_hbm3:2,nvme:1"), ["--gres=gpu:nvidia_h100_80gb_hbm3:4,nvme:1"]),
    (SlurmOptions(gres="nvme:1"), ["--gres=nvme:1", "--gpus-per-node=4"]),
    (SlurmOptions(gpus="a100:1"), ["--gpus-per-node=a100:4"]),
    (SlurmOptions(gpus="2"), ["--gpus-per-node=4"]),
    (SlurmOptions(), ["--gpus-per-node=4"]),
]


@pytest.mark.parametrize(("options", "words"), REQUESTS, ids=[repr(o) for o, _ in REQUESTS])
def test_the_gpu_request_asks_for_every_gpu_of_a_node_of_the_partitions_type(
    options: SlurmOptions, words: list[str]
) -> None:
    """init writes the probe's one-GPU request (gpu:a100:1); a job asks for G per node of the same type. sbatch's
    --gpus counts the whole job, so the file's `gpus` becomes --gpus-per-node."""
    assert sbatch.gpu_request(options, 4) == words


def test_the_directives_keep_the_partitions_account_and_constraint(cluster: Any) -> None:
    words = sbatch.directives(job_for(cluster.partition("v100"), cpus_per_task=16))
    assert words == [
        "--partition=v100",
        "--account=ml-team",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=16",
        "--gres=gpu:v100:4",
    ]


def env_recording_srun(tmp_path: Path) -> tuple[Path, Path]:
    """(a directory to put first on PATH, the file its `srun` writes): an srun that records the environment the
    job's step would get, and runs nothing."""
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f"#!/bin/sh\nenv > {shlex.quote(str(seen))}\n")
    (bin_dir / "srun").chmod(stat.S_IRWXU)
    return bin_dir, seen


HOSTILE = [
    ("time", "10; touch CANARY"),
    ("time", "1-"),
    ("job_name", "x$(touch CANARY)"),
    ("job_name", "a b"),
    ("prefix", "relative/env"),
    ("prefix", "/shared/env\n#SBATCH --uid=0"),
    ("command", ("python", "train.py\n#SBATCH --uid=0")),
    ("command", ("python", "")),
    ("command", ()),
    ("nodes", 0),
    ("gpus_per_node", 65),
    ("cpus_per_task", 0),
]


@pytest.mark.parametrize(("key", "value"), HOSTILE, ids=[f"{k}={v!r}" for k, v in HOSTILE])
def test_hostile_values_are_refused_with_a_fix(cluster: Any, key: str, value: Any) -> None:
    with pytest.raises(BadInputError) as info:
        sbatch.render(job_for(cluster.partition("a100"), **{key: value}))
    assert ". " in str(info.value)  # a message, then the fix


def test_a_hand_built_partition_with_a_hostile_slurm_value_is_refused(cluster: Any) -> None:
    """The cluster file's loader checks these; a Partition built another way is checked again before rendering."""
    a100 = cluster.partition("a100")
    for options in (SlurmOptions(account="x;touch CANARY"), SlurmOptions(gres="gpu:1 --uid=0")):
        bad = Partition(a100.name, a100.gpu_names, a100.gpus, a100.driver, a100.platform, a100.glibc, options)
        with pytest.raises(BadInputError, match="Fix it in the cluster file"):
            sbatch.render(job_for(bad))


def stand_in_slurm(tmp_path: Path, verify_exit: int = 0) -> tuple[Path, Path]:
    """srun that appends its argv (as JSON) to calls.jsonl and exits with `verify_exit` for the verify step."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"sys.exit({verify_exit} if any(w.endswith('gate.py') for w in sys.argv) else 0)\n"
    )
    (bin_dir / "srun").chmod(stat.S_IRWXU)
    return bin_dir, calls


def run_script(script: str, tmp_path: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "job.sh"
    path.write_text(script)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7"}
    return subprocess.run(["bash", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def test_hostile_paths_and_words_reach_srun_as_single_words(cluster: Any, tmp_path: Path) -> None:
    """A prefix with $(...), backticks, quotes and spaces, and command words with ; and $(...): the script runs
    (bash, stand-in srun), each arrives as one word exactly, and nothing ran (no canary file)."""
    canary = tmp_path / "CANARY"
    prefix = f"/shared/it's $(touch {canary}) `touch {canary}`/env"
    command = ("python", "train.py", f"--note=x; touch {canary}", f"$(touch {canary})", "'", '"', "*")
    bin_dir, calls = stand_in_slurm(tmp_path)
    job = job_for(cluster.partition("v100"), prefix=prefix, command=command, job_name="j")
    done = run_script(sbatch.render(job), tmp_path, bin_dir)
    assert done.returncode == 0, done.stderr
    verify, launch = (json.loads(line) for line in calls.read_text().splitlines())
    assert verify[verify.index("--python") + 1] == f"{prefix}/bin/python"
    assert launch[launch.index("--") + 1 :] == list(command)
    assert launch[3] == f"{prefix}/bin/python"
    assert not canary.exists()


def test_the_prefix_is_named_the_same_everywhere(cluster: Any) -> None:
    """A trailing or doubled slash (found by the fuzz test): CONDA_PREFIX, the activate.d loop, the verify step's
    and the launcher's python all name /shared/envs/train."""
    script = sbatch.render(job_for(cluster.partition("v100"), prefix="/shared//envs/train/"))
    assert "/shared/envs/train/" not in script.replace("/shared/envs/train/bin", "").replace(
        "/shared/envs/train/etc", ""
    )
    assert "//" not in script and "export CONDA_PREFIX=/shared/envs/train\n" in script
    assert " --python /shared/envs/train/bin/python " in script


def test_the_activation_reaches_the_steps(cluster: Any, tmp_path: Path) -> None:
    """CONDA_PREFIX and PATH as environ_for sets them, then the prefix's activate.d scripts, in every step."""
    prefix = tmp_path / "env dir"
    (prefix / "etc" / "conda" / "activate.d").mkdir(parents=True)
    (prefix / "etc" / "conda" / "activate.d" / "envsolver.sh").write_text('export TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "seen"
    (bin_dir / "srun").write_text(f"#!/bin/sh\nenv >> {shlex.quote(str(seen))}\n")
    (bin_dir / "srun").chmod(stat.S_IRWXU)
    done = run_script(sbatch.render(job_for(cluster.partition("v100"), prefix=str(prefix))), tmp_path, bin_dir)
    assert done.returncode == 0, done.stderr
    env = seen.read_text().splitlines()
    assert f"CONDA_PREFIX={prefix}" in env and "TORCH_CUDA_ARCH_LIST=8.0;9.0+PTX" in env
    assert f"PATH={prefix}/bin:{bin_dir}:{os.environ['PATH']}" in env


def test_a_failing_verify_ends_the_job_before_the_command(cluster: Any, tmp_path: Path) -> None:
    bin_dir, calls = stand_in_slurm(tmp_path, verify_exit=1)
    done = run_script(sbatch.render(job_for(cluster.partition("v100"))), tmp_path, bin_dir)
    assert done.returncode == 1, done.stderr
    assert len(calls.read_text().splitlines()) == 1  # the verify step only
    assert "failed verify on a node of this job" in done.stderr and "the command was not run" in done.stderr


def test_no_verify_runs_only_the_command(cluster: Any, tmp_path: Path) -> None:
    bin_dir, calls = stand_in_slurm(tmp_path, verify_exit=1)
    done = run_script(sbatch.render(job_for(cluster.partition("v100"), verify=False)), tmp_path, bin_dir)
    assert done.returncode == 0, done.stderr
    [launch] = [json.loads(line) for line in calls.read_text().splitlines()]
    assert "--nproc-per-node=4" in launch and "verify" not in launch


# --- GPUs per node, from sinfo --------------------------------------------------------------------------------

SINFO = """\
a100|gpu02|up|idle|gpu:a100:2(S:0)
mixed|gpu02|up|idle|gpu:a100:2(S:0)
mixed|gpu03|up|idle|gpu:h100:2
big|n1|up|idle|gpu:a100:8(S:0-1)
big|n2|up|mixed|gpu:a100:4(S:0),gpu:h100:2
cpu|cpu01|up|idle|(null)
"""


def test_gpus_per_node_are_the_fewest_on_the_partitions_nodes() -> None:
    rows, _ = parse.parse_sinfo(SINFO)
    a100 = sbatch.gpus_from_sinfo(rows, "a100", "a100")
    assert a100 == sbatch.NodeGpus(2, "sinfo GRES gpu:a100:2(S:0) on gpu02", ("gpu02",))
    big = sbatch.gpus_from_sinfo(rows, "big", "a100")
    assert big is not None and big.count == 4 and big.origin.startswith("sinfo GRES gpu:a100:4(S:0),gpu:h100:2 on n2")
    untyped = sbatch.gpus_from_sinfo(rows, "big", None)
    assert untyped is not None and untyped.count == 6
    assert sbatch.gpus_from_sinfo(rows, "mixed", None) == sbatch.NodeGpus(
        2, "sinfo GRES gpu:a100:2(S:0) on gpu02 (the fewest of 2 nodes)", ("gpu02", "gpu03")
    )
    assert sbatch.gpus_from_sinfo(rows, "cpu", None) is None
    assert sbatch.gpus_from_sinfo(rows, "a100", "h100") is None


def test_gpus_per_node_from_a_real_sinfo_capture() -> None:
    rows, _ = parse.parse_sinfo((DATA / "slurm" / "sinfo-node.txt").read_text())
    found = sbatch.gpus_from_sinfo(rows, "a100", "a100")
    assert found is not None and found.count == 2 and "gpu02" in found.origin


# --- the command ------------------------------------------------------------------------------------------------


@pytest.fixture
def files_here(tmp_path: Path) -> tuple[Path, Path]:
    """cluster.yaml, and an environment prefix (bin/python) in tmp_path."""
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").write_text("#!/bin/sh\n")
    (prefix / "bin" / "python").chmod(0o755)
    return path, prefix


def invoke(args: list[str], env: dict[str, str] | None = None, check: bool = False) -> Any:
    """`cluster sbatch ARGS`; without `check`, with --no-slurm-check (there is no Slurm in these tests; the lab's
    tests read the partition's limits)."""
    return CliRunner().invoke(main, ["cluster", "sbatch", *([] if check else ["--no-slurm-check"]), *args], env=env)


def test_cli_prints_the_script_and_json(files_here: tuple[Path, Path]) -> None:
    path, prefix = files_here
    args = ["--cluster", str(path), "--partition", "h100", "-p", str(prefix), "--gpus-per-node", "8", "--nodes", "2"]
    result = invoke([*args, "python", "train.py", "--lr", "3e-4"])  # the command without --: after the options
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("#!/bin/bash\n")
    assert "#SBATCH --partition=h100\n" in result.stdout and "#SBATCH --gpus-per-node=8\n" in result.stdout
    assert result.stdout.splitlines()[-1].endswith("--nproc-per-node=8 -- python train.py --lr 3e-4")
    gate = f"{shlex.quote(str(prefix / 'bin' / 'python'))} -I {shlex.quote(str(gate_step.GATE))}"
    assert gate in result.stdout and sys.executable not in result.stdout, result.stdout  # never this interpreter
    doc = json.loads(invoke([*args, "--json", "--", "python", "train.py"]).stdout)
    assert doc["ok"] is True and doc["partition"] == "h100" and doc["gpus_per_node"] == 8
    assert doc["gpus_per_node_from"] == "--gpus-per-node" and doc["command"] == ["python", "train.py"]
    assert doc["script"].startswith("#!/bin/bash\n") and doc["out"] is None


def test_cli_writes_the_file_and_keeps_hand_edits(files_here: tuple[Path, Path], tmp_path: Path) -> None:
    path, prefix = files_here
    out = tmp_path / "train.sh"
    args = ["--cluster", str(path), "--partition", "v100", "-p", str(prefix), "--gpus-per-node", "2", "--out", str(out)]
    result = invoke([*args, "--", "python", "train.py"])
    assert result.exit_code == 0, result.output
    assert f"submit it with: sbatch {out}" in result.stdout
    assert not files.edited_by_hand(out.read_text())
    out.write_text(out.read_text() + "echo mine\n")
    again = invoke([*args, "--json", "--", "python", "train.py"])
    assert again.exit_code == 2 and "edited by hand" in json.loads(again.stdout)["error"]["message"], again.output
    assert "--force" in json.loads(again.stdout)["error"]["fix"]
    assert invoke([*args, "--force", "--", "python", "train.py"]).exit_code == 0


def refused(args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    result = invoke(["--json", *args], env)
    assert result.exit_code == 2, result.output
    error: dict[str, Any] = json.loads(result.stdout)["error"]
    assert error["fix"], error
    return error


def test_cli_refusals_end_with_the_fix(files_here: tuple[Path, Path], tmp_path: Path) -> None:
    path, prefix = files_here
    base = ["--cluster", str(path), "-p", str(prefix), "--gpus-per-node", "1"]
    unknown = refused([*base, "--partition", "a10", "--", "python", "t.py"])
    assert "no partition 'a10'" in unknown["message"] and "v100, a100, h100, gh200" in unknown["fix"]
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = refused(["--cluster", str(path), "-p", str(empty), "--partition", "v100", "--", "python", "t.py"])
    assert "no bin/python" in missing["message"] and "envsolver install" in missing["fix"]
    both = refused([*base, "--partition", "v100", "--no-verify", "--check", "driver", "--", "python", "t.py"])
    assert "--no-verify" in both["message"]
    time = refused([*base, "--partition", "v100", "--time", "10;id", "--", "python", "t.py"])
    assert "--time" in time["message"]
    hostile = refused([*base, "--partition", "$(id)", "--", "python", "t.py"])
    assert "no partition '$(id)'" in hostile["message"]


def test_cli_refuses_an_environment_of_another_platform(files_here: tuple[Path, Path]) -> None:
    from envsolver.install import prefixmeta

    path, prefix = files_here
    prefixmeta.save(prefix, "linux-64", {"envsolver_cluster_partitions": "v100;a100;h100"})
    error = refused(
        ["--cluster", str(path), "-p", str(prefix), "--partition", "gh200", "--gpus-per-node", "1", "--", "x"]
    )
    assert "installed for linux-64" in error["message"] and "linux-aarch64/conda-lock.yml" in error["fix"]
    ok = invoke(
        ["--cluster", str(path), "-p", str(prefix), "--partition", "h100", "--gpus-per-node", "1", "--json", "x"]
    )
    assert ok.exit_code == 0, ok.output
    assert not [n for n in json.loads(ok.stdout)["notes"] if "lock was made" in n], ok.output


def test_cli_without_slurm_asks_for_gpus_per_node(files_here: tuple[Path, Path], tmp_path: Path) -> None:
    """No --gpus-per-node: sinfo is asked; where Slurm cannot answer, the fix names the option."""
    path, prefix = files_here
    env = {"SLURM_CONF": str(tmp_path / "no-such-slurm.conf")}
    error = refused(["--cluster", str(path), "-p", str(prefix), "--partition", "v100", "--", "python", "t.py"], env)
    assert "SLURM_CONF" in error["message"] and "--gpus-per-node N" in error["fix"]


# --- launch styles, the job's options, the clean start ----------------------------------------------------------


def test_the_launch_step_per_style(cluster: Any) -> None:
    a100 = cluster.partition("a100")
    launcher = "/shared/envsolver/envsolver/cluster/slurm_launch.py"
    per_gpu = sbatch.launch_argv(job_for(a100, launch="per-gpu", cpus_per_gpu=8))
    assert per_gpu == [
        "srun",
        "--nodes=2",
        "--ntasks-per-node=4",
        "--gpus-per-task=1",
        "--gpu-bind=none",
        "--kill-on-bad-exit=1",
        "--cpus-per-task=8",
        "/shared/envs/train/bin/python",
        "-I",
        launcher,
        "--nproc-per-node=4",
        "--style=per-task",
        "--",
        "python",
        "train.py",
        "--lr",
        "3e-4",
    ]
    deepspeed = sbatch.launch_argv(job_for(a100, launch="deepspeed", cpus_per_gpu=8, command=("train.py", "--x")))
    assert deepspeed == [
        "srun",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--cpus-per-task=32",
        "/shared/envs/train/bin/python",
        "-I",
        launcher,
        "--nproc-per-node=4",
        "--style=deepspeed",
        "--",
        "train.py",
        "--x",
    ]


def test_the_directives_with_the_jobs_options(cluster: Any) -> None:
    """--constraint replaces the file's (a100&ib); per-gpu asks for G tasks per node with cpus-per-gpu CPUs each;
    the job's options follow, site lines last."""
    options = JobOptions(constraint="rack1", qos="high", mem_per_gpu="80G", exclusive=True, site_lines=("--hold",))
    job = job_for(cluster.partition("a100"), launch="per-gpu", cpus_per_gpu=6, options=options, time="60")
    assert sbatch.directives(job) == [
        "--partition=gpu",
        "--constraint=rack1",
        "--nodes=2",
        "--ntasks-per-node=4",
        "--cpus-per-task=6",
        "--gpus-per-node=a100:4",
        "--time=60",
        "--qos=high",
        "--mem-per-gpu=80G",
        "--exclusive",
        "--hold",
    ]
    torchrun = sbatch.directives(job_for(cluster.partition("a100"), cpus_per_gpu=6, cpus_per_task=3))
    assert "--constraint=a100&ib" in torchrun and "--cpus-per-task=3" in torchrun, torchrun


def test_deepspeed_takes_the_script_not_an_interpreter(cluster: Any) -> None:
    for first in ("python", "python3.11", "/usr/bin/python3"):
        with pytest.raises(BadInputError, match="Pass the script first"):
            sbatch.render(job_for(cluster.partition("a100"), launch="deepspeed", command=(first, "train.py")))
    assert "--style=deepspeed -- train.py" in sbatch.render(
        job_for(cluster.partition("a100"), launch="deepspeed", command=("train.py",))
    )


def test_deepspeed_without_whole_nodes_is_noted(cluster: Any) -> None:
    a100 = cluster.partition("a100")
    [note] = sbatch.launch_notes(job_for(a100, launch="deepspeed", command=("train.py",)))
    assert "CUDA_VISIBLE_DEVICES=0..G-1" in note and "pass --exclusive" in note
    assert sbatch.launch_notes(job_for(a100, launch="deepspeed", options=JobOptions(exclusive=True))) == []
    assert sbatch.launch_notes(job_for(a100, launch="per-gpu")) == []


def test_deepspeed_needs_deepspeed_in_the_environment(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no bin/deepspeed") as info:
        sbatch.check_launch(str(tmp_path), "deepspeed")
    assert "--launch torchrun" in str(info.value)
    sbatch.check_launch(str(tmp_path), "torchrun")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "deepspeed").write_text("#!/bin/sh\n")
    sbatch.check_launch(str(tmp_path), "deepspeed")


DIRTY = {
    "PYTHONPATH": "/other/site-packages",
    "PYTHONHOME": "/other",
    "PYTHONSTARTUP": "/other/startup.py",
    "LD_LIBRARY_PATH": "/other/lib",
    "CONDA_PREFIX": "/other/env",
    "CONDA_DEFAULT_ENV": "other",
    "VIRTUAL_ENV": "/other/venv",
    "CUDA_HOME": "/other/cuda",
    "TORCH_EXTENSIONS_DIR": "/other/ext",
    "MASTER_ADDR": "elsewhere",
    "RANK": "3",
}


@pytest.mark.parametrize("with_modules", [True, False], ids=["module-command", "no-module-command"])
def test_the_clean_start_keeps_the_submit_shells_python_out(cluster: Any, tmp_path: Path, with_modules: bool) -> None:
    """bash runs the script with a dirty environment and a stand-in srun that records the environment a step
    gets: none of the submit shell's Python, loader, conda, toolkit or rendezvous variables; PYTHONNOUSERSITE=1;
    the user's own variables and Slurm's stay; `module purge` ran where a `module` function exists."""
    prefix = tmp_path / "env"
    (bin_dir, seen), purged = env_recording_srun(tmp_path), tmp_path / "purged"
    path = tmp_path / "job.sh"
    path.write_text(sbatch.render(job_for(cluster.partition("v100"), prefix=str(prefix), verify=False)))
    env = {**os.environ, **DIRTY, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7", "KEEP_ME": "1"}
    env["SLURM_EXPORT_ENV"] = "NONE"  # as `sbatch --export=NONE` leaves it
    if with_modules:  # an exported bash function, as Lmod's `module` reaches a batch job
        env["BASH_FUNC_module%%"] = f'() {{ echo "$*" >> {shlex.quote(str(purged))}; }}'
    done = subprocess.run(["bash", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    step = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    leaked = {key: step[key] for key in DIRTY if key in step and step[key] == DIRTY[key]}
    assert leaked == {}, leaked
    assert step["CONDA_PREFIX"] == str(prefix) and step["PYTHONNOUSERSITE"] == "1" and step["KEEP_ME"] == "1"
    assert step["SLURM_EXPORT_ENV"] == "ALL" and step["SLURM_JOB_ID"] == "7", step
    assert step["PATH"].startswith(f"{prefix}/bin:{bin_dir}:"), step["PATH"]
    assert (purged.read_text() if purged.exists() else None) == ("purge\n" if with_modules else None)


def test_cli_takes_the_jobs_options(files_here: tuple[Path, Path]) -> None:
    path, prefix = files_here
    args = ["--cluster", str(path), "--partition", "v100", "-p", str(prefix), "--gpus-per-node", "2", "--json"]
    args += ["--launch", "per-gpu", "--cpus-per-gpu", "4", "--qos", "high", "--mem", "0", "--exclusive"]
    args += ["--output", "logs/%x-%j.out", "--error", "logs/%x-%j.err", "--exclude", "gpu[01-02]"]
    args += ["--signal", "B:USR1@300", "--requeue", "--array", "0-3%2", "--constraint", "ib"]
    args += ["--sbatch-line=--mail-type=END", "--sbatch-line", "--reservation=maint"]
    result = invoke([*args, "--", "python", "train.py"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["launch"] == "per-gpu" and doc["cpus_per_task"] == 4 and doc["cpus_from"] == "--cpus-per-gpu", doc
    lines = [line.removeprefix("#SBATCH ") for line in doc["script"].splitlines() if line.startswith("#SBATCH ")]
    assert lines == [
        "--partition=v100",
        "--account=ml-team",
        "--constraint=ib",
        "--nodes=1",
        "--ntasks-per-node=2",
        "--cpus-per-task=4",
        "--gres=gpu:v100:2",
        "--qos=high",
        "--mem=0",
        "--output=logs/%x-%j.out",
        "--error=logs/%x-%j.err",
        "--exclude=gpu[01-02]",
        "--signal=B:USR1@300",
        "--array=0-3%2",
        "--exclusive",
        "--requeue",
        "--mail-type=END",
        "--reservation=maint",
    ], doc["script"]
    assert any("--no-slurm-check" in note for note in doc["notes"]), doc["notes"]


def test_cli_refuses_a_bad_site_line_and_bad_values(files_here: tuple[Path, Path]) -> None:
    path, prefix = files_here
    base = ["--cluster", str(path), "--partition", "v100", "-p", str(prefix), "--gpus-per-node", "1"]
    bad = refused([*base, "--sbatch-line", "--export=ALL", "--", "python", "t.py"])
    assert "clean environment" in bad["message"] + bad["fix"], bad
    mem = refused([*base, "--mem", "1G", "--mem-per-gpu", "1G", "--", "python", "t.py"])
    assert "exclude each other" in mem["message"], mem
    array = refused([*base, "--array", "0-3;id", "--", "python", "t.py"])
    assert "--array '0-3;id'" in array["message"] and "Pass --array" in array["fix"], array


def test_cli_says_how_to_write_without_slurm(files_here: tuple[Path, Path], tmp_path: Path) -> None:
    """With --gpus-per-node but no Slurm, reading the partition's limits fails: the fix names --no-slurm-check,
    and that fix works."""
    path, prefix = files_here
    env = {"SLURM_CONF": str(tmp_path / "no-such-slurm.conf")}
    args = ["--cluster", str(path), "-p", str(prefix), "--partition", "v100", "--gpus-per-node", "1", "--json"]
    result = invoke([*args, "--", "python", "t.py"], env, check=True)
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert "SLURM_CONF" in error["message"] and "--no-slurm-check" in error["fix"], error
    assert invoke([*args, "--no-slurm-check", "--", "python", "t.py"], env, check=True).exit_code == 0


LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")  # Debian's lmod package


@pytest.mark.skipif(not LMOD_INIT.is_file(), reason="Lmod is not installed (scripts/install_system_deps.sh)")
def test_module_purge_with_real_lmod_unloads_the_submit_shells_modules(cluster: Any, tmp_path: Path) -> None:
    """A submit shell with a module loaded by real Lmod (which exports its `module` function to the job, as a
    batch script inherits it): the script's `module purge` unloads it, so the module's variable and
    LOADEDMODULES never reach the step."""
    (tmp_path / "mods" / "site").mkdir(parents=True)
    (tmp_path / "mods" / "site" / "1.0.lua").write_text('setenv("SITE_MODULE_VAR", "loaded")\n')
    bin_dir, seen = env_recording_srun(tmp_path)
    job = tmp_path / "job.sh"
    job.write_text(sbatch.render(job_for(cluster.partition("v100"), prefix=str(tmp_path / "env"), verify=False)))
    submit_shell = (
        f"source {LMOD_INIT} && module use {shlex.quote(str(tmp_path / 'mods'))} && module load site/1.0 && "
        f'test "$SITE_MODULE_VAR" = loaded && bash {shlex.quote(str(job))}'
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7"}
    done = subprocess.run(["bash", "-c", submit_shell], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    step = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert "SITE_MODULE_VAR" not in step and not step.get("LOADEDMODULES"), step


def test_a_batch_signal_is_passed_to_the_commands_step(cluster: Any, tmp_path: Path) -> None:
    """--signal B:USR1@300: Slurm signals the batch shell, which without a trap would die and end the job early.
    The script runs the step in the background and passes the signal to srun (here a stand-in that records it
    and exits 7); the job's exit status is the step's."""
    started, got = tmp_path / "started", tmp_path / "got"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        f"#!/bin/bash\ntrap 'echo USR1 > {shlex.quote(str(got))}; exit 7' USR1\n"
        f"touch {shlex.quote(str(started))}\nfor i in $(seq 600); do sleep 0.1; done\nexit 3\n"
    )
    (bin_dir / "srun").chmod(stat.S_IRWXU)
    job = job_for(cluster.partition("v100"), verify=False, options=JobOptions(signal="B:USR1@300"))
    path = tmp_path / "job.sh"
    path.write_text(sbatch.render(job))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7"}
    proc = subprocess.Popen(["bash", str(path)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            if started.exists():
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGUSR1)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 7, err
    assert got.read_text() == "USR1\n" and "SIGUSR1 before the time limit" in err, err


def test_without_a_signal_the_steps_status_is_the_jobs(cluster: Any, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 3\n")
    (bin_dir / "srun").chmod(stat.S_IRWXU)
    for options in (JobOptions(), JobOptions(signal="B:10@60"), JobOptions(signal="USR1@60")):
        done = run_script(
            sbatch.render(job_for(cluster.partition("v100"), verify=False, options=options)), tmp_path, bin_dir
        )
        assert done.returncode == 3, (options, done.stderr)


def test_without_compgen_the_best_known_variables_are_still_unset(cluster: Any, tmp_path: Path) -> None:
    """A bash without programmable completion has no `compgen` (here a function that fails stands for it): the
    pattern loop finds nothing, and the names unset one by one still keep PYTHONPATH and the others out."""
    bin_dir, seen = env_recording_srun(tmp_path)
    path = tmp_path / "job.sh"
    path.write_text(sbatch.render(job_for(cluster.partition("v100"), prefix=str(tmp_path / "env"), verify=False)))
    env = {**os.environ, **DIRTY, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7"}
    env["BASH_FUNC_compgen%%"] = "() { return 127; }"
    done = subprocess.run(["bash", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    step = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    leaked = {key: step[key] for key in DIRTY if step.get(key) == DIRTY[key]}
    assert leaked == {}, leaked


def test_dash_c_is_not_the_cluster_file_and_the_message_names_the_option_that_works(
    files_here: tuple[Path, Path],
) -> None:
    path, prefix = files_here
    rest = [str(path), "--partition", "h100", "-p", str(prefix), "--gpus-per-node", "8", "--", "python", "t.py"]
    refused = invoke(["-c", *rest])
    assert refused.exit_code == 2, refused.output
    assert "pass the cluster file as --cluster FILE" in refused.stderr, refused.output
    done = invoke(["--cluster", *rest])  # the fix, as the message words it
    assert done.exit_code == 0 and done.stdout.startswith("#!/bin/bash\n"), done.output
