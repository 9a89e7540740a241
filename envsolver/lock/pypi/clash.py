"""Why a PyPI part cannot be locked beside the conda part, in plain words, with ways out that were each resolved
before being offered (uv runs them; its own text goes to progress, for -v).

For each of the user's requirements (at most MAX_TRIALS runs in all): does the rest resolve without it (then it
is a culprit: "drop it" is a way out); does a release of it resolve once its specifier is lifted (then
`NAME==THAT` is one). For a culprit and each held package uv's answer names: with that package left free, which
release does the culprit take, and which of its requirements does the held version not meet: "peft 0.21.2
requires torch>=2.4; the lock holds torch 2.3.1 (from conda's pytorch)".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from packaging.utils import canonicalize_name

from envsolver.lock.pypi import deps, pylock, uvrun
from envsolver.lock.pypi.guards import PypiRefused, forbidden
from envsolver.lock.pypi.project import Problem, Progress, choose, mentions, solve
from envsolver.lock.pypi.requirements import UserRequirement
from envsolver.lock.pypi.sources import Source

MAX_TRIALS = 16


def explain(
    problem: Problem, src: Source, answer: uvrun.Answer, excluded: Sequence[str], progress: Progress
) -> PypiRefused:
    """The refusal of requirements uv found no solution for."""
    messages = answer.messages
    progress(f"uv found no solution:\n{messages.strip()}")
    unknown = [r for r in problem.requirements if f"{r.name} was not found in the package registry" in messages]
    if unknown:
        return PypiRefused(
            f"{src.public} has no project named {unknown[0].name!r} (the PyPI requirement {unknown[0].text!r}). Check "
            "its spelling (pypi.org/project/NAME), or point ENVSOLVER_PYPI_INDEX at the index that holds it.",
            unknown[0].text,
            unknown[0].name,
        )
    named = [n for n in sorted(problem.held) if mentions(messages, n)]
    trials = _Trials(problem, src)
    culprits: list[UserRequirement] = []
    ways: list[str] = []
    needs: list[str] = []
    for req in problem.requirements:
        if len(problem.requirements) > 1 and trials.resolves(without=req):
            culprits.append(req)
            ways.append(f"drop {req.text!r} from the PyPI list (the rest resolves)")
        if str(req.requirement.specifier):
            version = trials.release(req)
            if version is not None:
                ways.append(f"ask for {req.name}=={version} instead of {req.text!r} (it resolves)")
    if len(problem.requirements) == 1:
        culprits = list(problem.requirements)
    why = []
    for req in culprits:
        for name in named:
            found = trials.needs(req, name)
            why += [f"{u.package} {u.version} requires {u.requirement}" for u in found]
            needs += [u.requirement for u in found]
    held = ", ".join(f"{n} {problem.held[n]}" for n in named) or "the conda part's packages"
    shown = ", ".join(repr(r.text) for r in (culprits or problem.requirements))
    reason = f": {'; '.join(dict.fromkeys(why))}" if why else ""
    first = (culprits or problem.requirements)[0]
    fix = (
        f"Ways out, each resolved: {'; '.join(dict.fromkeys(ways))}."
        if ways
        else f"Drop {first.text!r} from the PyPI list, or loosen it."
    )
    out = (
        f"the PyPI requirement(s) {shown} cannot be resolved beside what the lock holds ({held}){reason}. {fix} "
        "(-v shows uv's own explanation.)"
    )
    refused = PypiRefused(out, first.text, named[0] if named else "", tuple(dict.fromkeys(ways)))
    refused.conda_needs = tuple(dict.fromkeys(needs))
    return refused


def unmet(
    problems: Sequence[deps.Unmet], problem: Problem, excluded: Sequence[str], graph: Mapping[str, Sequence[str]]
) -> PypiRefused:
    """The refusal of a resolution whose files require what the lock does not hold (a held package uv did not
    weigh, because the index has no wheel of its version for the target)."""
    from envsolver.lock.pypi.guards import chain

    first = problems[0]
    root, path = chain(graph, problem.requirements, first.package) if problem.requirements else (None, [])
    holds = f"the lock holds {first.name} {first.holds}" if first.holds else f"the lock holds no {first.name}"
    unseen = (
        f", a version of which the index has no wheel for Python {problem.target.python} on "
        f"{problem.target.platform}, so uv could not weigh it"
        if first.name in excluded
        else ""
    )
    listed = "; ".join(f"{u.package} {u.version} requires {u.requirement}" for u in problems[:5])
    text = root.text if root else first.package
    return PypiRefused(
        f"the PyPI part cannot be locked: {listed}, and {holds}{unseen} ({' -> '.join(path)}). Drop {text!r} "
        f"from the PyPI list, or ask the conda part for a {first.name} that {first.requirement!r} accepts "
        "(with --add).",
        text,
        first.name,
    )


class _Trials:
    """uv runs of variants of the problem, counted (at most MAX_TRIALS)."""

    def __init__(self, problem: Problem, src: Source) -> None:
        self.problem, self.src, self.left = problem, src, MAX_TRIALS

    def _run(
        self, problem: Problem, drop: str | None = None, exclude: frozenset[str] = frozenset()
    ) -> tuple[pylock.LockedPackage, ...] | None:
        if self.left <= 0:
            return None
        self.left -= 1
        answer, _ = solve(problem, self.src, lambda _: None, drop, exclude)
        if answer.code != 0 or answer.pylock is None:
            return None
        try:
            return pylock.parse(answer.pylock)
        except pylock.BadLock:
            return None

    def resolves(self, without: UserRequirement) -> bool:
        return self._run(self.problem, drop=without.text) is not None

    def release(self, req: UserRequirement) -> str | None:
        """The release of req's package uv takes once req's specifier is lifted; None when none resolves."""
        bare = dataclasses.replace(
            req, line=req.name + (f"[{','.join(sorted(req.requirement.extras))}]" if req.requirement.extras else "")
        )
        changed = dataclasses.replace(
            self.problem, requirements=tuple(bare if r is req else r for r in self.problem.requirements)
        )
        found = self._run(changed)
        return next((p.version for p in found or () if p.name == req.name), None)

    def needs(self, req: UserRequirement, name: str) -> list[deps.Unmet]:
        """With `name` left out of the resolution and `req` alone: what uv takes, and its requirements on `name` that
        the held version does not meet (read from the files' metadata: uv did not weigh them)."""
        held = self.problem.held
        alone = dataclasses.replace(self.problem, requirements=(req,))
        found = self._run(alone, exclude=frozenset({name}))
        if found is None:
            return []
        target = self.problem.target
        env = target.environment()
        requires = {}
        for package in found:
            if package.name == name or forbidden(package.name, held, {}):
                continue
            entry = self.src.real(package, choose(package, target))
            meta = self.src.metadata(entry)
            requires[package.name] = [
                r for r in (meta.requires_dist if meta else ()) if canonicalize_name(r.name) == name
            ]
        applicable = deps.applicable(requires, (req,), env)
        versions = {p.name: p.version for p in found if p.name != name}
        return deps.unmet(applicable, versions, {name: held[name]})
