"""The user's PyPI requirements resolved for real, around the conda part (pixi's model: every Python package the
conda part provides is handed to uv as already there, at its version, with no PyPI requirements of its own).

    resolve_project(["accelerate", "peft>=0.10"], held={"torch": "2.9.1", "numpy": "2.3.5", ...}, ...)

1. The requirements are held to PEP 508 and evaluated for the target (requirements.py); one that names a held
   package, a package the conda part occupies, or a CUDA wheel is refused (guards.py).
2. uv resolves them (uvrun.py) against the index (live; or the bundled snapshot on loopback, offline or when the
   index cannot be read, with one warning line), for the target's Python and platform, each held package a
   constraint `==version` with no requirements, never emitted. A held version of which the index has no wheel for
   the target (conda builds versions and Pythons PyPI lacks) would make that constraint unsatisfiable: such a
   package is excluded from uv's resolution instead (found from uv's answer and proven on the index's page), and
   the locked files' requirements on it are checked against the held version after.
3. uv's pylock.toml is read (pylock.py); for each package ONE file: the wheel the target prefers (target.py), else
   its sdist (named in `sdists`); each proven on the index's page, its URL PyPI's; its requirements from its core
   metadata (sources.py, deps.py). A resolved file that would install what conda provides, or a CUDA wheel, is
   refused, naming the requirement chain (guards.py); no solution at all is explained with ways out (clash.py).

An existing lock's PyPI part is passed as `preferences` (uv keeps those versions where it can), `upgrade` frees
names (make --update NAME).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.utils import canonicalize_name
from packaging.version import Version

from envsolver.core.errors import ConflictError, EnvsolverError, Kind
from envsolver.core.printable import one_line
from envsolver.core.redact import redact
from envsolver.core.versions import MajorMinor
from envsolver.lock.pypi import deps, guards, pylock, uvrun
from envsolver.lock.pypi import requirements as user_requirements
from envsolver.lock.pypi.condamap import CondaProvides
from envsolver.lock.pypi.record import PipRecord
from envsolver.lock.pypi.requirements import UserRequirement
from envsolver.lock.pypi.sources import Source
from envsolver.lock.pypi.target import Platform, Target
from envsolver.net import coremeta
from envsolver.net import pypi_index as index

Mode = Literal["live", "offline", "custom"]
Progress = Callable[[str], None]
MAX_ROUNDS = 12  # uv runs that each exclude a held package PyPI has no wheel of (a few at most in practice)
FETCH_WORKERS = 8


@dataclass(frozen=True)
class ProjectPart:
    """The locked PyPI part: records sorted by name (each with its requirements as dependencies), the index they
    were read from (public form), the bundled snapshot's date where it was used, warnings (one line each) and
    the files that are sdists (no wheel fits the target)."""

    records: tuple[PipRecord, ...]
    index: str
    snapshot_date: str | None
    warnings: tuple[str, ...] = ()
    sdists: tuple[str, ...] = ()


class UvFailed(EnvsolverError):
    """uv could not resolve for a reason other than a conflict (exit 2); its own text follows."""

    kind: Kind = "failed"


@dataclass(frozen=True)
class Problem:
    """What resolve_project works with, once its inputs are checked."""

    requirements: tuple[UserRequirement, ...]
    held: dict[str, str]
    target: Target
    preferences: tuple[tuple[str, str], ...]
    upgrade: tuple[str, ...]


def resolve_project(
    requirements: Sequence[str],
    held: Mapping[str, str],
    python: MajorMinor,
    platform: Platform,
    glibc: MajorMinor,
    mode: Mode,
    environ: Mapping[str, str],
    cache: Path,
    progress: Progress,
    preferences: Mapping[str, str] = {},
    upgrade: frozenset[str] = frozenset(),
    conda: CondaProvides | None = None,
) -> ProjectPart:
    """Lock the user's PyPI `requirements` for the target, with every `held` name (normalized PyPI name -> exact
    version: the conda part's, condamap.held_by_conda, and the stack's own PyPI part) at its version. `conda`
    (condamap.conda_provides) adds the names the conda part occupies at no known version, and says which conda
    package holds each. Raises BadInputError (exit 2) for a requirement that is not PEP 508 or is a direct
    reference; guards.PypiRefused (exit 1) for one that would install what conda provides or a CUDA wheel, or
    that cannot be resolved beside the conda part (with ways out, each run); EnvsolverError (exit 2) when uv or
    the index fails."""
    if not requirements:
        return ProjectPart((), "", None)
    target = Target(python, platform, glibc)
    if target.uv_platform() is None:
        raise ConflictError(
            f"the target's glibc {glibc} is older than 2.17, the oldest manylinux level PyPI's wheels (and uv) "
            "know, so no PyPI part can be locked for it. Drop the PyPI requirements, or target a newer system."
        )
    reqs, left_out = user_requirements.parse(requirements, target)
    for text in left_out:
        progress(f"left out the PyPI requirement {text!r}: its marker is false for Python {python} on {platform}")
    problem = Problem(
        reqs,
        {str(canonicalize_name(n)): str(Version(v)) for n, v in held.items()},
        target,
        tuple(sorted((str(canonicalize_name(n)), str(Version(v))) for n, v in preferences.items())),
        tuple(sorted({str(canonicalize_name(n)) for n in upgrade})),
    )
    occupied, by = (conda.occupied, conda.by) if conda else ({}, {})
    guards.check_direct(reqs, problem.held, occupied, by)
    if not reqs:
        return ProjectPart((), "", None)
    with source(reqs, mode, environ, cache, progress) as (src, warnings):
        answer, excluded = solve(problem, src, progress)
        if no_solution(answer):
            from envsolver.lock.pypi import clash

            raise clash.explain(problem, src, answer, excluded, progress)
        packages = read(answer, src)
        records, sdists = lock(problem, src, packages, excluded, occupied, by, progress)
        return ProjectPart(records, src.public, src.date, warnings, sdists)


@contextmanager
def source(
    reqs: Sequence[UserRequirement], mode: Mode, environ: Mapping[str, str], cache: Path, progress: Progress
) -> Iterator[tuple[Source, tuple[str, ...]]]:
    """The index uv reads: the live one (ENVSOLVER_PYPI_INDEX, PIP_INDEX_URL or PyPI), or the bundled snapshot on
    loopback (offline, or with one warning line when the live index cannot be read)."""
    warnings: tuple[str, ...] = ()
    if mode != "offline":
        url = index.index_url(environ)
        live = Source(url, redact(url), None, environ, cache)
        progress(f"resolving {', '.join(r.name for r in reqs)} against {live.public}")
        try:
            live.files(reqs[0].name)
        except index.IndexUnreadable as exc:
            if exc.status == 404:  # the index answers: it has no such project
                raise ConflictError(
                    f"{live.public} has no project named {reqs[0].name!r} (the PyPI requirement {reqs[0].text!r}). "
                    "Check its spelling (pypi.org/project/NAME), or point ENVSOLVER_PYPI_INDEX at the index that "
                    "holds it."
                ) from None
            from envsolver.lock.pypi import snapshot

            warning = (
                f"the Python package index could not be read ({one_line(str(exc))}); the PyPI part was resolved "
                f"from the bundled snapshot of PyPI's pages of {snapshot.date()} instead (the same files and sha256 "
                "as PyPI gave them)"
            )
            progress(warning)
            warnings = (warning,)
        else:
            yield live, ()
            return
    from envsolver.lock.pypi import loopback, snapshot

    date = snapshot.date()
    public = f"the bundled PyPI snapshot of {date}"
    lacking = [r.name for r in reqs if snapshot.page(r.name) is None]
    if lacking:
        raise ConflictError(
            f"{public} holds no page for {', '.join(lacking)}, so the PyPI part cannot be locked offline (it holds "
            "what envsolver's tests lock: accelerate and peft beside the conda snapshot's packages). Run make where "
            "PyPI (or ENVSOLVER_PYPI_INDEX) can be reached."
        )
    with loopback.serve() as url:
        yield Source(url, public, date, environ, None), warnings


def solve(
    problem: Problem, src: Source, progress: Progress, drop: str | None = None, exclude: frozenset[str] = frozenset()
) -> tuple[uvrun.Answer, tuple[str, ...]]:
    """uv's answer, and the held names excluded because the index has no wheel of their version for the target.
    clash.py's trials: `drop`, a user requirement left out; `exclude`, held names left out of the resolution."""
    excluded: set[str] = set(exclude)
    for _ in range(MAX_ROUNDS):
        answer = uvrun.compile_part(request(problem, src, excluded, drop), src.environ)
        if not no_solution(answer):
            return answer, tuple(sorted(excluded))
        suspects = [n for n in problem.held if n not in excluded and mentions(answer.messages, n)]
        missing = [n for n in suspects if not src.usable(n, problem.held[n], problem.target)]
        if not missing:
            return answer, tuple(sorted(excluded))
        for name in missing:
            progress(
                f"{src.public} has no wheel of {name} {problem.held[name]} for Python {problem.target.python} on "
                f"{problem.target.platform}: uv resolves without it, and its requirements on {name} are checked "
                "against the held version after"
            )
        excluded.update(missing)
    return answer, tuple(sorted(excluded))


