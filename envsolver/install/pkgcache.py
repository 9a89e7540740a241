"""The archive cache: each archive is fetched once, and proven against the lock's hash every time it is used.

An archive is never used in place. It is copied from the cache (or fetched) into a private staging directory
(mode 0700, one per install) and hashed as it is copied, so the bytes that rattler extracts are exactly the
bytes that were proven. A cache entry that does not match is dropped and fetched again; a fetched archive that
does not match is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

from envsolver.core import boundedread
from envsolver.core.errors import EnvsolverError, Kind
from envsolver.core.redact import redact_text
from envsolver.lock.lockfile import LockEntry

Progress = Callable[[str], None]
Fetch = Callable[[str, Path], None]  # fetch URL into the file at Path; raises OSError or EnvsolverError
CHUNK = 1 << 20
PART_MARK = "~"  # between an archive's name and its writer in a partial cache copy: in neither (_FILE_NAME, _host)
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+!-]*\.(?:conda|tar\.bz2)$")


class IntegrityError(EnvsolverError):
    """An archive does not match the lock's hash (exit 2); nothing in the prefix was changed."""

    kind: Kind = "integrity"


class FetchError(EnvsolverError):
    """An archive could not be fetched (exit 2); nothing in the prefix was changed."""

    kind: Kind = "fetch"


def expected_hash(entry: LockEntry) -> tuple[str, str]:
    """(algorithm, hex digest) the archive must have: sha256, or md5 where an explicit lock has only that."""
    if entry.sha256:
        return "sha256", entry.sha256.lower()
    if entry.md5:
        return "md5", entry.md5.lower()
    raise IntegrityError(
        f"{entry.name} {entry.version} has no hash in the lock, so it cannot be verified. "
        "Regenerate the lock with envsolver make."
    )


def _copy_hashed(source: Path, target: Path, algorithm: str) -> str:
    """Copy `source` to `target` (created, private), returning the digest of exactly the bytes written."""
    hasher = hashlib.new(algorithm)
    with (
        boundedread.open_regular(source, follow=False) as src,  # a FIFO swapped in is refused, never waited on
        open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out,
    ):
        while chunk := src.read(CHUNK):
            hasher.update(chunk)
            out.write(chunk)
    return hasher.hexdigest()


def _digest(path: Path, algorithm: str) -> str:
    hasher = hashlib.new(algorithm)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def _keep(staged: Path, cached: Path) -> None:
    """Put a proven archive in the cache for next time (atomically; the cache is an optimisation, so a failure
    to write it is not an error)."""
    with contextlib.suppress(OSError):
        cached.parent.mkdir(parents=True, exist_ok=True)
        # The writer in the name, after a `~` that neither an archive's name nor a host's holds (this host, this
        # pid): a copy a killed install left is swept by the next one.
        fd, tmp = tempfile.mkstemp(prefix=f".{cached.name}{PART_MARK}{_owner()}-", suffix=".part", dir=cached.parent)
        try:
            with staged.open("rb") as src, os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
            os.replace(tmp, cached)
        finally:
            Path(tmp).unlink(missing_ok=True)


def stage(entry: LockEntry, fetch_url: str, cache: Path, staging: Path, fetch: Fetch, progress: Progress) -> Path:
    """The archive of `entry`, proven, in `staging`. A cached copy is used when it matches the lock's hash;
    one that does not is dropped and the archive is fetched again from `fetch_url`.
    Raises IntegrityError or FetchError."""
    if not _FILE_NAME.match(entry.file_name):
        raise IntegrityError(
            f"{entry.name} {entry.version}: {entry.file_name!r} is not a conda archive file name. "
            "Regenerate the lock with envsolver make."
        )
    algorithm, expected = expected_hash(entry)
    return stage_file(
        f"{entry.name} {entry.version}", entry.file_name, (algorithm, expected), fetch_url, (cache, staging), fetch,
        progress, "If the channel moved, rewrite its URLs with --mirror FROM=TO.",
    )  # fmt: skip


def stage_file(
    label: str,
    file_name: str,
    digest: tuple[str, str],
    fetch_url: str,
    dirs: tuple[Path, Path],
    fetch: Fetch,
    progress: Progress,
    moved_hint: str,
) -> Path:
    """The file FILE_NAME (already checked against its grammar by the caller), proven against DIGEST
    ((algorithm, hex)), in the staging directory of DIRS ((cache, staging)): from the cache when a copy there
    matches, else fetched from FETCH_URL. Raises IntegrityError or FetchError, naming LABEL."""
    algorithm, expected = digest
    cache, staging = dirs
    cached = cache / f"{expected}-{file_name}"
    target = staging / file_name
    if cached.is_file():
        try:
            if _copy_hashed(cached, target, algorithm) == expected:
                return target
        except (OSError, boundedread.Refused):
            pass
        target.unlink(missing_ok=True)
        progress(f"the cached {file_name} does not match the lock's {algorithm}: dropped, fetching it again")
        cached.unlink(missing_ok=True)
    partial = staging / f".{file_name}.part"
    try:
        fetch(fetch_url, partial)
    except (OSError, EnvsolverError) as exc:
        partial.unlink(missing_ok=True)
        why = str(exc) if isinstance(exc, EnvsolverError) else f"cannot fetch {redact_text(fetch_url)}: {exc}."
        hint = "" if "--mirror" in why else f" {moved_hint}"
        raise FetchError(f"{label}: {redact_text(why)}{hint}") from None
    actual = _digest(partial, algorithm)
    if actual != expected:
        partial.unlink(missing_ok=True)
        raise IntegrityError(
            f"{label} ({file_name}) does not match the lock: {algorithm} {actual}, expected {expected}. The file "
            "is tampered or truncated; nothing was installed. Fetch it again from the original channel or index, or "
            "check the mirror."
        )
    os.replace(partial, target)
    _keep(target, cached)
    return target


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64] or "host"


def _owner() -> str:
    """HOST-pidPID: who writes a staging directory or a partial cache copy."""
    return f"{_host()}-pid{os.getpid()}"


def _stale(name: str, host: str) -> bool:
    """Whether `name` (`HOST-pidPID-...`) was written by a process of exactly this host that is gone (a host whose
    name ends in this one's, login.gpu1 for gpu1, is another host)."""
    owner, _, rest = name.rpartition("-pid")
    pid = rest.split("-", 1)[0]
    return owner == host and pid.isascii() and pid.isdigit() and not _alive(int(pid))


def staging_dir(cache: Path) -> Path:
    """A new private directory for one install's archives and extractions. Stale ones, left by installs on this
    host whose process is gone, are removed first, and so are the partial copies such installs left in the cache
    (cache/verified/.NAME~HOST-pidPID-XXXX.part: _keep); a cache shared by several hosts (a home directory on NFS)
    keeps the others' (their names carry their host name)."""
    root = cache / "staging"
    root.mkdir(parents=True, exist_ok=True)
    host = _host()
    for old in root.iterdir():
        if _stale(old.name, host):
            shutil.rmtree(old, ignore_errors=True)
    verified = cache / "verified"
    if verified.is_dir():
        for part in verified.glob(f".*{PART_MARK}*.part"):
            if _stale(part.name.removesuffix(".part").rpartition(PART_MARK)[2], host):
                part.unlink(missing_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{_owner()}-", dir=root))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
