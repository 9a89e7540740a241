"""Which partitions have GPUs, and in each, which nodes hold each GPU GRES type: a group, the nodes one probe step
covers, with the srun options that reach one of them. Pure: fed with parse.py's results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envsolver.cluster import grammar
from envsolver.cluster.model import Skipped, SlurmOptions
from envsolver.cluster.nodes import LeftOut, split
from envsolver.cluster.parse import NodeInfo, SinfoRow, parse_config, parse_scontrol_nodes, parse_sinfo
from envsolver.core.errors import BadInputError

DEFAULT_NAME = "cluster"
ProbeKey = tuple[str, str | None]  # (partition, GRES type or None for untyped GPUs)


@dataclass(frozen=True)
class Facts:
    """What Slurm says: its cluster name, (partition, node) rows with GRES, and every node's details."""

    cluster: str | None
    rows: tuple[SinfoRow, ...]
    nodes: Mapping[str, NodeInfo]


def facts(sinfo_text: str, nodes_text: str, config_text: str) -> Facts:
    """Parse the three outputs. Raises BadInputError when sinfo printed lines of another layout."""
    rows, bad = parse_sinfo(sinfo_text)
    if bad:
        raise BadInputError(
            f"sinfo printed {len(bad)} line(s) envsolver cannot read, such as {bad[0]!r}. Check that `sinfo` is "
            "Slurm's own (`sinfo --version`), then run the same command again."
        )
    return Facts(parse_config(config_text).get("ClusterName"), rows, parse_scontrol_nodes(nodes_text))


@dataclass(frozen=True)
class Group:
    """The nodes of one partition that hold one GPU GRES type, and the srun options that reach them: `usable`
    those a step can run on, `left_out` the others (down, drained, reserved, ...) with their state."""

    partition: str
    gres_type: str | None
    nodes: tuple[str, ...]
    gres: Mapping[str, str]  # node -> its GRES as sinfo printed it
    options: SlurmOptions
    usable: tuple[str, ...] = ()
    left_out: tuple[LeftOut, ...] = ()

    @property
    def key(self) -> ProbeKey:
        return (self.partition, self.gres_type)


@dataclass(frozen=True)
class Surveyed:
    name: str
    nodes: tuple[str, ...]
    groups: tuple[Group, ...]
    available: str
    slurm: SlurmOptions


@dataclass(frozen=True)
class Survey:
    cluster: str
    partitions: tuple[Surveyed, ...]
    skipped: tuple[Skipped, ...]
    arch: Mapping[str, str | None]  # node -> scontrol's Arch

    def partition(self, name: str) -> Surveyed:
        return next(p for p in self.partitions if p.name == name)

    @property
    def groups(self) -> tuple[Group, ...]:
        return tuple(g for p in self.partitions for g in p.groups)


def _gpu_options(partition: str, types: Sequence[str | None]) -> SlurmOptions:
    """`--gres=gpu:TYPE:1` for one typed GPU GRES; `--gres=gpu:1` for an untyped one or several types."""
    if len(types) == 1 and types[0] is not None:
        return SlurmOptions(gres=f"gpu:{types[0]}:1")
    return SlurmOptions(gres="gpu:1")


def survey(found: Facts, only: Sequence[str] = ()) -> Survey:
    """The GPU partitions and the skipped ones, by name, their nodes by name: sinfo's own order changes with the
    nodes' states, and the same cluster must give the same file. Raises BadInputError for a name in `only` that
    no partition has, or when no partition asked for has GPUs."""
    rows: dict[str, list[SinfoRow]] = {}
    for row in sorted(found.rows, key=lambda r: (r.partition, r.node)):
        rows.setdefault(row.partition, []).append(row)
    order = sorted(rows)
    unknown = [p for p in only if p not in rows]
    if unknown:
        raise BadInputError(
            f"no partition {', '.join(repr(p) for p in unknown)} in sinfo; its partitions are "
            f"{', '.join(sorted(rows))}. Pass one of them to --partition."
        )
    partitions: list[Surveyed] = []
    skipped: list[Skipped] = []
    for name in order:
        members = rows[name]
        if only and name not in only:
            skipped.append(Skipped(name, f"left out: not among --partition {', '.join(only)}"))
            continue
        try:
            grammar.name(name)
        except grammar.GrammarError as exc:
            skipped.append(Skipped(name, f"its name cannot be passed to srun safely ({exc})"))
            continue
        types: dict[str | None, list[SinfoRow]] = {}
        for row in members:
            for gres in row.gpus:
                types.setdefault(gres.type, [])
                if row not in types[gres.type]:
                    types[gres.type].append(row)
        if not types:
            shown = "; ".join(f"{r.gres_text} on {r.node}" for r in members[:3])
            skipped.append(Skipped(name, f"no GPUs: sinfo GRES {shown}"))
            continue
        bad_types = [t for t in types if t is not None and not grammar.TYPE.fullmatch(t)]
        if bad_types:
            skipped.append(Skipped(name, f"GRES type {bad_types[0]!r} cannot be passed to srun safely"))
            continue
        kinds = list(types)
        groups = tuple(_group(name, kind, group_rows, found) for kind, group_rows in types.items())
        partitions.append(
            Surveyed(name, tuple(r.node for r in members), groups, members[0].available, _gpu_options(name, kinds))
        )
    if not partitions:
        reasons = "; ".join(f"{s.name}: {s.reason}" for s in skipped[:5])
        raise BadInputError(
            f"no partition with GPUs among those asked for ({reasons}). Check `sinfo --Node --format='%R %N %G'`: "
            "GPU nodes declare a Gres=gpu:... in slurm.conf."
        )
    cluster = found.cluster if found.cluster and _is_name(found.cluster) else DEFAULT_NAME
    arch = {name: info.arch for name, info in found.nodes.items()}
    return Survey(cluster, tuple(partitions), tuple(skipped), arch)


def _group(partition: str, kind: str | None, rows: Sequence[SinfoRow], found: Facts) -> Group:
    names = tuple(r.node for r in rows)
    usable, left_out = split(names, found.nodes, {r.node: r.state for r in rows})
    return Group(
        partition=partition,
        gres_type=kind,
        nodes=names,
        gres={r.node: r.gres_text for r in rows},
        options=_gpu_options(partition, [kind]),
        usable=usable,
        left_out=left_out,
    )


def _is_name(text: str) -> bool:
    try:
        grammar.name(text)
    except grammar.GrammarError:
        return False
    return True
