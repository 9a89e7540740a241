"""`envsolver verify --nccl` across the nodes of a Slurm allocation (the check itself: verify/nccl_run.py).

The way Slurm users do it: one task per node (`srun --nodes=N --ntasks-per-node=1`), each running envsolver's Slurm
launcher (envsolver/cluster/slurm_launch.py, the one launch rule), which starts torchrun with the step's node count
and node rank and a c10d rendezvous on the step's first host, and torchrun runs the worker under the env's python;
no shell anywhere. API for the cluster commands: SlurmJob -> srun_argv (an argv) or sbatch_fragment (#SBATCH lines
and the srun line, for a batch script). Every Slurm value is checked against the cluster file's grammars
(envsolver/cluster/grammar.py; a time limit against TIME here), and shell-quoted where it goes into a script.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envsolver.cluster import grammar, running, slurm, slurm_launch
from envsolver.cluster.model import SlurmOptions
from envsolver.core import interrupts, pipes, pystart
from envsolver.core.errors import BadInputError
from envsolver.verify import nccl
from envsolver.verify.nccl_run import (
    MAX_RANK_FILES,
    WORKER,
    Options,
    Run,
    deadline,
    environ_for,
    reports,
    worker_args,
)
from envsolver.verify.run import VerifyError

LAUNCHER = Path(slurm_launch.__file__).resolve()
STEP_NAME = "envsolver-nccl"

# Source: sbatch(1) --time: "Acceptable time formats include "minutes", "minutes:seconds", "hours:minutes:seconds",
# "days-hours", "days-hours:minutes" and "days-hours:minutes:seconds"" (0: no limit). Bounded repeats.
TIME = re.compile(r"[0-9]{1,4}-[0-9]{1,2}(?::[0-9]{1,2}){0,2}|[0-9]{1,6}(?::[0-9]{1,2}){0,2}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def time_limit(text: str) -> str:
    """A --time value, unchanged. Raises grammar.GrammarError (a ValueError) with the expected form."""
    if not isinstance(text, str) or not TIME.fullmatch(text):
        raise grammar.GrammarError(
            "expected a Slurm time limit: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS, "
            "DAYS-HOURS:MINUTES or DAYS-HOURS:MINUTES:SECONDS (such as '30', '04:00:00' or '1-12')"
        )
    return text


def absolute_path(text: str) -> str:
    """A path that reaches argv lists and scripts: absolute, no control characters, at most 4096 characters.
    Raises grammar.GrammarError."""
    if not isinstance(text, str) or not text.startswith("/") or _CONTROL.search(text) or len(text) > 4096:
        raise grammar.GrammarError("expected an absolute path without control characters")
    return text


@dataclass(frozen=True)
class SlurmJob:
    """The NCCL check across `nodes` nodes of a Slurm allocation. `python` and `worker` are absolute paths the
    compute nodes see (the env and envsolver on the shared filesystem); `out_dir` a shared directory for the rank
    files; `port` the rendezvous port on the first node (None: 29500 + SLURM_JOB_ID % 3000, chosen on the node,
    so two jobs sharing a node rarely collide)."""

    python: str
    nodes: int
    gpus_per_node: int
    out_dir: str
    worker: str = str(WORKER)
    launcher: str = str(LAUNCHER)
    port: int | None = None
    partition: str | None = None
    account: str | None = None
    constraint: str | None = None
    gres: str | None = None
    time: str | None = None
    options: Options = field(default_factory=Options)


def _refuse(what: str, value: object, expected: str) -> BadInputError:
    return BadInputError(f"{what} {value!r} is not {expected}. Fix the {what} (it reaches srun and sbatch scripts).")


# Each Slurm value of a SlurmJob and its grammar: the cluster file's (cluster/grammar.py), and TIME.
_GRAMMARS = {
    "partition": grammar.name,
    "account": lambda text: grammar.name(text, "Slurm account name"),
    "constraint": grammar.constraint,
    "gres": grammar.gres,
    "time": time_limit,
}


def validate(job: SlurmJob) -> None:
    """Every value against its grammar. Raises BadInputError naming the value."""
    for what, path in (("python", job.python), ("worker", job.worker), ("launcher", job.launcher)):
        try:
            absolute_path(path)
        except ValueError as exc:
            raise _refuse(what, path, str(exc).removeprefix("expected ")) from None
    try:
        absolute_path(job.out_dir)
    except ValueError as exc:
        raise _refuse("out_dir", job.out_dir, str(exc).removeprefix("expected ")) from None
    for what, check in _GRAMMARS.items():
        value = getattr(job, what)
        if value is None:
            continue
        try:
            check(value)
        except ValueError as exc:
            raise _refuse(what, value, f"valid: {exc}") from None
    for what, number, low, high in (("nodes", job.nodes, 1, 4096), ("gpus_per_node", job.gpus_per_node, 1, 64)):
        if not low <= number <= high:
            raise _refuse(what, number, f"a whole number from {low} to {high}")
    if job.port is not None and not 1024 <= job.port <= 65535:
        raise _refuse("port", job.port, "a port from 1024 to 65535")
    check_options(job.options)


def check_options(options: Options) -> None:
    if options.backend not in ("nccl", "gloo") or options.iters < 1 or options.warmup < 0 or options.timeout <= 0:
        raise BadInputError(
            f"NCCL check options {options!r} are out of range. Pass --iters 1 or more and a positive timeout."
        )
    if not options.sizes or any(not 4 <= s <= nccl.MAX_SIZE for s in options.sizes):
        raise BadInputError(f"--sizes {options.sizes!r} must be from 4 bytes to 16G. Fix --sizes.")
    fault = r"\d{1,4}:(?:sum|nccl-version|nccl-library)"
    if options.inject_fault and not re.fullmatch(f"{fault}(?:,{fault}){{0,63}}", options.inject_fault):
        raise BadInputError(f"inject_fault {options.inject_fault!r} is not RANK:KIND[,RANK:KIND...]. Fix the test.")


def node_command(job: SlurmJob) -> list[str]:
    """What srun starts on each node: the Slurm launcher, which finds the step's first host and runs torchrun,
    which runs the worker under the env's python. Raises BadInputError."""
    validate(job)
    worker = pystart.command(job.python, job.worker, *worker_args(job.options, job.out_dir))
    return slurm_launch.task_argv(job.python, job.gpus_per_node, worker, job.port, job.launcher)


