"""make --cluster, the pure part: the cluster's partitions grouped by platform, one Target per group whose lock
runs on every partition of the group, how each partition runs it, and which partition cannot share it.

One lock per platform. Its GPUs are the union of the partitions' GPUs (so the arch list is the union of their
compute capabilities, `+PTX` on the highest, each one buildable by the chosen toolkit: the resolver's rules), its
driver the oldest of the partitions' drivers (so every partition runs the chosen CUDA: the resolver plans for
the oldest), its glibc the oldest. A partition with an unknown driver or glibc adds no constraint: the plan
assumes a driver that runs its CUDA (as `make` without --driver) and glibc 2.28 (as `make` without --glibc).

Planning is given as a function (Target -> Plan, raising ConflictError), so the same rules serve a plan within
the knowledge base and one within the bundled snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from envsolver.cluster.model import Cluster, Partition
from envsolver.core.errors import BadInputError, ConflictError
from envsolver.kb.model import KnowledgeBase, Platform
from envsolver.resolve import driver as drivers
from envsolver.resolve.inputs import Options, build_target
from envsolver.resolve.plan import Plan
from envsolver.resolve.target import DEFAULT_GLIBC, Target

Planner = Callable[[Target], Plan]
FitKind = Literal["full", "minor", "assumed"]
# The make options a cluster file answers: they cannot be given with --cluster.
FROM_FILE = (
    ("gpus", "--gpu"),
    ("profile", "--profile"),
    ("driver", "--driver"),
    ("platform", "--platform"),
    ("glibc", "--glibc"),
)


@dataclass(frozen=True)
class Group:
    """The partitions of one platform and the Target their shared lock is planned for."""

    platform: Platform
    partitions: tuple[Partition, ...]
    target: Target


@dataclass(frozen=True)
class Fit:
    """How one partition runs its platform's lock: 'full' (its driver fully supports the lock's CUDA), 'minor'
    (only through minor-version compatibility), 'assumed' (its driver is unknown)."""

    partition: str
    kind: FitKind
    text: str


def check_options(options: Options) -> None:
    """Refuse the options the cluster file answers. Raises BadInputError."""
    given = [flag for attr, flag in FROM_FILE if getattr(options, attr) not in (None, ())]
    if given:
        raise BadInputError(
            f"{' and '.join(given)} cannot be given with --cluster: the cluster file names each partition's GPUs, "
            "driver, platform and glibc. Edit the file, or leave --cluster out to plan for the options alone."
        )


def select(cluster: Cluster, only: Sequence[str] = (), skip: Sequence[str] = ()) -> tuple[Partition, ...]:
    """The partitions to plan for: those named by `only` (all when empty), less those in `skip`, in file order.
    Raises BadInputError for a name the file does not have, or when nothing is left."""
    names = [p.name for p in cluster.partitions]
    unknown = [n for n in (*only, *skip) if n not in names]
    if unknown:
        raise BadInputError(
            f"cluster {cluster.name!r} has no partition {', '.join(repr(n) for n in dict.fromkeys(unknown))}; "
            f"its partitions are {', '.join(names)}. Pass one of those names."
        )
    chosen = tuple(p for p in cluster.partitions if (not only or p.name in only) and p.name not in skip)
    if not chosen:
        raise BadInputError(
            f"--partition and --skip-partition leave no partition of cluster {cluster.name!r} to plan for. "
            "Skip fewer partitions."
        )
    return chosen


def target_for(kb: KnowledgeBase, partitions: Sequence[Partition], platform: Platform, options: Options) -> Target:
    """The Target whose plan runs on every one of `partitions` (all of `platform`): their GPUs, the oldest known
    driver, the oldest known glibc, and the user's other options. Raises BadInputError as build_target does."""
    gpus = tuple(dict.fromkeys(g.key for p in partitions for g in p.gpus))
    known_drivers = [p.driver for p in partitions if p.driver is not None]
    known_glibcs = [p.glibc for p in partitions if p.glibc is not None]
    merged = replace(
        options,
        gpus=gpus,
        profile=None,
        driver=str(min(known_drivers)) if known_drivers else None,
        driver_from_cluster_file=True,
        platform=platform,
        glibc=str(min(known_glibcs)) if known_glibcs else str(DEFAULT_GLIBC),
    )
    return build_target(merged, kb).target


def groups(kb: KnowledgeBase, partitions: Sequence[Partition], options: Options) -> tuple[Group, ...]:
    """One Group per platform, platforms sorted, partitions in file order."""
    platforms = sorted({p.platform for p in partitions})
    out = []
    for platform in platforms:
        members = tuple(p for p in partitions if p.platform == platform)
        out.append(Group(platform, members, target_for(kb, members, platform, options)))
    return tuple(out)


