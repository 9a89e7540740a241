"""make --cluster: plan, lock and write one environment per platform of a cluster file.

Every platform is planned first, then every one is locked, and only then is anything written: a partition that
cannot share its platform's lock, or a lock that cannot be solved, leaves the output directory as it was. Each
platform's files are one set (writers/fileset.py) in OUT/<platform>/.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from envsolver.cluster import planning
from envsolver.cluster.model import Cluster
from envsolver.core.errors import ConflictError
from envsolver.kb.model import KnowledgeBase
from envsolver.lock import outputs
from envsolver.lock import run as lock
from envsolver.lock.run import LockResult, Mode
from envsolver.lock.writers import files
from envsolver.resolve.inputs import Options, cluster_make_command
from envsolver.resolve.plan import Plan
from envsolver.resolve.run import choose


@dataclass(frozen=True)
class Request:
    """What the user asked: the file (as given, for the regenerate line), the partitions, the make options."""

    cluster_file: str
    options: Options
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    mode: Mode = "live"
    channels: tuple[str, ...] = ()
    name: str | None = None
    no_lock: bool = False
    force: bool = False


@dataclass(frozen=True)
class Made:
    """One platform's outcome: its group, plan, lock (None with --no-lock), fits, and the files written."""

    group: planning.Group
    plan: Plan
    locked: LockResult | None
    fits: tuple[planning.Fit, ...]
    out_dir: Path
    written: dict[Path, files.Outcome]


def command(request: Request, group: planning.Group, out: Path | None) -> str:
    """The line that regenerates this cluster's files."""
    return cluster_make_command(
        request.cluster_file,
        group.target,
        request.only,
        request.skip,
        str(out) if out is not None else None,
        request.name,
        request.mode == "offline",
        request.channels,
        request.no_lock,
    )


def _planner(kb: KnowledgeBase, mode: Mode) -> Callable[..., Plan]:
    """Plans within what the lock will use: the knowledge base, or the part of it the snapshot holds."""
    planned = lock.snapshot_kb(kb) if mode == "offline" else kb
    return lambda target: choose(target, planned)


def make(
    cluster: Cluster,
    kb: KnowledgeBase,
    request: Request,
    out_dir: Path,
    cache: Path,
    progress: lock.Progress = lambda _: None,
    on_wait: Callable[[str], None] | None = None,
) -> list[Made]:
    """Plan, lock and write. Raises BadInputError (exit 2) for bad options or names, ConflictError (exit 1)
    naming a partition that cannot share its platform's lock and the commands that split it out."""
    planning.check_options(request.options)
    partitions = planning.select(cluster, request.only, request.skip)
    groups = planning.groups(kb, partitions, request.options)
    planner = _planner(kb, request.mode)
    for group in groups:
        try:
            planner(group.target)
        except ConflictError as exc:

            def split(only: Sequence[str], skip: Sequence[str], suffix: str, g: planning.Group = group) -> str:
                selected = Request(**{**vars(request), "only": tuple(only), "skip": (*request.skip, *skip)})
                out = Path(os.path.normpath(out_dir / suffix)) if suffix else out_dir
                return command(selected, g, out)

            raise planning.refusal(kb, group, exc, planner, request.options, split) from None
    for group in groups:  # make never writes what it reads: refused before anything is solved
        outputs.refuse_inputs(out_dir / group.platform, request.options.files, command(request, group, out_dir))
    results: list[tuple[planning.Group, Plan, LockResult | None]] = []
    for group in groups:
        progress(f"{group.platform}: {', '.join(p.name for p in group.partitions)}")
        if request.no_lock:
            results.append((group, planner(group.target), None))
        else:
            result = lock.lock(group.target, kb, request.mode, request.channels, cache, progress)
            results.append((group, result.plan, result))
    made = []
    for group, plan, locked in results:
        fits = tuple(planning.fit(kb, plan, p) for p in group.partitions)
        where = out_dir / group.platform
        line = command(request, group, out_dir)
        if locked is None:
            written = outputs.write_environment(plan, where, line, request.name, request.force, on_wait=on_wait)
        else:
            extra = planning.metadata(cluster, group, fits)
            written = outputs.write_all(
                locked, kb, where, line, request.name, request.force, on_wait=on_wait, extra=extra
            )
        made.append(Made(group, plan, locked, fits, where, written))
    return made