def _resources(job: SlurmJob) -> list[str]:
    options = [f"--partition={job.partition}"] if job.partition else []
    options += [f"--account={job.account}"] if job.account else []
    options += [f"--constraint={job.constraint}"] if job.constraint else []
    options += [f"--gres={job.gres}"] if job.gres else [f"--gpus-per-node={job.gpus_per_node}"]
    options += [f"--time={job.time}"] if job.time else []
    return options


def _tasks(job: SlurmJob) -> list[str]:
    """One task per node, said three ways: a job's SLURM_NTASKS (inherited by srun) must not ask for more."""
    return [f"--nodes={job.nodes}", f"--ntasks={job.nodes}", "--ntasks-per-node=1"]


# srun's own options for the check's step: a rank that fails ends the step; one SIGINT (envsolver stopping it)
# cancels the step at once, instead of srun's default of printing the step's state and waiting for a second.
_STEP = ["--kill-on-bad-exit=1", "--quit-on-interrupt", f"--job-name={STEP_NAME}"]


def srun_argv(job: SlurmJob) -> list[str]:
    """`srun` with one task per node, from a login node (srun makes the allocation). Raises BadInputError."""
    command = node_command(job)
    return ["srun", *_tasks(job), *_STEP, *_resources(job), *command]


def step_argv(job: SlurmJob) -> list[str]:
    """`srun` inside an allocation (SLURM_JOB_ID set: salloc, a batch job): a step on `nodes` of its nodes. The
    allocation already has its partition, account, constraint and GPUs (srun(1) --gres: "By default, the job step
    will be allocated all of the generic resources that have been requested by the job"); the step asks for its
    time only. Raises BadInputError."""
    command = node_command(job)
    return ["srun", *_tasks(job), *_STEP, *([f"--time={job.time}"] if job.time else []), *command]


