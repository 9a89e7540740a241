"""The one module that asks rattler for work: solve a set of specs for a target platform, index a local channel,
install records into a prefix. Each request goes to rattler's worker process (envsolver/lock/worker_call.py says
how it runs, is bounded and ends); a rattler error comes back as an answer and becomes envsolver's own error here.

Results come back as envsolver's own `Record` type, with URLs in their public form (a record read from a
local copy of a channel, such as the bundled snapshot, gets the public channel's URL).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envsolver.core.errors import ConflictError, EnvsolverError, Kind, WorkerCrashed
from envsolver.core.redact import redact, redact_text
from envsolver.lock import worker_call

if TYPE_CHECKING:  # the lock reader (and the YAML parser it imports) is needed by install alone
    from envsolver.lock.lockfile import LockEntry


@dataclass(frozen=True)
class ChannelSource:
    """A channel to read (`location`: https:// or file://) and the URL it stands for in written files."""

    public: str
    location: str


@dataclass(frozen=True)
class Record:
    name: str
    version: str
    build: str
    build_number: int
    subdir: str
    channel: str
    url: str
    md5: str
    sha256: str
    size: int | None
    depends: tuple[str, ...]
    constrains: tuple[str, ...]
    noarch: str | None = None

    @property
    def file_name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Locked:
    """A package of an existing lock that a solve prefers (rattler's locked_packages; make keeps its lock this
    way): the worker finds the channel's own record of it by its subdir and file name (the same archive, where
    both know its sha256 or md5) and passes that."""

    name: str
    subdir: str
    file_name: str
    sha256: str  # "" where the lock does not know it
    md5: str


class SolveFailed(ConflictError):
    """The solver found no solution (exit 1); the message carries its explanation."""

    kind: Kind = "solve_failed"


class ChannelsUnreachable(EnvsolverError):
    """Repodata could not be fetched from a channel (exit 2)."""

    kind: Kind = "fetch"


def _public_url(url: str, sources: Sequence[ChannelSource]) -> tuple[str, str]:
    for source in sources:
        location = source.location.rstrip("/")
        if url.startswith(location + "/"):
            return source.public.rstrip("/") + url[len(location) :], source.public.rstrip("/")
    return url, url.rsplit("/", 2)[0]


def cache_dir() -> Path:
    """Where rattler keeps repodata and packages: ENVSOLVER_CACHE_DIR, else the user cache directory."""
    if os.environ.get("ENVSOLVER_CACHE_DIR"):
        return Path(os.environ["ENVSOLVER_CACHE_DIR"])
    import platformdirs

    return Path(platformdirs.user_cache_dir("envsolver"))


def _failure(doc: dict[str, Any]) -> tuple[str, str]:
    kind, message = doc.get("kind"), doc.get("message")
    if kind == "bad-request":  # only a bug in this module builds a request the worker refuses
        raise RuntimeError(f"rattler's worker refused envsolver's request: {message}")
    return str(kind), redact_text(str(message))


def _unreadable(what: str) -> WorkerCrashed:
    return WorkerCrashed(f"rattler's answer holds {what}; nothing was written. Run the same command again.")


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str):
        raise _unreadable(f"a record whose {key!r} is not text")
    return value


def _texts(doc: dict[str, Any], key: str) -> tuple[str, ...]:
    value = doc.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _unreadable(f"a record whose {key!r} is not a list of text")
    return tuple(value)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def records_from_answer(doc: dict[str, Any], sources: Sequence[ChannelSource]) -> list[Record]:
    """The solved records of a worker's answer, sorted by name, with public URLs. Raises WorkerCrashed (exit 2)
    when the answer does not hold records of the expected shape."""
    docs = doc.get("records")
    if not isinstance(docs, list) or not all(isinstance(d, dict) for d in docs):
        raise _unreadable("no list of records")
    out = []
    for rec in docs:
        number, size, noarch = rec.get("build_number"), rec.get("size"), rec.get("noarch")
        if not _count(number) or not (size is None or _count(size)):
            raise _unreadable("a record whose build number or size is not a whole number")
        if noarch not in (None, "python", "generic"):
            raise _unreadable(f"a record with the unknown noarch kind {noarch!r}")
        url, channel = _public_url(_text(rec, "url"), sources)
        out.append(
            Record(
                name=_text(rec, "name"),
                version=_text(rec, "version"),
                build=_text(rec, "build"),
                build_number=number,
                subdir=_text(rec, "subdir"),
                channel=channel,
                url=url,
                md5=_text(rec, "md5"),
                sha256=_text(rec, "sha256"),
                size=size,
                depends=_texts(rec, "depends"),
                constrains=_texts(rec, "constrains"),
                noarch=noarch,
            )
        )
    return sorted(out, key=lambda r: r.name)