def request(problem: Problem, src: Source, excluded: set[str], drop: str | None = None) -> uvrun.Request:
    from envsolver.lock.solve import cache_dir

    return uvrun.Request(
        tuple(r.line for r in problem.requirements if r.text != drop),
        tuple((n, v) for n, v in sorted(problem.held.items()) if n not in excluded),
        tuple(sorted(excluded)),
        problem.preferences,
        problem.upgrade,
        problem.target,
        src.url,
        None if src.bundled else (src.cache or cache_dir()) / "uv",
    )


def no_solution(answer: uvrun.Answer) -> bool:
    """Whether uv ran and found the requirements unsatisfiable (exit 1 and its resolver's words; an index it could
    not read is exit 2, or exit 1 with other words)."""
    return answer.code == 1 and "No solution found when resolving dependencies" in answer.messages


_SNAPSHOT_FILE = re.compile(r"http://127\.0\.0\.1:[0-9]+/files/[0-9a-f]{64}/([A-Za-z0-9._+!-]+\.whl)")


def mentions(text: str, name: str) -> bool:
    """Whether uv's message names the package (as a whole name: `numpy` in `numpy==2.3.1`, not in `numpy-x`)."""
    return re.search(rf"(?<![A-Za-z0-9._-]){re.escape(name)}(?![A-Za-z0-9_-]|\.[A-Za-z0-9])", text) is not None