def sbatch_fragment(job: SlurmJob) -> str:
    """#SBATCH lines for the allocation (they belong at the top of the job script), then the srun line that runs
    the check on every node of it (inside a batch job srun takes the allocation's nodes). Every word is
    shell-quoted; nothing in it is expanded. Raises BadInputError."""
    command = node_command(job)
    directives = [f"--nodes={job.nodes}", "--ntasks-per-node=1", *_resources(job)]
    lines = ["# envsolver: the NCCL check on every node (rendezvous on the allocation's first host)"]
    lines += [f"#SBATCH {d}" for d in directives]
    lines.append(shlex.join(["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", *command]))
    return "\n".join(lines) + "\n"


# --- running the step from envsolver -----------------------------------------------------------------------------

# From a login node srun waits for the nodes first: the check's own deadline starts after at most this long.
QUEUE_WAIT_S = 600.0
# srun's stdout carries rank 0's report line (a few KB per rank; 512 ranks fit) and whatever the nodes print.
STDOUT = pipes.Bound(8 << 20, 1 << 20)
STDERR = pipes.Bound(64 << 10, 64 << 10)
# The submit shell's python settings would make the env's python on the nodes import the login node's packages.
DROPPED = ("PYTHONPATH", "PYTHONHOME")
LAUNCH_WORDS = slurm_launch.PROG + ":"  # the launcher's line on stderr: the step started on a node


def allocation(environ: Mapping[str, str]) -> str | None:
    """The job id when envsolver runs inside a Slurm allocation (salloc, a batch job), else None."""
    job = environ.get("SLURM_JOB_ID", "")
    return job if job.isascii() and job.isdigit() else None


def allocation_nodes(environ: Mapping[str, str]) -> int | None:
    """How many nodes the allocation has (SLURM_JOB_NUM_NODES, else SLURM_NNODES), None when unknown."""
    for name in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        text = environ.get(name, "")
        if text.isascii() and text.isdigit() and int(text) > 0:
            return int(text)
    return None


def scratch_root(environ: Mapping[str, str]) -> Path:
    """Where the run directories go: the user's cache ($XDG_CACHE_HOME, else ~/.cache)/envsolver/nccl. Every
    node writes its rank's file there, so it must be on the shared filesystem (home directories are); when it is
    not, the report still arrives through srun (rank 0 prints it) and only the per-rank fallback is lost."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(base) / "envsolver" / "nccl"


@contextlib.contextmanager
def run_dir(root: Path) -> Iterator[Path]:
    """A fresh directory under `root` (made private), removed afterwards. Raises VerifyError."""
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        made = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    except OSError as exc:
        raise VerifyError(
            f"cannot make a directory for the ranks' reports under {str(root)!r}: {exc.strerror or exc}. Set "
            "XDG_CACHE_HOME to a writable directory on the shared filesystem and run the same command again."
        ) from None
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def slurm_environ(prefix: Path | None, environ: Mapping[str, str]) -> dict[str, str]:
    """What srun hands the tasks (srun exports its environment): the env activated (environ_for), without the
    submit shell's PYTHONPATH and PYTHONHOME."""
    env = environ_for(prefix, environ)
    for name in DROPPED:
        env.pop(name, None)
    return env


