"""`verify --cluster`: check one prefix (on the shared filesystem) on every partition of a cluster file, from
the login node. One srun step per partition (step.py), run concurrently, each running verify's probe (standard
library only) under the environment's own PREFIX/bin/python after the cluster probe: nothing of envsolver and
never this interpreter runs on a node, so a node of another architecture (aarch64) is checked by its own python.
verify's checks over each node's facts, then the checks across partitions (compare.py), run on the login node.
Nothing is printed here: progress goes to a callback, the result is a Report.

Which partitions: those of the prefix's platform (from the lock metadata `envsolver install` kept in the prefix,
or --lock); a partition of another platform cannot run this prefix and is reported as not checked. A step srun
cannot start (an unknown partition, a node down or busy past the wait) or a node that cannot run the prefix's
python does not stop the others: its partition's outcome is an error (exit 2) whose message ends with the fix.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envsolver import lockfile, prefixmeta
from envsolver.cluster import compare, slurm, step
from envsolver.cluster import file as cluster_file
from envsolver.cluster.model import Cluster, Partition
from envsolver.errors import BadInputError
from envsolver.kb.model import KnowledgeBase
from envsolver.verify import run
from envsolver.verify.checks_base import Check
from envsolver.verify.run import VerifyError

MAX_STEPS = 8  # steps running at once: one per partition, bounded so a large cluster does not flood the queue
Status = Literal["pass", "warn", "fail", "error", "skipped"]
Progress = Callable[[str], None]
Runner = Callable[[Sequence[str], float, str, str], str]  # slurm.run's shape: argv, timeout, what, fix -> stdout


@dataclass(frozen=True)
class Request:
    """What was asked: the cluster file (as given), the prefix (each node runs its bin/python), and verify's
    options."""

    cluster_file: Path
    prefix: Path
    lock: Path | None = None
    gpu_test: bool = False
    only: tuple[str, ...] = ()
    wait_s: int = step.WAIT_S
    timeout_s: float = step.TIMEOUT_S


@dataclass(frozen=True)
class Outcome:
    """One partition: its status; the step's argv and node; the node's checks and the cross-partition ones;
    `error` the message (ending with the fix) of a step that could not run, or why a partition was not checked."""

    partition: Partition
    status: Status
    argv: tuple[str, ...] = ()
    node: str | None = None
    checks: tuple[Check, ...] = ()
    cross: tuple[Check, ...] = ()
    reply: step.Reply | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Report:
    cluster: Cluster
    file: str
    prefix: str
    python: str
    platform: str | None  # the prefix's platform, from its lock metadata (None: unknown)
    meta_source: str | None  # where the lock metadata came from (None: there is none)
    meta: Mapping[str, str]
    outcomes: tuple[Outcome, ...]

    @property
    def exit_code(self) -> int:
        """2 when a step could not run, else 1 when a partition failed, else 0."""
        statuses = {o.status for o in self.outcomes}
        return 2 if "error" in statuses else 1 if "fail" in statuses else 0


def status_of(checks: Sequence[Check]) -> Status:
    found = {c.status for c in checks}
    return "fail" if "fail" in found else "warn" if "warn" in found else "pass"


def _metadata(prefix: Path, lock: Path | None) -> tuple[str | None, str | None, Mapping[str, str]]:
    """(platform, where the metadata came from, the metadata). Raises BadInputError for a lock or a kept file
    that cannot be read."""
    if lock is not None:
        read = lockfile.read(lock, None)
        return read.platform, str(lock), read.metadata
    kept = prefixmeta.load(prefix)
    if kept is None:
        return None, None, {}
    return kept.platform, str(prefix / prefixmeta.METADATA), kept.custom


def _absolute(path: Path) -> str:
    """The path as the nodes must see it: absolute, symlinks kept (a shared path may be a link on the login node)."""
    return os.path.abspath(path)


def _check_prefix(prefix: str, cluster: Cluster, file: Path) -> None:
    """The prefix has a bin/python here, where it is shared from. Raises VerifyError whose fix works with
    --cluster (which takes no --python): -p an installed environment, and how to install one."""
    if (Path(prefix) / "bin" / "python").exists():
        return
    platforms = list(dict.fromkeys(p.platform for p in cluster.partitions))
    others = "".join(f" ({other}/conda-lock.yml for the {other} partitions)" for other in platforms[1:])
    raise VerifyError(
        f"{prefix!r} has no bin/python, so it is not an environment the nodes can run. Pass -p the prefix of an "
        "environment installed on the filesystem the nodes share; to install one from the locks "
        f"`envsolver make --cluster {shlex.quote(str(file))}` wrote: envsolver install "
        f"{platforms[0]}/conda-lock.yml -p PREFIX{others}."
    )


def verify(
    request: Request,
    kb: KnowledgeBase,
    progress: Progress = lambda _: None,
    runner: Runner = slurm.run,
    environ: Mapping[str, str] = os.environ,
) -> Report:
    """Raises BadInputError (the cluster file, the prefix, the lock, no partition of the prefix's platform),
    VerifyError (no bin/python in the prefix) and SlurmError (SLURM_CONF names no file, the controller does not
    answer, no Slurm configuration)."""
    cluster = cluster_file.load(request.cluster_file, kb)
    prefix = _absolute(request.prefix)
    _check_prefix(prefix, cluster, request.cluster_file)
    platform, source, meta = _metadata(Path(prefix), request.lock)
    chosen = [p for p in cluster.partitions if platform is None or p.platform == platform]
    if not chosen:
        raise BadInputError(
            f"the prefix {prefix!r} is for {platform}, and cluster {cluster.name!r} has no {platform} partition "
            f"(its partitions: {', '.join(f'{p.name} ({p.platform})' for p in cluster.partitions)}). Pass the prefix "
            "installed from the lock envsolver make --cluster wrote for their platform (OUT/<platform>/conda-lock.yml)."
        )
    slurm.check_conf(environ)
    # One answer from the controller first: a controller that is down, or no Slurm configuration, is one error
    # rather than one per partition.
    runner(
        ("sinfo", "--noheader", "--format=%R"),
        slurm.QUERY_TIMEOUT_S,
        "the partitions",
        "Check that the controller answers (`scontrol ping`), then run the same command again.",
    )
    lock = _absolute(request.lock) if request.lock is not None else None
    read_lock = lockfile.read(Path(lock), None) if lock is not None else None
    command = step.node_command(prefix, kb, read_lock, request.gpu_test)

    def judge(facts: Mapping[str, Any]) -> list[Check]:
        return run.checks_of(facts, kb, Path(prefix), read_lock, request.gpu_test, request.only)

    scope = compare.Scope(cluster, str(request.cluster_file), prefix, meta)
    outcomes: dict[str, Outcome] = {}
    for p in cluster.partitions:
        if p not in chosen:
            outcomes[p.name] = Outcome(
                p,
                "skipped",
                error=f"not checked: the prefix is for {platform}, {p.name} is {p.platform}; verify the prefix made "
                f"for it: envsolver verify --cluster {shlex.quote(str(request.cluster_file))} -p PREFIX",
            )

    def one(partition: Partition) -> Outcome:
        return _run_step(kb, scope, partition, command, request, runner, judge)

    pool = ThreadPoolExecutor(max_workers=min(MAX_STEPS, len(chosen)), thread_name_prefix="envsolver-verify")
    try:
        futures = {}
        for p in chosen:
            progress(f"verifying {p.name}: srun {' '.join(step.options(p))}")
            futures[pool.submit(one, p)] = p
        for future in as_completed(futures):
            outcome = future.result()
            outcomes[outcome.partition.name] = outcome
            progress(f"  {_summary(outcome)}")
    finally:
        # On Ctrl-C the steps' srun got the terminal's SIGINT too and quit (--quit-on-interrupt); steps not yet
        # started are dropped.
        pool.shutdown(wait=False, cancel_futures=True)
    ordered = tuple(outcomes[p.name] for p in cluster.partitions)
    python = step.python_of(prefix)
    return Report(cluster, str(request.cluster_file), prefix, python, platform, source, meta, ordered)


def _run_step(
    kb: KnowledgeBase,
    scope: compare.Scope,
    partition: Partition,
    command: tuple[str, ...],
    request: Request,
    runner: Runner,
    judge: step.Judge,
) -> Outcome:
    options = step.options(partition)
    argv = step.argv(options, command, request.wait_s)
    shown = " ".join(options)
    fix = (
        f"Check that `srun {shown} --nodes=1 --time={step.TIME_MIN} hostname` runs (a partition whose time limit is "
        f"under {step.TIME_MIN} minutes refuses the step), or correct partition {partition.name}'s slurm: options in "
        f"{scope.file}; then run the same command again."
    )
    started = time.monotonic()
    try:
        text = runner(argv, request.wait_s + request.timeout_s, f"the verify step of partition {partition.name}", fix)
    except slurm.SlurmError as exc:
        return Outcome(partition, "error", argv, error=f"partition {partition.name}: {exc}", seconds=_since(started))
    reply = step.read(text, scope.prefix, judge)
    trouble = step.trouble(reply, scope.prefix)
    if trouble is not None:
        return Outcome(
            partition,
            "error",
            argv,
            reply.probe.node,
            reply=reply,
            error=f"partition {partition.name}: {trouble}",
            seconds=_since(started),
        )
    cross = compare.compare(kb, scope, partition, reply.probe)
    return Outcome(
        partition,
        status_of((*reply.checks, *cross)),
        argv,
        reply.probe.node,
        reply.checks,
        cross,
        reply,
        seconds=_since(started),
    )


def _since(started: float) -> float:
    return round(time.monotonic() - started, 2)


def _summary(outcome: Outcome) -> str:
    name = outcome.partition.name
    if outcome.status == "error":
        return f"{name}: could not run ({outcome.seconds:.1f} s)"
    checks = (*outcome.checks, *outcome.cross)
    counts = ", ".join(f"{sum(1 for c in checks if c.status == s)} {s}" for s in ("pass", "warn", "fail", "skip"))
    return f"{name}: {outcome.node or 'unknown node'}: {outcome.status} ({counts}; {outcome.seconds:.1f} s)"
