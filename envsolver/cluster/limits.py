"""What a partition allows, read before `cluster sbatch` writes a job: its state, MaxTime and MaxNodes, and each of
its nodes' state, CPUs, features and GPUs; then the judgement of a request against them. A request sbatch would
reject, or that could never start, is refused (JobRefused, exit 1, every reason at once, each with its fix); a
risky one is warned about; the CPUs per GPU for the job come from the partition's smallest usable node.

Two queries on the login node, each bounded in time and size (slurm.run):

    scontrol --oneliner show partition P      one line:  ... MaxNodes=UNLIMITED MaxTime=00:10:00 ... State=UP ...
    sinfo --noheader --Node --partition=P --format=%N|%T|%c|%f|%G
                                              one line a node:  gpu02|idle|2|ib,rack1|gpu:a100:2(S:0)

(sinfo for the nodes, not `scontrol show node`: about 60 bytes a node instead of about 1 KiB, so a partition of
thousands of nodes stays within what slurm.run keeps.) sinfo's %T is the long state with a suffix for a flag
(sinfo(1), NODE STATE CODES): `*` not responding, `~` powered off, `#` powering up, `%` powering down, `$` in a
maintenance reservation, `@` reboot pending, `^` rebooting, `-` planned, `!` power down pending.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from envsolver.cluster import parse, slurm
from envsolver.core.errors import EnvsolverError, Kind

NODE_FORMAT = "%N|%T|%c|%f|%G"
# Node states a job cannot start on (sinfo's long forms); and the flag of a node that does not answer.
UNUSABLE = frozenset({"down", "drained", "draining", "drain", "fail", "failing", "future", "inval", "unknown"})
NOT_RESPONDING = "*"
_STATE = re.compile(r"([a-z_]{1,32})([*~#%$@^!\-]{0,8})")
# Source: Slurm's time format (sbatch(1) --time): MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS,
# DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS; scontrol prints UNLIMITED (or INFINITE) for no limit.
_DAYS = re.compile(r"([0-9]{1,5})-([0-9]{1,2})(?::([0-9]{1,2}))?(?::([0-9]{1,2}))?")
_CLOCK = re.compile(r"([0-9]{1,7})(?::([0-9]{1,2}))?(?::([0-9]{1,2}))?")
_FEATURE_SPLIT = re.compile(r"[&|()\[\]]")


class JobRefused(EnvsolverError):
    """A job sbatch would reject or that could never start on the partition (exit 1); the message lists every
    reason with its fix."""

    exit_code = 1
    kind: Kind = "conflict"


def seconds(text: str) -> int | None:
    """A Slurm time as seconds; None for UNLIMITED/INFINITE or a form Slurm does not print. `30` -> 1800."""
    text = text.strip()
    days = _DAYS.fullmatch(text)
    if days:
        d, h, m, s = (int(g) if g else 0 for g in days.groups())
        return ((d * 24 + h) * 60 + m) * 60 + s
    clock = _CLOCK.fullmatch(text)
    if clock is None:
        return None
    parts = [int(g) for g in clock.groups() if g is not None]
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


@dataclass(frozen=True)
class Node:
    """A node of the partition as sinfo shows it: its state without the flag suffix, the flags, its CPUs,
    features and GPU GRES."""

    name: str
    state: str
    flags: str
    cpus: int | None
    features: tuple[str, ...]
    gpus: tuple[parse.Gres, ...]

    @property
    def usable(self) -> bool:
        return self.state not in UNUSABLE and NOT_RESPONDING not in self.flags

    @property
    def shown_state(self) -> str:
        return self.state + (" (not responding)" if NOT_RESPONDING in self.flags else "")

    def gpu_count(self, kind: str | None) -> int:
        return sum(g.count for g in self.gpus if kind is None or g.type == kind)

    @property
    def gpu_types(self) -> frozenset[str]:
        return frozenset(g.type or "untyped" for g in self.gpus)


@dataclass(frozen=True)
class PartitionFacts:
    """The partition's limits (None: unlimited, or Slurm did not say) and its nodes."""

    name: str
    state: str | None
    max_time_s: int | None
    max_time: str | None
    max_nodes: int | None
    nodes: tuple[Node, ...]
    max_cpus_per_node: int | None = None


def parse_nodes(text: str) -> tuple[Node, ...]:
    """The nodes of `sinfo --noheader --Node --format=NODE_FORMAT`; lines that are not rows are left out."""
    nodes: dict[str, Node] = {}
    for line in text.splitlines()[:100_000]:
        fields = line.split("|", 4) if len(line) <= parse.MAX_LINE else []
        if len(fields) != 5:
            continue
        name, state_text, cpus, features, gres = (f.strip() for f in fields)
        state = _STATE.fullmatch(state_text.lower())
        if not name or state is None:
            continue
        nodes.setdefault(
            name,
            Node(
                name=name,
                state=state.group(1),
                flags=state.group(2),
                cpus=_count(cpus, 6),
                features=tuple(f for f in features.split(",") if f and f != parse.NULL),
                gpus=tuple(g for g in parse.parse_gres(gres) if g.name == "gpu" and g.count > 0),
            ),
        )
    return tuple(nodes.values())


