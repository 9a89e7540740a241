"""Read a conda package archive before it is linked, and check what linking it would do.

A lock pins each archive's hash, but the hash proves only that the archive is the one the lock names, not that
linking it is harmless. Before rattler links anything, every archive is read here (in Python, so a hostile
archive ends in an error, never in a native abort) and checked: its info/index.json must name the lock's
package, and every path it would create must be a plain relative path that stays inside the prefix, never
reached through a symbolic link.

Formats (conda's package spec, https://docs.conda.io/projects/conda-build/en/stable/resources/package-spec.html):
  NAME-VERSION-BUILD.tar.bz2   one bzip2 tar holding info/ and the payload
  NAME-VERSION-BUILD.conda     a zip of info-*.tar.zst, pkg-*.tar.zst and metadata.json
"""

from __future__ import annotations

import json
import re
import tarfile
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from envsolver.core.errors import EnvsolverError, Kind

INFO_FILES = ("info/index.json", "info/paths.json", "info/link.json", "info/files")
MAX_INFO_BYTES = 256 << 20  # paths.json of the largest real packages (cuda toolkits, torch) is a few MiB
MAX_PATH = 4096
PATH_TYPES = ("hardlink", "softlink", "directory")
# An entry point becomes PREFIX/bin/NAME (noarch: python packages' info/link.json).
_COMMAND = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


class ArchiveError(EnvsolverError):
    """An archive cannot be read, or linking it would be unsafe (exit 2); nothing was linked."""

    kind: Kind = "archive"


@dataclass(frozen=True)
class Member:
    """A payload entry of the archive's tar: its path, kind ("file", "dir", "symlink", "hardlink", "other")
    and, for links, the target."""

    path: str
    kind: str
    target: str | None = None


@dataclass(frozen=True)
class PackageInfo:
    name: str
    version: str
    build: str
    subdir: str | None
    noarch: str | None
    paths: tuple[tuple[str, str], ...]  # (path, path_type) as linking will create them
    commands: tuple[str, ...]  # entry points: PREFIX/bin/<command>
    members: tuple[Member, ...]


def path_problem(path: object) -> str | None:
    """Why `path` is not a plain path inside the prefix (relative, no '.', '..' or empty parts), or None."""
    if not isinstance(path, str) or not path:
        return f"{path!r} is not a path"
    if len(path) > MAX_PATH:
        return f"a path of {len(path)} characters"
    if "\0" in path:
        return f"{path!r} holds a NUL byte"
    if path.startswith("/"):
        return f"{path!r} is absolute"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return f"{path!r} leaves its directory or is not normalised"
    return None


def _json(data: bytes | None, what: str) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ArchiveError(f"{what} is not valid JSON ({exc})") from None


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    if member.size > MAX_INFO_BYTES:
        raise ArchiveError(f"{member.name} is {member.size} bytes, more than {MAX_INFO_BYTES}")
    handle = tar.extractfile(member)
    return handle.read() if handle is not None else b""


def _kind(member: tarfile.TarInfo) -> str:
    if member.isreg():
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    return "other"


def _scan(tar: tarfile.TarFile, info: dict[str, bytes], members: list[Member]) -> None:
    for member in tar:
        name = member.name.removeprefix("./").rstrip("/") if member.name not in ("", "/") else member.name
        if name in INFO_FILES:
            info[name] = _read_member(tar, member)
        elif not name.startswith("info/") and name != "info":
            target = member.linkname if member.issym() or member.islnk() else None
            members.append(Member(name, _kind(member), target))


def _zstd_tar(stream: IO[bytes]) -> tarfile.TarFile:
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(stream)
    return tarfile.open(fileobj=reader, mode="r|")


def _open_sections(path: Path) -> Iterator[tuple[str, tarfile.TarFile]]:
    if path.name.endswith(".tar.bz2"):
        with tarfile.open(path, mode="r|bz2") as tar:
            yield "archive", tar
        return
    if not path.name.endswith(".conda"):
        raise ArchiveError(f"{path.name!r} is neither a .conda nor a .tar.bz2 archive")
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        sections = [n for n in names if n.endswith(".tar.zst") and n.startswith(("info-", "pkg-"))]
        if not any(n.startswith("info-") for n in sections):
            raise ArchiveError(f"{path.name} has no info-*.tar.zst section")
        for name in sorted(sections):
            with archive.open(name) as raw, _zstd_tar(raw) as tar:
                yield name, tar


def read_info(path: Path) -> PackageInfo:
    """The package's identity, the paths linking will create, its entry points and its payload members.
    Raises ArchiveError when the archive or its info files cannot be read."""
    info: dict[str, bytes] = {}
    members: list[Member] = []
    try:
        for _, tar in _open_sections(path):
            _scan(tar, info, members)
    except ArchiveError:
        raise
    except Exception as exc:  # tarfile, zipfile, bz2 and zstandard each raise their own errors on hostile bytes
        raise ArchiveError(f"{path.name} cannot be read as a conda package ({type(exc).__name__}: {exc})") from None
    return _parse(path.name, info, members)