def _solve(
    specs: Sequence[str],
    sources: Sequence[ChannelSource],
    platform: str,
    virtual_packages: dict[str, str],
    cache_dir: Path,
    timeout_s: float,
    locked: Sequence[Locked],
) -> list[Record]:
    virtual = []
    for name, value in sorted(virtual_packages.items()):
        version, _, build = value.partition(" ")
        virtual.append([name, version, build or "0"])
    request = {
        "op": "solve",
        "channels": [s.location for s in sources],
        "specs": list(specs),
        "platforms": [platform, "noarch"],
        "virtual_packages": virtual,
        "cache_dir": str(cache_dir),
        "timeout_s": timeout_s,
        "locked": [[p.name, p.subdir, p.file_name, p.sha256, p.md5] for p in locked],
    }
    doing, again = f"solving for {platform}", "Run the same command again; if it stops the same way, report it."
    doc = worker_call.call(
        request, doing, again, worker_call.time_limit(max(worker_call.LIMITS_S["solve"], timeout_s + 300))
    )
    if doc["ok"]:
        return records_from_answer(doc, sources)
    kind, message = _failure(doc)
    if kind == "solver":  # rattler's texts may name a channel URL: redacted
        raise SolveFailed(f"no solution for {platform}:\n{message}")
    if kind == "fetch":
        raise ChannelsUnreachable(f"could not fetch repodata: {message}")
    if kind == "channel":
        raise ChannelsUnreachable(f"a channel URL is not valid: {message}. Pass http(s):// or file:// channel URLs.")
    raise ChannelsUnreachable(
        f"rattler could not read the channels for {platform}: {message}. Check that the channels can be read and "
        f"that the cache directory {str(cache_dir)!r} is writable (ENVSOLVER_CACHE_DIR chooses another), then run "
        "the same command again."
    )


def solve(
    specs: Sequence[str],
    sources: Sequence[ChannelSource],
    platform: str,
    virtual_packages: dict[str, str],
    cache_dir: Path,
    timeout_s: float = 300.0,
    locked: Sequence[Locked] = (),
) -> list[Record]:
    """Solve `specs` for `platform` (plus noarch) with strict channel priority and exactly these virtual
    packages (never the host's), preferring the `locked` packages where the specs allow them (those the
    channels no longer hold are solved anew). A channel whose URL carries credentials is read through a private
    repodata cache that is removed afterwards. Raises SolveFailed (exit 1) or ChannelsUnreachable (exit 2)."""
    if not any(redact(s.location) != s.location for s in sources):
        return _solve(specs, sources, platform, virtual_packages, cache_dir, timeout_s, locked)
    # rattler's repodata cache records the URL it fetched; a URL with credentials gets a cache of its own,
    # removed afterwards, so no credential is left in a file.
    with tempfile.TemporaryDirectory(prefix="envsolver-solve-") as private:
        return _solve(specs, sources, platform, virtual_packages, Path(private), timeout_s, locked)


def index_channel(path: Path) -> None:
    """Write repodata.json for every subdir of a local channel directory (tests build channels this way).
    Raises EnvsolverError (exit 2)."""
    doc = worker_call.call(
        {"op": "index", "path": str(path)}, f"indexing {str(path)!r}", "Run the same command again.",
        worker_call.time_limit(worker_call.LIMITS_S["index"]),
    )  # fmt: skip
    if not doc["ok"]:
        _, message = _failure(doc)
        raise EnvsolverError(f"indexing the channel {str(path)!r} failed: {message}. Fix the cause and run it again.")


class LinkFailed(EnvsolverError):
    """rattler's install answered with an error; `cause` is its message (redacted)."""

    kind: Kind = "failed"

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


def install_records(
    entries: Sequence[tuple[LockEntry, str]],
    prefix: Path,
    platform: str,
    cache_dir: Path,
    reinstall: set[str] | None = None,
) -> None:
    """Link lock entries into `prefix` with rattler; each comes with the URL of its already-verified archive.
    Packages in the prefix that the lock does not list are removed; those named in `reinstall` are linked
    again even where the prefix has the same name, version and build. Link scripts are not run. Raises
    EnvsolverError (exit 2); a KeyboardInterrupt stops the linking where it is."""
    records = [
        {
            "name": entry.name,
            "version": entry.version,
            "build": entry.build,
            "subdir": entry.subdir,
            "depends": list(entry.depends),
            "sha256": entry.sha256 or "",
            "md5": entry.md5 or "",
            "file_name": entry.file_name,
            "url": url,
            "channel": entry.url.rsplit("/", 2)[0],
        }
        for entry, url in entries
    ]
    request = {
        "op": "install",
        "records": records,
        "prefix": str(prefix),
        "platform": platform,
        "cache_dir": str(cache_dir),
        "reinstall": sorted(reinstall or ()),
    }
    again = "Run the same command again; it picks up where it stopped."
    doc = worker_call.call(
        request, f"installing into {str(prefix)!r}", again, worker_call.time_limit(worker_call.LIMITS_S["install"])
    )
    if not doc["ok"]:
        _, message = _failure(doc)
        raise LinkFailed(
            f"installing into {str(prefix)!r} failed: {message}. Fix the cause and {again[0].lower()}{again[1:]}",
            message,
        )
