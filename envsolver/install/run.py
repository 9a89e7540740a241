"""Install a lock into a prefix without conda: prove and check every archive first, then let rattler link.

Order of work, so that a refusal leaves the prefix exactly as it was:
  1. read the lock and check its envsolver metadata (platform, arch list);
  2. copy every archive that is not installed yet into a private staging directory, from the cache or the
     channel, proving each against the lock's sha256 (md5 where an explicit lock has only that) as it is copied;
     up to ENVSOLVER_DOWNLOAD_JOBS (8) are fetched at once, transient failures tried again (envsolver.net.http),
     each body bounded by its archive's size where the snapshot's repodata records it, else by
     ENVSOLVER_MAX_DOWNLOAD (envsolver.net.bodylimit), the bytes shown on one progress line (envsolver.net.progress);
     Ctrl-C or a failure stops them all, and each removes its partial file;
  3. read every staged archive (envsolver.install.archive): its index.json must name the lock's package, and nothing it
     links may leave the prefix or be written through a symbolic link;
  4. rattler extracts the staged archives into the staging directory (never a shared extraction cache) and
     links them; conda-meta records get the lock's public URL, without credentials. A failure there (a full
     disk) is undone so that no package is left half-linked, and the prefix is as it was where rattler had
     unlinked nothing (envsolver.install.linking); an install killed there is undone by the next one;
  5. the staging directory is removed.
Installs into one prefix take turns (a lock file in the cache). A prefix that already holds exactly the lock's
packages is left alone without fetching anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envsolver.core import boundedread, dirlock
from envsolver.core.errors import BadInputError, EnvsolverError
from envsolver.core.redact import redact
from envsolver.install import archive, envkind, inventory, linking, pkgcache, shadowing
from envsolver.install import pypi as pypi_install
from envsolver.install.pkgcache import FetchError, IntegrityError
from envsolver.kb.model import KnowledgeBase
from envsolver.lock import lockfile, snapshot, solve
from envsolver.lock.lockfile import LockEntry
from envsolver.lock.pypi.record import PipRecord
from envsolver.lock.writers import files
from envsolver.net import bodylimit, http, netconf
from envsolver.net.progress import Meter
from envsolver.resolve import detect

Progress = Callable[[str], None]
WAIT_S = 6 * 3600.0  # an install of a large environment over a slow link takes a while
JOBS_ENV = "ENVSOLVER_DOWNLOAD_JOBS"  # how many archives are fetched at once (default DEFAULT_JOBS)
DEFAULT_JOBS = 8

__all__ = ["FetchError", "InstallReport", "IntegrityError", "install", "installed", "plan"]


@dataclass(frozen=True)
class InstallReport:
    prefix: Path
    platform: str
    packages: int
    fetched: int
    changed: bool
    lock_metadata: dict[str, str]
    warnings: tuple[str, ...] = ()
    pip_installed: tuple[str, ...] = ()  # 'deepspeed 0.19.8' for each PyPI file this run installed
    pip_kept: tuple[str, ...] = ()  # the same for each already in place
    pip_removed: tuple[str, ...] = ()  # 'torch 2.13.0+cpu' for each PyPI copy over the conda part this run removed


State = Literal["installed", "cached", "download", "remove"]


@dataclass(frozen=True)
class PlannedPackage:
    """One package of a dry run: installed already (kept), in the cache, to download, or (a PyPI copy over the conda
    part) to remove; its size in bytes where known (a cached archive's; a lock records no sizes), and the URL it
    would come from (redacted; a copy to remove: its directory)."""

    name: str
    version: str
    build: str
    state: State
    size: int | None
    url: str
    manager: Literal["conda", "pip"] = "conda"


@dataclass(frozen=True)
class InstallPlan:
    prefix: Path
    platform: str
    packages: tuple[PlannedPackage, ...]
    changes: bool


def records(prefix: Path) -> dict[str, dict[str, Any]]:
    """name -> the conda-meta record of every package installed in PREFIX (unreadable records are skipped)."""
    out = {}
    for path in sorted((prefix / "conda-meta").glob("*.json")):
        try:  # a regular file only, not through a link (a FIFO there is skipped at once), as inventory reads them
            doc = json.loads(boundedread.read_regular(path, inventory.MAX_RECORD_BYTES, follow=False))
        except (OSError, ValueError, RecursionError):  # boundedread.Refused is a ValueError
            continue
        if isinstance(doc, dict) and all(isinstance(doc.get(k), str) for k in ("name", "version", "build")):
            out[doc["name"]] = doc
    return out


def installed(prefix: Path) -> dict[str, tuple[str, str]]:
    """name -> (version, build) from PREFIX/conda-meta/*.json."""
    return {name: (doc["version"], doc["build"]) for name, doc in records(prefix).items()}


def _same(entry: LockEntry, doc: dict[str, Any] | None) -> bool:
    """Whether the installed record is the lock's package: same version and build, and the same archive hash
    where both know it."""
    if doc is None or (doc["version"], doc["build"]) != (entry.version, entry.build):
        return False
    algorithm, expected = pkgcache.expected_hash(entry)
    have = doc.get(algorithm)
    return not isinstance(have, str) or not have or have.lower() == expected


def _softlinks_kept(doc: dict[str, Any]) -> set[str]:
    data = doc.get("paths_data")
    paths = data.get("paths") if isinstance(data, dict) else None
    if not isinstance(paths, list):
        return set()
    return {p["_path"] for p in paths if isinstance(p, dict) and p.get("path_type") == "softlink" and "_path" in p}


def check_archives(
    prefix: Path, staged: dict[str, tuple[LockEntry, Path]], kept: dict[str, dict[str, Any]], progress: Progress
) -> None:
    """Read every staged archive and refuse the whole install when one is not the lock's package or would
    write outside the prefix. Raises archive.ArchiveError (exit 2)."""
    problems: list[str] = []
    new_paths: dict[str, list[str]] = {}
    links: dict[str, set[str]] = {name: _softlinks_kept(doc) for name, doc in kept.items()}
    # Decompressing is most of the work and bz2 and zstd release the GIL: the archives are read side by side.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        infos = pool.map(lambda item: _read(item[1][1]), sorted(staged.items()))
        read: list[archive.PackageInfo | archive.ArchiveError] = []
        for number, info in enumerate(infos, start=1):
            progress(f"checked {number}/{len(staged)} archives")
            read.append(info)
    for (name, (entry, _)), info in zip(sorted(staged.items()), read, strict=True):
        if isinstance(info, archive.ArchiveError):
            problems.append(str(info))
            continue
        found = archive.identity_problems(info, entry.name, entry.version, entry.build, entry.subdir)
        found += archive.own_problems(info)
        problems += [f"{entry.file_name}: {p}" for p in found]
        if not found:
            new_paths[name] = [p for p, _ in info.paths] + [f"bin/{c}" for c in info.commands]
            links[name] = archive.softlinks(info)
    if not problems:
        problems += archive.crossing_problems(new_paths, links)
        problems += archive.prefix_problems(prefix, (p for paths in new_paths.values() for p in paths))
    if problems:
        shown = "\n".join(f"  - {p}" for p in problems[:20])
        more = f"\n  … and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise archive.ArchiveError(
            f"refusing to install into {str(prefix)!r}: linking these archives would not be safe, so nothing was "
            f"linked:\n{shown}{more}\nThe lock pins archives that are not what they claim; regenerate it with "
            "envsolver make from channels you trust."
        )


def _read(path: Path) -> archive.PackageInfo | archive.ArchiveError:
    """The archive's info, or why it cannot be read (reported with the others, under one fix)."""
    try:
        return archive.read_info(path)
    except archive.ArchiveError as exc:
        return exc


def _record_public_urls(prefix: Path, entries: list[LockEntry]) -> None:
    """conda-meta gets the lock's URL and channel without credentials, and no paths into the removed staging
    directory."""
    for entry in entries:
        path = prefix / "conda-meta" / f"{entry.name}-{entry.version}-{entry.build}.json"
        try:
            doc = json.loads(boundedread.read_regular(path, inventory.MAX_RECORD_BYTES, follow=False))
        except (OSError, ValueError, RecursionError):
            continue
        doc["url"] = redact(entry.url)
        doc["channel"] = redact(entry.url.rsplit("/", 2)[0])
        for key in ("extracted_package_dir", "package_tarball_full_path", "link"):
            doc.pop(key, None)
        files.replace_with(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


@contextlib.contextmanager
def _turn(cache: Path, prefix: Path, progress: Progress) -> Iterator[None]:
    """Installs into one prefix take turns: a lock file in the cache, named by the prefix's path. Raises
    EnvsolverError (exit 2) when the cache cannot hold it or another install holds it past WAIT_S."""
    key = hashlib.sha256(str(prefix.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    path = cache / "locks" / f"prefix-{key}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = dirlock.acquire(
            path, WAIT_S, lambda: progress(f"waiting for another envsolver installing into {prefix}")
        )
    except TimeoutError:
        raise EnvsolverError(
            f"another envsolver has been installing into {str(prefix)!r} for {WAIT_S:g} s; nothing was changed. "
            "Run this again when it has finished."
        ) from None
    except OSError as exc:
        raise EnvsolverError(
            f"cannot create the lock file {str(path)!r} ({exc.strerror}); nothing was changed. Point "
            "ENVSOLVER_CACHE_DIR at a writable directory and run this again."
        ) from None
    try:
        yield
    finally:
        lock.release()


def download_jobs(environ: Mapping[str, str]) -> int:
    """How many archives are fetched at once: $ENVSOLVER_DOWNLOAD_JOBS, default DEFAULT_JOBS. Raises
    BadInputError (exit 2) for a value that is not a whole number from 1 to 64."""
    value = environ.get(JOBS_ENV, "").strip()
    if not value:
        return DEFAULT_JOBS
    if not (value.isascii() and value.isdigit() and len(value) <= 2 and 1 <= int(value) <= 64):
        raise BadInputError(
            f"{JOBS_ENV}={value!r} is not a number of parallel downloads. Set it to a whole number from 1 to 64 "
            f"(e.g. export {JOBS_ENV}=4), or unset it for {DEFAULT_JOBS}."
        )
    return int(value)


@dataclass(frozen=True)
class _Fetching:
    """What every download of one install shares: the mirrors' URLs, the TLS context, the meter, the cancel,
    the ceiling of a body whose size is not known."""

    urls: dict[str, str]
    environ: Mapping[str, str]
    context: ssl.SSLContext | None
    meter: Meter
    cancel: threading.Event
    ceiling: int


def _stage_one(entry: LockEntry, how: _Fetching, cache: Path, staging: Path, progress: Progress) -> Path:
    fetched = False

    def fetch(url: str, path: Path) -> None:
        nonlocal fetched
        fetched = True
        watch = http.Watch(lambda n: how.meter.expect(entry.name, n), how.meter.add, how.cancel)
        size = snapshot.size_of(entry.sha256, entry.md5)
        http.download(url, path, environ=how.environ, watch=watch, context=how.context, size=size, ceiling=how.ceiling)

    path = pkgcache.stage(entry, how.urls[entry.name], cache / "verified", staging, fetch, progress)
    if fetched:
        how.meter.finish()
    else:
        how.meter.cached()
    return path


def stage_all(
    missing: list[LockEntry],
    urls: dict[str, str],
    cache: Path,
    staging: Path,
    progress: Progress,
    environ: Mapping[str, str],
) -> dict[str, tuple[LockEntry, Path]]:
    """Every missing archive, proven, in STAGING: up to download_jobs() fetched at once. The first failure
    cancels the others and is raised (FetchError, IntegrityError); so is a KeyboardInterrupt, once every
    download has stopped and removed its partial file."""
    jobs = min(download_jobs(environ), max(len(missing), 1))
    ceiling = bodylimit.ceiling(environ)
    https = any(urls[e.name].startswith("https:") for e in missing)
    settings = netconf.tls(environ) if https else None
    how = _Fetching(urls, environ, settings.context() if settings else None, Meter(len(missing), progress),
                    threading.Event(), ceiling)  # fmt: skip
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="envsolver-fetch") as pool:
        try:
            futures = [pool.submit(_stage_one, e, how, cache, staging, progress) for e in missing]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        except BaseException:
            how.cancel.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        failed = [error for f in futures if f in done and (error := f.exception()) is not None]
        if failed:
            how.cancel.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise failed[0]
    return {e.name: (e, f.result()) for e, f in zip(missing, futures, strict=True)}


def tls_warnings(environ: Mapping[str, str]) -> tuple[str, ...]:
    """What the user should know about the certificate settings (ssl_verify: false)."""
    return netconf.tls(environ).warnings


def plan(
    lock_path: Path,
    prefix: Path,
    platform: str | None,
    mirrors: dict[str, str],
    cache: Path,
    kb: KnowledgeBase | None = None,
) -> InstallPlan:
    """What install would do, changing nothing (no cache directory, no lock file, no prefix): every package of
    the lock, installed already, cached or to download, and each PyPI copy over its conda part to remove (KB: as
    install's). Raises EnvsolverError (exit 2) as install would."""
    lock = _read_lock(lock_path, platform)
    envkind.installable(prefix, lock_path)
    urls = {e.name: e.url for e in lockfile.apply_mirrors(lock.entries, mirrors)}
    have = records(prefix) if prefix.exists() else {}
    found = shadowing.survey(prefix, lock.entries, have, kb)
    out = []
    for entry in lock.entries:
        _, expected = pkgcache.expected_hash(entry)
        cached = cache / "verified" / f"{expected}-{entry.file_name}"
        state, size = _state(_same(entry, have.get(entry.name)) and entry.name not in found.relink, cached)
        out.append(PlannedPackage(entry.name, entry.version, entry.build, state, size, redact(urls[entry.name])))
    for s in found.shadows:
        out.append(PlannedPackage(s.dist.name, s.dist.version or "", "pypi", "remove", None, s.dist.path, "pip"))
    kept = pypi_install.recorded(prefix) if prefix.exists() else {}
    for record, url in zip(lock.pip, pip_urls(lock.pip, mirrors), strict=True):
        cached = cache / pypi_install.CACHE / f"{record.sha256}-{record.filename}"
        state, size = _state(pypi_install.in_place(prefix, record, kept), cached)
        out.append(PlannedPackage(record.name, record.version, "pypi", state, size, redact(url), "pip"))
    unchanged = (
        prefix.exists() and all(p.state == "installed" for p in out) and set(have) == {e.name for e in lock.entries}
    )
    return InstallPlan(prefix, lock.platform, tuple(out), not unchanged)


def _state(installed: bool, cached: Path) -> tuple[State, int | None]:
    """A dry run's state of one file: installed already, else in the cache (with its size) or to download."""
    if installed:
        return "installed", None
    with contextlib.suppress(OSError):
        if cached.is_file():
            return "cached", cached.stat().st_size
    return "download", None


def pip_urls(records: tuple[PipRecord, ...], mirrors: dict[str, str]) -> list[str]:
    """Where each PyPI file is fetched from: its locked URL, or a mirror's where --mirror rewrites it."""
    return [lockfile.mirrored(record.url, mirrors) for record in records]


def _read_lock(lock_path: Path, platform: str | None) -> lockfile.Lock:
    lock = lockfile.read_whole(lock_path, platform)
    here = detect.host_platform()
    if platform is None and here is not None and lock.platform != here:
        raise BadInputError(
            f"{str(lock_path)!r} is for {lock.platform}, and this host is {here}: its binaries would not run here. "
            f"Install it on a {lock.platform} node, or pass --platform {lock.platform} to install it here anyway "
            "(e.g. into a prefix on a shared file system that those nodes use)."
        )
    return lock


def install(
    lock_path: Path,
    prefix: Path,
    platform: str | None,
    mirrors: dict[str, str],
    cache: Path,
    progress: Progress,
    environ: Mapping[str, str] | None = None,
    warn: Progress | None = None,
    kb: KnowledgeBase | None = None,
) -> InstallReport:
    """Make PREFIX hold exactly the lock's packages for the platform. `environ` (default os.environ) holds the
    network settings (proxies, certificates, netrc, ENVSOLVER_DOWNLOAD_JOBS); `warn` is told what the user must
    know before anything is fetched (ssl_verify: false), which the report keeps too. A PyPI copy of what the conda
    part provides (PyPI's torch over the lock's pytorch: install/shadowing) is removed with the env's pip and its conda
    package linked again; KB names what the conda part provides (default: the default knowledge base, read only when
    site-packages holds a foreign distribution). Raises EnvsolverError (exit 2)."""
    env = os.environ if environ is None else environ
    lock = _read_lock(lock_path, platform)
    fetch_from = {e.name: e.url for e in lockfile.apply_mirrors(lock.entries, mirrors)}
    pip_from = dict(zip((r.name for r in lock.pip), pip_urls(lock.pip, mirrors), strict=True))
    with _turn(cache, prefix, progress):
        undone = linking.recover(prefix)  # an install killed while linking: what it half-linked goes first
        recovered = () if undone is None else (linking.recovered_note(prefix, undone),)
        if warn is not None and recovered:
            warn(recovered[0])
        envkind.installable(prefix, lock_path)  # with the prefix's turn held: another install may be filling it
        have = records(prefix) if prefix.exists() else {}
        found = shadowing.survey(prefix, lock.entries, have, kb)
        missing = [e for e in lock.entries if not _same(e, have.get(e.name)) or e.name in found.relink]
        conda_done = prefix.exists() and not missing and set(have) == {e.name for e in lock.entries}
        kept = pypi_install.recorded(prefix) if prefix.exists() else {}
        pip_done = all(pypi_install.in_place(prefix, r, kept) for r in lock.pip)
        if conda_done and pip_done and not found.shadows:
            names = tuple(f"{r.name} {r.version}" for r in lock.pip)
            return InstallReport(
                prefix, lock.platform, len(lock.entries), 0, False, lock.metadata, recovered, pip_kept=names
            )
        urls = [fetch_from[e.name] for e in missing] + list(pip_from.values())
        warned = tls_warnings(env) if any(u.startswith("https:") for u in urls) else ()
        warned = (*recovered, *warned)
        if warn is not None:
            for warning in warned:
                warn(warning)
        staging = pkgcache.staging_dir(cache)
        removed: tuple[str, ...] = ()

        def clear() -> None:  # after every archive is proven and checked, before anything is linked
            nonlocal removed
            removed = shadowing.remove(prefix, found.shadows, have, env, progress) if found.shadows else ()

        try:
            if not conda_done:
                _link(lock, prefix, have, missing, fetch_from, cache, staging, progress, env, clear)
            else:
                clear()
            pip = pypi_install.PipReport((), (), 0)
            if lock.pip:
                pip = pypi_install.install(
                    prefix, lock.pip, pip_from, cache, staging, _pip_fetch(env, progress), progress, env
                )
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(staging)
    return InstallReport(
        prefix, lock.platform, len(lock.entries), len(missing) + pip.fetched, True, lock.metadata, warned,
        pip.installed, pip.kept, removed,
    )  # fmt: skip


def _link(
    lock: lockfile.Lock,
    prefix: Path,
    have: dict[str, dict[str, Any]],
    missing: list[LockEntry],
    fetch_from: dict[str, str],
    cache: Path,
    staging: Path,
    progress: Progress,
    env: Mapping[str, str],
    before: Callable[[], None],
) -> None:
    """The conda part: stage and prove the missing archives, check them all, then BEFORE, then link."""
    staged = stage_all(missing, fetch_from, cache, staging, progress, env)
    wanted = {e.name for e in lock.entries}
    kept = {name: doc for name, doc in have.items() if name in wanted and name not in staged}
    check_archives(prefix, staged, kept, progress)
    before()
    progress(f"linking {len(lock.entries)} packages into {prefix}")
    reinstall = {e.name for e in missing if e.name in have}
    links = [(e, staged[e.name][1].as_uri() if e.name in staged else redact(e.url)) for e in lock.entries]

    def run() -> None:
        solve.install_records(links, prefix, lock.platform, staging / "pkgs", reinstall)
        try:
            _record_public_urls(prefix, missing)
        except OSError as exc:
            cause = f"its records could not be rewritten ({exc.strerror or exc})"
            raise solve.LinkFailed(f"installing into {str(prefix)!r} failed: {cause}", cause) from None

    linking.link(prefix, run, (f"{e.name}-{e.version}-{e.build}.json" for e in lock.entries))


def _pip_fetch(environ: Mapping[str, str], progress: Progress) -> pypi_install.Fetch:
    """A PyPI file's download: as a conda archive's (proxies, certificates, netrc, retries), one at a time."""

    from envsolver.lock.pypi import pins

    def fetch(url: str, path: Path, sha256: str) -> None:
        """The body bounded by the file's size where the bundled PyPI snapshot knows it (its sha256 is proven
        by pkgcache.stage_file, with the lock's message)."""
        progress(f"fetching {redact(url).rsplit('/', 1)[-1]}")
        context = netconf.tls(environ).context() if url.startswith("https:") else None
        http.download(url, path, environ=environ, context=context, size=pins.size_of(sha256))

    return fetch
