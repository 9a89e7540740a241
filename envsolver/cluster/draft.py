"""Draft a cluster file from Slurm: pure functions, no Slurm here (slurm.py runs the commands).

survey.facts(...), survey.survey(...)          the GPU partitions and their groups (survey.py)
parse_maps(values, kb)                         --map TYPE=GPU values
build(survey, probes, maps, kb, command)       a Cluster whose every value says where it came from (decide.py
                                               decides each partition), or one refusal naming every partition
                                               that cannot be drafted, with the commands that fix it
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envsolver.cluster import grammar
from envsolver.cluster.decide import PROBE, SPLIT, Inputs, ProbeResult, decide
from envsolver.cluster.model import Cluster, Partition
from envsolver.cluster.survey import Facts, Group, ProbeKey, Survey, Surveyed, facts, survey
from envsolver.core.errors import BadInputError
from envsolver.kb import KnowledgeBase
from envsolver.kb.gpus import lookup
from envsolver.kb.model import Gpu

__all__ = [
    "Draft",
    "Facts",
    "Group",
    "ProbeKey",
    "ProbeResult",
    "Survey",
    "Surveyed",
    "build",
    "facts",
    "parse_maps",
    "survey",
]


def parse_maps(values: Sequence[str], kb: KnowledgeBase) -> dict[str, Gpu]:
    """`--map TYPE=GPU` values -> {type: GPU row}. Raises BadInputError, UnknownGpuError (with the closest)."""
    maps: dict[str, Gpu] = {}
    for value in values:
        kind, sep, gpu = value.partition("=")
        if not sep or "=" in gpu or not grammar.TYPE.fullmatch(kind) or not gpu.strip():
            raise BadInputError(
                f"malformed --map {value!r}: expected --map TYPE=GPU, a GRES type as sinfo prints it and a GPU name "
                "`envsolver gpus` lists. Pass --map tesla=v100, for example."
            )
        maps[kind] = lookup(kb, gpu)
    return maps


@dataclass(frozen=True)
class Draft:
    cluster: Cluster
    notes: tuple[str, ...]  # what the user should know: nodes that differ, probes that failed, names that disagree


def build(
    surveyed: Survey,
    probes: Mapping[ProbeKey, ProbeResult] | None,
    maps: Mapping[str, Gpu],
    kb: KnowledgeBase,
    command: Sequence[str],
) -> Draft:
    """The Cluster. `probes` None: --no-probe. `command`: the words of the command as run, for the fixes.
    Raises BadInputError listing every GRES type that names no GPU, every --map no node uses, every partition
    whose nodes have two platforms."""
    used = {g.gres_type for g in surveyed.groups}
    stray = sorted(k for k in maps if k not in used)
    if stray:
        known = ", ".join(sorted(t for t in used if t is not None)) or "none"
        raise BadInputError(
            f"--map {', '.join(repr(s) for s in stray)}: no GPU node of the partitions asked for has that GRES type "
            f"(their types: {known}). Pass --map with one of those types."
        )
    partitions: list[Partition] = []
    notes: list[str] = []
    problems: list[str] = []
    fixes: list[str] = []
    blocked: list[str] = []
    for item in surveyed.partitions:
        decided = decide(Inputs(item, probes, maps, kb, surveyed.arch))
        notes.extend(decided.notes)
        if decided.partition is None:
            problems.extend(decided.problems)
            fixes.extend(f for f in decided.fixes if f not in fixes)
            blocked.append(item.name)
        else:
            partitions.append(decided.partition)
    if problems:
        rest = [p.name for p in surveyed.partitions if p.name not in blocked]
        raise BadInputError(_refusal(problems, fixes, command, rest))
    return Draft(Cluster(surveyed.cluster, tuple(partitions), surveyed.skipped), tuple(notes))


def _command(words: Sequence[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def _refusal(problems: list[str], fixes: list[str], command: Sequence[str], rest: list[str]) -> str:
    """The problems, then every way out as a command to run."""
    ways = []
    maps = [w for f in fixes if f.startswith("--map ") for w in f.split()]
    if maps:
        ways.append(f"`{_command([*command, *maps])}` with each GPU a name `envsolver gpus` lists")
    if PROBE in fixes and "--no-probe" in command:
        ways.append(f"`{_command([w for w in command if w != '--no-probe'])}`, so nvidia-smi on a node names it")
    if SPLIT in fixes:
        ways.append("a cluster file written by hand with one entry per platform (slurm.constraint picks the nodes)")
    if rest:
        kept = [w for name in rest for w in ("--partition", name)]
        ways.append(f"draft the other partitions only: `{_command([*_without_partitions(command), *kept])}`")
    body = "\n".join(f"  - {p}" for p in problems)
    return f"cannot draft {len(problems)} partition(s):\n{body}\nRun one of these: " + "; or ".join(ways) + "."


def _without_partitions(command: Sequence[str]) -> list[str]:
    out: list[str] = []
    words = iter(command)
    for word in words:
        if word == "--partition":
            next(words, None)
        elif not word.startswith("--partition="):
            out.append(word)
    return out
