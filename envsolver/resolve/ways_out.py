"""Ways out of a conflict: option changes that give a plan, each tried through the same planner before a
message offers it, so that every fix a refusal names works when the user runs it.

A way out is shown as the options to put in the command (`--driver 570.26`, `--source pytorch`), each
value shell-quoted; the changed command replaces those options and keeps the rest. Pure given the planner
(resolve for the knowledge base, the snapshot planner for --offline).
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace

from packaging.version import InvalidVersion, Version

from envsolver.core import versions
from envsolver.core.errors import EnvsolverError
from envsolver.kb.model import KnowledgeBase
from envsolver.resolve.plan import Plan
from envsolver.resolve.target import Target, torch_specifier

Planner = Callable[[Target], Plan]
Options = tuple[tuple[str, str | None], ...]  # (flag, value or None for a bare flag), in command order
SHOWN = 3  # ways out named in one message
_FREE_TORCH: Options = (("--torch", None),)


@dataclass(frozen=True)
class WayOut:
    options: Options
    plan: Plan

    @property
    def text(self) -> str:
        """`--driver 570.26 --source pytorch`: the options as they go on the command line."""
        return " ".join(flag if value is None else f"{flag} {shlex.quote(value)}" for flag, value in self.options)


def apply(target: Target, options: Options) -> Target:
    """The target as the command line with these options in place of the same options would give it.
    Raises BadInputError for a value the command line would refuse."""
    for flag, value in options:
        text = value or ""
        if flag == "--driver":
            target = replace(target, driver=versions.driver(text))
        elif flag == "--driver-compat":
            target = replace(target, driver_compat="full" if text == "full" else "minor")
        elif flag == "--cuda":
            target = replace(target, cuda=versions.cuda(text))
        elif flag == "--torch":
            target = replace(target, torch=torch_specifier(text), torch_text=text)
        elif flag == "--python":
            target = replace(target, python=versions.python(text))
        elif flag == "--source":
            target = replace(target, source="pytorch" if text == "pytorch" else "conda-forge")
        elif flag == "--glibc":
            target = replace(target, glibc=versions.parse_major_minor(text, "glibc version", "2.28", "--glibc"))
        elif flag == "--platform":
            target = replace(target, platform="linux-aarch64" if text == "linux-aarch64" else "linux-64")
        elif flag == "--no-deepspeed":
            target = replace(target, deepspeed=False)
        else:
            raise ValueError(f"no such target option {flag!r}")
    return target


def _drivers(kb: KnowledgeBase, target: Target) -> list[str]:
    """The driver floors the KB knows above the target's driver, oldest first (a newer driver never loses
    a stack an older one has, so the first that plans is the one to name)."""
    if target.driver is None:
        return []
    return [str(d) for d in kb.known_drivers() if d > target.driver]


def _moves(kb: KnowledgeBase, target: Target) -> list[Options]:
    """Single option changes besides the driver, nearest first. A value of None frees the option: the
    planner chooses, and the message names what it chose."""
    moves: list[Options] = []
    if target.driver_compat == "full":
        moves.append((("--driver-compat", "minor"),))
    for flag, given in (("--cuda", target.cuda), ("--torch", target.torch), ("--python", target.python)):
        if given is not None:
            moves.append(((flag, None),))
    moves.append((("--source", "pytorch" if target.source == "conda-forge" else "conda-forge"),))
    newer_glibc = sorted({b.glibc for b in kb.torch_builds if b.glibc is not None and b.glibc > target.glibc})
    moves += [(("--glibc", str(glibc)),) for glibc in newer_glibc]
    # The GPUs' own platform, where the user named another; never a platform some target GPU is not built for
    # (GPUs that need different platforms need one environment each, as the conflict says); none for a GPU whose
    # row records no platform (known only by PCI ID or CC: it has no platform of its own to offer).
    usual = {g.platform for g in target.gpus}
    if len(usual) == 1 and None not in usual and target.platform is not None and target.platform not in usual:
        moves.append((("--platform", usual.pop()),))
    if target.deepspeed:
        moves.append((("--no-deepspeed", None),))
    return moves


# Freeing an option: how the target drops it, and how the chosen plan names its value.
_FREED: dict[str, tuple[Callable[[Target], Target], Callable[[Plan], str]]] = {
    "--cuda": (lambda t: replace(t, cuda=None), lambda p: str(p.cuda_version)),
    "--torch": (lambda t: replace(t, torch=None, torch_text=None), lambda p: p.torch_version),
    "--python": (lambda t: replace(t, python=None), lambda p: str(p.python_version)),
}


def _plans(planner: Planner, target: Target) -> Plan | None:
    try:
        return planner(target)
    except EnvsolverError:
        return None


def combine(
    planner: Planner, target: Target, moves: tuple[Options, ...], drivers: list[str] | None = None
) -> WayOut | None:
    """These moves together (an option whose value is None is freed: the planner chooses, and the way out names
    what it chose), with the oldest of `drivers` (ascending) that then plans where drivers are given: the way out,
    checked as the user will run it, or None."""
    fixed = tuple(o for m in moves for o in m if not (o[1] is None and o[0] in _FREED))
    freed = [o[0] for m in moves for o in m if o[1] is None and o[0] in _FREED]
    try:
        base = apply(target, fixed)
    except EnvsolverError:
        return None
    for flag in freed:
        base = _FREED[flag][0](base)
    driver = None
    if drivers is not None:
        found = _oldest_driver(planner, base, drivers)
        if found is None:
            return None
        driver, chosen = found
    else:
        plan = _plans(planner, base)
        if plan is None:
            return None
        chosen = plan
    options = fixed + ((("--driver", driver),) if driver else ())
    options += tuple((flag, _FREED[flag][1](chosen)) for flag in freed)
    try:
        typed = apply(target, options)
    except EnvsolverError:
        return None
    checked = _plans(planner, typed)
    return WayOut(options, checked) if checked is not None else None


def _oldest_driver(planner: Planner, target: Target, drivers: list[str]) -> tuple[str, Plan] | None:
    """The oldest of these drivers (ascending) with which the target plans, and that plan. A newer driver
    keeps every stack an older one has, so the newest is tried first (none plans without it) and the
    oldest found by bisection."""
    plans: dict[int, Plan | None] = {}

    def at(i: int) -> Plan | None:
        if i not in plans:
            plans[i] = _plans(planner, replace(target, driver=versions.driver(drivers[i])))
        return plans[i]

    if not drivers or at(len(drivers) - 1) is None:
        return None
    low, high = 0, len(drivers) - 1  # at(high) plans
    while low < high:
        middle = (low + high) // 2
        if at(middle) is not None:
            high = middle
        else:
            low = middle + 1
    plan = at(high)
    return (drivers[high], plan) if plan is not None else None


def _asked(kb: KnowledgeBase, target: Target) -> list[Version]:
    """The releases --torch names: those of the channel it matches, else the versions its clauses write."""
    if target.torch is None:
        return []
    offered = {v for b in kb.torch_builds if b.channel == target.source for v in b.versions}
    matched = [v for v in offered if target.torch.contains(v, prereleases=True)]
    if matched:
        return matched
    named = []
    for clause in target.torch:
        try:
            named.append(Version(clause.version.removesuffix(".*")))
        except InvalidVersion:
            continue
    return named


def _distance(version: Version, asked: list[Version]) -> tuple[int, int, int]:
    """How far a release is from the nearest asked one: the major difference, then the minor, then (within the
    same major.minor only) the patch difference."""

    def between(v: Version, other: Version) -> tuple[int, int, int]:
        (major, minor, micro), (major2, minor2, micro2) = ([*x.release, 0, 0][:3] for x in (v, other))
        same = (major, minor) == (major2, minor2)
        return abs(major - major2), abs(minor - minor2), abs(micro - micro2) if same else 0

    return min(between(version, other) for other in asked)


def nearest_torch(kb: KnowledgeBase, target: Target, planner: Planner) -> WayOut | None:
    """`--torch X.Y.Z`: the release nearest to the one --torch asks for (the newer of two as near) with which the
    target plans; None without --torch, or when no other release plans. Freeing --torch names the newest
    instead, which can be far from what the user asked for (2.13.0 for --torch 2.5 where 2.7.1 plans)."""
    asked = _asked(kb, target)
    if target.torch is None or not asked:
        return None
    offered = {v for b in kb.torch_builds if b.channel == target.source for v in b.versions}
    others = [v for v in offered if not target.torch.contains(v, prereleases=True)]
    for version in sorted(others, key=lambda v: (_distance(v, asked), [-p for p in v.release])):
        way = combine(planner, target, ((("--torch", str(version)),),))
        if way is not None:
            return way
    return None


def find(kb: KnowledgeBase, target: Target, planner: Planner) -> list[WayOut]:
    """Up to SHOWN ways out, nearest first, none named twice, from the first tier that has any: one option
    changed (a newer driver first; for --torch the nearest release that plans, then the newest); two (an option
    and a newer driver first); three (two options and a newer driver first, then three options, such as another
    source with the torch and Python it offers)."""
    moves = _moves(kb, target)
    pairs = list(itertools.combinations(moves, 2))
    tiers: list[list[tuple[tuple[Options, ...], bool]]] = [
        [((), True)] + [((m,), False) for m in moves],
        [((m,), True) for m in moves] + [(pair, False) for pair in pairs],
        [(pair, True) for pair in pairs] + [(three, False) for three in itertools.combinations(moves, 3)],
    ]
    found: dict[str, WayOut] = {}
    for tier in tiers:
        for combination, newer_driver in tier:
            if newer_driver and target.driver is None:
                continue
            ways = [combine(planner, target, combination, _drivers(kb, target) if newer_driver else None)]
            if combination == (_FREE_TORCH,) and not newer_driver:
                ways.insert(0, nearest_torch(kb, target, planner))
            for way in ways:
                if way is not None:
                    found.setdefault(way.text, way)
                if len(found) == SHOWN:
                    return list(found.values())
        if found:
            return list(found.values())
    return list(found.values())


def label(plan: Plan) -> str:
    """'torch 2.3.0 cu121 (pytorch channel)', as resolve names candidates."""
    channel = " (pytorch channel)" if plan.source == "pytorch" else ""
    return f"torch {plan.torch_version} cu{plan.torch_cuda.nodot}{channel}"


def describe(plan: Plan) -> str:
    return f"{label(plan)} with CUDA {plan.cuda_version}"


def sentence(ways: list[WayOut], where: str) -> str:
    """The fix as one sentence: `Fix: upgrade the driver to X or newer (...)` first where a newer driver is
    a way out, then the others; or that no change of up to three options plans the target."""
    if not ways:
        return f"No change of up to three options plans this target within {where}."
    parts = [f"`{w.text}` gives {describe(w.plan)}" for w in ways]
    first = ways[0]
    if len(first.options) == 1 and first.options[0][0] == "--driver":
        head = f"Fix: upgrade the driver to {first.options[0][1]} or newer ({parts[0]})"
        return head + "".join(f"; or {p}" for p in parts[1:]) + "."
    return "Ways out: " + "; ".join(parts) + "."


def one_each(target: Target, groups: tuple[tuple[str, ...], ...], planner: Planner) -> str:
    """The fix for GPUs that need different platforms: one environment per platform, each group's `--gpu`
    options tried through the planner before they are named."""
    parts = []
    for keys in groups:
        group = replace(target, gpus=tuple(g for g in target.gpus if g.key in keys))
        plan = _plans(planner, group)
        text = " ".join(f"--gpu {shlex.quote(k)}" for k in keys)
        parts.append(f"`{text}` ({describe(plan)} on {plan.platform})" if plan else f"`{text}` (no plan either)")
    return "Fix: make one environment for each platform, " + " and ".join(parts) + "."