def _parse(file_name: str, info: Mapping[str, bytes], members: list[Member]) -> PackageInfo:
    index = _json(info.get("info/index.json"), f"{file_name}: info/index.json")
    if not isinstance(index, dict) or not all(isinstance(index.get(k), str) for k in ("name", "version", "build")):
        raise ArchiveError(f"{file_name}: info/index.json is missing or lacks name, version and build")
    noarch = index.get("noarch")
    paths_doc = _json(info.get("info/paths.json"), f"{file_name}: info/paths.json")
    paths: list[tuple[str, str]] = []
    if paths_doc is not None:
        entries = paths_doc.get("paths") if isinstance(paths_doc, dict) else None
        if not isinstance(entries, list):
            raise ArchiveError(f"{file_name}: info/paths.json has no 'paths' list")
        for entry in entries:
            if not isinstance(entry, dict):
                raise ArchiveError(f"{file_name}: info/paths.json has an entry that is not a mapping")
            paths.append((entry.get("_path"), entry.get("path_type", "hardlink")))  # type: ignore[arg-type]
    elif "info/files" in info:
        text = info["info/files"].decode("utf-8", errors="replace")
        paths = [(line, "hardlink") for line in text.splitlines() if line.strip()]
    else:
        raise ArchiveError(f"{file_name} has neither info/paths.json nor info/files, so what it links is unknown")
    link = _json(info.get("info/link.json"), f"{file_name}: info/link.json")
    commands: list[str] = []
    if isinstance(link, dict) and isinstance(link.get("noarch"), dict):
        for item in link["noarch"].get("entry_points") or []:
            commands.append(str(item).split("=", 1)[0].strip())
    return PackageInfo(
        name=index["name"],
        version=index["version"],
        build=index["build"],
        subdir=index.get("subdir") if isinstance(index.get("subdir"), str) else None,
        noarch=noarch if isinstance(noarch, str) else ("generic" if noarch is True else None),
        paths=tuple(paths),
        commands=tuple(commands),
        members=tuple(members),
    )


def identity_problems(info: PackageInfo, name: str, version: str, build: str, subdir: str) -> list[str]:
    """How the archive's info/index.json differs from the lock's entry."""
    out = [
        f"its info/index.json says {key} {got!r}, the lock says {want!r}"
        for key, got, want in (
            ("name", info.name, name),
            ("version", info.version, version),
            ("build", info.build, build),
        )
        if got != want
    ]
    if info.subdir is not None and info.subdir != subdir and info.subdir != "noarch":
        out.append(f"its info/index.json says subdir {info.subdir!r}, the lock says {subdir!r}")
    return out


def own_problems(info: PackageInfo) -> list[str]:
    """Paths, path types, entry points and payload members that would leave the prefix."""
    out = []
    for path, kind in info.paths:
        why = path_problem(path)
        if why:
            out.append(f"paths.json: {why}")
        elif kind not in PATH_TYPES:
            out.append(f"paths.json: {path!r} has path_type {kind!r}")
    for command in info.commands:
        if not _COMMAND.match(command):
            out.append(f"link.json: entry point {command!r} is not a plain command name")
    for member in info.members:
        why = path_problem(member.path)
        if why:
            out.append(f"payload: {why}")
        elif member.kind == "hardlink" and path_problem(member.target):
            out.append(f"payload: hard link {member.path!r} -> {member.target!r} leaves the package")
        elif member.kind == "other":
            out.append(f"payload: {member.path!r} is a device, FIFO or other special file")
    return out


def softlinks(info: PackageInfo) -> set[str]:
    """Paths that are symbolic links: declared so in paths.json, or stored as symlinks in the payload."""
    return {p for p, kind in info.paths if kind == "softlink"} | {m.path for m in info.members if m.kind == "symlink"}


def crossing_problems(new: Mapping[str, Iterable[str]], links: Mapping[str, set[str]]) -> list[str]:
    """Across all packages of the environment: a path written through another path that is a symbolic link
    (which could point anywhere), or a symbolic link that another package also writes (a clobber that could
    write through it). `new` maps the packages being linked to their paths; `links` maps every package of the
    environment, kept ones included, to its symbolic links."""
    owner = {link: pkg for pkg, items in links.items() for link in items}
    out = []
    for pkg, paths in sorted(new.items()):
        for path in paths:
            parts = path.split("/")
            through = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) in owner), None)
            if through is not None:
                out.append(f"{pkg}: {path!r} would be written through the symbolic link {through!r} ({owner[through]})")
            elif path in owner and owner[path] != pkg:
                out.append(f"{pkg}: {path!r} is a symbolic link of {owner[path]}, which {pkg} would overwrite")
    return out


def prefix_problems(prefix: Path, paths: Iterable[str]) -> list[str]:
    """Paths whose parent directories already in the prefix are symbolic links leading out of it."""
    root = prefix.resolve()
    out = []
    seen: dict[str, bool] = {}
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent not in seen:
                here = prefix / parent
                seen[parent] = not here.is_symlink() or here.resolve().is_relative_to(root)
            if not seen[parent]:
                out.append(f"{path!r} would be written through {str(prefix / parent)!r}, a link out of the prefix")
                break
    return out
