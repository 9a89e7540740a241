"""Run a command on every node (or every task) of a Slurm step, all meeting at the step's first host.

srun runs this file once per node (one task per node), with the environment's python, whose torch provides torchrun:

    srun --nodes=N --ntasks-per-node=1 --kill-on-bad-exit=1 \\
        PREFIX/bin/python -I slurm_launch.py --nproc-per-node=G [--port=P] -- COMMAND [ARGS...]

On each node it asks Slurm for the step's first host (`scontrol show hostnames "$SLURM_STEP_NODELIST"`, the first
name; its address is the NodeAddr of `scontrol --oneliner show node NAME`, the address Slurm itself reaches it by,
else the name) and replaces itself with

    python -I -m torch.distributed.run --nnodes=$SLURM_STEP_NUM_NODES --nproc-per-node=G --max-restarts=0
        --rdzv-id=envsolver-JOB.STEP --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT --no-python COMMAND [ARGS...]

(no --node-rank: the c10d rendezvous ranks the nodes as they join, and torchrun warns that it ignores one), so
every node computes the same host from the same Slurm facts: the rendezvous is on the step's first host by
construction (the common multi-node failure is a rendezvous on the wrong host: a MASTER_ADDR typed by hand, each
node naming itself, or the job's first host when the step runs on other nodes of it). PORT is --port, else
29500 + SLURM_JOB_ID % 3000 (below the kernel's ephemeral ports: PORT_SPREAD), so two jobs sharing a node rarely
collide. torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for each process; COMMAND runs as
given (`--no-python`: it names its own interpreter, e.g. `python train.py`, found on the PATH the job's activation
set).

Two more launch styles (`--style`), with the same rendezvous rule:

  per-task   srun starts one task per GPU (`--ntasks-per-node=G --gpus-per-task=1 --gpu-bind=none`); each task
             sets RANK=$SLURM_PROCID, LOCAL_RANK=$SLURM_LOCALID, WORLD_SIZE=$SLURM_STEP_NUM_TASKS,
             LOCAL_WORLD_SIZE (its node's count in $SLURM_STEP_TASKS_PER_NODE), GROUP_RANK=NODE_RANK=$SLURM_NODEID,
             MASTER_ADDR (the step's first host, as above) and MASTER_PORT, then replaces itself with COMMAND.
  deepspeed  one task per node, as torchrun: it writes DeepSpeed's hostfile for the step (`NODE slots=G`, one
             line per node of `scontrol show hostnames`, in node-id order) in a private temporary directory and
             runs `python -I -m deepspeed.launcher.runner --hostfile=H --no_ssh --node_rank=$SLURM_NODEID
             --master_addr=HOST --master_port=PORT COMMAND`: DeepSpeed's own launcher on every node, started by
             srun instead of pdsh/ssh (compute nodes often refuse ssh between them), which sets RANK, LOCAL_RANK,
             WORLD_SIZE, MASTER_ADDR/PORT and passes --local_rank as DeepSpeed always does. COMMAND is the
             training script and its arguments (DeepSpeed runs it with this python). DeepSpeed's `--launcher
             slurm` is not used: its srun runs `python -u SCRIPT` with no rank variables, which DeepSpeed's
             init_distributed then seeks through mpi4py. The hostfile is removed when the runner ends.

Standard library only: any python 3.8+ can run it as a file on a compute node (envsolver need not be importable
there); envsolver imports it for `task_argv`, the one place that writes its command line. No shell: every value
reaches argv lists only. Errors: one line on stderr saying what to do, and exit 2. `--dry-run` prints the
torchrun command as JSON instead of running it.

Used by `envsolver cluster sbatch` (the job's command) and by `envsolver verify --nccl` across nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

PROG = "envsolver-launch"
SCONTROL_TIMEOUT_S = 60
PORT_BASE = 29500
# Ports 29500 to 32499: below the ports Linux hands to outgoing connections (32768 and up by default:
# net.ipv4.ip_local_port_range), where any process's connection on the first host could hold the job's port at
# the moment torch's store binds it (29500 + id % 20000 reached 49499: the Slurm lab's rendezvous failed so).
PORT_SPREAD = 3000
STYLES = ("torchrun", "per-task", "deepspeed")
# A host name or IPv4 address as NodeAddr holds it (IPv6 would need brackets in the endpoint: the name is used).
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.\-]{0,252})")
_NODE_ADDR = re.compile(r"(?:^|\s)NodeAddr=(\S{1,300})")
_TASKS = re.compile(r"([0-9]{1,6})(?:\(x[0-9]{1,6}\))?")


# How the launcher starts a python: envsolver/core/pystart.py's rule (FLAGS), copied here because the launcher runs
# on a node where envsolver need not be importable; tests/test_isolation.py holds the copies equal. The launcher
# itself, torchrun and DeepSpeed's runner run isolated; COMMAND is the user's job: it runs as given, in the job's
# working directory, seeing the job's PYTHONPATH (its own script's directory first, as `python train.py` does).
FLAGS = ("-I",)


def _isolated(python: str, *args: str) -> list[str]:
    """`PYTHON -I ARGS...`: neither the working directory nor the script's directory on sys.path, no PYTHON*."""
    return [python, *FLAGS, *args]


