"""Lock a plan's PyPI part: for each `name==version` the plan takes from PyPI, the one file of that release (its
URL and sha256, from the index, live or the bundled snapshot), and the release's run requirements, each of which
the solved conda part must already satisfy, so that pip installs the release alone (`--no-deps`) and never
replaces a conda package such as torch.

Which index: --offline reads the bundled snapshot of PyPI's simple pages (scripts/build_pypi_snapshot.py);
otherwise ENVSOLVER_PYPI_INDEX, pip's PIP_INDEX_URL or PyPI, and the bundled snapshot when that cannot be read,
with one warning line, as for conda channels. An index that gives a file another sha256 than the snapshot
holds for the same file name is refused: PyPI's files never change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from envsolver.core.errors import ConflictError, EnvsolverError
from envsolver.core.printable import one_line
from envsolver.core.redact import redact
from envsolver.core.versions import MajorMinor
from envsolver.kb.model import KnowledgeBase
from envsolver.lock.pypi.record import PipRecord
from envsolver.lock.pypi.target import environment
from envsolver.lock.solve import Record
from envsolver.net import pypi_index as index
from envsolver.resolve import deepspeed as ds_rules
from envsolver.resolve.plan import Plan

Mode = Literal["live", "offline", "custom"]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class PipPart:
    records: tuple[PipRecord, ...]
    index: str  # where the files were read, public form (the live index, or the bundled snapshot's page)
    snapshot_date: str | None  # set when read from the bundled snapshot
    warnings: tuple[str, ...] = ()


def snapshot_dir() -> Path:
    """The bundled snapshot of PyPI's simple pages (scripts/build_pypi_snapshot.py writes it)."""
    from importlib import resources

    return Path(str(resources.files("envsolver.lock.pypi").joinpath("data")))


def bundled(project: str) -> tuple[str, list[index.PypiFile]]:
    """(date, files) of the bundled snapshot of PROJECT's page. Raises ConflictError (exit 1) when the snapshot
    holds no page for it."""
    path = snapshot_dir() / f"{index.normalize(project)}.json"
    if not path.is_file():
        raise ConflictError(
            f"the bundled PyPI snapshot holds no page for {project!r}, so its files cannot be locked offline. "
            "Run make where PyPI (or ENVSOLVER_PYPI_INDEX) can be reached."
        )
    return index.read_snapshot(path, project)


def size_of(sha256: str) -> int | None:
    """The size in bytes the bundled snapshot of PyPI's pages gives the file with this sha256; None when it
    holds no such file (a download of it is then bounded by the ceiling, envsolver.net.bodylimit)."""
    for path in sorted(snapshot_dir().glob("*.json")):
        try:
            _, files = index.read_snapshot(path, path.stem)
        except (OSError, ValueError):
            continue
        found = next((f.size for f in files if f.sha256 == sha256), None)
        if found is not None:
            return found
    return None


def pin(
    plan: Plan,
    conda: Sequence[Record],
    kb: KnowledgeBase,
    mode: Mode,
    environ: Mapping[str, str],
    progress: Progress = lambda _: None,
) -> PipPart:
    """The locked files of the plan's PyPI requirements (each `name==version`), with CONDA (the plan's solved
    conda part) holding every run requirement the KB gives each release (resolve.deepspeed). Raises
    ConflictError (exit 1) when a release has no lockable file, needs another Python, or needs what the conda
    part does not hold."""
    requirements, python, platform = plan.pip, plan.python_version, plan.platform
    if not requirements:
        return PipPart((), "", None)
    wanted = [_exact(text) for text in requirements]
    pages, where, date, warnings = _pages([name for name, _ in wanted], mode, environ, progress)
    records = []
    for name, version in wanted:
        found = index.release_file(pages[name], str(version))
        if found is None:
            raise ConflictError(
                f"{where} has no file of {name} {version} with a sha256 (and not yanked), so it cannot be locked. "
                "Point ENVSOLVER_PYPI_INDEX (or PIP_INDEX_URL) at an index that holds it, or pass --no-deepspeed."
            )
        _check_python(found, python)
        needs = ds_rules.requirements_of(kb, version)
        if needs is None:
            raise ConflictError(
                f"the knowledge base does not know the run requirements of {name} {version}, so the conda part "
                "cannot be checked to hold them (an envsolver bug: a plan takes only releases it knows). Pass "
                "--no-deepspeed to lock the rest, and report it."
            )
        deps = _satisfied(name, version, needs, environment(python, platform), conda, kb)
        records.append(PipRecord(name, found.version, found.filename, found.url, found.sha256, deps))
        progress(f"locked {found.filename} (sha256 {found.sha256[:12]}…) from {where}")
    return PipPart(tuple(records), where, date, tuple(warnings))


