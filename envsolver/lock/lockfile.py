"""Read a lock back: conda-lock.yml (conda-lock's models) or an explicit file. Pure parsing.

Every field of every entry is checked against its exact grammar before anything uses it: the package name,
version and build string, the platform and subdir, md5 (32 hex) and sha256 (64 hex), and the URL, which must be
scheme://…/<subdir>/<name>-<version>-<build>.conda (or .tar.bz2) naming the same package as the entry. A bad
field raises BadInputError naming the lock, the entry and the value (URLs without their credentials).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from envsolver.core import safeyaml
from envsolver.core.archlist import parse_arch_list
from envsolver.core.errors import BadInputError
from envsolver.core.redact import redact
from envsolver.kb.model import PLATFORMS
from envsolver.lock.pypi.record import PipRecord
from envsolver.net import pypi_index as index

MAX_BYTES = 32 << 20  # the a100 lock is 70 KiB
LIMITS = safeyaml.Limits(chars=MAX_BYTES, depth=16, aliases=100, nodes=4_000_000)

# Source: conda's KNOWN_SUBDIRS (conda/base/constants.py). A lock may list any of them; envsolver installs
# only PLATFORMS, and an entry's archive comes from its platform's subdir or noarch.
KNOWN_SUBDIRS = (
    "noarch", "emscripten-wasm32", "wasi-wasm32", "freebsd-64", "linux-32", "linux-64", "linux-aarch64",
    "linux-armv6l", "linux-armv7l", "linux-ppc64", "linux-ppc64le", "linux-riscv64", "linux-s390x", "osx-64",
    "osx-arm64", "win-32", "win-64", "win-arm64", "zos-z",
)  # fmt: skip

# Sources: conda's package-name rules (conda-build "Package naming conventions": lowercase, digits, '_', '.',
# '-'), its version grammar (conda.models.version: alphanumeric components separated by '.' or '_', an
# optional 'N!' epoch and '+local' tail; no '-', which separates name, version and build in a file name) and
# build strings (letters, digits, '_', '.', '+'). Checked against every record of the bundled snapshot.
_NAME = re.compile(r"[a-z0-9_][a-z0-9_.\-]{0,127}")
_COMPONENTS = r"[0-9A-Za-z]+(?:[._][0-9A-Za-z]+)*"
_VERSION = re.compile(rf"(?:[0-9]{{1,9}}!)?{_COMPONENTS}(?:\+{_COMPONENTS})?")
_BUILD = re.compile(r"[A-Za-z0-9_.+]{1,128}")
_MD5 = re.compile(r"[0-9a-f]{32}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_URL = index.URL  # a conda archive's URL and a PyPI file's have one grammar
_FILE = re.compile(r"(?P<stem>.+)(?P<ext>\.conda|\.tar\.bz2)")
_DEPENDS = re.compile(r"[A-Za-z0-9_.*,<>=!|~+\- ]{0,256}")
_METADATA_KEY = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_EXPLICIT_LINE = re.compile(r"(?P<url>[^\s#]+)(?:#(?:sha256[=:](?P<sha256>[0-9a-f]{64})|(?P<md5>[0-9a-f]{32})))?")
# conda-lock's explicit form of a PyPI file (render_lockfile_for_platform, kind explicit): `# pip NAME @ URL#sha256=H`.
_EXPLICIT_PIP = re.compile(r"# pip (?P<name>\S+) @ (?P<url>[^\s#]+)#sha256=(?P<sha256>[0-9a-f]{64})")
_PIP_SPECIFIER = re.compile(r"\*|[A-Za-z0-9_.*,<>=!~+ ]{1,256}")
MAX_FIELD = 128


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
    """A lock read back: the platform chosen, its conda entries, the custom_metadata (empty for explicit locks)
    and its PyPI part (conda-lock's `manager: pip` entries, or an explicit lock's `# pip` lines)."""

    platform: str
    entries: list[LockEntry]
    metadata: dict[str, str]
    pip: tuple[PipRecord, ...] = ()


def split_file_name(file_name: str) -> tuple[str, str, str]:
    """'pytorch-2.10.0-cuda129_mkl_py313_h623d66f_303.conda' -> ('pytorch', '2.10.0', 'cuda129_…_303')."""
    match = _FILE.fullmatch(file_name)
    parts = match.group("stem").rsplit("-", 2) if match else []
    if len(parts) != 3:
        raise BadInputError(
            f"{file_name!r} is not a conda package file name (name-version-build.conda). "
            "Fix the lock file or regenerate it with envsolver make."
        )
    return parts[0], parts[1], parts[2]


def read(path: Path, platform: str | None) -> Lock:
    """A conda-lock.yml or explicit lock, parsed once and every field checked; a path that is not a regular file (a
    FIFO, a device) is refused before anything waits on it (core.boundedread). Raises BadInputError (exit 2)."""
    where = repr(str(path))
    try:
        text = safeyaml.read_text(path, MAX_BYTES)
    except OSError as exc:
        raise BadInputError(
            f"cannot read lock {where}: {exc.strerror}. Pass the path of a conda-lock.yml "
            "or conda-<platform>.lock written by envsolver make."
        ) from None
    except safeyaml.SafeYamlError as exc:
        raise BadInputError(f"lock {where} is {exc}. Pass a conda-lock.yml or conda-<platform>.lock.") from None
    if any(line.strip() == "@EXPLICIT" for line in text.splitlines()):
        return _explicit(text, where, platform)
    return _conda_lock(text, where, platform)


def read_whole(path: Path, platform: str | None) -> Lock:
    """read(), for a lock that is installed or verified: refused first when a file beside it names another set than
    its own (writers/setmark.py: copied from another run, or left by a make that was stopped). Raises
    BadInputError (exit 2) naming the files."""
    from envsolver.lock.writers import setmark

    refused = setmark.refusal(path)
    if refused is not None:
        raise BadInputError(refused)
    return read(path, platform)


def _fail(where: str, problem: str) -> BadInputError:
    return BadInputError(f"{where}: {problem}. Fix the entry, or regenerate the lock with envsolver make.")


def _entry(
    where: str,
    url: str,
    platform: str,
    md5: str | None,
    sha256: str | None,
    given: tuple[str | None, str | None, str | None] = (None, None, None),
    depends: tuple[str, ...] = (),
) -> LockEntry:
    """One entry, every field checked; `given` is (name, version, build) as the lock states them, if it does."""
    if md5 is None and sha256 is None:
        raise _fail(where, "has no md5 or sha256, so its archive cannot be verified")
    if md5 is not None and not _MD5.fullmatch(md5):
        raise _fail(where, f"md5 {md5[:80]!r} is not 32 lowercase hex digits")
    if sha256 is not None and not _SHA256.fullmatch(sha256):
        raise _fail(where, f"sha256 {sha256[:80]!r} is not 64 lowercase hex digits")
    if len(url) > 4096 or not _URL.fullmatch(url):
        raise _fail(
            where,
            f"URL {redact(url)!r} is not http(s)://host/…/SUBDIR/NAME-VERSION-BUILD.conda (or .tar.bz2, or a "
            "file:// path) in plain URL characters",
        )
    segments = urlsplit(url).path.split("/")
    if len(segments) < 3 or not segments[-2]:
        raise _fail(where, f"URL {redact(url)!r} has no SUBDIR/ before its file name")
    subdir, file_name = segments[-2], segments[-1]
    match = _FILE.fullmatch(file_name)
    if not match:
        raise _fail(where, f"file name {file_name!r} does not end in .conda or .tar.bz2")
    found = match.group("stem").rsplit("-", 2)
    if len(found) != 3:
        raise _fail(where, f"file name {file_name!r} is not NAME-VERSION-BUILD.conda")
    for field, stated, value in zip(_FIELDS, given, found, strict=True):
        if stated is not None:
            _check_field(where, field, stated)
        _check_field(where, field, value)
        if stated is not None and stated != value:
            raise _fail(where, f"{field} {stated!r} does not match its file name {file_name!r}")
    if subdir not in (platform, "noarch"):
        raise _fail(where, f"subdir {subdir!r} in its URL is not {platform} or noarch")
    return LockEntry(found[0], found[1], found[2], subdir, platform, url, md5, sha256, depends)


_FIELDS = ("name", "version", "build")
_EXPECTED = {
    "name": "a conda package name (lowercase letters, digits, '_', '.', '-')",
    "version": "a conda version (letters and digits separated by '.' or '_', such as '2.5.1')",
    "build": "a conda build string (letters, digits, '_', '.', '+')",
}


def well_formed(field: str, value: str) -> bool:
    """Whether VALUE is a conda package name, version or build string (FIELD: "name", "version", "build") by the
    grammar every lock entry is held to."""
    grammar = {"name": _NAME, "version": _VERSION, "build": _BUILD}[field]
    return isinstance(value, str) and len(value) <= MAX_FIELD and grammar.fullmatch(value) is not None


def _check_field(where: str, field: str, value: str) -> None:
    if not well_formed(field, value):
        raise _fail(where, f"{field} {value[:MAX_FIELD]!r} is not {_EXPECTED[field]}")


def _platform(where: str, platform: str) -> str:
    if platform not in PLATFORMS:
        raise BadInputError(
            f"{where} is for {platform[:80]!r}; envsolver installs {' and '.join(PLATFORMS)} environments. "
            f"Make a lock for one of them: envsolver make --platform {PLATFORMS[0]} (with your --gpu options)."
        )
    return platform


def _explicit(text: str, where: str, platform: str | None) -> Lock:
    declared = next(
        (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("# platform:")), None
    )
    if declared:
        _platform(where, declared)
    if platform and declared and platform != declared:
        raise BadInputError(
            f"{where} is for {declared!r}, not {platform}. Pass --platform {declared} or the lock for your platform."
        )
    chosen = platform or declared
    if not chosen:
        raise BadInputError(f"{where} names no platform. Pass --platform linux-64 (or linux-aarch64).")
    chosen = _platform(where, chosen)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "@EXPLICIT") + 1
    entries = []
    pip = []
    for number, raw in enumerate(lines[start:], start=1):
        line = raw.strip()
        here = f"{where}: line {number} after @EXPLICIT"
        if line.startswith("# pip "):
            found = _EXPLICIT_PIP.fullmatch(line)
            if not found:
                raise _fail(here, f"is not `# pip NAME @ URL#sha256=HASH`: {redact(line)[:300]!r}")
            pip.append(_pip_entry(here, found.group("name"), None, found.group("url"), found.group("sha256"), {}))
            continue
        if not line or line.startswith("#"):
            continue
        match = _EXPLICIT_LINE.fullmatch(line)
        if not match:
            raise _fail(here, f"is not `url#md5`: {redact(line)!r}")
        entries.append(_entry(here, match.group("url"), chosen, match.group("md5"), match.group("sha256")))
    return Lock(chosen, _checked(where, entries, chosen), {}, _pip_checked(where, pip))


def _checked(where: str, entries: list[LockEntry], platform: str) -> list[LockEntry]:
    """The platform's entries: at least one, each name once."""
    if not entries:
        raise BadInputError(f"{where} has no packages for {platform}. Regenerate it with envsolver make.")
    _once(where, [e.name for e in entries], f"{{!r}} twice for {platform}")
    return entries


