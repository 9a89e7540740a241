"""Where a PyPI part's files and their requirements come from: a live index, or the bundled snapshot (served to
uv on loopback). Both answer the same three questions: does the index hold a usable file of NAME==VERSION for
the target, what is the real file behind a file uv chose (URL and sha256, proven by the index's own page), and
what does its core metadata say.

Live, a locked file's metadata is read, in order: from envsolver's cache (CACHE/pypi-metadata/SHA256.metadata,
keyed by the file's own sha256, so it is the file's whatever the index); from PEP 658's URL.metadata where the
index page advertises it (checked against the page's sha256 for it); else from the file itself, downloaded and
proven by its sha256 (a wheel's NAME-VERSION.dist-info/METADATA, an sdist's PKG-INFO). PyPI's JSON API is not
used: its requires_dist is the release's (its first file's), not the file's, and mirrors do not serve it.
"""

from __future__ import annotations

import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from envsolver.core import atomic
from envsolver.core.errors import EnvsolverError, Kind
from envsolver.core.redact import redact_text
from envsolver.lock.pypi import snapshot
from envsolver.lock.pypi.pylock import LockedFile, LockedPackage
from envsolver.lock.pypi.target import Target
from envsolver.net import coremeta
from envsolver.net import pypi_index as index

MAX_METADATA = coremeta.MAX_BYTES
MAX_FILE = 1 << 30  # a file read only for its metadata, where the index gives no size
TIMEOUT_S = 60.0


class IndexDisagrees(EnvsolverError):
    """The file uv chose is not on the index's page with that sha256, or its metadata is not its own (exit 2)."""

    kind: Kind = "integrity"


@dataclass
class Source:
    """An index uv resolves against: `url` (credentials kept: uv gets it in its environment), `public` (how
    messages and the lock's header name it), `date` (the bundled snapshot's; None live)."""

    url: str
    public: str
    date: str | None
    environ: Mapping[str, str]
    cache: Path | None
    _pages: dict[str, list[index.PypiFile]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def bundled(self) -> bool:
        return self.date is not None

    def files(self, name: str) -> list[index.PypiFile]:
        """NAME's lockable files on this index (each page read once). Raises index.IndexUnreadable (exit 2)."""
        with self._lock:
            if name in self._pages:
                return self._pages[name]
        if self.bundled:
            found = snapshot.page(name)
            files = list(found[1]) if found else []
        else:
            files = index.fetch(name, self.url, self.environ)
        with self._lock:
            self._pages[name] = files
        return files

    def usable(self, name: str, version: str, target: Target) -> bool:
        """Whether the index holds a wheel of NAME==VERSION the target takes (uv builds nothing: --no-build)."""
        return any(f.version == version and f.wheel and target.rank(f.filename) is not None for f in self.files(name))

    def real(self, package: LockedPackage, chosen: LockedFile) -> index.PypiFile:
        """The index's own entry for the file uv chose: same name and sha256 (its URL is PyPI's where the file came
        from the bundled snapshot). Raises IndexDisagrees when the page has no such file."""
        entry = next((f for f in self.files(package.name) if f.sha256 == chosen.sha256), None)
        if entry is None or entry.filename != chosen.filename:
            raise IndexDisagrees(
                f"uv locked {chosen.filename} with sha256 {chosen.sha256}, but {self.public}'s page of "
                f"{package.name} holds no such file, so it cannot be proven and nothing was written. Run make "
                "again; if it stays, the index serves pages that change under it: use another index."
            )
        return entry

    def metadata(self, entry: index.PypiFile) -> coremeta.CoreMetadata | None:
        """The core metadata of this file of the index; None where none can be had without a build (an sdist
        with dynamic or missing requirements). Raises IndexDisagrees, coremeta.BadMetadata or http's
        DownloadError."""
        data = self._metadata_bytes(entry)
        if data is None:
            return None
        meta = coremeta.parse(data, name=entry.name, version=entry.version)
        if not entry.wheel and (Version(meta.metadata_version) < Version("2.2") or "requires-dist" in meta.dynamic):
            return None  # PEP 643: only metadata 2.2 that does not name Requires-Dist dynamic is the sdist's own
        return meta

    def _metadata_bytes(self, entry: index.PypiFile) -> bytes | None:
        if self.bundled:
            return snapshot.metadata(entry.core_metadata) if entry.core_metadata else None
        kept = self.cache / "pypi-metadata" / f"{entry.sha256}.metadata" if self.cache else None
        if kept is not None and kept.is_file():
            with kept.open("rb") as handle:
                return handle.read(MAX_METADATA + 1)
        data = self._fetch_metadata(entry)
        if kept is not None and data is not None:
            atomic.replace(kept, data)
        return data

    def _fetch_metadata(self, entry: index.PypiFile) -> bytes | None:
        from envsolver.net import http

        with tempfile.TemporaryDirectory(prefix="envsolver-metadata-") as tmp:
            if entry.core_metadata is not None and entry.wheel:
                target = Path(tmp) / "METADATA"
                http.download(
                    entry.url + ".metadata",
                    target,
                    timeout=TIMEOUT_S,
                    environ=self.environ,
                    ceiling=MAX_METADATA,
                    sha256=entry.core_metadata or None,
                    pace=index.deadline(self.environ),  # a read of the index, as its pages are
                )
                return target.read_bytes()
            path = Path(tmp) / entry.filename
            http.download(
                entry.url, path, timeout=TIMEOUT_S, environ=self.environ, size=entry.size, ceiling=MAX_FILE,
                sha256=entry.sha256,
            )  # fmt: skip
            return wheel_metadata(path, entry) if entry.wheel else sdist_metadata(path, entry)


def wheel_metadata(path: Path, entry: index.PypiFile) -> bytes:
    """NAME-VERSION.dist-info/METADATA of the wheel (the one top-level .dist-info). Raises coremeta.BadMetadata."""
    from envsolver.kb.upstream import wheels

    try:
        with zipfile.ZipFile(path) as archive:
            found = [
                i
                for i in archive.infolist()
                if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/METADATA")
            ]
            if len(found) != 1:
                raise coremeta.BadMetadata(f"{entry.filename} holds {len(found)} top-level .dist-info/METADATA files")
            return wheels.read_member(archive, found[0], MAX_METADATA)
    except (zipfile.BadZipFile, wheels.WheelUnreadable) as exc:
        raise coremeta.BadMetadata(f"{entry.filename} is not a readable wheel ({redact_text(str(exc))})") from None


def sdist_metadata(path: Path, entry: index.PypiFile) -> bytes | None:
    """The sdist's top-level PKG-INFO (NAME-VERSION/PKG-INFO); None when it has none."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                parts = member.name.split("/")
                if len(parts) == 2 and parts[1] == "PKG-INFO" and member.isfile():
                    if member.size > MAX_METADATA:
                        raise coremeta.BadMetadata(f"{entry.filename}'s PKG-INFO is {member.size} bytes")
                    handle = archive.extractfile(member)
                    return handle.read(MAX_METADATA) if handle else None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise coremeta.BadMetadata(f"{entry.filename} is not a readable sdist ({exc})") from None
    return None
