"""Two package sets -> what changed between them: the package-level diff of `envsolver diff` and `make --dry-run`.
Pure: the sets come from a lock (`of_lock`), a solve (`of_result`) or an installed prefix (install/inventory).

A package is its name, version, build (conda; none for a PyPI distribution) and manager (conda or pip). Two
packages are the same entry when they share manager and name; an entry in both sets whose version or build
differs is `changed`. A package that left one manager and arrived under the other for the same Python project is
`moved` (conda's pytorch gone, PyPI's torch there: the case where a `pip install` replaced conda's CUDA build). A
PyPI distribution that arrived while a conda package of NEW still provides its project is `added` with `over`
naming that conda package (pip's torch beside conda's pytorch, in site-packages over it).

A project is a PyPI name (PEP 503 normalized); a conda package's project is the KB's pypi_conda_names row that
names it (pytorch -> torch, msgpack-python -> msgpack), else its own name normalized (most conda-forge Python
packages carry their PyPI name).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from envsolver.core.printable import printable
from envsolver.net.pypi_index import normalize

if TYPE_CHECKING:
    from envsolver.kb.model import KnowledgeBase

Manager = Literal["conda", "pip"]
ChangeKind = Literal["added", "removed", "changed", "moved"]
KINDS: tuple[ChangeKind, ...] = ("changed", "added", "removed", "moved")


@dataclass(frozen=True, order=True)
class Package:
    name: str
    version: str
    build: str  # "" for a PyPI distribution
    manager: Manager

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "build": self.build or None, "manager": self.manager}


@dataclass(frozen=True)
class Change:
    """One difference: `old` is None for an added package, `new` None for a removed one; `over` is the conda
    package of NEW that provides an added PyPI distribution's project."""

    kind: ChangeKind
    old: Package | None
    new: Package | None
    over: Package | None = None

    @property
    def name(self) -> str:
        shown = self.new or self.old
        assert shown is not None
        return shown.name

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "old": self.old.to_json() if self.old else None,
            "new": self.new.to_json() if self.new else None,
            "over": self.over.to_json() if self.over else None,
        }


@dataclass(frozen=True)
class Diff:
    changes: tuple[Change, ...]
    unchanged: int

    @property
    def differ(self) -> bool:
        return bool(self.changes)

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {kind: sum(1 for c in self.changes if c.kind == kind) for kind in KINDS}
        return {**found, "unchanged": self.unchanged}

    def to_json(self) -> dict[str, Any]:
        """Stable keys: differ, counts (changed, added, removed, moved, unchanged), changes (sorted by name)."""
        return {"differ": self.differ, "counts": self.counts(), "changes": [c.to_json() for c in self.changes]}


def pypi_of_conda(kb: KnowledgeBase) -> dict[str, str]:
    """conda name -> the PyPI project it installs itself (pytorch -> torch; kb/pypi_names, the one mapping)."""
    from envsolver.kb.pypi_names import own_names

    return own_names(kb)


def project(package: Package, pypi_of_conda: Mapping[str, str]) -> str:
    """The Python project PACKAGE installs (see the module's docstring)."""
    if package.manager == "pip":
        return normalize(package.name)
    return normalize(pypi_of_conda.get(package.name, package.name))


def _by_key(packages: Iterable[Package]) -> dict[tuple[str, str], Package]:
    """(manager, name) -> package; the first of two with one key wins (a reader reports the second)."""
    out: dict[tuple[str, str], Package] = {}
    for package in packages:
        out.setdefault((package.manager, package.name), package)
    return out


