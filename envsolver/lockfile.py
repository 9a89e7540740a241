"""Read a lock back: conda-lock.yml (through conda-lock's parser) or an explicit file. Pure parsing."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from envsolver.errors import BadInputError

_EXPLICIT_LINE = re.compile(r"^(?P<url>\S+?)(?:#(?:sha256[=:](?P<sha256>[0-9a-f]{64})|(?P<md5>[0-9a-f]{32})))?$")


@dataclass(frozen=True)
class LockEntry:
    name: str
    version: str
    build: str
    subdir: str
    platform: str
    url: str
    md5: str | None
    sha256: str | None
    depends: tuple[str, ...] = ()

    @property
    def file_name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Lock:
    """A lock read back: the platform chosen, its entries, and the custom_metadata (empty for explicit locks)."""

    platform: str
    entries: list[LockEntry]
    metadata: dict[str, str]


def split_file_name(file_name: str) -> tuple[str, str, str]:
    """'pytorch-2.10.0-cuda129_mkl_py313_h623d66f_303.conda' -> ('pytorch', '2.10.0', 'cuda129_…_303')."""
    stem = file_name.removesuffix(".conda").removesuffix(".tar.bz2")
    parts = stem.rsplit("-", 2)
    if len(parts) != 3 or stem == file_name:
        raise BadInputError(
            f"{file_name!r} is not a conda package file name (name-version-build.conda). "
            "Fix the lock file or regenerate it with envsolver make."
        )
    return parts[0], parts[1], parts[2]


def read(path: Path, platform: str | None) -> Lock:
    """A conda-lock.yml or explicit lock, parsed once. Raises BadInputError (exit 2)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInputError(
            f"cannot read lock {str(path)!r}: {exc.strerror}. Pass the path of a conda-lock.yml "
            "or conda-<platform>.lock written by envsolver make."
        ) from None
    if "@EXPLICIT" in text:
        return _explicit(text, path, platform)
    return _conda_lock(path, platform)


def _explicit(text: str, path: Path, platform: str | None) -> Lock:
    declared = next(
        (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("# platform:")), None
    )
    if platform and declared and platform != declared:
        raise BadInputError(
            f"{str(path)!r} is for {declared}, not {platform}. Pass --platform {declared} "
            "or the lock for your platform."
        )
    chosen = platform or declared
    if chosen is None:
        raise BadInputError(f"{str(path)!r} names no platform. Pass --platform linux-64 (or linux-aarch64).")
    entries = []
    body = text.split("@EXPLICIT", 1)[1]
    for number, raw in enumerate(body.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _EXPLICIT_LINE.match(line)
        if not match or "://" not in line:
            raise BadInputError(
                f"{str(path)!r}: line {number} after @EXPLICIT is not `url#md5`: {line!r}. "
                "Regenerate the lock with envsolver make."
            )
        url = match.group("url")
        name, version, build = split_file_name(url.rsplit("/", 1)[-1])
        entries.append(
            LockEntry(
                name, version, build, url.rsplit("/", 2)[-2], chosen, url, match.group("md5"), match.group("sha256")
            )
        )
    return Lock(chosen, entries, {})


def _conda_lock(path: Path, platform: str | None) -> Lock:
    from conda_lock.lockfile import parse_conda_lock_file

    try:
        lockfile = parse_conda_lock_file(path)
    except Exception as exc:  # conda-lock raises pydantic, YAML and its own errors
        raise BadInputError(
            f"{str(path)!r} is not a conda-lock.yml conda-lock can read ({exc}). Regenerate it with envsolver make."
        ) from None
    platforms = list(lockfile.metadata.platforms)
    if platform is None:
        if len(platforms) != 1:
            raise BadInputError(f"{str(path)!r} locks {', '.join(platforms)}. Pass --platform with one of them.")
        platform = platforms[0]
    if platform not in platforms:
        raise BadInputError(
            f"{str(path)!r} has no {platform} packages (it locks {', '.join(platforms)}). "
            f"Pass --platform {platforms[0]}."
        )
    entries = []
    for dep in lockfile.package:
        if dep.platform != platform:
            continue
        if dep.manager != "conda":
            raise BadInputError(
                f"{str(path)!r} has a {dep.manager} package ({dep.name}); envsolver install "
                "installs conda packages only. Install it with pip after the environment exists."
            )
        build = split_file_name(dep.url.rsplit("/", 1)[-1])[2]
        depends = tuple(f"{k} {v}".strip() for k, v in sorted(dep.dependencies.items()))
        entries.append(
            LockEntry(
                dep.name,
                dep.version,
                dep.build or build,
                dep.url.rsplit("/", 2)[-2],
                platform,
                dep.url,
                dep.hash.md5,
                dep.hash.sha256,
                depends,
            )
        )
    return Lock(platform, entries, {str(k): str(v) for k, v in (lockfile.metadata.custom_metadata or {}).items()})


def apply_mirrors(entries: list[LockEntry], mirrors: dict[str, str]) -> list[LockEntry]:
    """Rewrite URL prefixes (FROM -> TO), e.g. to a site mirror, at install time."""
    out = []
    for entry in entries:
        url = entry.url
        for old, new in mirrors.items():
            if url.startswith(old.rstrip("/") + "/"):
                url = new.rstrip("/") + url[len(old.rstrip("/")) :]
                break
        out.append(dataclasses.replace(entry, url=url))
    return out
