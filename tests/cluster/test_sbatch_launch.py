"""The Slurm launch rule (envsolver/cluster/slurm_launch.py): the one place that turns a Slurm step into torchrun
on every node, meeting at the step's first host. Used by `cluster sbatch`'s scripts and by `verify --nccl` across
nodes.

Without Slurm: the argv it builds (golden), how it reads Slurm's variables, and its refusals; then two 'nodes'
(two processes with SLURM_NODEID 0 and 1) run it for real with a stand-in scontrol, and the command under
torchrun (gloo, the CPU torch) joins one process group at the first host of the STEP, not of the job.
The same launcher on the real Slurm lab is in test_sbatch_lab.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envsolver.cluster import slurm_launch
from tests.dist import needs_torch

LAUNCHER = str(Path(slurm_launch.__file__).resolve())

# The user's command in these tests: joins the process group torchrun set up (gloo: CPU), all-reduces rank+1 and
# writes what it saw as one JSON line after the marker. One os.write per line: the ranks of a node share one pipe,
# and under PYTHONUNBUFFERED=1 (the sbatch scripts export it; CI's shell has it) print() writes the text and its
# newline in two calls, so two ranks' lines could run together.
TRAIN = """\
import datetime, json, os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=90))
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
os.write(1, ("TRAIN " + json.dumps({
    "rank": rank, "world": world, "sum": total.item(), "node": os.environ.get("SLURMD_NODENAME"),
    "group_rank": os.environ.get("GROUP_RANK"), "argv": sys.argv[1:], "conda_prefix": os.environ.get("CONDA_PREFIX"),
    "run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
}) + "\\n").encode())
dist.destroy_process_group()
os._exit(0)  # what it had to say is written: no interpreter teardown (0.55 s of CPU with torch)
"""
MARK = "TRAIN "


def trained(output: str) -> list[dict[str, Any]]:
    """The JSON lines the command printed, by rank."""
    rows = [json.loads(line.split(MARK, 1)[1]) for line in output.splitlines() if MARK in line]
    return sorted(rows, key=lambda row: row["rank"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the argv it builds -------------------------------------------------------------------------------------


def test_task_argv_is_the_launcher_with_its_options_then_the_command() -> None:
    argv = slurm_launch.task_argv("/shared/envs/train/bin/python", 4, ["python", "train.py", "--lr", "3e-4"])
    assert argv == [
        "/shared/envs/train/bin/python",
        "-I",
        LAUNCHER,
        "--nproc-per-node=4",
        "--",
        "python",
        "train.py",
        "--lr",
        "3e-4",
    ]
    with_port = slurm_launch.task_argv("/p/bin/python", 1, ["x"], port=29533, launcher="/l.py")
    assert with_port == ["/p/bin/python", "-I", "/l.py", "--nproc-per-node=1", "--port=29533", "--", "x"]


def test_torchrun_argv_meets_at_the_first_host_with_the_steps_nodes() -> None:
    """c10d gives each node its rank as it joins; torchrun ignores --node-rank there (and warns), so none is given."""
    step = slurm_launch.Step(nodes=["gpu07", "gpu08"], nnodes=2, node_rank=1, job="4242", step="3", node="gpu08")
    argv = slurm_launch.torchrun_argv("/envs/t/bin/python", step, "10.0.0.7", 29501, 4, ["python", "train.py"])
    assert argv == [
        "/envs/t/bin/python",
        "-I",
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc-per-node=4",
        "--max-restarts=0",
        "--rdzv-id=envsolver-4242.3",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.0.0.7:29501",
        "--no-python",
        "python",
        "train.py",
    ]


def test_the_port_is_given_or_derived_from_the_job() -> None:
    assert slurm_launch.port_for("4242", None) == 29500 + 1242
    assert slurm_launch.port_for("123456", None) == 29500 + 123456 % 3000
    assert slurm_launch.port_for("4242", 31000) == 31000
    assert slurm_launch.port_for("not-a-number", None) == 29500


def test_no_job_gets_a_port_the_kernel_may_give_an_outgoing_connection() -> None:
    """Linux hands out 32768 and up (its default net.ipv4.ip_local_port_range) to outgoing connections: a derived
    rendezvous port there could be held by any connection on the first host when torch's store binds it."""
    ports = {slurm_launch.port_for(str(job), None) for job in range(100_000)}
    assert min(ports) == 29500 and max(ports) < 32768, (min(ports), max(ports))


