"""Install a lock into a prefix without conda: fetch and verify every archive first, then let rattler link.

Every archive is checked against the lock's sha256 (md5 where an explicit lock has only that) before
anything in the prefix changes, so a tampered or truncated archive is refused with the prefix as it was.
A prefix that already holds exactly the lock's packages is left alone without fetching anything.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from envsolver import lockfile, solve
from envsolver.errors import EnvsolverError
from envsolver.lockfile import LockEntry

Progress = Callable[[str], None]
CHUNK = 1 << 20


class IntegrityError(EnvsolverError):
    """An archive does not match the lock's hash (exit 2); nothing in the prefix was changed."""


class FetchError(EnvsolverError):
    """An archive could not be fetched (exit 2); nothing in the prefix was changed."""


@dataclass(frozen=True)
class InstallReport:
    prefix: Path
    platform: str
    packages: int
    fetched: int
    changed: bool
    lock_metadata: dict[str, str]


def installed(prefix: Path) -> dict[str, tuple[str, str]]:
    """name -> (version, build) from PREFIX/conda-meta/*.json."""
    out = {}
    for path in sorted((prefix / "conda-meta").glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and {"name", "version", "build"} <= set(doc):
            out[str(doc["name"])] = (str(doc["version"]), str(doc["build"]))
    return out


def _digest(path: Path, algorithm: str) -> str:
    hasher = hashlib.new(algorithm)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def _copy(url: str, target: Path) -> None:
    parts = urlsplit(url)
    if parts.scheme == "file":
        shutil.copyfile(unquote(parts.path), target)
        return
    with urllib.request.urlopen(url, timeout=60) as response, target.open("wb") as out:
        shutil.copyfileobj(response, out, CHUNK)


def fetch_verified(entry: LockEntry, staging: Path) -> Path:
    """The archive in `staging`, fetched and checked against the lock's hash. Raises IntegrityError/FetchError."""
    algorithm, expected = ("sha256", entry.sha256) if entry.sha256 else ("md5", entry.md5)
    if not expected:
        raise IntegrityError(
            f"{entry.name} {entry.version} has no hash in the lock, so it cannot be verified. "
            "Regenerate the lock with envsolver make."
        )
    staging.mkdir(parents=True, exist_ok=True)
    final = staging / f"{expected[:16]}-{entry.file_name}"
    if final.exists():
        return final
    partial = final.with_name(final.name + ".part")
    try:
        _copy(entry.url, partial)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise FetchError(
            f"cannot fetch {entry.name} {entry.version} from {entry.url}: {exc}. Check the URL is "
            "reachable, or rewrite it to a mirror with --mirror FROM=TO."
        ) from None
    actual = _digest(partial, algorithm)
    if actual != expected:
        partial.unlink(missing_ok=True)
        raise IntegrityError(
            f"{entry.name} {entry.version} ({entry.file_name}) does not match the lock: {algorithm} {actual}, "
            f"expected {expected}. The archive is tampered or truncated; nothing was installed. Fetch it again "
            "from the original channel, or check the mirror."
        )
    partial.rename(final)
    return final


def install(
    lock_path: Path, prefix: Path, platform: str | None, mirrors: dict[str, str], cache: Path, progress: Progress
) -> InstallReport:
    """Make PREFIX hold exactly the lock's packages for the platform. Raises EnvsolverError (exit 2)."""
    lock = lockfile.read(lock_path, platform)
    chosen, meta = lock.platform, lock.metadata
    entries = lockfile.apply_mirrors(lock.entries, mirrors)
    have = installed(prefix) if prefix.exists() else {}
    if prefix.exists() and have == {e.name: (e.version, e.build) for e in entries}:
        return InstallReport(prefix, chosen, len(entries), 0, False, meta)
    missing = [e for e in entries if have.get(e.name) != (e.version, e.build)]
    local: dict[str, Path] = {}
    for number, entry in enumerate(missing, start=1):
        progress(f"fetching and verifying {number}/{len(missing)}: {entry.name} {entry.version}")
        local[entry.name] = fetch_verified(entry, cache / "verified")
    progress(f"linking {len(entries)} packages into {prefix}")
    staged = [(e, local[e.name].as_uri() if e.name in local else e.url) for e in entries]
    solve.install_records(staged, prefix, chosen, cache / "pkgs")
    return InstallReport(prefix, chosen, len(entries), len(missing), True, meta)