class LaunchError(Exception):
    """The step cannot be launched; the message says what to do."""


@dataclass(frozen=True)
class Step:
    """The Slurm step this task belongs to: its nodes in order, this node's rank among them, its ids."""

    nodes: list[str]
    nnodes: int
    node_rank: int
    job: str
    step: str
    node: str


def task_argv(
    python: str,
    nproc_per_node: int,
    command: Sequence[str],
    port: int | None = None,
    launcher: str | None = None,
    style: str = "torchrun",
) -> list[str]:
    """What srun starts once per node (per task for `per-task`):
    `PYTHON -I slurm_launch.py --nproc-per-node=N [--style=S] [--port=P] -- COMMAND...`."""
    if style not in STYLES:
        raise ValueError(f"launch style {style!r} is not one of {', '.join(STYLES)}")
    head = _isolated(python, launcher or os.path.abspath(__file__), f"--nproc-per-node={nproc_per_node}")
    head += [f"--style={style}"] if style != "torchrun" else []
    head += [f"--port={port}"] if port is not None else []
    return [*head, "--", *command]


def port_for(job: str, port: int | None) -> int:
    if port is not None:
        return port
    return PORT_BASE + (int(job) if job.isascii() and job.isdigit() else 0) % PORT_SPREAD


def _number(environ: Mapping[str, str], name: str) -> int:
    text = environ.get(name, "")
    if not (text.isascii() and text.isdigit()):  # str.isdigit() alone takes '²', which int() refuses
        raise LaunchError(f"{name}={text!r} is not a number; run this under srun, which sets it.")
    return int(text)


def tasks_per_node(text: str) -> list[int] | None:
    """Slurm's compressed task counts, one per node: `2(x3),1` -> [2, 2, 2, 1]; None when unreadable."""
    counts: list[int] = []
    for part in text.split(","):
        match = _TASKS.fullmatch(part)
        if match is None:
            return None
        times = part.partition("(x")[2].rstrip(")")
        counts += [int(match.group(1))] * (int(times) if times else 1)
        if len(counts) > 1_000_000:
            return None
    return counts


def read_step(
    environ: Mapping[str, str], hostnames: Callable[[str], list[str]], one_task_per_node: bool = True
) -> Step:
    """The step from Slurm's variables; `hostnames` expands a node list (scontrol show hostnames). With
    `one_task_per_node`, a step of more tasks per node is refused (torchrun and DeepSpeed start a node's processes
    themselves). Raises LaunchError."""
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    missing = [n for n in ("SLURM_NODEID",) if not environ.get(n)] + ([] if nodelist else ["SLURM_JOB_NODELIST"])
    if missing:
        raise LaunchError(
            f"{', '.join(missing)} unset: this runs inside a Slurm step, once per node. Start it with "
            "`srun --ntasks-per-node=1 PYTHON -I slurm_launch.py --nproc-per-node=N -- COMMAND` in an allocation "
            "(a batch job, or salloc)."
        )
    assert nodelist is not None
    tasks = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE") or "1"
    counts = [_TASKS.fullmatch(part) for part in tasks.split(",")]
    if one_task_per_node and not all(m and m.group(1) == "1" for m in counts):
        raise LaunchError(
            f"the step runs {tasks} task(s) per node (SLURM_STEP_TASKS_PER_NODE); torchrun starts the processes "
            "of a node itself, so run one task per node: srun --ntasks-per-node=1."
        )
    nodes = hostnames(nodelist)
    if not nodes:
        raise LaunchError(f"scontrol show hostnames {nodelist!r} named no host; check the node list Slurm set.")
    count = _number(environ, "SLURM_STEP_NUM_NODES" if environ.get("SLURM_STEP_NUM_NODES") else "SLURM_NNODES")
    if count != len(nodes):
        raise LaunchError(
            f"the step has {count} node(s) (SLURM_STEP_NUM_NODES) but its node list {nodelist!r} names {len(nodes)}; "
            "run this under srun in the allocation, without changing Slurm's variables."
        )
    rank = _number(environ, "SLURM_NODEID")
    if rank >= len(nodes):
        raise LaunchError(f"SLURM_NODEID={rank} is not below the step's {len(nodes)} node(s); run this under srun.")
    job = environ.get("SLURM_JOB_ID", "0")
    step = environ.get("SLURM_STEP_ID", "0")
    return Step(nodes, len(nodes), rank, job, step, environ.get("SLURMD_NODENAME") or nodes[rank])