STEP_ENV = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "3",
    "SLURM_JOB_NODELIST": "gpu-x[01-02]",
    "SLURM_STEP_NODELIST": "gpu-a[07-08]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURMD_NODENAME": "gpu-a08",
}


def test_the_step_is_read_from_slurms_variables() -> None:
    step = slurm_launch.read_step(STEP_ENV, lambda nodelist: ["gpu-a07", "gpu-a08"] if "a[07" in nodelist else [])
    assert step == slurm_launch.Step(["gpu-a07", "gpu-a08"], 2, 1, "4242", "3", "gpu-a08")


def test_the_steps_node_list_wins_over_the_jobs() -> None:
    """A step on some nodes of a bigger job meets at ITS first host: the job's first host may not run it."""
    asked: list[str] = []
    slurm_launch.read_step(STEP_ENV, lambda nodelist: asked.append(nodelist) or ["gpu-a07", "gpu-a08"])
    assert asked == ["gpu-a[07-08]"]
    without = {k: v for k, v in STEP_ENV.items() if not k.startswith("SLURM_STEP_")}
    asked.clear()
    step = slurm_launch.read_step(without, lambda nodelist: asked.append(nodelist) or ["gpu-x01", "gpu-x02"])
    assert asked == ["gpu-x[01-02]"] and step.nnodes == 2


REFUSED = [
    ({"SLURM_NODEID": None}, "SLURM_NODEID"),
    ({"SLURM_STEP_NODELIST": None, "SLURM_JOB_NODELIST": None}, "SLURM_JOB_NODELIST"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x2)"}, "--ntasks-per-node=1"),
    ({"SLURM_STEP_TASKS_PER_NODE": "1,2"}, "--ntasks-per-node=1"),
    ({"SLURM_NODEID": "x"}, "SLURM_NODEID"),
    ({"SLURM_NODEID": "2"}, "SLURM_NODEID"),
    ({"SLURM_STEP_NUM_NODES": "3"}, "3 node(s)"),
]


@pytest.mark.parametrize(("change", "word"), REFUSED, ids=[w + repr(c) for c, w in REFUSED])
def test_a_step_that_cannot_be_launched_is_refused(change: dict[str, str | None], word: str) -> None:
    env = {k: v for k, v in {**STEP_ENV, **change}.items() if v is not None}
    with pytest.raises(slurm_launch.LaunchError, match=word.replace("(", r"\(").replace(")", r"\)")):
        slurm_launch.read_step(env, lambda nodelist: ["gpu-a07", "gpu-a08"])


def test_the_address_is_slurms_node_addr_or_the_name() -> None:
    line = "NodeName=gpu-a07 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.1.2.7 NodeHostName=gpu-a07 Port=6818\n"
    assert slurm_launch.node_addr(line) == "10.1.2.7"
    assert slurm_launch.node_addr("NodeName=gpu-a07 NodeAddr=gpu-a07.ib.cluster NodeHostName=x") == "gpu-a07.ib.cluster"
    assert slurm_launch.node_addr("NodeName=gpu-a07 Arch=x86_64") is None
    assert slurm_launch.node_addr("NodeName=gpu-a07 NodeAddr=$(id) x") is None  # not a host name: not used
    assert slurm_launch.node_addr("NodeName=n NodeAddr=fe80::1 x") is None  # IPv6 needs brackets: the name is used


