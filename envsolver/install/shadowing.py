"""PyPI's copies over an environment's conda part: the rule that verify's pip_conda_mix check reports, that the hook
refuses to build ops against, and that `envsolver install` undoes (the one home of the rule; the gathering of the
facts is the probe's in the env's python, and read_prefix's here, on disk).

A distribution is foreign (PyPI's) when no conda package's record lists its *.dist-info directory (conda-meta/*.json
`files`), or when its INSTALLER names a PyPI installer: conda-build writes `conda` there, so pip's own dist-info
written over the very directory a conda record lists is still seen. A foreign distribution shadows the conda part
when a conda package provides it: installs a distribution of that name itself (its record lists one, or the
knowledge base says so: kb/pypi_names; PyPI's torch over pytorch, a second numpy), or holds what its wheel carries
(nvidia-cublas-cu12 beside libcublas).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envsolver.core import boundedread, procrun, pystart
from envsolver.core.errors import EnvsolverError
from envsolver.kb.model import KnowledgeBase
from envsolver.kb.pypi_names import provided_by
from envsolver.lock.lockfile import LockEntry
from envsolver.net.pypi_index import normalize

# What a PyPI installer writes in a distribution's INSTALLER file (pip, uv); verify/probe.py keeps the same list.
PYPI_INSTALLERS = frozenset({"pip", "uv"})
Where = Literal["prefix", "user", "pythonpath", "other"]
UNINSTALL_TIMEOUT_S = 600.0
MAX_METADATA_BYTES = 1 << 18


@dataclass(frozen=True)
class Dist:
    """A foreign distribution: its name (PEP 503), version, INSTALLER, *.dist-info directory and where that lies (in
    the prefix, the user site-packages, a PYTHONPATH directory, elsewhere on sys.path before the prefix's own)."""

    name: str
    version: str | None
    installer: str | None
    path: str
    where: Where = "prefix"
    requested: bool = False  # pip's REQUESTED: asked for by name, not as another's requirement
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Package:
    """A conda package of the environment's conda part (the lock's, or conda-meta's), with the PEP 503 names of the
    distributions its record lists (none known for a lock's entry that is not installed)."""

    name: str
    version: str
    build: str
    dists: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Shadow:
    """DIST, from PyPI, over (own: the conda package's own distribution) or beside (the library its wheel carries)
    the conda PACKAGE."""

    dist: Dist
    package: Package
    own: bool


def dist_name(info: str) -> str:
    """The PEP 503 name of a *.dist-info directory (torch-2.12.0.dist-info -> torch)."""
    return normalize(Path(info).name.removesuffix(".dist-info").split("-")[0])


def foreign(listed: bool, installer: str | None) -> bool:
    """Whether a distribution is PyPI's: no conda record lists its directory, or its INSTALLER is a PyPI installer's."""
    return not listed or (installer or "").strip().lower() in PYPI_INSTALLERS


def find(kb: KnowledgeBase, packages: Iterable[Package], dists: Iterable[Dist]) -> list[Shadow]:
    """Each foreign distribution of DISTS that a conda package of PACKAGES provides, in DISTS' order. A record's own
    listing comes before the knowledge base's mapping."""
    known: dict[str, tuple[Package, bool]] = {}
    every = list(packages)
    for package in every:
        for name in package.dists:
            known.setdefault(name, (package, True))
    for package in every:
        for provided in provided_by(kb, package.name):
            known.setdefault(provided.pypi, (package, provided.own))
    return [Shadow(d, *known[d.name]) for d in dists if d.name in known]


def provides(kb: KnowledgeBase, packages: Iterable[Package]) -> list[str]:
    """The PEP 503 names of the distributions PACKAGES install themselves, sorted (what a pass says it looked at)."""
    names: set[str] = set()
    for package in packages:
        names |= package.dists | {p.pypi for p in provided_by(kb, package.name) if p.own}
    return sorted(names)


# On disk, for install: the prefix's own site-packages and its conda-meta records.


def listed_infos(record: Mapping[str, Any]) -> set[str]:
    """The *.dist-info directories (relative to the prefix) a conda-meta record's files list directly in a
    site-packages directory (not those a package vendors: setuptools/_vendor/packaging-24.2.dist-info)."""
    files = record.get("files")
    listed = files if isinstance(files, list) else ()
    heads = {f.split(".dist-info/", 1)[0] for f in listed if isinstance(f, str) and ".dist-info/" in f}
    return {h + ".dist-info" for h in heads if h.rpartition("/")[0].rpartition("/")[2] == "site-packages"}


def site_packages(prefix: Path, records: Mapping[str, Mapping[str, Any]]) -> Path | None:
    """PREFIX/lib/pythonX.Y/site-packages for the installed python's X.Y (conda-meta's python record); None without
    one (no python: nothing there is imported)."""
    python = records.get("python")
    version = str(python.get("version", "")) if python else ""
    parts = version.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    threads = "t" if python and str(python.get("build", "")).endswith("t") else ""  # a free-threading build, _cp314t
    site = prefix / "lib" / f"python{parts[0]}.{parts[1]}{threads}" / "site-packages"
    return site if site.is_dir() else None


def read_prefix(prefix: Path, records: Mapping[str, Mapping[str, Any]]) -> list[Dist]:
    """The foreign distributions in the prefix's own site-packages (RECORDS: name -> conda-meta record)."""
    site = site_packages(prefix, records)
    if site is None:
        return []
    listed = {info for record in records.values() for info in listed_infos(record)}
    out = []
    for info in sorted(site.glob("*.dist-info")):
        if not info.is_dir() or info.is_symlink():
            continue
        installer = _text(info / "INSTALLER", 100)
        if foreign(str(info.relative_to(prefix)) in listed, installer):
            head = dict(line.split(":", 1) for line in _head(info / "METADATA") if ":" in line)
            name = normalize(head["Name"].strip()) if head.get("Name", "").strip() else dist_name(info.name)
            out.append(Dist(name, head.get("Version", "").strip() or None, installer, str(info)))
    return out


def packages_of(records: Mapping[str, Mapping[str, Any]], names: Iterable[str] | None = None) -> list[Package]:
    """The conda packages of RECORDS (those NAMES names, when given) with the distributions each record lists."""
    wanted = set(records) if names is None else set(names) & set(records)
    out = []
    for name in sorted(wanted):
        record = records[name]
        listed = frozenset(map(dist_name, listed_infos(record)))
        out.append(Package(name, str(record["version"]), str(record["build"]), listed))
    return out


def broken(prefix: Path, records: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The conda packages whose listed *.dist-info has no METADATA on disk (pip uninstalled or replaced it): linked
    again by install."""
    return {
        name
        for name, record in records.items()
        if any(not (prefix / info / "METADATA").is_file() for info in listed_infos(record))
    }


def remove(
    prefix: Path,
    shadows: Sequence[Shadow],
    records: Mapping[str, Mapping[str, Any]],
    environ: Mapping[str, str],
    progress: Callable[[str], None],
) -> tuple[str, ...]:
    """Uninstall each shadowing distribution with the environment's own pip (`python -I -m pip --isolated uninstall
    -y`). A conda package whose own distribution is shadowed is linked again afterwards, so its listed *.dist-info is
    removed first: pip then sees the PyPI copy alone. Returns 'torch 2.13.0+cpu' for each removed. Raises
    EnvsolverError (exit 2) when pip cannot run or leaves one in place."""
    from envsolver.install import pypi as pypi_install

    site = site_packages(prefix, records)
    for shadow in shadows:
        for info in listed_infos(records.get(shadow.package.name, {})) if shadow.own else ():
            path = prefix / info
            # (not when pip wrote its own dist-info over the directory the record lists: that one is pip's to remove)
            mine = str(path) != shadow.dist.path and path.parent == site
            if mine and path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
    names = sorted({s.dist.name for s in shadows})
    said = ", ".join(f"{s.dist.name} {s.dist.version}" for s in shadows)
    python = pypi_install.python_of(prefix)
    argv = pystart.command(python, "-m", "pip", "--isolated", "--disable-pip-version-check", "--no-input")
    argv += ["uninstall", "-y"]
    progress(f"pip: removing {said} from {prefix} (PyPI's, over the lock's conda packages)")
    code, output = procrun.run([*argv, *names], pypi_install.pip_env(environ), UNINSTALL_TIMEOUT_S)
    left = [s for s in shadows if Path(s.dist.path).exists()]
    if code != 0 or left:
        tools = {s.dist.installer for s in left or shadows}
        how = (
            f"uv pip uninstall --python {python} {' '.join(names)}"
            if "uv" in tools
            else f"{python} -m pip uninstall -y {' '.join(names)}"
        )
        raise EnvsolverError(
            f"could not remove {said} from {str(prefix)!r}: PyPI's copies over the lock's conda packages (pip exit "
            f"{code}). pip said:\n{pypi_install.shown(output)}\nRemove them with the tool that installed them ({how}), "
            "then run the same command again."
        )
    return tuple(f"{s.dist.name} {s.dist.version}" for s in shadows)


def _text(path: Path, limit: int) -> str | None:
    """The head of a small metadata file, read as a regular file only (core.boundedread: a FIFO or device in a
    prefix is refused at once); None when absent or unreadable."""
    try:
        return boundedread.read_head(path, limit, follow=False).decode("utf-8", "replace").strip() or None
    except (OSError, boundedread.Refused):
        return None


def _head(path: Path) -> list[str]:
    """METADATA's header lines (up to its first blank line)."""
    lines = []
    for line in (_text(path, MAX_METADATA_BYTES) or "").splitlines():
        if not line.strip():
            break
        lines.append(line)
    return lines


@dataclass(frozen=True)
class Survey:
    """What install undoes in a prefix: the foreign distributions in its site-packages that the lock's conda packages
    provide, and the conda packages linked again (their own distribution shadowed, or its listed dist-info gone)."""

    shadows: tuple[Shadow, ...] = ()
    relink: frozenset[str] = frozenset()


def survey(
    prefix: Path,
    entries: Sequence[LockEntry],
    records: Mapping[str, Mapping[str, Any]],
    kb: KnowledgeBase | None = None,
) -> Survey:
    """The prefix against the lock's conda part ENTRIES (RECORDS: its conda-meta records by name; KB: the default
    knowledge base when None, loaded only when the prefix holds a foreign distribution)."""
    wanted = {e.name for e in entries}
    relink = broken(prefix, records) & wanted
    dists = read_prefix(prefix, records) if records else []
    if not dists:
        return Survey((), frozenset(relink))
    if kb is None:
        from envsolver.kb import default_kb

        kb = default_kb()
    absent = [Package(e.name, e.version, e.build) for e in entries if e.name not in records]
    found = tuple(find(kb, packages_of(records, wanted) + absent, dists))
    relink |= {s.package.name for s in found if s.own and s.package.name in records}
    return Survey(found, frozenset(relink))