@dataclass(frozen=True)
class Task:
    """One task of a per-task step: its global rank, its rank on its node, the counts."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int


def read_task(environ: Mapping[str, str], step: Step) -> Task:
    """This task's place in a one-task-per-GPU step, from Slurm's variables. Raises LaunchError."""
    rank, local_rank = _number(environ, "SLURM_PROCID"), _number(environ, "SLURM_LOCALID")
    world = _number(environ, "SLURM_STEP_NUM_TASKS" if environ.get("SLURM_STEP_NUM_TASKS") else "SLURM_NTASKS")
    text = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE") or ""
    counts = tasks_per_node(text)
    if counts is None or len(counts) != step.nnodes or sum(counts) != world:
        raise LaunchError(
            f"SLURM_STEP_TASKS_PER_NODE={text!r} does not give the tasks of the step's {step.nnodes} node(s) "
            f"({world} in all); run this under srun in the allocation, without changing Slurm's variables."
        )
    here = counts[step.node_rank]
    if not (0 <= rank < world and 0 <= local_rank < here):
        raise LaunchError(
            f"SLURM_PROCID={rank} / SLURM_LOCALID={local_rank} lie outside the step's {world} task(s) "
            f"({here} on this node); run this under srun."
        )
    return Task(rank, local_rank, world, here)


def task_environ(step: Step, task: Task, host: str, port: int) -> dict[str, str]:
    """The variables torch.distributed's env:// rendezvous reads, as torchrun would set them for this rank."""
    return {
        "RANK": str(task.rank),
        "LOCAL_RANK": str(task.local_rank),
        "WORLD_SIZE": str(task.world_size),
        "LOCAL_WORLD_SIZE": str(task.local_world_size),
        "GROUP_RANK": str(step.node_rank),
        "NODE_RANK": str(step.node_rank),
        "MASTER_ADDR": host,
        "MASTER_PORT": str(port),
    }


def hostfile_text(step: Step, slots: int) -> str:
    """DeepSpeed's hostfile for the step: `NODE slots=G`, one line per node, in node-id order (the order
    --node_rank counts in)."""
    return "".join(f"{node} slots={slots}\n" for node in step.nodes)


def deepspeed_argv(python: str, step: Step, hostfile: str, host: str, port: int, command: Sequence[str]) -> list[str]:
    """DeepSpeed's launcher on this node alone (--no_ssh), its rank among the step's nodes given."""
    return [
        *_isolated(python, "-m", "deepspeed.launcher.runner"),
        f"--hostfile={hostfile}",
        "--no_ssh",
        f"--node_rank={step.node_rank}",
        f"--master_addr={host}",
        f"--master_port={port}",
        *command,
    ]


def node_addr(text: str) -> str | None:
    """NodeAddr from `scontrol --oneliner show node NAME`, when it is a host name or an IPv4 address."""
    match = _NODE_ADDR.search(text)
    if match is None or not _HOST.fullmatch(match.group(1)):
        return None
    return match.group(1)


def torchrun_argv(
    python: str, step: Step, host: str, port: int, nproc_per_node: int, command: Sequence[str]
) -> list[str]:
    return [
        *_isolated(python, "-m", "torch.distributed.run"),
        f"--nnodes={step.nnodes}",
        f"--nproc-per-node={nproc_per_node}",
        "--max-restarts=0",
        f"--rdzv-id=envsolver-{step.job}.{step.step}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={host}:{port}",
        "--no-python",
        *command,
    ]