def _once(where: str, names: list[str], twice: str) -> None:
    """Raise BadInputError for the first name listed twice (TWICE: how the message says it, `{!r}` the name)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise _fail(where, "lists " + twice.format(name))
        seen.add(name)


def _model(text: str, where: str) -> Any:
    """conda-lock's Lockfile (v2 in memory) from the text; raises BadInputError with pydantic's findings."""
    from conda_lock.lockfile.v1.models import Lockfile as LockfileV1
    from conda_lock.lockfile.v2prelim.models import Lockfile, lockfile_v1_to_v2
    from pydantic import ValidationError

    fix = "Regenerate it with envsolver make."
    try:
        content = safeyaml.load(text, LIMITS)
    except safeyaml.SafeYamlError as exc:
        raise BadInputError(f"{where} is not a conda-lock.yml: {exc}. {fix}") from None
    if not isinstance(content, dict):
        raise BadInputError(f"{where} is not a conda-lock.yml (no mapping at the top). {fix}")
    version = content.pop("version", None)
    if version not in (1, 2) or isinstance(version, bool):
        raise BadInputError(f"{where} has lock version {version!r}; conda-lock reads 1 and 2. {fix}")
    try:
        if version == 1:
            lockfile = lockfile_v1_to_v2(LockfileV1.model_validate(content))
        else:
            lockfile = Lockfile.model_validate(content)
        lockfile.toposort_inplace()
    except ValidationError as exc:
        # Field locations and messages only: the offending values may hold credentials.
        found = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_input=False)[:3]
        )
        raise BadInputError(f"{where} is not a conda-lock.yml conda-lock can read ({found}). {fix}") from None
    except Exception as exc:  # conda-lock's conversion and sorting raise their own errors
        raise BadInputError(
            f"{where} is not a conda-lock.yml conda-lock can read ({type(exc).__name__}). {fix}"
        ) from None
    return lockfile


def _conda_lock(text: str, where: str, platform: str | None) -> Lock:
    lockfile = _model(text, where)
    platforms = list(lockfile.metadata.platforms)
    if not platforms:
        raise BadInputError(f"{where} lists no platforms (metadata.platforms). Regenerate it with envsolver make.")
    unknown = [p for p in platforms if p not in KNOWN_SUBDIRS or p == "noarch"]
    if unknown:
        raise BadInputError(f"{where} lists unknown platform(s) {unknown}. Regenerate it with envsolver make.")
    if platform is None:
        if len(platforms) != 1:
            raise BadInputError(f"{where} locks {', '.join(platforms)}. Pass --platform with one of them.")
        platform = platforms[0]
    if platform not in platforms:
        raise BadInputError(
            f"{where} has no {platform} packages (it locks {', '.join(platforms)}). Pass --platform {platforms[0]}."
        )
    platform = _platform(where, platform)
    entries = []
    pip: list[PipRecord] = []
    for number, dep in enumerate(lockfile.package, start=1):
        here = f"{where}: package {number} ({str(dep.name)[:MAX_FIELD]!r})"
        if dep.platform not in platforms:
            raise _fail(here, f"is for platform {dep.platform!r}, which metadata.platforms does not list")
        if dep.manager == "pip":
            if dep.platform == platform:
                pip.append(_pip_entry(here, dep.name, dep.version, dep.url, dep.hash.sha256, dep.dependencies))
            continue
        if dep.manager != "conda":
            raise _fail(here, f"manager {str(dep.manager)[:40]!r} is neither conda nor pip")
        depends = tuple(_depends(here, dep.dependencies))
        entry = _entry(
            here, dep.url, dep.platform, dep.hash.md5, dep.hash.sha256, (dep.name, dep.version, dep.build), depends
        )
        if dep.platform == platform:
            entries.append(entry)
    return Lock(
        platform,
        _checked(where, entries, platform),
        _metadata(where, lockfile.metadata.custom_metadata),
        _pip_checked(where, pip),
    )


def _pip_entry(
    where: str, name: str, version: str | None, url: str, sha256: str | None, dependencies: dict[str, str]
) -> PipRecord:
    """One PyPI file of a lock, every field checked: a normalized project name, a PEP 440 version, an http(s)
    or file URL ending in a wheel or sdist of that release, a sha256, and plain requirement specifiers."""
    if not isinstance(name, str) or len(name) > MAX_FIELD or index.normalize(name) != name or not _NAME.fullmatch(name):
        raise _fail(where, f"PyPI name {str(name)[:MAX_FIELD]!r} is not a normalized project name (PEP 503)")
    if sha256 is None or not _SHA256.fullmatch(sha256):
        raise _fail(where, "has no sha256 (64 lowercase hex digits), so its file cannot be verified")
    filename = urlsplit(url).path.rsplit("/", 1)[-1] if isinstance(url, str) else ""
    problem = index.check_file(name, filename, url, sha256, None) if filename else "it has no file name"
    if problem is not None:
        raise _fail(where, problem)
    found = index.name_version(filename)
    if found is None or (version is not None and found[1] != _canonical(version)):
        raise _fail(where, f"version {str(version)[:MAX_FIELD]!r} does not match its file name {filename!r}")
    deps = []
    for dep, spec in sorted(dependencies.items()):
        if index.normalize(dep) != dep or not _NAME.fullmatch(dep) or not _PIP_SPECIFIER.fullmatch(spec):
            raise _fail(where, f"dependency {dep[:MAX_FIELD]!r}: {spec[:MAX_FIELD]!r} is not a name and specifier")
        deps.append((dep, spec))
    return PipRecord(name, found[1], filename, url, sha256, tuple(deps))


def _canonical(version: str) -> str | None:
    from packaging.version import InvalidVersion, Version

    try:
        return str(Version(version))
    except InvalidVersion:
        return None


def _pip_checked(where: str, pip: list[PipRecord]) -> tuple[PipRecord, ...]:
    _once(where, [r.name for r in pip], "the PyPI package {!r} twice")
    return tuple(pip)


def _depends(where: str, dependencies: dict[str, str]) -> list[str]:
    out = []
    for name, spec in sorted(dependencies.items()):
        if not _NAME.fullmatch(name) or not _DEPENDS.fullmatch(spec):
            raise _fail(where, f"dependency {name!r}: {spec!r} is not a conda package name and version spec")
        out.append(f"{name} {spec}".strip())
    return out


ARCH_LIST_KEY = "envsolver_torch_cuda_arch_list"


def _metadata(where: str, custom: dict[str, str] | None) -> dict[str, str]:
    """custom_metadata: plain keys, one-line values, and an arch list the hook can use."""
    out: dict[str, str] = {}
    for key, value in (custom or {}).items():
        if not _METADATA_KEY.fullmatch(key) or len(value) > 4096 or _CONTROL.search(value):
            raise BadInputError(
                f"{where}: custom_metadata {key[:128]!r} is not a plain key with a one-line value. "
                "Regenerate the lock with envsolver make."
            )
        out[key] = value
    if ARCH_LIST_KEY in out:
        try:
            parse_arch_list(out[ARCH_LIST_KEY])
        except ValueError as exc:
            raise BadInputError(
                f"{where}: custom_metadata {ARCH_LIST_KEY} {out[ARCH_LIST_KEY]!r} is not an arch list such as "
                f"'8.0;9.0+PTX' ({exc}). Regenerate the lock with envsolver make."
            ) from None
    return out


def mirrored(url: str, mirrors: dict[str, str]) -> str:
    """URL with its prefix rewritten by the first --mirror FROM=TO that matches (a site mirror), else as it is."""
    for old, new in mirrors.items():
        if url.startswith(old.rstrip("/") + "/"):
            return new.rstrip("/") + url[len(old.rstrip("/")) :]
    return url


def apply_mirrors(entries: list[LockEntry], mirrors: dict[str, str]) -> list[LockEntry]:
    """Rewrite URL prefixes (FROM -> TO), e.g. to a site mirror, at install time."""
    out = []
    for entry in entries:
        out.append(dataclasses.replace(entry, url=mirrored(entry.url, mirrors)))
    return out