def parse_partition(text: str, name: str, nodes: Sequence[Node]) -> PartitionFacts:
    """The limits of `scontrol --oneliner show partition NAME`; a value it does not print is None."""
    values: dict[str, str] = {}
    for line in text.splitlines()[:100]:
        found = parse.parse_key_values(line.strip())
        if found.get("PartitionName") == name:
            values = found
            break
    max_time = values.get("MaxTime")
    nodes_text = values.get("MaxNodes", "")
    cpus_text = values.get("MaxCPUsPerNode", "")
    return PartitionFacts(
        name=name,
        state=values.get("State"),
        max_time_s=seconds(max_time) if max_time else None,
        max_time=max_time if max_time and seconds(max_time) is not None else None,
        max_nodes=_count(nodes_text, 9),
        nodes=tuple(nodes),
        max_cpus_per_node=_count(cpus_text, 9),
    )


def read(slurm_partition: str) -> PartitionFacts:
    """Ask Slurm on this login node. Raises SlurmError whose fix names --no-slurm-check."""
    fix = (
        "Check that `scontrol show partition` answers on this login node, then run the same command again; or "
        "pass --no-slurm-check to write the script without reading the partition's limits."
    )
    what = f"partition {slurm_partition}'s limits"
    show = ("scontrol", "--oneliner", "show", "partition", slurm_partition)
    argv = ("sinfo", "--noheader", "--Node", f"--partition={slurm_partition}", f"--format={NODE_FORMAT}")
    try:
        slurm.check_conf()
        shown = slurm.run(show, slurm.QUERY_TIMEOUT_S, what, fix)
        listed = slurm.run(argv, slurm.QUERY_TIMEOUT_S, f"partition {slurm_partition}'s nodes", fix)
    except slurm.SlurmError as exc:
        if "--no-slurm-check" in str(exc):
            raise
        way_out = "or pass --no-slurm-check to write the script without reading the partition's limits"
        raise slurm.SlurmError(f"{str(exc).rstrip('.')}; {way_out}.", exc.said) from None
    return parse_partition(shown, slurm_partition, parse_nodes(listed))


@dataclass(frozen=True)
class Request:
    """What the job asks of the partition: GPUs of `kind` (None: any), the effective constraint, the time, the
    nodes it must not use, and the CPUs a node must give it when the user set them."""

    nodes: int
    gpus_per_node: int
    kind: str | None
    time: str | None
    constraint: str | None
    excluded: frozenset[str]
    cpus_per_node: int | None = None  # what the user asked (--cpus-per-task/-gpu x tasks); None: envsolver fills it


@dataclass(frozen=True)
class Refusal:
    problem: str
    fix: str


@dataclass(frozen=True)
class Verdict:
    refusals: tuple[Refusal, ...]
    warnings: tuple[str, ...]
    cpus_per_gpu: int | None  # CPUs / GPUs of the smallest usable node that fits; None: Slurm did not say

    def raise_refusals(self, partition: str) -> None:
        """Raises JobRefused listing every problem, then every fix (after `Fix:`, as errors.split_fix reads)."""
        if self.refusals:
            body = "\n".join(f"  - {r.problem}" for r in self.refusals)
            fixes = "; ".join(r.fix for r in self.refusals)
            raise JobRefused(
                f"partition {partition!r} cannot run this job (sbatch would reject it, or it would wait for "
                f"ever):\n{body}\nFix: {fixes}."
            )


def features_named(constraint: str) -> list[str]:
    """The feature names of a --constraint expression (grammar.constraint), without `*COUNT`."""
    names = (part.split("*")[0] for part in _FEATURE_SPLIT.split(constraint))
    return [name for name in names if name]


def _satisfies(node: Node, constraint: str | None) -> bool:
    """Whether the node can meet the constraint: exactly for features joined by `&`; any other expression is
    left to Slurm (True)."""
    if constraint is None or not re.fullmatch(r"[^|()\[\]*]+", constraint):
        return True
    return all(feature in node.features for feature in constraint.split("&"))


def _cpus(node: Node, facts: PartitionFacts) -> int | None:
    """The CPUs a job may use on the node: its CPUs, capped by the partition's MaxCPUsPerNode."""
    if node.cpus is None:
        return facts.max_cpus_per_node
    return min(node.cpus, facts.max_cpus_per_node) if facts.max_cpus_per_node else node.cpus