def _exact(text: str) -> tuple[str, Version]:
    """('deepspeed', Version('0.19.8')) of 'deepspeed==0.19.8'; anything else is an envsolver bug."""
    requirement = Requirement(text)
    pins = list(requirement.specifier)
    if len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version:
        raise ValueError(f"a plan's PyPI requirement must pin one release: {text!r}")
    return index.normalize(requirement.name), Version(pins[0].version)


def _pages(
    names: list[str], mode: Mode, environ: Mapping[str, str], progress: Progress
) -> tuple[dict[str, list[index.PypiFile]], str, str | None, list[str]]:
    """Each project's files, where they were read, the snapshot date when bundled, and the warnings."""
    if mode == "offline":
        return (*_bundled_pages(names), [])
    url = index.index_url(environ)
    public = redact(url)
    progress(f"reading {', '.join(names)} from {public}")
    try:
        live = {name: index.fetch(name, url, environ) for name in names}
    except index.IndexUnreadable as exc:
        why = one_line(str(exc))
        pages, where, date = _bundled_pages(names)
        warning = (
            f"the Python package index could not be read ({why}); the PyPI part was locked from the bundled "
            f"snapshot of PyPI's pages of {date} instead (the same files and sha256 as PyPI gave them)"
        )
        progress(warning)
        return pages, where, date, [warning]
    for name, files in live.items():
        _same_as_pypi(name, files, public)
    return live, public, None, []


def _bundled_pages(names: list[str]) -> tuple[dict[str, list[index.PypiFile]], str, str]:
    """Each project's files from the bundled snapshot, how messages name it, and its date."""
    snap = {name: bundled(name) for name in names}
    date = max(d for d, _ in snap.values())
    return {n: files for n, (_, files) in snap.items()}, f"the bundled PyPI snapshot of {date}", date


def _same_as_pypi(name: str, files: list[index.PypiFile], where: str) -> None:
    """Refuse an index that gives a file of the bundled snapshot another sha256: PyPI never replaces a file."""
    try:
        _, known = bundled(name)
    except (ConflictError, OSError, ValueError):
        return
    kept = {f.filename: f.sha256 for f in known}
    for found in files:
        if found.filename in kept and kept[found.filename] != found.sha256:
            raise EnvsolverError(
                f"{where} gives {found.filename} the sha256 {found.sha256}, but PyPI's is {kept[found.filename]} "
                "(PyPI never replaces a file): the index serves another file under that name, so nothing was "
                "written. Use PyPI or an index that mirrors it unchanged (ENVSOLVER_PYPI_INDEX)."
            )


def _check_python(found: index.PypiFile, python: MajorMinor) -> None:
    if found.requires_python is None:
        return
    from packaging.specifiers import SpecifierSet

    if not SpecifierSet(found.requires_python).contains(f"{python}.0", prereleases=True):
        raise ConflictError(
            f"{found.filename} requires Python {found.requires_python}, and the plan has Python {python}. "
            "Pass --python with a version it accepts."
        )


def _satisfied(
    name: str,
    version: Version,
    needs: tuple[Requirement, ...],
    env: dict[str, str],
    conda: Sequence[Record],
    kb: KnowledgeBase,
) -> tuple[tuple[str, str], ...]:
    """Check that the conda part holds every run requirement (whose marker holds in the target's marker
    environment ENV); (name, specifier) of each, as the lock records."""
    by_name = {r.name: r for r in conda}
    problems = []
    out = []
    for need in needs:
        if need.marker is not None and not need.marker.evaluate(env):
            continue
        out.append((index.normalize(need.name), str(need.specifier) or "*"))
        conda_package = ds_rules.conda_name(kb, need.name)
        if conda_package is None:
            problems.append(f"{need} (the knowledge base knows no conda-forge package for it)")
            continue
        record = by_name.get(conda_package)
        if record is None:
            problems.append(f"{need} (the conda part holds no {conda_package})")
            continue
        try:
            held = Version(record.version)
        except InvalidVersion:
            problems.append(f"{need} (the conda part's {conda_package} {record.version} is not a PEP 440 version)")
            continue
        if not need.specifier.contains(held, prereleases=True):
            problems.append(f"{need} (the conda part holds {conda_package} {record.version})")
    if problems:
        raise ConflictError(
            f"{name} {version} from PyPI is installed without its dependencies (pip --no-deps), so the conda part "
            f"must hold them, and it does not: {'; '.join(problems)}. This is a gap in the knowledge base's "
            "specs for this release: pass --no-deepspeed, or report it."
        )
    return tuple(sorted(dict(out).items()))
