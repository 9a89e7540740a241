"""Each locked file's run requirements, as the lock records them (conda-lock's pip form: name -> specifier, '*' for
any), from its core metadata's Requires-Dist with markers evaluated for the target: a requirement applies when its
marker holds with `extra` unset or set to one of the extras asked of that package (by the user's requirement, or
by another locked package's requirement, `datasets[audio]`), found to a fixed point. And the checks that what the
requirements ask is what the lock holds: each applicable requirement is met by a locked file or by the held
version (the conda part's, which uv weighed as a constraint, or did not see where PyPI lacks that version).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envsolver.lock.pypi.requirements import UserRequirement


@dataclass(frozen=True)
class Unmet:
    """`package` `version` requires `requirement`, and the lock holds `name` at `holds` (None: not at all)."""

    package: str
    version: str
    requirement: str
    name: str
    holds: str | None


def applicable(
    requires: Mapping[str, Sequence[Requirement]], roots: Sequence[UserRequirement], env: Mapping[str, str]
) -> dict[str, list[Requirement]]:
    """Package -> its requirements that apply on the target, with the extras asked of it (see the docstring)."""
    extras: dict[str, set[str]] = {name: set() for name in requires}
    for root in roots:
        extras.setdefault(root.name, set()).update(str(canonicalize_name(e)) for e in root.requirement.extras)
    while True:
        out: dict[str, list[Requirement]] = {}
        for name, reqs in requires.items():
            asked = ["", *sorted(extras.get(name, set()))]
            out[name] = [
                r for r in reqs if r.marker is None or any(r.marker.evaluate({**env, "extra": e}) for e in asked)
            ]
        grown = False
        for reqs in out.values():
            for req in reqs:
                wanted = {str(canonicalize_name(e)) for e in req.extras}
                have = extras.setdefault(str(canonicalize_name(req.name)), set())
                if not wanted <= have:
                    have |= wanted
                    grown = True
        if not grown:
            return out


def dependencies(reqs: Sequence[Requirement]) -> tuple[tuple[str, str], ...]:
    """(name, specifier) of each requirement, as the lock writes them: one entry a name, the specifiers of two
    requirements on it joined, '*' for none; sorted."""
    merged: dict[str, list[str]] = {}
    for req in reqs:
        name = str(canonicalize_name(req.name))
        merged.setdefault(name, [])
        if str(req.specifier):
            merged[name].append(str(req.specifier))
    return tuple(sorted((name, ",".join(sorted(set(specs))) or "*") for name, specs in merged.items()))


def unmet(
    reqs: Mapping[str, Sequence[Requirement]],
    versions: Mapping[str, str],
    held: Mapping[str, str],
) -> list[Unmet]:
    """Every applicable requirement that neither a locked file (`versions`) nor a held version meets."""
    out = []
    for package, package_reqs in sorted(reqs.items()):
        for req in package_reqs:
            name = str(canonicalize_name(req.name))
            holds = versions.get(name, held.get(name))
            if holds is None or not req.specifier.contains(holds, prereleases=True):
                out.append(Unmet(package, versions.get(package, "?"), str(req), name, holds))
    return out