def _names(nodes: Sequence[Node], limit: int = 8) -> str:
    shown = ", ".join(f"{n.name} ({n.shown_state})" for n in nodes[:limit])
    return shown + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def judge(facts: PartitionFacts, request: Request) -> Verdict:
    """The request against the partition: refusals (each with its fix), warnings, CPUs per GPU."""
    refusals: list[Refusal] = []
    warnings: list[str] = []
    name, kind = facts.name, request.kind
    gpu_words = f"GPUs of type {kind}" if kind else "GPUs"
    if facts.state is not None and facts.state.upper() in ("DRAIN", "INACTIVE"):
        refusals.append(
            Refusal(
                f"the partition's state is {facts.state}: it takes no new jobs",
                "pass another --partition, or ask the site when it opens again",
            )
        )
    elif facts.state is not None and facts.state.upper() == "DOWN":
        warnings.append(f"partition {name} is DOWN: the job waits until the site brings it up")
    asked = seconds(request.time) if request.time else None
    if asked is not None and facts.max_time_s is not None and asked > facts.max_time_s:
        refusals.append(
            Refusal(
                f"--time {request.time} is above the partition's MaxTime={facts.max_time}",
                f"pass --time {facts.max_time} or less",
            )
        )
    if facts.max_nodes is not None and request.nodes > facts.max_nodes:
        refusals.append(
            Refusal(f"--nodes {request.nodes} is above MaxNodes={facts.max_nodes}", f"pass --nodes {facts.max_nodes}")
        )
    if not facts.nodes:
        refusals.append(Refusal(f"sinfo lists no node in partition {name}", f"check `sinfo --partition={name} --Node`"))
        return Verdict(tuple(refusals), tuple(warnings), None)
    most = max(n.gpu_count(kind) for n in facts.nodes)
    if request.gpus_per_node > most:
        refusals.append(
            Refusal(
                f"--gpus-per-node {request.gpus_per_node}, but no node of {name} has more than {most} {gpu_words}",
                f"pass --gpus-per-node {most} or less (and more --nodes)",
            )
            if most
            else Refusal(f"no node of {name} has {gpu_words}", "pass another --partition")
        )
    features = sorted({f for n in facts.nodes for f in n.features})
    unknown: list[str] = []
    if request.constraint is not None:
        unknown = [f for f in features_named(request.constraint) if f not in features]
        if unknown:
            have = ", ".join(features) if features else "none"
            refusals.append(
                Refusal(
                    f"--constraint {request.constraint} names {', '.join(unknown)}, a feature no node of {name} "
                    f"has (its features: {have})",
                    "pass a --constraint of the partition's features, or leave it out",
                )
            )
    offered = [c for c in (_cpus(n, facts) for n in facts.nodes) if c is not None]
    cpus = request.cpus_per_node
    if cpus is not None and offered and cpus > max(offered):
        refusals.append(
            Refusal(
                f"the job asks {cpus} CPUs per node, but a node of {name} gives a job at most {max(offered)}",
                f"pass --cpus-per-gpu {max(1, max(offered) // request.gpus_per_node)} or less (and no "
                "--cpus-per-task), or leave both out",
            )
        )
        cpus = None  # the cause is named; the node count below would only repeat it
    fits = [
        n
        for n in facts.nodes
        if n.name not in request.excluded
        and n.gpu_count(kind) >= request.gpus_per_node
        and _satisfies(n, request.constraint)
        and (cpus is None or (_cpus(n, facts) or cpus) >= cpus)
    ]
    usable = [n for n in fits if n.usable]
    out = [n for n in fits if not n.usable]
    if request.nodes > len(usable) and request.gpus_per_node <= most and not unknown:
        why = f"; {_names(out)} cannot run jobs now" if out else ""
        excluded = " not excluded," if request.excluded else ""
        refusals.append(
            Refusal(
                f"--nodes {request.nodes}, but {name} has {len(usable)} usable node(s){excluded} with "
                f"{request.gpus_per_node} {gpu_words}" + (" and the constraint" if request.constraint else "") + why,
                f"pass --nodes {len(usable)} or less, or wait until the site brings the nodes back"
                if usable
                else "wait until the site brings the nodes back, or pass another --partition",
            )
        )
    elif out:
        warnings.append(f"{len(out)} node(s) of {name} cannot run jobs now: {_names(out)}")
    types = sorted({t for n in facts.nodes for t in n.gpu_types})
    if kind is None and request.constraint is None and len(types) > 1:
        warnings.append(
            f"partition {name} has nodes with different GPUs ({', '.join(types)}) and the job asks for untyped "
            "GPUs with no --constraint: its nodes may differ; pass --constraint with a feature of one kind of "
            "node, or type the GPUs in the cluster file (slurm.gres: gpu:TYPE:1)"
        )
    per_gpu = [c // max(1, n.gpu_count(None)) for n in usable if (c := _cpus(n, facts))]
    return Verdict(tuple(refusals), tuple(warnings), max(1, min(per_gpu)) if per_gpu else None)


def _count(text: str, digits: int) -> int | None:
    """A count Slurm printed: ASCII digits only (str.isdigit() alone takes '²', which int() refuses), at most
    `digits` of them; None otherwise."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= digits else None