def read(answer: uvrun.Answer, src: Source) -> tuple[pylock.LockedPackage, ...]:
    """uv's packages. Raises UvFailed when uv failed or wrote what pylock.parse refuses."""
    wanted = _SNAPSHOT_FILE.search(answer.messages) if src.bundled else None
    found = index.name_version(wanted.group(1)) if wanted else None
    if answer.code != 0 and found is not None:
        raise UvFailed(
            f"{src.public} does not hold the metadata of {found[0]} {found[1]}, which this resolution needs: it holds "
            "what envsolver's tests lock offline (accelerate and peft beside the conda snapshot's packages). Run make "
            "where PyPI (or ENVSOLVER_PYPI_INDEX) can be reached."
        )
    if answer.code != 0 or answer.pylock is None:
        raise UvFailed(
            f"uv could not resolve the PyPI part against {src.public} (exit {answer.code}):\n"
            f"{answer.messages.strip()[-4000:]}\nCheck that the index answers (ENVSOLVER_PYPI_INDEX, "
            "PIP_INDEX_URL), or pass --offline to resolve from the bundled snapshot."
        )
    try:
        return pylock.parse(answer.pylock)
    except pylock.BadLock as exc:
        raise UvFailed(f"{exc}; nothing was written. Run make again, and report it if it stays.") from None


