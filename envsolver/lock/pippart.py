"""A lock's PyPI part, after its conda part: the stack's own (DeepSpeed's sdist, lock/pypi/pins.py) and the
project's requirements, resolved by uv with every Python distribution the conda part and the stack's PyPI part
provide held at its version (lock/pypi/project.py), so the PyPI part never carries a second torch, numpy or CUDA
library. A project requirement that needs another version of a conda package (`accelerate` needing torch >= 2.6
beside a lock holding 2.5) gets ways out that change the conda part, each locked whole (conda and PyPI) before it
is named: `--torch '>=2.6'` for torch, `--add 'numpy >=2.1'` for another conda package.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal

from envsolver.core.errors import ConflictError, EnvsolverError
from envsolver.core.versions import parse_major_minor
from envsolver.kb.model import KnowledgeBase
from envsolver.resolve import ways_out
from envsolver.resolve.project import conda_want
from envsolver.resolve.target import Target

if TYPE_CHECKING:
    from pathlib import Path

    from envsolver.lock.keep import Keep
    from envsolver.lock.run import LockResult

Mode = Literal["live", "offline", "custom"]
Progress = Callable[[str], None]
Relock = Callable[[Target], "LockResult"]  # the whole lock (conda and PyPI) of a changed target, quietly
MAX_WAYS = 3  # conda-side ways out tried (each a whole lock: a conda solve and a uv resolve)


def lock_pip(
    result: LockResult,
    target: Target,
    kb: KnowledgeBase,
    mode: Mode,
    environ: Mapping[str, str],
    cache: Path,
    progress: Progress,
    keep: Keep | None = None,
    relock: Relock | None = None,
) -> LockResult:
    """RESULT with its PyPI part locked: the stack's (pins) and the project's (uv). RELOCK, where given, tries the
    conda-side ways out of a project requirement the conda part does not meet. Raises ConflictError (exit 1) and
    the PyPI resolver's errors."""
    plan = result.plan
    if not plan.pip and not plan.project.pip:
        return result
    from envsolver.lock.pypi import pins

    records = result.records[plan.platform]
    stack = pins.pin(plan, records, kb, mode, environ, progress) if plan.pip else None
    found = stack.records if stack else ()
    index = stack.index if stack else None
    warnings = stack.warnings if stack else ()
    sdists: tuple[str, ...] = ()
    if plan.project.pip:
        from envsolver.lock.pypi import condamap
        from envsolver.lock.pypi import project as pypi_project
        from envsolver.lock.pypi.guards import PypiRefused

        conda = condamap.conda_provides(records, kb)
        held = {**conda.held, **{r.name: r.version for r in found}}
        glibc = parse_major_minor(plan.virtual_packages["__glibc"], "glibc version", "2.28", "--glibc")
        try:
            part = pypi_project.resolve_project(
                [w.text for w in plan.project.pip], held, plan.python_version, plan.platform, glibc, mode, environ,
                cache, progress, preferences=keep.preferences() if keep else {},
                upgrade=keep.pip_upgrade if keep else frozenset(), conda=conda,
            )  # fmt: skip
        except PypiRefused as exc:
            if relock is None or not exc.conda_needs:
                raise
            raise _with_conda_ways(exc, exc.conda_needs, target, relock) from None
        found = tuple(sorted((*found, *part.records), key=lambda r: r.name))
        index = index or part.index
        warnings = tuple(dict.fromkeys((*warnings, *part.warnings)))
        sdists = part.sdists
    return dataclasses.replace(
        result,
        pip={plan.platform: found},
        pip_index=index,
        pip_sdists=sdists,
        warnings=result.warnings + tuple(w for w in warnings if w not in result.warnings),
    )


def _with_conda_ways(exc: ConflictError, needs: tuple[str, ...], target: Target, relock: Relock) -> ConflictError:
    """EXC (the PyPI part's refusal) with the conda-side ways out it names locked whole before they are offered."""
    from packaging.requirements import InvalidRequirement, Requirement

    from envsolver.lock.pypi.guards import conda_names

    ways: list[str] = []
    for need in needs[:MAX_WAYS]:
        try:
            requirement = Requirement(need)
        except InvalidRequirement:
            continue
        specifier = str(requirement.specifier)
        names = conda_names(str(requirement.name).lower())
        if not names or (names[0] == "pytorch" and not specifier):
            continue
        if names[0] == "pytorch":
            option = ("--torch", specifier)
            try:
                changed = ways_out.apply(target, (option,))
            except EnvsolverError:
                continue
            text = f"`--torch {shlex.quote(specifier)}`"
        else:
            try:
                want = conda_want(f"{names[0]} {specifier}".strip(), "--add")
            except EnvsolverError:
                continue
            pip = tuple(w for w in target.project.pip if w.text != str(requirement))  # from conda instead
            project = dataclasses.replace(
                target.project,
                conda=(*target.project.conda, want),
                added=(*target.project.added, want.spec),
                pip=pip,
            )
            changed = dataclasses.replace(target, project=project)
            instead = f" (in place of the PyPI requirement {str(requirement)!r})" if pip != target.project.pip else ""
            text = f"`--add {shlex.quote(want.spec)}`{instead}"
        try:
            locked = relock(changed)
        except EnvsolverError:
            continue
        ways.append(f"{text} locks {ways_out.describe(locked.plan)} and the PyPI part")
    if not ways:
        return exc
    return ConflictError(f"{exc} Ways out that change the conda part, each locked: {'; '.join(ways)}.")
