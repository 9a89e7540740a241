"""Why a plan with a project's packages has no solution where the stack alone has one: which of the project's
specs cannot live with the stack, and with which of the stack's packages, in plain words, then the ways out,
each solved before it is named (leaving the package out; option changes that lock with the project as it is).

The culprits are found by solving: the stack with each project spec alone, then, for a spec that fails, the
stack with one of its constrained specs (python, pytorch, cuda-version, a compiler cap, ...) relaxed at a time:
the one whose relaxing solves is the stack package it clashes with. Every solve is one of the caller's (the
live channels, a mirror or the bundled snapshot), bounded in number (MAX_SOLVES).
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from envsolver.core.errors import ConflictError, EnvsolverError, Kind
from envsolver.kb.model import KnowledgeBase
from envsolver.lock import unsolved
from envsolver.lock.solve import Record
from envsolver.resolve import projectmerge, ways_out
from envsolver.resolve.plan import CondaSpec, Plan
from envsolver.resolve.project import CondaWant, Project
from envsolver.resolve.target import Target

Solver = Callable[[Plan], "str | tuple[Record, ...]"]  # the solved records, or the solver's explanation
Planner = Callable[[Target], Plan]  # a plan that locks where the solver looks (raises EnvsolverError otherwise)
MAX_SOLVES = 40
MAX_PLANS = 24  # option changes tried for ways out, each a plan that locks (a solve or a few)


class _Spent(EnvsolverError):
    """The diagnosis used up its solves (caught here: it never reaches the user)."""

    kind: Kind = "internal"


@dataclass(frozen=True)
class Clash:
    want: CondaWant
    partner: CondaSpec | None  # the stack's spec it cannot live with, where one alone was found
    why: str  # the solver's reason in plain words
    beside: Record | None = None  # the partner's record the want installs beside, once the partner is relaxed


def explain(target: Target, kb: KnowledgeBase, planner: Planner, solver: Solver, where: str) -> ConflictError | None:
    """The refusal for TARGET's project, or None where the stack without the project's conda packages does not
    lock either (then the project is not why). PLANNER: plans that lock where SOLVER looks (the live channels, a
    mirror, the bundled snapshot); WHERE names them in messages ('the live channels')."""
    budget = _Budget(solver)
    project = target.project
    bare = dataclasses.replace(target, project=dataclasses.replace(project, conda=()))
    try:
        base = planner(bare)
    except EnvsolverError:
        return None
    if isinstance(budget(_with(base, project, tuple(project.conda))), tuple):
        return None  # the specs solve together: the refusal is not about the project's packages
    wants = [w for w in project.conda if w.name not in projectmerge.PLANNED]
    clashes: list[Clash] = []
    for want in wants:
        try:
            why = budget(_with(base, project, (want,)))
        except _Spent:
            break
        if isinstance(why, str):
            partner, beside = _partner(base, project, want, budget)
            clashes.append(Clash(want, partner, unsolved.plain(why, base, where), beside))
    if not clashes:  # each alone solves: together they do not
        clashes = [Clash(w, None, "") for w in wants]
        together = True
    else:
        together = False
    ways = _ways(target, kb, base, project, clashes, budget, planner, where)
    named = "; ".join(_sentence(c, base) for c in clashes)
    head = (
        f"the project's packages {', '.join(c.want.spec for c in clashes)} do not install together with the stack "
        f"({ways_out.describe(base)} on {base.platform}) from {where}, though each does alone"
        if together
        else f"{named}; without {'it' if len(clashes) == 1 else 'them'}, the stack ({ways_out.describe(base)} on "
        f"{base.platform}) locks from {where}"
    )
    return ConflictError(f"{head}. {ways}")


def _leave_out(wants: list[CondaWant]) -> str:
    """'drop `--add X`' / 'remove `X` from env.yml': how the user leaves these specs out."""
    added = [w.spec for w in wants if w.origin == "--add"]
    filed: dict[str, list[str]] = {}
    for w in wants:
        if w.origin != "--add":
            filed.setdefault(w.origin, []).append(f"`{w.spec}`")
    parts = [f"drop `--add {shlex.quote(spec)}`" for spec in added]
    parts += [f"remove {', '.join(specs)} from {origin}" for origin, specs in filed.items()]
    return " and ".join(parts)


def _sentence(clash: Clash, base: Plan) -> str:
    origin = f"{clash.want.spec} (from {clash.want.origin})"
    if clash.partner is not None and clash.beside is not None:
        return (
            f"{origin} cannot be installed with the stack's {clash.partner}: it installs only beside "
            f"{clash.beside.name} {clash.beside.version} ({clash.beside.build})"
        )
    if clash.partner is not None:
        return f"{origin} cannot be installed with the stack's {clash.partner} ({clash.why})"
    return f"{origin} cannot be installed with the stack ({clash.why})"


def _with(base: Plan, project: Project, wants: tuple[CondaWant, ...]) -> Plan:
    """BASE with these project specs merged in, as the planner merges them."""
    specs, channels, _ = projectmerge.merge(base.specs, dataclasses.replace(project, conda=wants), base.channels)
    return dataclasses.replace(base, specs=specs, channels=channels)


def _relaxed(spec: CondaSpec) -> CondaSpec:
    return CondaSpec(spec.name)


def _partner(base: Plan, project: Project, want: CondaWant, budget: _Budget) -> tuple[CondaSpec | None, Record | None]:
    """The one stack spec whose constraint, relaxed, lets WANT solve with the stack, and the record of it that WANT
    then installs beside; (None, None) where no one alone does."""
    for spec in base.specs:
        if spec.version is None and spec.build is None:
            continue
        relaxed = dataclasses.replace(base, specs=tuple(_relaxed(s) if s is spec else s for s in base.specs))
        try:
            answer = budget(_with(relaxed, project, (want,)))
        except _Spent:
            return None, None
        if isinstance(answer, tuple):
            return spec, next((r for r in answer if r.name == spec.name), None)
    return None, None


def _ways(
    target: Target,
    kb: KnowledgeBase,
    base: Plan,
    project: Project,
    clashes: list[Clash],
    budget: _Budget,
    planner: Planner,
    where: str,
) -> str:
    """The ways out, each solved: leaving the clashing packages out (the rest of the project kept), and option
    changes that lock with the project as it is."""
    ways: list[str] = []
    left = tuple(w for w in project.conda if w not in {c.want for c in clashes} and w.name not in projectmerge.PLANNED)
    try:
        if isinstance(budget(_with(base, project, left)), tuple):
            ways.append(f"{_leave_out([c.want for c in clashes])} (the rest locks: {ways_out.describe(base)})")
    except _Spent:
        pass

    tries = [0]

    def bounded(changed: Target) -> Plan:
        tries[0] += 1
        if tries[0] > MAX_PLANS:
            raise _Spent("the ways out used up their plans")
        return planner(changed)

    found = ways_out.find(kb, target, bounded)
    if target.python is None:  # the Pythons the project's packages may have builds for, newest first
        pythons = sorted({p for b in kb.torch_builds for p in b.python if p != base.python_version}, reverse=True)
        for python in pythons:
            if len(found) >= ways_out.SHOWN:
                break
            try:
                way = ways_out.combine(bounded, target, ((("--python", str(python)),),))
            except _Spent:
                break
            if way is not None and way.text not in {w.text for w in found}:
                found.append(way)
    for way in found:
        ways.append(f"`{way.text}` locks {ways_out.describe(way.plan)} with the project as it is")
    if not ways:
        return f"No way out was found within {where}: change or remove the project's packages named above."
    return "Ways out: " + "; ".join(ways) + "."


class _Budget:
    """The caller's solver, at most MAX_SOLVES times per diagnosis, each plan's answer kept."""

    def __init__(self, solver: Solver) -> None:
        self.solver = solver
        self.left = MAX_SOLVES
        self.seen: dict[tuple[tuple[str, ...], tuple[str, ...]], str | tuple[Record, ...]] = {}

    def __call__(self, plan: Plan) -> str | tuple[Record, ...]:
        key = (tuple(str(s) for s in plan.specs), plan.channels)
        if key in self.seen:
            return self.seen[key]
        if self.left <= 0:
            raise _Spent("the diagnosis used up its solves")
        self.left -= 1
        self.seen[key] = answer = self.solver(plan)
        return answer