# --- as srun runs it ------------------------------------------------------------------------------------------


def stand_in_scontrol(tmp_path: Path, addr: str | None = "127.0.0.1") -> Path:
    """scontrol as the launcher uses it: the step's hosts (a node that cannot be reached first for the JOB's list,
    so meeting at the job's first host cannot work), and each node's NodeAddr."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shown = f"NodeName=$4 Arch=x86_64 NodeAddr={addr} NodeHostName=$4" if addr else "NodeName=$4 Arch=x86_64"
    script = f"""#!/bin/sh
case "$1 $2 $3" in
  'show hostnames gpu-a[07-08]') printf 'gpu-a07\\ngpu-a08\\n' ;;
  'show hostnames gpu-x[01-02]') printf 'no-such-host.invalid\\ngpu-a07\\n' ;;
  '--oneliner show node') echo "{shown}" ;;
  *) echo "scontrol stand-in: unexpected $*" >&2; exit 1 ;;
esac
"""
    (bin_dir / "scontrol").write_text(script)
    (bin_dir / "scontrol").chmod(stat.S_IRWXU)
    return bin_dir


def node_env(bin_dir: Path, node_id: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(STEP_ENV, SLURM_NODEID=str(node_id), SLURMD_NODENAME=f"gpu-a0{7 + node_id}", **extra)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def run_nodes(argv: list[str], envs: list[dict[str, str]], timeout: float = 240) -> list[tuple[int, str, str]]:
    """Each 'node' as its own process group; anything left at the end is killed."""
    procs = [
        subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        for env in envs
    ]
    try:
        outs = [proc.communicate(timeout=timeout) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return [(proc.returncode, out, err) for proc, (out, err) in zip(procs, outs, strict=True)]


@needs_torch
def test_two_nodes_meet_at_the_steps_first_host_and_run_the_command(tmp_path: Path) -> None:
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    bin_dir, port = stand_in_scontrol(tmp_path), free_port()
    argv = slurm_launch.task_argv(sys.executable, 2, [sys.executable, str(train), "--lr", "3e-4; touch x"], port=port)
    results = run_nodes(argv, [node_env(bin_dir, n) for n in (0, 1)])
    assert [code for code, _, _ in results] == [0, 0], [err[-2000:] for _, _, err in results]
    rows = trained("".join(out for _, out, _ in results))
    assert [row["rank"] for row in rows] == [0, 1, 2, 3]
    assert {row["world"] for row in rows} == {4} and {row["sum"] for row in rows} == {10.0}
    assert {row["group_rank"] for row in rows} == {"0", "1"}
    assert {row["run_id"] for row in rows} == {"envsolver-4242.3"}
    assert all(row["argv"] == ["--lr", "3e-4; touch x"] for row in rows)
    assert not (tmp_path / "x").exists()
    assert not any("node_rank is only used" in err for _, _, err in results)  # torchrun's warning for --node-rank
    for node_id, (_, _, err) in enumerate(results):
        said = f"envsolver-launch: gpu-a0{7 + node_id} (node {node_id} of 2): torchrun with 2 process(es), "
        assert said + f"rendezvous at 127.0.0.1:{port} (gpu-a07, the step's first host)" in err


def test_without_a_node_addr_the_first_hosts_name_is_the_endpoint(tmp_path: Path) -> None:
    """Slurm gives no NodeAddr: the first host's node name is the endpoint, the same on both nodes (--dry-run
    prints the torchrun command instead of running it)."""
    bin_dir, port = stand_in_scontrol(tmp_path, addr=None), free_port()
    argv = slurm_launch.task_argv(sys.executable, 1, [sys.executable, "-c", "pass"], port=port)
    argv[3:3] = ["--dry-run"]  # after PYTHON -I LAUNCHER
    results = run_nodes(argv, [node_env(bin_dir, n) for n in (0, 1)])
    assert [code for code, _, _ in results] == [0, 0]
    for _, out, err in results:
        assert f"rendezvous at gpu-a07:{port}" in err
        shown = json.loads(out)
        assert f"--rdzv-endpoint=gpu-a07:{port}" in shown and "--nnodes=2" in shown


def test_outside_slurm_it_says_to_run_under_srun(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    done = subprocess.run(
        [sys.executable, LAUNCHER, "--nproc-per-node=1", "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "SLURM_NODEID" in done.stderr and "srun" in done.stderr
    assert "Traceback" not in done.stderr


LAUNCHER_USAGE = [
    (["--", "true"], "--nproc-per-node"),
    (["--nproc-per-node=0", "--", "true"], "--nproc-per-node"),
    (["--nproc-per-node=2"], "a command"),
    (["--nproc-per-node=2", "--port=80", "--", "true"], "--port"),
]


@pytest.mark.parametrize(("args", "word"), LAUNCHER_USAGE, ids=[" ".join(a) for a, _ in LAUNCHER_USAGE])
def test_the_launchers_usage_errors_exit_2(args: list[str], word: str) -> None:
    done = subprocess.run([sys.executable, LAUNCHER, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and word in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_scontrol_that_fails_is_a_message(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    (bin_dir / "scontrol").chmod(stat.S_IRWXU)
    done = subprocess.run(
        [sys.executable, LAUNCHER, "--nproc-per-node=1", "--", "true"],
        env=node_env(bin_dir, 0),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "scontrol show hostnames" in done.stderr and "Unable to contact" in done.stderr


# --- the per-task and DeepSpeed styles ------------------------------------------------------------------------


def test_task_argv_names_the_style_unless_it_is_torchrun() -> None:
    argv = slurm_launch.task_argv("/p/bin/python", 2, ["python", "t.py"], launcher="/l.py", style="per-task")
    assert argv == ["/p/bin/python", "-I", "/l.py", "--nproc-per-node=2", "--style=per-task", "--", "python", "t.py"]
    with pytest.raises(ValueError, match="launch style 'mpi'"):
        slurm_launch.task_argv("/p/bin/python", 2, ["x"], style="mpi")


@pytest.mark.parametrize(
    ("text", "counts"),
    [("1", [1]), ("2(x3)", [2, 2, 2]), ("2(x2),1", [2, 2, 1]), ("8,4(x2)", [8, 4, 4]), ("x", None), ("2(x", None)],
)
def test_tasks_per_node_expands_slurms_compressed_counts(text: str, counts: list[int] | None) -> None:
    assert slurm_launch.tasks_per_node(text) == counts, text


TASK_ENV = {**STEP_ENV, "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "3", "SLURM_LOCALID": "1"}
TASK_ENV["SLURM_STEP_NUM_TASKS"] = "4"


def test_a_task_is_one_rank_with_torchruns_variables() -> None:
    step = slurm_launch.read_step(TASK_ENV, lambda _: ["gpu-a07", "gpu-a08"], one_task_per_node=False)
    task = slurm_launch.read_task(TASK_ENV, step)
    assert task == slurm_launch.Task(rank=3, local_rank=1, world_size=4, local_world_size=2)
    assert slurm_launch.task_environ(step, task, "10.0.0.7", 29501) == {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "NODE_RANK": "1",
        "MASTER_ADDR": "10.0.0.7",
        "MASTER_PORT": "29501",
    }


@pytest.mark.parametrize(
    ("change", "word"),
    [
        ({"SLURM_PROCID": None}, "SLURM_PROCID"),
        ({"SLURM_STEP_TASKS_PER_NODE": "2,1"}, "SLURM_STEP_TASKS_PER_NODE"),
        ({"SLURM_STEP_NUM_TASKS": "5"}, "SLURM_STEP_TASKS_PER_NODE"),
        ({"SLURM_PROCID": "4"}, "outside"),
        ({"SLURM_LOCALID": "2"}, "outside"),
    ],
)
def test_a_task_outside_its_step_is_refused(change: dict[str, str | None], word: str) -> None:
    env = {k: v for k, v in {**TASK_ENV, **change}.items() if v is not None}
    step = slurm_launch.read_step(env, lambda _: ["gpu-a07", "gpu-a08"], one_task_per_node=False)
    with pytest.raises(slurm_launch.LaunchError, match=word):
        slurm_launch.read_task(env, step)


def test_the_deepspeed_hostfile_and_command_line() -> None:
    """DeepSpeed's hostfile syntax (`HOST slots=N`, deepspeed/launcher/runner.py fetch_hostfile) in node-id order;
    its runner on this node alone (--no_ssh) with this node's rank and the step's first host."""
    step = slurm_launch.Step(nodes=["gpu07", "gpu08"], nnodes=2, node_rank=1, job="4242", step="3", node="gpu08")
    assert slurm_launch.hostfile_text(step, 4) == "gpu07 slots=4\ngpu08 slots=4\n"
    argv = slurm_launch.deepspeed_argv("/e/bin/python", step, "/tmp/h", "10.0.0.7", 29501, ["train.py", "--x"])
    assert argv == [
        "/e/bin/python",
        "-I",
        "-m",
        "deepspeed.launcher.runner",
        "--hostfile=/tmp/h",
        "--no_ssh",
        "--node_rank=1",
        "--master_addr=10.0.0.7",
        "--master_port=29501",
        "train.py",
        "--x",
    ]


def test_per_task_dry_run_prints_the_ranks_variables(tmp_path: Path) -> None:
    bin_dir, port = stand_in_scontrol(tmp_path), free_port()
    argv = slurm_launch.task_argv(sys.executable, 2, ["python", "t.py"], port=port, style="per-task")
    argv[3:3] = ["--dry-run"]  # after PYTHON -I LAUNCHER
    envs = [
        node_env(
            bin_dir,
            1,
            SLURM_STEP_TASKS_PER_NODE="2(x2)",
            SLURM_STEP_NUM_TASKS="4",
            SLURM_PROCID=str(r),
            SLURM_LOCALID=str(r - 2),
        )
        for r in (2, 3)
    ]
    results = run_nodes(argv, envs)
    assert [code for code, _, _ in results] == [0, 0], [err for _, _, err in results]
    shown = [json.loads(out) for _, out, _ in results]
    assert [s["environ"]["RANK"] for s in shown] == ["2", "3"] and shown[0]["argv"] == ["python", "t.py"]
    assert {s["environ"]["MASTER_ADDR"] for s in shown} == {"127.0.0.1"}
    assert f"rank 3 of 4 (local 1 of 2), rendezvous at 127.0.0.1:{port} (gpu-a07" in results[1][2]


def test_non_ascii_digits_in_slurms_variables_are_refused_not_a_traceback() -> None:
    """str.isdigit() takes '²' and '٣', which int() refuses: the launcher reads ASCII digits only (the fuzz run's
    fresh seed found SLURM_STEP_NUM_NODES='²' raising ValueError)."""
    for text in ("²", "٣", "1²"):
        with pytest.raises(slurm_launch.LaunchError, match="is not a number"):
            slurm_launch._number({"SLURM_STEP_NUM_NODES": text}, "SLURM_STEP_NUM_NODES")
        assert slurm_launch.port_for(text, None) == slurm_launch.PORT_BASE


def test_the_launchers_help_prints_and_exits_0() -> None:
    """argparse formats help texts with %: the port's help once ended `--help` in a ValueError traceback."""
    done = subprocess.run(
        [sys.executable, slurm_launch.__file__, "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert f"{slurm_launch.PORT_BASE} + SLURM_JOB_ID % {slurm_launch.PORT_SPREAD}" in done.stdout, done.stdout
