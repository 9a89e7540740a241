"""Install a lock's PyPI part into the environment's own python, after its conda part is linked.

Every file is fetched once into envsolver's cache (PYPI_CACHE under the cache directory), proven against the
lock's sha256 as it is copied into the install's private staging directory, and then installed by the env's
own `python -m pip` with nothing else to choose from: `--no-index --find-links STAGING`, `--require-hashes`
(pip proves each file again), `--no-deps` (the conda part holds the requirements; pip never replaces conda's
torch), `--no-build-isolation` (an sdist builds with the env's own setuptools, so nothing unlocked is
downloaded), `--isolated` (no pip configuration file or PIP_* variable of the user's takes part) and
`--no-cache-dir` (nothing is written outside the prefix and the staging directory). DeepSpeed's sdist is built
with DS_BUILD_OPS=0: the hook builds its ops for the target GPUs.

What was installed is recorded in PREFIX/etc/envsolver/pip-part.json (name, version, sha256), so a second run
with the same lock and the release still in site-packages changes nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envsolver.core import boundedread, procrun
from envsolver.core.errors import EnvsolverError, Kind
from envsolver.core.printable import printable
from envsolver.core.redact import redact, redact_text
from envsolver.install import pkgcache
from envsolver.lock import howto
from envsolver.lock.pypi.record import PipRecord
from envsolver.lock.writers import files, pipreqs
from envsolver.net import pypi_index as index

Progress = Callable[[str], None]
Fetch = Callable[[str, Path, str], None]  # fetch URL into the file at Path; the sha256 the file must have
RECORD = Path("etc") / "envsolver" / "pip-part.json"
CACHE = "pypi"  # the cache's directory of proven PyPI files
MAX_RECORD_BYTES = 1 << 20
MAX_METADATA_BYTES = 1 << 20
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


def _site_packages(prefix: Path) -> list[Path]:
    return sorted(p for p in (prefix / "lib").glob("python3*/site-packages") if p.is_dir())


def installed_version(prefix: Path, name: str) -> str | None:
    """The version of NAME (normalized) installed in PREFIX's site-packages, from its .dist-info/METADATA; None
    when it is not installed or cannot be read."""
    for site in _site_packages(prefix):
        for info in sorted(site.glob("*.dist-info")):
            dist, _, version = info.name[: -len(".dist-info")].partition("-")
            if index.normalize(dist) != name:
                continue
            found = _metadata_version(info / "METADATA")
            if found is not None:
                return found
            return version or None
    return None


def _metadata_version(path: Path) -> str | None:
    try:  # a regular file only: a FIFO or device in site-packages is refused at once (core.boundedread)
        head = boundedread.read_head(path, MAX_METADATA_BYTES).decode("utf-8", "replace")
    except (OSError, boundedread.Refused):
        return None
    for line in head.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip() or None
        if not line.strip():
            break
    return None


def recorded(prefix: Path) -> dict[str, dict[str, str]]:
    """name -> {version, sha256} of what envsolver installed into PREFIX's PyPI part (empty when it is missing or
    unreadable). Raises BadInputError (exit 2) when it is no regular file of at most MAX_RECORD_BYTES (a FIFO, a
    device: refused at once, core.boundedread)."""
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
        str(name): {"version": str(v.get("version")), "sha256": str(v.get("sha256"))}
        for name, v in packages.items()
        if isinstance(v, dict)
    }


def in_place(prefix: Path, record: PipRecord, kept: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether PREFIX holds exactly this file's release: envsolver installed this sha256 and site-packages still
    has the version."""
    mine = kept.get(record.name, {})
    return mine.get("sha256") == record.sha256 and installed_version(prefix, record.name) == record.version


def _save(prefix: Path, records: Sequence[PipRecord]) -> None:
    doc = {
        "packages": {
            r.name: {"version": r.version, "sha256": r.sha256, "file": r.filename, "url": redact(r.url)}
            for r in sorted(records, key=lambda r: r.name)
        }
    }
    (prefix / RECORD).parent.mkdir(parents=True, exist_ok=True)
    files.replace_with(prefix / RECORD, json.dumps(doc, indent=1, sort_keys=True) + "\n")


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
    """The one pip command: the staged files only, each by its hash, without dependencies or build isolation,
    ignoring the user's pip configuration, writing no cache."""
    return [
        str(python), "-m", "pip", "--isolated", "--disable-pip-version-check", "--no-input", "install",
        *howto.PIP_FLAGS, "--no-index", "--find-links", str(staging), "--no-cache-dir", "--no-warn-script-location",
        "-r", str(requirements),
    ]  # fmt: skip


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
    missing = [r for r in records if not in_place(prefix, r, kept)]
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
    wheels = staging / "pypi"
    wheels.mkdir(mode=0o700, exist_ok=True)
    fetched = 0

    def counted(url: str, path: Path, sha256: str) -> None:
        nonlocal fetched
        fetched += 1
        fetch(url, path, sha256)

    stage(missing, urls, cache, wheels, counted, progress)
    requirements = staging / "pypi-requirements.txt"
    files.write_new(requirements, requirements_text(missing))
    progress(f"pip: installing {', '.join(f'{r.name} {r.version}' for r in missing)} into {prefix} (by sha256)")
    code, output = procrun.run(pip_argv(python, wheels, requirements), pip_env(environ), BUILD_TIMEOUT_S)
    if code != 0:
        raise PipInstallError(
            f"pip could not install {', '.join(f'{r.name} {r.version}' for r in missing)} into {str(prefix)!r} "
            f"(exit {code}); the conda part is linked. pip said:\n{shown(output)}\nFix what pip names (a missing "
            "build tool is a gap in the lock's conda part: regenerate it with envsolver make), then run the same "
            "command again."
        )
    wrong = [r for r in missing if installed_version(prefix, r.name) != r.version]
    if wrong:
        raise PipInstallError(
            f"pip ran, but {str(prefix)!r} does not hold {', '.join(f'{r.name} {r.version}' for r in wrong)} "
            "afterwards. Run the same command again; if it persists, check PREFIX/lib/python3*/site-packages."
        )
    _save(prefix, records)
    return PipReport(tuple(f"{r.name} {r.version}" for r in missing), done, fetched)