def diff(old: Iterable[Package], new: Iterable[Package], pypi_of_conda: Mapping[str, str]) -> Diff:
    """What changed from OLD to NEW (see the module's docstring), each change once, sorted by name then kind.
    `pypi_of_conda`: conda name -> PyPI project for the packages whose names differ (the KB's pypi_conda_names)."""
    before, after = _by_key(old), _by_key(new)
    removed = [p for key, p in before.items() if key not in after]
    added = [p for key, p in after.items() if key not in before]
    changes = [
        Change("changed", before[key], after[key])
        for key in before.keys() & after.keys()
        if (before[key].version, before[key].build) != (after[key].version, after[key].build)
    ]
    unchanged = len(before.keys() & after.keys()) - len(changes)
    arrived = {(p.manager, project(p, pypi_of_conda)): p for p in sorted(added)}
    for gone in sorted(removed):
        other: Manager = "pip" if gone.manager == "conda" else "conda"
        came = arrived.pop((other, project(gone, pypi_of_conda)), None)
        if came is None:
            changes.append(Change("removed", gone, None))
        else:
            changes.append(Change("moved", gone, came))
            added.remove(came)
    conda_projects: dict[str, Package] = {}
    for package in sorted(after.values()):
        if package.manager == "conda":
            conda_projects.setdefault(project(package, pypi_of_conda), package)
    for came in sorted(added):
        over = conda_projects.get(project(came, pypi_of_conda)) if came.manager == "pip" else None
        changes.append(Change("added", None, came, over))
    return Diff(tuple(sorted(changes, key=lambda c: (c.name, KINDS.index(c.kind), _manager(c)))), unchanged)


class CondaLike(Protocol):
    """lockfile.LockEntry, solve.Record."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def build(self) -> str: ...


class PipLike(Protocol):
    """pypi.record.PipRecord."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...


def of_lock(conda: Iterable[CondaLike], pip: Iterable[PipLike]) -> list[Package]:
    """A lock's packages: its conda entries (a read lock's, or a solve's records) and its PyPI files."""
    return [Package(e.name, e.version, e.build, "conda") for e in conda] + [
        Package(r.name, r.version, "", "pip") for r in pip
    ]


# --- text ------------------------------------------------------------------------------------------------------


def _cell(package: Package | None, name_shown: str) -> str:
    if package is None:
        return "-"
    named = "" if package.name == name_shown else f"{package.name} "
    return f"{named}{package.version}{' ' + package.build if package.build else ''}"


def _manager(change: Change) -> str:
    if change.kind == "moved" and change.old and change.new:
        return f"{change.old.manager} -> {change.new.manager}"
    shown = change.new or change.old
    assert shown is not None
    return shown.manager


def rows(found: Diff) -> list[tuple[str, ...]]:
    """One row per change: kind, name, manager, old, new, note; every cell printable (core.printable)."""
    out = []
    for change in found.changes:
        note = ""
        if change.over is not None:
            note = f"(over conda's {change.over.name} {change.over.version})"
        cells = (change.kind, change.name, _manager(change), _cell(change.old, change.name))
        out.append(tuple(printable(c) for c in (*cells, _cell(change.new, change.name), note)))
    return out


def _aligned(table: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))] if table else []
    lines = []
    for kind, name, manager, old, new, note in table:
        cells = [kind.ljust(widths[0]), name.ljust(widths[1]), manager.ljust(widths[2]), old.ljust(widths[3])]
        lines.append(f"  {'  '.join(cells)}  -> {new.ljust(widths[4]) if note else new}{'  ' + note if note else ''}")
    return [line.rstrip() for line in lines]


def summary(found: Diff) -> str:
    """One line: how many packages differ and how, or that none does."""
    counts = found.counts()
    total = len(found.changes) + found.unchanged
    if not found.differ:
        return f"no package differs ({total} packages, each the same version and build)."
    said = [f"{counts[k]} {k}" for k in ("changed", "added", "removed") if counts[k]]
    if counts["moved"]:
        said.append(f"{counts['moved']} moved between conda and PyPI")
    return f"{len(found.changes)} of {total} packages differ: {', '.join(said)}."


def lines(found: Diff) -> list[str]:
    """The text of a diff: one aligned row per change (kind, name, manager, old -> new), then the summary."""
    return [*_aligned(rows(found)), summary(found)]