def _scontrol(args: list[str]) -> str:
    """stdout of `scontrol ARGS`. Raises LaunchError when it cannot run, fails or takes too long."""
    shown = "scontrol " + " ".join(args)
    try:
        done = subprocess.run(
            ["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"`{shown}` did not run: {exc}; check that Slurm's commands work on this node.") from None
    if done.returncode != 0:
        said = " / ".join(line.strip() for line in done.stderr.strip().splitlines()[-3:])[-300:]
        raise LaunchError(f"`{shown}` failed (exit {done.returncode}: {said}); check that `{shown}` runs on the node.")
    return done.stdout


def _address(name: str) -> str:
    """The first host's address: its NodeAddr, else its name (also when scontrol cannot say)."""
    try:
        return node_addr(_scontrol(["--oneliner", "show", "node", name])) or name
    except LaunchError:
        return name


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description="Run COMMAND on every node of a step (see --style).")
    parser.add_argument("--nproc-per-node", type=int, required=True, help="processes per node (one per GPU)")
    parser.add_argument(
        "--style",
        choices=STYLES,
        default="torchrun",
        help="torchrun per node (default); per-task: this task is one rank; deepspeed: DeepSpeed's launcher per node",
    )
    parser.add_argument(  # argparse formats help with %: a literal one is %%
        "--port", type=int, help=f"rendezvous port (default {PORT_BASE} + SLURM_JOB_ID %% {PORT_SPREAD})"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the command as JSON, do not run it")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.command:
        parser.error("give a command after --, e.g. -- python train.py")
    if not 1 <= args.nproc_per_node <= 1024:
        parser.error("--nproc-per-node takes 1 to 1024 (one process per GPU)")
    if args.port is not None and not 1024 <= args.port <= 65535:
        parser.error("--port takes 1024 to 65535")
    return args


def _run_deepspeed(argv: list[str], where: str) -> int:
    """DeepSpeed's runner as a child (SIGTERM and SIGINT passed on), then its hostfile's directory removed."""
    child = subprocess.Popen(argv)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    try:
        return child.wait()
    finally:
        shutil.rmtree(where, ignore_errors=True)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    try:
        step = read_step(
            os.environ,
            lambda nodelist: _scontrol(["show", "hostnames", nodelist]).split(),
            one_task_per_node=args.style != "per-task",
        )
        task = read_task(os.environ, step) if args.style == "per-task" else None
    except LaunchError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    first = step.nodes[0]
    host, port = _address(first), port_for(step.job, args.port)
    where = f"rendezvous at {host}:{port} ({first}, the step's first host)"
    sys.stdout.flush()
    if task is not None:
        environ = task_environ(step, task, host, port)
        sys.stderr.write(
            f"{PROG}: {step.node} (node {step.node_rank} of {step.nnodes}): rank {task.rank} of {task.world_size} "
            f"(local {task.local_rank} of {task.local_world_size}), {where}\n"
        )
        sys.stderr.flush()
        if args.dry_run:
            sys.stdout.write(json.dumps({"argv": args.command, "environ": environ}) + "\n")
            return 0
        try:
            os.execvpe(args.command[0], args.command, {**os.environ, **environ})
        except OSError as exc:
            sys.stderr.write(f"{PROG}: cannot run {args.command[0]!r}: {exc.strerror or exc}; check the command.\n")
            return 2
    if args.style == "deepspeed":
        sys.stderr.write(
            f"{PROG}: {step.node} (node {step.node_rank} of {step.nnodes}): DeepSpeed's launcher with "
            f"{args.nproc_per_node} process(es), {where}\n"
        )
        sys.stderr.flush()
        hostfile = hostfile_text(step, args.nproc_per_node)
        if args.dry_run:
            shown = deepspeed_argv(sys.executable, step, "HOSTFILE", host, port, args.command)
            sys.stdout.write(json.dumps({"argv": shown, "hostfile": hostfile}) + "\n")
            return 0
        private = tempfile.mkdtemp(prefix="envsolver-deepspeed-")
        path = os.path.join(private, "hostfile")
        with open(path, "w", encoding="utf-8") as out:
            out.write(hostfile)
        return _run_deepspeed(deepspeed_argv(sys.executable, step, path, host, port, args.command), private)
    command = torchrun_argv(sys.executable, step, host, port, args.nproc_per_node, args.command)
    sys.stderr.write(
        f"{PROG}: {step.node} (node {step.node_rank} of {step.nnodes}): torchrun with {args.nproc_per_node} "
        f"process(es), {where}\n"
    )
    sys.stderr.flush()
    if args.dry_run:
        sys.stdout.write(json.dumps(command) + "\n")
        return 0
    os.execv(sys.executable, command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
