"""What an installed prefix holds, as packages `envsolver diff` compares with a lock: the conda packages its
conda-meta/*.json records name, and the PyPI distributions in its site-packages.

A PyPI distribution is a `*.dist-info` directory of PREFIX/lib/python3.X/site-packages that no conda record lists,
or whose INSTALLER names a PyPI installer (pip, uv): install/shadowing.foreign, the one rule. Its name and version
come from METADATA's Name and Version (else from the directory's name), the version in PEP 440's normal form, as a
lock holds it.

The prefix may be a hostile user's: every read is bounded and never waits. A symbolic link where conda puts a
directory (conda-meta/, lib/, site-packages/) is refused or skipped; every record and metadata file is read as a
regular file only (a FIFO or device is skipped), not through a symbolic link, up to a size; the entries scanned
and the bytes read have limits. Each record skipped is named, with why, in `skipped`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envsolver.core import boundedread
from envsolver.core.errors import BadInputError
from envsolver.install import shadowing
from envsolver.lock import lockfile, pkgdiff
from envsolver.lock.pkgdiff import Package
from envsolver.net.pypi_index import normalize

META = "conda-meta"
MAX_RECORD_BYTES = 64 << 20  # a conda-meta record lists every file of its package: pytorch's is a few MiB
MAX_TOTAL_BYTES = 512 << 20  # of all records together
MAX_ENTRIES = 200_000  # directory entries scanned, conda-meta/ and each site-packages/ together
MAX_METADATA_BYTES = 1 << 20
MAX_INSTALLER_BYTES = 1024
MAX_SKIPPED = 50  # notes kept; the rest are counted
_PYTHON_LIB = re.compile(r"python3\.[0-9]+t?")
_DIST_INFO = re.compile(r"(?P<dir>lib/python3\.[0-9]+t?/site-packages/[^/]+\.dist-info)/")
_PYPI_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,126}[a-z0-9])?")
_FIELDS = ("name", "version", "build")


@dataclass(frozen=True)
class Inventory:
    prefix: Path
    platform: str | None  # from the lock metadata `envsolver install` kept there; None without it
    packages: tuple[Package, ...]
    skipped: tuple[str, ...]  # what was not read, and why (text from the prefix: escape it before printing)


class _Budget:
    """The entries and bytes a read may still take, and the notes it has made."""

    def __init__(self) -> None:
        self.entries = MAX_ENTRIES
        self.bytes = MAX_TOTAL_BYTES
        self.notes: list[str] = []
        self.more = 0

    def note(self, text: str) -> None:
        if len(self.notes) < MAX_SKIPPED:
            self.notes.append(text)
        else:
            self.more += 1

    def scan(self, directory: Path, where: str) -> list[os.DirEntry[str]]:
        """DIRECTORY's entries by name, while the entry budget lasts (a note says where it ran out). Raises
        OSError."""
        entries = []
        with os.scandir(directory) as found:
            for entry in found:
                if self.entries <= 0:
                    self.note(f"{where}: more than {MAX_ENTRIES} entries in all; the rest were not read")
                    break
                self.entries -= 1
                entries.append(entry)
        return sorted(entries, key=lambda e: e.name)

    def skipped(self) -> tuple[str, ...]:
        return (*self.notes, *([f"and {self.more} more"] if self.more else []))


def _refuse(prefix: Path, problem: str) -> BadInputError:
    return BadInputError(
        f"{str(prefix)!r} {problem}, so its packages cannot be read. Pass an environment `envsolver install` "
        f"or conda created (a directory with conda-meta/), or a lock: envsolver diff LOCK {shlex.quote(str(prefix))}"
    )


def read(prefix: Path) -> Inventory:
    """PREFIX's packages (see the module's docstring). Raises BadInputError (exit 2) when PREFIX is not a
    directory with a conda-meta/ directory of its own (a symbolic link there is refused)."""
    meta = prefix / META
    if not prefix.is_dir():
        raise _refuse(prefix, "is not a directory")
    if meta.is_symlink():
        raise _refuse(prefix, "has a conda-meta that is a symbolic link (conda never makes one)")
    if not meta.is_dir():
        raise _refuse(prefix, "is not a conda environment (no conda-meta/)")
    budget = _Budget()
    try:
        conda, owned = _conda(meta, budget)
    except OSError as exc:
        raise _refuse(prefix, f"has a conda-meta/ that cannot be read ({exc.strerror or exc})") from None
    pip = _pypi(prefix, owned, budget)
    return Inventory(prefix, _platform(prefix, budget), tuple(conda + pip), budget.skipped())


def _conda(meta: Path, budget: _Budget) -> tuple[list[Package], set[str]]:
    """The packages conda-meta/*.json names, and the dist-info directories (relative to the prefix) they own."""
    packages: dict[str, Package] = {}
    owned: set[str] = set()
    for entry in budget.scan(meta, META):
        if not entry.name.endswith(".json"):
            continue
        where = f"{META}/{entry.name}"
        if budget.bytes <= 0:
            budget.note(f"{where}: the records read past {MAX_TOTAL_BYTES} bytes; the rest were not read")
            break
        try:
            raw = boundedread.read_regular(Path(entry.path), min(MAX_RECORD_BYTES, budget.bytes), follow=False)
        except boundedread.Refused as exc:
            budget.note(f"{where}: {exc}, skipped")
            continue
        except OSError as exc:
            budget.note(f"{where}: {exc.strerror or exc}, skipped")
            continue
        budget.bytes -= len(raw)
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            budget.note(f"{where}: not JSON, skipped")
            continue
        fields = [doc.get(k) if isinstance(doc, dict) else None for k in _FIELDS]
        if not all(isinstance(v, str) and lockfile.well_formed(f, v) for f, v in zip(_FIELDS, fields, strict=True)):
            budget.note(f"{where}: no well-formed name, version and build, skipped")
            continue
        name, version, build = (str(v) for v in fields)
        if name in packages:
            budget.note(f"{where}: a second record of {name}, skipped")
            continue
        packages[name] = Package(name, version, build, "conda")
        files = doc.get("files")
        for path in files if isinstance(files, list) else ():
            found = _DIST_INFO.match(path) if isinstance(path, str) else None
            if found:
                owned.add(found.group("dir"))
    return sorted(packages.values()), owned


def _site_packages(prefix: Path, budget: _Budget) -> list[Path]:
    lib = prefix / "lib"
    if lib.is_symlink():
        budget.note("lib: a symbolic link, so its site-packages were not read")
        return []
    try:
        entries = budget.scan(lib, "lib") if lib.is_dir() else []
    except OSError as exc:
        budget.note(f"lib: {exc.strerror or exc}, not read")
        return []
    out = []
    for entry in entries:
        if not _PYTHON_LIB.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        site = Path(entry.path) / "site-packages"
        if site.is_symlink():
            budget.note(f"lib/{entry.name}/site-packages: a symbolic link, not read")
        elif site.is_dir():
            out.append(site)
    return out


def _pypi(prefix: Path, owned: set[str], budget: _Budget) -> list[Package]:
    packages: dict[str, Package] = {}
    for site in _site_packages(prefix, budget):
        relative = site.relative_to(prefix).as_posix()
        try:
            entries = budget.scan(site, relative)
        except OSError as exc:
            budget.note(f"{relative}: {exc.strerror or exc}, not read")
            continue
        for entry in entries:
            if not entry.name.endswith(".dist-info"):
                continue
            where = f"{relative}/{entry.name}"
            if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                budget.note(f"{where}: not a directory of its own, skipped")
                continue
            installer = _small(Path(entry.path) / "INSTALLER", MAX_INSTALLER_BYTES, where, budget)
            said = installer.splitlines()[0].strip() if installer else None
            if not shadowing.foreign(where in owned, said):  # the one rule (install/shadowing)
                continue
            package = _distribution(Path(entry.path), where, budget)
            if package is None:
                continue
            if package.name in packages:
                budget.note(f"{where}: a second distribution of {package.name}, skipped")
                continue
            packages[package.name] = package
    return sorted(packages.values())


def _small(path: Path, limit: int, where: str, budget: _Budget) -> str | None:
    """The text of a small metadata file; None when it is absent or cannot be read (noted)."""
    try:
        return boundedread.read_regular(path, limit, follow=False).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    except boundedread.Refused as exc:
        budget.note(f"{where}/{path.name}: {exc}, not read")
    except OSError as exc:
        budget.note(f"{where}/{path.name}: {exc.strerror or exc}, not read")
    return None


def _distribution(info: Path, where: str, budget: _Budget) -> Package | None:
    """The distribution a dist-info directory records, by METADATA's Name and Version (else by the directory's
    name); None, noted, when neither gives a PyPI name and a PEP 440 version."""
    from packaging.version import InvalidVersion, Version

    stem, _, from_dir = info.name[: -len(".dist-info")].partition("-")
    headers = _headers(_small(info / "METADATA", MAX_METADATA_BYTES, where, budget) or "")
    name, version = normalize(headers.get("name") or stem), headers.get("version") or from_dir
    try:
        version = str(Version(version))
    except InvalidVersion:
        budget.note(f"{where}: no PEP 440 version, skipped")
        return None
    if not _PYPI_NAME.fullmatch(name):
        budget.note(f"{where}: no PyPI project name, skipped")
        return None
    return Package(name, version, "", "pip")


def _headers(text: str) -> dict[str, str]:
    """METADATA's Name and Version (the first of each), from its header (the lines before the first blank one).

    Metadata-Version: 2.1
    Name: tqdm
    Version: 4.67.1
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, colon, value = line.partition(":")
        if colon and key.strip().lower() in ("name", "version"):
            out.setdefault(key.strip().lower(), value.strip())
    return out


def _platform(prefix: Path, budget: _Budget) -> str | None:
    from envsolver.install import prefixmeta

    try:
        kept = prefixmeta.load(prefix)
    except BadInputError:
        budget.note(f"{prefixmeta.METADATA}: not the metadata envsolver install writes, not read")
        return None
    return kept.platform if kept else None


@dataclass(frozen=True)
class Side:
    """One side of `envsolver diff`: a lock (a file, or the conda-lock.yml of a directory make wrote) or an
    installed prefix, and its packages."""

    path: Path
    kind: Literal["lock", "prefix"]
    platform: str | None
    packages: tuple[Package, ...]
    skipped: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "kind": self.kind,
            "platform": self.platform,
            "packages": len(self.packages),
            "skipped": list(self.skipped),
        }


def side(path: Path, platform: str | None) -> Side:
    """What PATH holds: a directory with conda-meta/ is an installed prefix (read); another directory stands for
    the conda-lock.yml make wrote in it; a file is a lock (conda-lock.yml or an explicit conda-<platform>.lock,
    their PyPI part included), PLATFORM choosing among a conda-lock.yml's platforms. Raises BadInputError
    (exit 2): no such path, a FIFO or device, a directory that is neither, a lock that cannot be read."""
    if path.is_dir() and not (path / META).is_dir() and not (path / META).is_symlink():
        if not (path / "conda-lock.yml").is_file():
            raise _refuse(path, "holds neither conda-meta/ (an installed prefix) nor conda-lock.yml (what make wrote)")
        path = path / "conda-lock.yml"
    elif path.is_dir():
        found = read(path)
        return Side(path, "prefix", found.platform, found.packages, found.skipped)
    if path.name.endswith(".pip.txt"):
        raise BadInputError(
            f"{str(path)!r} is an explicit lock's PyPI part. Pass the conda-<platform>.lock beside it: its "
            "`# pip` lines hold the same files, with the conda part."
        )
    lock = lockfile.read(path, platform)
    return Side(path, "lock", lock.platform, tuple(pkgdiff.of_lock(lock.entries, lock.pip)))
