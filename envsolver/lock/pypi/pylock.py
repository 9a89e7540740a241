"""uv's answer: the pylock.toml `uv pip compile --format pylock.toml` writes, read as untrusted input (uv read it
from an index), every field envsolver uses held to its exact grammar before anything uses it.

Sample (uv 0.13.9, one package):

    lock-version = "1.0"
    created-by = "uv"
    requires-python = ">=3.12"

    [[packages]]
    name = "accelerate"
    version = "1.16.0"
    wheels = [{ url = "https://files.pythonhosted.org/packages/29/8e/.../accelerate-1.16.0-py3-none-any.whl",
                upload-time = 2026-11-16T21:00:36Z, size = 389390, hashes = { sha256 = "1808...859e" } }]

Source: PEP 751 (the pylock.toml format: `[[packages]]` with name, version, marker, and the files as `wheels` and
`sdist`, each with url and hashes; `vcs`, `directory` and `archive` for other sources). Only index files are taken:
a package from any other source is refused (envsolver takes no direct references, see requirements.py).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.markers import InvalidMarker, Marker
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envsolver.net.pypi_index import URL, name_version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MAX_BYTES = 16 << 20  # 35 packages take 12 KiB
MAX_PACKAGES = 5000
MAX_FILES = 1000  # files of one package (uv lists those for the target: one or a few)
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,126}[a-z0-9])?")  # normalized (PEP 503), as uv writes it
_SHA256 = re.compile(r"[0-9a-f]{64}")
_PACKAGE_KEYS = frozenset({"name", "version", "marker", "requires-python", "index", "wheels", "sdist", "dependencies"})
_FILE_KEYS = frozenset({"name", "url", "upload-time", "size", "hashes"})
_OTHER_SOURCES = ("vcs", "directory", "archive")


class BadLock(ValueError):
    """uv's pylock.toml is not what envsolver can lock; the message names the package and the field."""


@dataclass(frozen=True)
class LockedFile:
    filename: str
    url: str
    sha256: str
    size: int | None

    @property
    def wheel(self) -> bool:
        return self.filename.endswith(".whl")


@dataclass(frozen=True)
class LockedPackage:
    name: str  # normalized
    version: str  # canonical
    marker: Marker | None
    wheels: tuple[LockedFile, ...]
    sdist: LockedFile | None


def parse(data: bytes) -> tuple[LockedPackage, ...]:
    """The packages of a pylock.toml. Raises BadLock for a file past MAX_BYTES, not TOML, of another lock
    version, or with a package or file that fails its grammar (name, version, marker, URL, sha256, size), that
    comes from a source other than an index, or whose file is not of its name and version."""
    if len(data) > MAX_BYTES:
        raise BadLock(f"uv's pylock.toml is {len(data)} bytes, more than the {MAX_BYTES} allowed")
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadLock(f"uv's pylock.toml is not TOML ({exc})") from None
    if doc.get("lock-version") != "1.0":
        raise BadLock(f"uv's pylock.toml has lock-version {str(doc.get('lock-version'))[:20]!r}; expected '1.0'")
    packages = doc.get("packages", [])
    if not isinstance(packages, list) or len(packages) > MAX_PACKAGES:
        raise BadLock(f"uv's pylock.toml's packages is not a list of at most {MAX_PACKAGES}")
    out = [_package(item, n) for n, item in enumerate(packages)]
    names = [p.name for p in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadLock(f"uv's pylock.toml holds {', '.join(twice)} more than once")
    return tuple(sorted(out, key=lambda p: p.name))


def _package(item: Any, number: int) -> LockedPackage:
    if not isinstance(item, dict):
        raise BadLock(f"package {number} of uv's pylock.toml is not a table")
    name, version = item.get("name"), item.get("version")
    if not isinstance(name, str) or not _NAME.fullmatch(name) or canonicalize_name(name) != name:
        raise BadLock(f"package {number} of uv's pylock.toml has the name {str(name)[:80]!r}, not a normalized name")
    if not isinstance(version, str) or len(version) > 128:
        raise BadLock(f"{name} in uv's pylock.toml has no version")
    try:
        canonical = str(Version(version))
    except InvalidVersion:
        raise BadLock(f"{name}'s version {version[:80]!r} in uv's pylock.toml is not a PEP 440 version") from None
    other = [k for k in _OTHER_SOURCES if k in item]
    if other:
        raise BadLock(f"{name} {version} in uv's pylock.toml comes from a {other[0]}, not from the index")
    unknown = sorted(set(item) - _PACKAGE_KEYS)
    if unknown:
        raise BadLock(f"{name} {version} in uv's pylock.toml has fields envsolver does not know: {unknown[:5]}")
    marker = None
    if "marker" in item:
        if not isinstance(item["marker"], str) or len(item["marker"]) > 4096:
            raise BadLock(f"{name}'s marker in uv's pylock.toml is not a string")
        try:
            marker = Marker(item["marker"])
        except InvalidMarker:
            raise BadLock(f"{name}'s marker {item['marker'][:120]!r} in uv's pylock.toml is not PEP 508") from None
    wheels = item.get("wheels", [])
    if not isinstance(wheels, list) or len(wheels) > MAX_FILES:
        raise BadLock(f"{name}'s wheels in uv's pylock.toml are not a list of at most {MAX_FILES}")
    sdist = item.get("sdist")
    if sdist is None and not wheels:
        raise BadLock(f"{name} {version} in uv's pylock.toml has no file")
    return LockedPackage(
        name,
        canonical,
        marker,
        tuple(_file(w, name, canonical) for w in wheels),
        None if sdist is None else _file(sdist, name, canonical),
    )


def _file(item: Any, name: str, version: str) -> LockedFile:
    if not isinstance(item, dict):
        raise BadLock(f"a file of {name} in uv's pylock.toml is not a table")
    unknown = sorted(set(item) - _FILE_KEYS)
    if unknown:
        raise BadLock(f"a file of {name} in uv's pylock.toml has fields envsolver does not know: {unknown[:5]}")
    url, hashes, size = item.get("url"), item.get("hashes"), item.get("size")
    if not isinstance(url, str) or len(url) > 4096 or not URL.fullmatch(url):
        shown = str(url)[:120].rpartition("@")[2]  # never a credential: what follows the last '@'
        raise BadLock(f"a file of {name} in uv's pylock.toml has the URL {shown!r}, not a plain http(s) file URL")
    filename = unquote(urlsplit(url).path).rsplit("/", 1)[-1]
    found = name_version(filename)
    if found is None or found != (name, version):
        raise BadLock(f"{filename[:120]!r} in uv's pylock.toml is not a wheel or sdist of {name} {version}")
    digest = hashes.get("sha256") if isinstance(hashes, dict) else None
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise BadLock(f"{filename} in uv's pylock.toml has no sha256 of 64 lowercase hex digits")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
        raise BadLock(f"{filename} in uv's pylock.toml has the size {str(size)[:40]!r}, not a byte count")
    return LockedFile(filename, url, digest, size)
