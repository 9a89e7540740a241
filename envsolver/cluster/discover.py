"""`cluster init` from start to end, without printing: ask Slurm (slurm.py), survey, probe each group one step
at a time, draft (draft.py). Progress goes to a callback; the CLI prints it.

A probe that srun cannot run does not stop the others: its SlurmError's message becomes that group's result
(the partition's driver and glibc are then unknown, and the draft says why). Probes run one after another: each
is one short step, and `--immediate=WAIT` bounds how long one waits for a free node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envsolver.cluster import slurm
from envsolver.cluster.draft import Draft, build, parse_maps
from envsolver.cluster.parse import Probe, parse_probe
from envsolver.cluster.survey import Group, ProbeKey, Survey, facts, survey
from envsolver.errors import split_fix
from envsolver.kb import KnowledgeBase

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Request:
    """What `cluster init` was asked: `command` is its words, for the fixes and the file's header."""

    partitions: tuple[str, ...]
    maps: tuple[str, ...]
    probe: bool
    wait_s: int
    command: tuple[str, ...]


@dataclass(frozen=True)
class ProbeRun:
    group: Group
    argv: tuple[str, ...]
    probe: Probe | None
    error: str | None


@dataclass(frozen=True)
class Discovery:
    survey: Survey
    probes: tuple[ProbeRun, ...]
    draft: Draft


def _describe(probe: Probe) -> str:
    gpus = ", ".join(dict.fromkeys(f"{g.name} (driver {g.driver})" for g in probe.gpus)) or (
        probe.smi_error or "no GPU"
    )
    return f"{probe.node}: {gpus}; glibc {probe.glibc or 'unknown'}; {probe.machine or 'unknown machine'}"


def run_probe(group: Group, wait_s: int, progress: Progress) -> ProbeRun:
    options = group.options.argv(group.partition)
    progress(f"probing {group.partition} ({group.gres_type or 'any GPU'}): srun {' '.join(options)}")
    try:
        text = slurm.probe(options, wait_s=wait_s)
    except slurm.SlurmError as exc:
        message = exc.said or split_fix(str(exc))[0]
        progress(f"  {group.partition}: the probe failed: {message}")
        return ProbeRun(group, options, None, message)
    probe = parse_probe(text)
    progress(f"  {group.partition}: {_describe(probe)}")
    return ProbeRun(group, options, probe, None)


def discover(request: Request, kb: KnowledgeBase, progress: Progress) -> Discovery:
    """Raises BadInputError (a bad --map or --partition, a type that names no GPU) and SlurmError."""
    maps = parse_maps(request.maps, kb)
    progress("asking Slurm for its partitions and nodes (sinfo, scontrol)")
    surveyed = survey(facts(slurm.sinfo(), slurm.nodes(), slurm.config()), request.partitions)
    runs: list[ProbeRun] = []
    if request.probe:
        runs = [run_probe(group, request.wait_s, progress) for group in surveyed.groups]
    results: dict[ProbeKey, Probe | str] | None = None
    if request.probe:
        results = {r.group.key: (r.probe if r.probe is not None else str(r.error)) for r in runs}
    drafted = build(surveyed, results, maps, kb, request.command)
    return Discovery(surveyed, tuple(runs), drafted)


def words(partitions: Sequence[str], maps: Sequence[str], probe: bool, wait_s: int, out: str) -> tuple[str, ...]:
    """The command's words as a user would type them again (no --json, no --force)."""
    command = ["envsolver", "cluster", "init"]
    if out != "cluster.yaml":
        command += ["--out", out]
    for name in partitions:
        command += ["--partition", name]
    for value in maps:
        command += ["--map", value]
    if not probe:
        command.append("--no-probe")
    if wait_s != slurm.IMMEDIATE_S:
        command += ["--wait", str(wait_s)]
    return tuple(command)