def fit(kb: KnowledgeBase, plan: Plan, partition: Partition) -> Fit:
    """How `partition` runs the plan's CUDA."""
    cuda = plan.cuda_version
    if partition.driver is None:
        return Fit(
            partition.name,
            "assumed",
            f"driver unknown: assumed to be one that runs CUDA {cuda} ({drivers.floor_text(kb, cuda)})",
        )
    support = drivers.support(kb, partition.driver, cuda)
    if support == "full":
        return Fit(partition.name, "full", f"driver {partition.driver} fully supports CUDA {cuda}")
    if support == "minor":
        return Fit(
            partition.name,
            "minor",
            f"driver {partition.driver} runs CUDA {cuda} through minor-version compatibility (full support needs "
            f"{drivers.full_driver_text(kb, cuda)}; PTX JIT of newer code fails there)",
        )
    # The plan is made for the oldest driver, so this means the planner broke its own rule.
    raise ConflictError(
        f"partition {partition.name!r}: driver {partition.driver} cannot run CUDA {cuda} "
        f"({drivers.requirement_text(kb, cuda)}). Upgrade its driver, or split it out with --skip-partition "
        f"{partition.name}."
    )


def describe(partition: Partition) -> str:
    """'v100 (NVIDIA V100 7.0; driver 535.104.05)'."""
    gpus = ", ".join(f"{g.name} {g.compute_capability}" for g in partition.gpus)
    return f"{partition.name} ({gpus}; driver {partition.driver or 'unknown'})"


def _tries(planner: Planner, target: Target) -> Plan | None:
    try:
        return planner(target)
    except ConflictError:
        return None


def _facts(exc: ConflictError) -> str:
    return str(exc).strip().rstrip(".")


def refusal(
    kb: KnowledgeBase,
    group: Group,
    exc: ConflictError,
    planner: Planner,
    options: Options,
    command: Callable[[Sequence[str], Sequence[str], str], str],
) -> ConflictError:
    """Why the group's partitions cannot share one lock, naming the partition(s) that cannot share it and the
    commands that split them out (each one planned before it is named). `command(only, skip, out_suffix)` is
    the make line for a selection of partitions."""
    facts = _facts(exc)
    then = "\n" if "\n" in facts else " "  # after a list of rejected builds, the next sentence on a line of its own
    members = group.partitions
    if len(members) == 1:
        return ConflictError(f"partition {describe(members[0])}: {facts}.", exc.rejected, exc.by_reason)
    by_driver = sorted(members, key=lambda p: (p.driver is None, p.driver.parts if p.driver else (), p.name))
    blamed: list[tuple[Partition, Plan]] = []
    for partition in by_driver:
        rest = [p for p in members if p is not partition]
        plan = _tries(planner, target_for(kb, rest, group.platform, options))
        if plan is not None:
            blamed.append((partition, plan))
    if blamed:
        partition, rest_plan = blamed[0]
        others = ", ".join(p.name for p in members if p is not partition)
        alone = _tries(planner, target_for(kb, [partition], group.platform, options))
        if alone is not None:
            own = f", and `{command([partition.name], [], partition.name)}` plans it alone ({_label(alone)})"
        else:
            own = f"; on its own it does not plan either: {_facts(_error_of(planner, kb, partition, group, options))}"
        return ConflictError(
            f"partition {describe(partition)} cannot share the {group.platform} lock with {others}: {facts}.{then}"
            f"Without it the others plan {_label(rest_plan)}. Split it out: `{command([], [partition.name], '')}` "
            f"makes the others' lock{own}.",
            exc.rejected,
            exc.by_reason,
        )
    singles = [(p, _tries(planner, target_for(kb, [p], group.platform, options))) for p in members]
    planned = [f"`{command([p.name], [], p.name)}`" for p, plan in singles if plan is not None]
    tail = (
        f"Make one lock per partition instead: {'; '.join(planned)}."
        if planned
        else "No partition plans on its own either: run envsolver explain with each partition's --gpu and --driver "
        "to see its ways out."
    )
    return ConflictError(
        f"the {group.platform} partitions {', '.join(p.name for p in members)} cannot share one lock: {facts}.{then}"
        f"Leaving out any one of them does not help. {tail}",
        exc.rejected,
        exc.by_reason,
    )


def _error_of(
    planner: Planner, kb: KnowledgeBase, partition: Partition, group: Group, options: Options
) -> ConflictError:
    try:
        planner(target_for(kb, [partition], group.platform, options))
    except ConflictError as exc:
        return exc
    raise AssertionError("planned")  # pragma: no cover - called only after a refusal


def _label(plan: Plan | None) -> str:
    if plan is None:  # pragma: no cover - callers pass plans
        return "nothing"
    return f"torch {plan.torch_version} with CUDA {plan.cuda_version}"


def metadata(cluster: Cluster, group: Group, fits: Sequence[Fit]) -> dict[str, str]:
    """What conda-lock.yml records of the cluster: its name, the platform's partitions, and per partition its
    GPUs, driver, glibc, where each came from, and how it runs the lock."""
    by_name = {f.partition: f for f in fits}
    meta = {
        "envsolver_cluster": cluster.name,
        "envsolver_cluster_partitions": ";".join(p.name for p in group.partitions),
    }
    for p in group.partitions:
        gpus = ", ".join(f"{g.name} ({g.compute_capability})" for g in p.gpus)
        glibc = str(p.glibc) if p.glibc is not None else f"unknown (assumed {DEFAULT_GLIBC})"
        meta[f"envsolver_partition_{p.name}"] = (
            f"GPUs {gpus}; driver {p.driver or 'unknown'} ({p.origin('driver')}); glibc {glibc}; "
            f"relies on: {by_name[p.name].text}"
        )
    return meta