def lock(
    problem: Problem,
    src: Source,
    packages: Sequence[pylock.LockedPackage],
    excluded: Sequence[str],
    occupied: Mapping[str, str],
    by: Mapping[str, str],
    progress: Progress,
) -> tuple[tuple[PipRecord, ...], tuple[str, ...]]:
    """The records of uv's packages (one file each), and the sdists among them. Raises guards.PypiRefused or
    EnvsolverError."""
    target, env = problem.target, problem.target.environment()
    wanted = [p for p in packages if p.marker is None or p.marker.evaluate({**env, "extra": ""})]
    chosen = [(p, choose(p, target)) for p in wanted]
    # what may never be installed is refused below; its own metadata is not needed for that (nor fetched: a torch
    # wheel is 500 MB where an index serves no PEP 658 file)
    allowed = [(p, f) for p, f in chosen if not guards.forbidden(p.name, problem.held, occupied)]
    with ThreadPoolExecutor(max_workers=FETCH_WORKERS, thread_name_prefix="envsolver-pypi") as pool:
        found = list(pool.map(lambda pc: _entry_and_metadata(src, *pc), allowed))
    requires = {
        p.name: list(meta.requires_dist) if meta else [] for (p, _), (_, meta) in zip(allowed, found, strict=True)
    }
    applicable = deps.applicable(requires, problem.requirements, env)
    graph = {name: [str(canonicalize_name(r.name)) for r in reqs] for name, reqs in applicable.items()}
    guards.check_resolved([p.name for p in wanted], graph, problem.requirements, problem.held, occupied, by)
    versions = {p.name: p.version for p in wanted}
    problems = deps.unmet(applicable, versions, problem.held)
    roots = {r.name: r for r in problem.requirements}
    have = {**problem.held, **versions}  # a requirement on a held package is met by the conda part's release
    problems += [
        deps.Unmet("your requirements", "", r.text, r.name, have.get(r.name))
        for r in roots.values()
        if have.get(r.name) is None or not r.requirement.specifier.contains(have[r.name], prereleases=True)
    ]
    if problems:
        from envsolver.lock.pypi import clash

        raise clash.unmet(problems, problem, excluded, graph)
    records, sdists = [], []
    for (package, _), (entry, meta) in zip(allowed, found, strict=True):
        if meta is None:
            progress(f"{entry.filename}: its requirements are not known without building it; the lock records none")
        if not entry.wheel:
            sdists.append(entry.filename)
        progress(f"locked {entry.filename} (sha256 {entry.sha256[:12]}…)")
        records.append(
            PipRecord(
                package.name, package.version, entry.filename, entry.url, entry.sha256,
                deps.dependencies(applicable.get(package.name, [])),
            )
        )  # fmt: skip
    return tuple(sorted(records, key=lambda r: r.name)), tuple(sorted(sdists))


def choose(package: pylock.LockedPackage, target: Target) -> pylock.LockedFile:
    """The package's file for the target: the wheel whose best tag the target prefers most (ties by file name),
    else its sdist. Raises UvFailed when uv listed neither (it resolved for this target, so it should not)."""
    ranked = sorted((rank, w.filename, w) for w in package.wheels if (rank := target.rank(w.filename)) is not None)
    if ranked:
        return ranked[0][2]
    if package.sdist is not None:
        return package.sdist
    raise UvFailed(
        f"uv locked {package.name} {package.version} with no file that Python {target.python} on {target.platform} "
        f"(glibc {target.glibc}) takes; nothing was written. Report it, naming the requirement."
    )


def _entry_and_metadata(
    src: Source, package: pylock.LockedPackage, chosen: pylock.LockedFile
) -> tuple[index.PypiFile, coremeta.CoreMetadata | None]:
    entry = src.real(package, chosen)
    try:
        return entry, src.metadata(entry)
    except coremeta.BadMetadata as exc:
        raise EnvsolverError(
            f"the core metadata of {entry.filename} from {src.public} cannot be used: {exc}. Nothing was written; "
            "report it, naming the file."
        ) from None
