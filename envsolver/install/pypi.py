"""Install a lock's PyPI part into the environment's own python, after its conda part is linked.

Every file is fetched once into envsolver's cache (PYPI_CACHE under the cache directory), proven against the
lock's sha256 as it is copied into the install's private staging directory, and then installed by the env's
own `python -m pip` with nothing else to choose from: `--no-index --find-links STAGING`, `--require-hashes`
(pip proves each file again), `--no-deps` (the conda part holds the requirements; pip never replaces conda's
torch), `--no-build-isolation` (an sdist builds with the env's own setuptools, so nothing unlocked is
downloaded), `--isolated` (no pip configuration file or PIP_* variable of the user's takes part) and
`--no-cache-dir` (nothing is written outside the prefix and the staging directory). DeepSpeed's sdist is built
with DS_BUILD_OPS=0: the hook builds its ops for the target GPUs.

pip runs with `-I` in the staging directory (core/pystart: nothing in the caller's directory is imported) and with
`--force-reinstall`: it runs only for files envsolver found not in place, and would otherwise call the same
version from another file "already satisfied" and install nothing. Before anything is recorded, the installed
files are proven to be the staged file's (install/pipfiles.prove: a RECORD pip wrote in this run, every file as it
says, and a wheel's own RECORD agreeing with it). What was installed is recorded in
PREFIX/etc/envsolver/pip-part.json (name, version, sha256 and the sha256 of the RECORD proven), so a second run
with the same lock and those files still in site-packages changes nothing; a lost or older record, another
RECORD, or a changed file means the file is installed again (never a record guessed from a version).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envsolver.core import boundedread, procrun, pystart
from envsolver.core.errors import EnvsolverError, Kind
from envsolver.core.printable import printable
from envsolver.core.redact import redact, redact_text
from envsolver.install import pipfiles, pkgcache
from envsolver.lock import howto
from envsolver.lock.pypi.record import PipRecord
from envsolver.lock.writers import files, pipreqs
from envsolver.net import pypi_index as index

Progress = Callable[[str], None]
Fetch = Callable[[str, Path, str], None]  # fetch URL into the file at Path; the sha256 the file must have
RECORD = Path("etc") / "envsolver" / "pip-part.json"
CACHE = "pypi"  # the cache's directory of proven PyPI files
MAX_RECORD_BYTES = 1 << 20
BUILD_TIMEOUT_S = 1800.0  # DeepSpeed's sdist builds in under a minute without ops; a slow shared disk takes longer
TAIL = 4000  # characters of pip's output a failure shows


class PipInstallError(EnvsolverError):
    """pip could not install the PyPI part into the env (exit 2); its conda part stays linked."""

    kind: Kind = "failed"


@dataclass(frozen=True)
class PipReport:
    installed: tuple[str, ...]  # 'deepspeed 0.19.8' for each file installed by this run
    kept: tuple[str, ...]  # the same for each already in place
    fetched: int


def python_of(prefix: Path) -> Path:
    return prefix / "bin" / "python"


def installed_version(prefix: Path, name: str) -> str | None:
    """The version of NAME (normalized) installed in PREFIX's site-packages, from its .dist-info/METADATA; None
    when it is not installed or cannot be read."""
    found = pipfiles.dist_infos(prefix, name)
    return found[0][1] if found else None


def recorded(prefix: Path) -> dict[str, dict[str, str]]:
    """name -> {version, sha256, record, dist_info} of what envsolver installed into PREFIX's PyPI part (_entry;
    '' for what a record an older envsolver wrote lacks); empty when it is missing or unreadable. Raises
    BadInputError (exit 2) when it is no regular file of at most MAX_RECORD_BYTES (a FIFO, a device: refused at
    once, core.boundedread)."""
    import shlex

    from envsolver.core.errors import BadInputError

    path = prefix / RECORD
    try:
        doc = json.loads(boundedread.read_regular(path, MAX_RECORD_BYTES))
    except boundedread.Refused as exc:
        raise BadInputError(
            f"{str(path)!r} is {exc}, not the record envsolver writes of the PyPI part, so what that part holds "
            f"cannot be read. Remove it (rm -r {shlex.quote(str(path))}) and run the same command again: the PyPI part "
            "is then installed anew."
        ) from None
    except (OSError, ValueError, RecursionError):
        return {}
    packages = doc.get("packages") if isinstance(doc, dict) else None
    if not isinstance(packages, dict):
        return {}
    return {
        str(name): {k: str(v.get(k) or "") for k in ("version", "sha256", "record", "dist_info")}
        for name, v in packages.items()
        if isinstance(v, dict)
    }


Standing = Literal["in place", "unrecorded", "other"]


def standing(prefix: Path, record: PipRecord, kept: Mapping[str, Mapping[str, str]]) -> tuple[Standing, str]:
    """Whether PREFIX holds this file's own files, and why not: "in place" (envsolver installed this sha256, the
    dist-info holds the RECORD it proved then, every file as RECORD says: install/pipfiles), "unrecorded" (no
    record of this file's: envsolver did not install it, or its record is lost or older than RECORD digests), or
    "other" (the files are another file's, or changed), each with a sentence."""
    mine = kept.get(record.name)
    if not mine:
        return "unrecorded", f"{record.name} {record.version} is not in {RECORD} (envsolver did not install it)"
    if mine.get("sha256") != record.sha256:
        return "other", (
            f"{record.name} was installed from another file (sha256 {mine.get('sha256', '')[:12]}…, the lock's "
            f"{record.sha256[:12]}…)"
        )
    if not mine.get("record"):
        return "unrecorded", f"{record.name}'s record in {RECORD} has no RECORD digest (an older envsolver wrote it)"
    try:
        pipfiles.check(prefix, record.name, record.version, mine["record"])
    except pipfiles.NotProven as exc:
        return "other", str(exc)
    return "in place", ""


def in_place(prefix: Path, record: PipRecord, kept: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether PREFIX holds exactly this file's files (standing)."""
    return standing(prefix, record, kept)[0] == "in place"


def _save(prefix: Path, entries: Mapping[str, Mapping[str, str]]) -> None:
    doc = {"packages": {name: dict(entries[name]) for name in sorted(entries)}}
    (prefix / RECORD).parent.mkdir(parents=True, exist_ok=True)
    files.replace_with(prefix / RECORD, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _entry(record: PipRecord, record_sha256: str, dist_info: str) -> dict[str, str]:
    """pip-part.json's entry of one file: `record` the sha256 of the RECORD proven, `dist_info` its directory
    relative to the prefix (installstate's no-op reads it)."""
    return {
        "version": record.version, "sha256": record.sha256, "file": record.filename, "url": redact(record.url),
        "record": record_sha256, "dist_info": dist_info,
    }  # fmt: skip


def stage(
    records: Sequence[PipRecord], urls: Mapping[str, str], cache: Path, staging: Path, fetch: Fetch, progress: Progress
) -> dict[str, Path]:
    """Each file, proven against its sha256, in STAGING (from the cache or fetched from URLS[name], a mirror's
    URL where --mirror rewrote it). Raises IntegrityError or FetchError."""
    out = {}
    for record in records:
        if index.name_version(record.filename) != (record.name, record.version):
            raise pkgcache.IntegrityError(
                f"{record.name} {record.version}: {record.filename!r} is not a file of that release. Regenerate "
                "the lock with envsolver make."
            )
        out[record.name] = pkgcache.stage_file(
            f"{record.name} {record.version} (PyPI)", record.filename, ("sha256", record.sha256), urls[record.name],
            (cache / CACHE, staging), _bound(fetch, record.sha256), progress,
            "If the index moved, rewrite its URLs with --mirror FROM=TO (e.g. https://files.pythonhosted.org=...).",
        )  # fmt: skip
        progress(f"proved {record.filename} against the lock's sha256")
    return out


def _bound(fetch: Fetch, sha256: str) -> Callable[[str, Path], None]:
    def one(url: str, path: Path) -> None:
        fetch(url, path, sha256)

    return one


def requirements_text(records: Sequence[PipRecord]) -> str:
    """pip's requirements for RECORDS, the lines of the explicit lock's .pip.txt (writers.pipreqs)."""
    return "".join(f"{pipreqs.line(r)}\n" for r in sorted(records, key=lambda r: r.name))


def pip_argv(python: Path, staging: Path, requirements: Path) -> list[str]:
    """The one pip command (isolated: core/pystart): the staged files only, each by its hash, reinstalled even
    when site-packages holds the same version (pip runs only for files envsolver found not in place, and would
    otherwise call another file's release "already satisfied"), without dependencies or build isolation, ignoring
    the user's pip configuration, writing no cache."""
    return pystart.command(
        python, "-m", "pip", "--isolated", "--disable-pip-version-check", "--no-input", "install",
        "--force-reinstall", *howto.PIP_FLAGS, "--no-index", "--find-links", str(staging), "--no-cache-dir",
        "--no-warn-script-location", "-r", str(requirements),
    )  # fmt: skip


def pip_env(environ: Mapping[str, str]) -> dict[str, str]:
    """pip's environment: the user's, less every PIP_* setting and PYTHONPATH/PYTHONHOME (they would let another
    python's packages or another index take part), with DeepSpeed's op builds off (the hook builds them)."""
    env = {
        k: v
        for k, v in environ.items()
        if not k.startswith("PIP_") and k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")
    }
    env.update(DS_BUILD_OPS="0", PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def shown(text: str) -> str:
    """pip's output for a message: its last TAIL characters, credentials masked, control characters escaped."""
    return printable(redact_text(text[-TAIL:]), newlines=True)


def install(
    prefix: Path,
    records: Sequence[PipRecord],
    urls: Mapping[str, str],
    cache: Path,
    staging: Path,
    fetch: Fetch,
    progress: Progress,
    environ: Mapping[str, str],
) -> PipReport:
    """Install every file of RECORDS that is not in place into PREFIX's python, proven by hash, staged in STAGING
    (the caller's private directory, which it removes). Raises IntegrityError, FetchError or PipInstallError
    (exit 2)."""
    kept = recorded(prefix)
    missing = [r for r in records if not in_place(prefix, r, kept)]  # a lost record: not in place, reinstalled
    done = tuple(f"{r.name} {r.version}" for r in records if r not in missing)
    if not missing:
        return PipReport((), done, 0)
    python = python_of(prefix)
    if not python.is_file() or not os.access(python, os.X_OK):
        raise PipInstallError(
            f"{str(prefix)!r} has no bin/python, so the lock's PyPI part ({', '.join(r.name for r in missing)}) "
            "cannot be installed. The lock's conda part must hold python and pip: regenerate the lock with "
            "envsolver make."
        )
    staging = Path(os.path.abspath(staging))  # pip runs in it: a relative path would name something under itself
    wheels = staging / "pypi"
    wheels.mkdir(mode=0o700, exist_ok=True)
    fetched = 0

    def counted(url: str, path: Path, sha256: str) -> None:
        nonlocal fetched
        fetched += 1
        fetch(url, path, sha256)

    staged = stage(missing, urls, cache, wheels, counted, progress)
    requirements = staging / "pypi-requirements.txt"
    files.write_new(requirements, requirements_text(missing))
    before = {r.name: pipfiles.identities(prefix, r.name) for r in missing}
    progress(f"pip: installing {', '.join(f'{r.name} {r.version}' for r in missing)} into {prefix} (by sha256)")
    # In the staging directory, which only this install can enter: core/pystart's private working directory.
    code, output = procrun.run(pip_argv(python, wheels, requirements), pip_env(environ), BUILD_TIMEOUT_S, staging)
    if code != 0:
        raise PipInstallError(
            f"pip could not install {', '.join(f'{r.name} {r.version}' for r in missing)} into {str(prefix)!r} "
            f"(exit {code}); the conda part is linked. pip said:\n{shown(output)}\nFix what pip names (a missing "
            "build tool is a gap in the lock's conda part: regenerate it with envsolver make), then run the same "
            "command again."
        )
    entries = {
        r.name: _entry(r, kept[r.name]["record"], kept[r.name]["dist_info"]) for r in records if r not in missing
    }
    for r in missing:
        try:
            found = pipfiles.prove(prefix, r.name, r.version, staged[r.name], before[r.name])
        except pipfiles.NotProven as exc:
            raise PipInstallError(
                f"pip ran, but {str(prefix)!r} does not hold {r.filename}'s files afterwards: {exc}. Nothing was "
                "recorded for it. Run the same command again; if it persists, check "
                "PREFIX/lib/python3*/site-packages."
            ) from None
        entries[r.name] = _entry(r, found.record_sha256, str(found.info.relative_to(prefix)))
    _save(prefix, entries)
    return PipReport(tuple(f"{r.name} {r.version}" for r in missing), done, fetched)