def slurm_rerun(prefix: Path | None, python: str, job: SlurmJob, across: Across, cluster: str | None) -> str:
    """The command a fix tells the user to run again: what they asked, with the nodes and GPUs it came to."""
    argv = ["envsolver", "verify", "--nccl"] + (["-p", str(prefix)] if prefix else ["--python", python])
    argv += ["--nodes", str(job.nodes), "--gpus", str(job.gpus_per_node)]
    argv += ["--cluster", cluster] if cluster else []
    argv += ["--partition", across.partition] if across.partition else []
    argv += ["--time", across.time] if across.time else []
    argv += ["--backend", "gloo"] if job.options.backend == "gloo" else []
    return shlex.join(argv)


def _stderr_tail(text: str, lines: int = 6) -> str:
    kept = [line.strip()[:300] for line in text.splitlines() if line.strip()][-lines:]
    return " / ".join(kept)[-900:]


def run_slurm(
    job: SlurmJob,
    inside: bool,
    prefix: Path | None,
    environ: Mapping[str, str],
    rerun: str,
    limit: float | None = None,
) -> Run:
    """Run the check in one srun step across `job.nodes` nodes (in the current allocation when `inside`, else in
    one srun makes) and judge it. srun's output is read bounded (STDOUT, STDERR); the ranks' files are read
    back from job.out_dir. At the deadline, or on Ctrl-C / SIGTERM / SIGHUP, the step is ended as every srun
    envsolver starts is (cluster/running.py: srun's SIGINT with --quit-on-interrupt, then scancel by id).
    Raises VerifyError or SlurmError (exit 2) when srun cannot start the step at all; every other outcome is in
    the checks."""
    argv = step_argv(job) if inside else srun_argv(job)
    limit = limit if limit is not None else deadline(job.options) + (0.0 if inside else QUEUE_WAIT_S)
    slurm.check_conf(environ)
    started = time.monotonic()
    env = slurm_environ(prefix, environ)
    try:  # registered while it runs (cluster/running.py): an interrupt ends its step, by id if srun does not
        command = running.REGISTRY.start(
            argv,
            lambda: subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
            ),
            environ,
        )
    except running.Closing:
        raise VerifyError(f"srun was not started: envsolver was interrupted. Run `{rerun}` again.") from None
    except OSError as exc:
        raise VerifyError(
            f"cannot run srun: {exc.strerror or exc}. Run this on a login node of the cluster (or inside an "
            "allocation), where `srun --version` runs."
        ) from None
    proc = command.proc
    code: int | None
    try:
        out, err = pipes.collect(proc, limit, STDOUT, STDERR)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        running.stop(command, environ)
        out, err, code = pipes.Kept(STDOUT), pipes.Kept(STDERR), None
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (envsolver.core.interrupts): every step ends, this one too
        interrupts.clean_up()
        running.stop(command, environ)
        raise
    except BaseException:
        running.stop(command, environ)
        raise
    finally:
        running.REGISTRY.done(command)
    stdout, stderr = out.text(), err.text()
    document, ranks = reports(Path(job.out_dir), stdout.splitlines())
    said = _stderr_tail(stderr)
    if code not in (0, None) and document is None and not ranks and LAUNCH_WORDS not in stderr:
        where = shlex.join(argv[: argv.index(job.python)])
        raise VerifyError(
            f"srun did not start the NCCL check's step (exit {code}: {said or 'no message'}). Check that "
            f"`{where} hostname` runs, fix the options (--partition, --nodes, --gpus, --time), then run "
            f"`{rerun}` again."
        )
    if code is None:
        failure = f"did not finish in {limit:.0f} s; srun was stopped and the step cancelled"
    else:
        failure = "" if code == 0 else f"srun exited {code}: {said}"
    expected = job.nodes * job.gpus_per_node
    collected = nccl.Collected(expected, document, ranks, failure, rerun)
    launched = tuple(line.strip()[:300] for line in stderr.splitlines() if line.startswith(LAUNCH_WORDS))
    seconds = time.monotonic() - started
    return Run(collected, nccl.judge(collected), shlex.join(argv), seconds, expected, launched[:MAX_RANK_FILES])


@dataclass(frozen=True)
class Across:
    """`verify --nccl` across nodes, as asked: --nodes, --gpus (per node), --partition, a cluster file's
    partition (its account, constraint and GPU type), --time, --port."""

    nodes: int | None = None
    gpus: int | None = None
    partition: str | None = None
    slurm_options: SlurmOptions | None = None
    time: str | None = None
    port: int | None = None


def _gpu_type(options: SlurmOptions) -> str | None:
    """The GPU type a cluster file's partition asks for (`--gres=gpu:a100:1`, `--gpus=a100:1`), else None."""
    if options.gres:
        words = options.gres.split(",")[0].split(":")
        if words[0] == "gpu" and len(words) >= 2 and not words[1].isdigit():
            return words[1]
    if options.gpus and ":" in options.gpus:
        return options.gpus.split(":", 1)[0]
    return None


def slurm_job(
    python: Path, across: Across, options: Options, out_dir: Path, environ: Mapping[str, str]
) -> tuple[SlurmJob, bool]:
    """The step to run and whether it runs inside the current allocation (SLURM_JOB_ID set). Raises
    BadInputError with the way out."""
    inside = allocation(environ) is not None
    slurm_options = across.slurm_options
    if inside and (across.partition or slurm_options):
        raise BadInputError(
            f"inside Slurm job {environ.get('SLURM_JOB_ID')} the NCCL check runs as a step on the job's own nodes, "
            "so --partition and --cluster do not apply. Remove them, or run from a login node (outside the job)."
        )
    nodes = across.nodes if across.nodes is not None else (allocation_nodes(environ) if inside else None)
    if nodes is None:
        raise BadInputError(
            "--nccl across nodes needs the number of nodes outside an allocation. Pass --nodes N (with "
            "--partition P), or run inside an allocation (salloc, a batch job), where every node of it is used."
        )
    have = allocation_nodes(environ) if inside else None
    if have is not None and nodes > have:
        raise BadInputError(
            f"--nodes {nodes} is more than the {have} node(s) of Slurm job {environ.get('SLURM_JOB_ID')}. Pass "
            f"--nodes {have} or fewer, or ask salloc/sbatch for more nodes."
        )
    gpus = across.gpus if across.gpus is not None else (1 if options.backend == "gloo" else None)
    if gpus is None:
        raise BadInputError(
            "--nccl across nodes needs the GPUs per node: pass --gpus G (one rank per GPU, e.g. --gpus 8)."
        )
    gres, partition, account, constraint = None, across.partition, None, None
    if slurm_options is not None:
        partition = slurm_options.partition or partition
        account, constraint = slurm_options.account, slurm_options.constraint
        kind = _gpu_type(slurm_options)
        gres = f"gpu:{kind}:{gpus}" if kind else None
    job = SlurmJob(
        python=str(python.absolute()),
        nodes=nodes,
        gpus_per_node=gpus,
        out_dir=str(out_dir),
        port=across.port,
        partition=partition,
        account=account,
        constraint=constraint,
        gres=gres,
        time=across.time or minutes(options),
        options=options,
    )
    validate(job)
    return job, inside


def minutes(options: Options) -> str:
    """The step's --time (Slurm ends the step then, whatever happens to envsolver): the check's deadline in whole
    minutes, rounded up, plus one."""
    return str(math.ceil(deadline(options) / 60) + 1)


def slurm_json(run: Run, job: SlurmJob, inside: bool, environ: Mapping[str, str]) -> dict[str, Any]:
    """The step's shape for --json: nodes, GPUs per node, where it ran, each node's launcher line."""
    return {
        "nodes": job.nodes,
        "gpus_per_node": job.gpus_per_node,
        "inside_job": environ.get("SLURM_JOB_ID") if inside else None,
        "launched": list(run.launched),
        "partition": job.partition,
        "account": job.account,
        "constraint": job.constraint,
        "gres": job.gres,
        "time": job.time,
        "port": job.port,
    }
