"""A project's files on a Python package index: read from the index's simple page (PEP 503 HTML, which every
index and mirror serves) or from the bundled snapshot of PyPI's (PEP 691 JSON), every field checked against
its exact grammar before anything uses it.

A file is kept only with a sha256 (the index gives it in the link's `#sha256=` fragment): a file that cannot be
proven cannot be locked. Pure parsing, except `fetch`, which reads the page through envsolver.net.http (proxies,
certificates and credentials as for conda downloads), bounded in size and time.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envsolver.core.errors import BadInputError, EnvsolverError, Kind
from envsolver.core.redact import redact, redact_text

if TYPE_CHECKING:  # the page reader and the download pace only where a page is read, not for the bundled snapshot
    from envsolver.net.pace import Pace

PYPI = "https://pypi.org/simple"
INDEX_ENV = "ENVSOLVER_PYPI_INDEX"  # a site index or mirror (PEP 503 simple API); else PIP_INDEX_URL, else PyPI
MAX_PAGE_BYTES = 16 << 20  # deepspeed's simple page is 0.1 MiB; the largest projects' are a few MiB
TIMEOUT_S = 20.0
# The whole read of one page, every try included: past it, make locks from the bundled snapshot (its warning names
# the index). PyPI serves deepspeed's page in well under a second; 30 s is 16 MiB at 0.5 MiB/s.
DEADLINE_ENV = "ENVSOLVER_INDEX_DEADLINE"
DEADLINE_S = 30

# Sources: PEP 503 (normalized names: runs of -_. become -, lowercase), PEP 440 (versions, read by packaging),
# the binary distribution format spec (wheel file names: name-version(-build)?-python-abi-platform.whl,
# with '_' for '-' inside each part) and the sdist spec (name-version.tar.gz).
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_WHEEL = re.compile(
    r"(?P<name>[A-Za-z0-9._]+)-(?P<version>[A-Za-z0-9_.!+]+)(?:-[0-9][A-Za-z0-9_.]*)?"
    r"-(?P<py>[A-Za-z0-9_.]+)-(?P<abi>[A-Za-z0-9_.]+)-(?P<platform>[A-Za-z0-9_.]+)\.whl"
)
_SDIST = re.compile(r"(?P<name>[A-Za-z0-9._-]+?)-(?P<version>[A-Za-z0-9_.!+]+)\.tar\.gz")
# A package URL, a conda archive's (lockfile.py) or a PyPI file's: http(s) with a host (and user info, a port),
# or file: with a path. Path characters exclude quotes, spaces, '$', '`', ';', '#', '?' and the like: a package
# URL needs none of them.
URL = re.compile(
    r"(?:https?://(?:[A-Za-z0-9._~%+\-:]+@)?[A-Za-z0-9.\-]+(?::[0-9]{1,5})?|file://)(?:/[A-Za-z0-9._~%+=,!@:\-]+)+"
)


class IndexUnreadable(EnvsolverError):
    """The index could not be read, or answered something that is not a simple page (exit 2)."""

    kind: Kind = "fetch"
    status: int | None = None  # the index's HTTP status, where it answered one (404: it has no such project)


@dataclass(frozen=True)
class PypiFile:
    """One file of one release: its project (normalized), version (canonical), file name, URL (no fragment),
    sha256, Requires-Python (None when the index gives none) and whether the index marks it yanked."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str
    requires_python: str | None
    yanked: bool
    size: int | None = None  # bytes, where the index says (PEP 700's JSON does; PEP 503's HTML does not)
    # PEP 658/714: the index serves the file's core metadata at URL + ".metadata": its sha256, "" where the index
    # says so without a hash, None where it does not say so
    core_metadata: str | None = None

    @property
    def wheel(self) -> bool:
        return self.filename.endswith(".whl")

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "filename": self.filename,
            "url": self.url,
            "hashes": {"sha256": self.sha256},
            "requires-python": self.requires_python,
            "yanked": self.yanked,
        }
        if self.core_metadata is not None:
            doc["core-metadata"] = {"sha256": self.core_metadata} if self.core_metadata else True
        return doc


def core_metadata(value: object) -> str | None:
    """The sha256 of a file's core metadata as a page gives it (PEP 714's `data-core-metadata="sha256=..."` or
    `"true"`, PEP 691's `"core-metadata": {"sha256": ...}` or `true`); "" for one without a hash; None where the
    page gives none, or gives it in another form."""
    if value is True or value == "true":
        return ""
    if isinstance(value, str):
        algorithm, _, digest = value.partition("=")
        return digest if algorithm == "sha256" and _SHA256.fullmatch(digest) else None
    if isinstance(value, dict):
        given = value.get("sha256")
        return given if isinstance(given, str) and _SHA256.fullmatch(given) else None
    return None


def normalize(name: str) -> str:
    """PEP 503's normalized name: 'Py_CPUInfo' -> 'py-cpuinfo' (packaging's canonicalize_name)."""
    return str(canonicalize_name(name))


def valid_name(name: str) -> bool:
    """Whether `name` is a PEP 508 distribution name (letters, digits, '.', '_', '-'; a letter or digit at each end)."""
    return _NAME.fullmatch(name) is not None


def name_version(filename: str) -> tuple[str, str] | None:
    """(normalized name, canonical version) of a wheel or sdist file name; None when it is neither."""
    match = _WHEEL.fullmatch(filename) or _SDIST.fullmatch(filename)
    if match is None:
        return None
    try:
        version = str(Version(match.group("version")))
    except InvalidVersion:
        return None
    return normalize(match.group("name")), version


def check_file(project: str, filename: str, url: str, sha256: str, requires_python: str | None) -> str | None:
    """Why this index entry cannot be locked, or None when every field holds its grammar and it is a file of
    PROJECT."""
    found = name_version(filename)
    if found is None:
        return f"{filename[:200]!r} is not a wheel or sdist (.tar.gz) file name"
    if found[0] != normalize(project):
        return f"{filename!r} is not a file of {project}"
    if not _SHA256.fullmatch(sha256):
        return f"the sha256 of {filename!r} is not 64 lowercase hex digits"
    if len(url) > 4096 or not URL.fullmatch(url) or unquote(urlsplit(url).path).rsplit("/", 1)[-1] != filename:
        return f"the URL of {filename!r} ({redact(url)[:200]!r}) is not a plain http(s) or file URL ending in it"
    if requires_python is not None:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            return f"the Requires-Python of {filename!r} ({requires_python[:80]!r}) is not a version specifier"
    return None


def from_index(url: str) -> bool:
    """Whether a file URL an index page names may be locked: http(s) only. PyPI's files live on another host
    (files.pythonhosted.org), and a mirror's relative links (`../../packages/...`) stay on its own origin, which
    answers for every path of it; a `file:` URL would have the lock name a file of this machine that the remote
    page chose (the lock's own `file:` URLs come from --mirror, never from a page)."""
    return urlsplit(url).scheme in ("http", "https")


def parse_html(text: str, project: str, page_url: str) -> list[PypiFile]:
    """The files of a PEP 503 simple page that can be locked: a wheel or sdist of PROJECT with a sha256, at an
    http(s) URL (from_index). Entries that fail their grammar are left out (an index lists many files a plan
    never takes). Linear in the page's length (envsolver.net.anchors)."""
    from envsolver.net import anchors

    out = []
    for values in anchors.anchors(text):
        href = values.get("href") or ""
        if "#sha256=" not in href:  # not a lockable entry, whatever else it holds: no URL parsing for it
            continue
        url, fragment = urldefrag(urljoin(page_url, href))
        algorithm, _, digest = fragment.partition("=")
        filename = unquote(urlsplit(url).path).rsplit("/", 1)[-1]
        requires_python = values.get("data-requires-python")
        if algorithm != "sha256" or not from_index(url):
            continue
        if check_file(project, filename, url, digest, requires_python) is not None:
            continue
        name, version = name_version(filename) or ("", "")
        # PEP 714's data-core-metadata, else PEP 658's data-dist-info-metadata
        metadata = core_metadata(values.get("data-core-metadata", values.get("data-dist-info-metadata")))
        yanked = "data-yanked" in values
        out.append(PypiFile(name, version, filename, url, digest, requires_python, yanked, None, metadata))
    return out


def parse_json(doc: Mapping[str, Any], project: str) -> list[PypiFile]:
    """The files of a PEP 691 JSON simple page (the bundled snapshot's form) that can be locked."""
    out = []
    for item in doc.get("files") or []:
        if not isinstance(item, dict):
            continue
        filename, url = item.get("filename"), item.get("url")
        digest = (item.get("hashes") or {}).get("sha256")
        requires_python = item.get("requires-python")
        if not (isinstance(filename, str) and isinstance(url, str) and isinstance(digest, str)):
            continue
        if requires_python is not None and not isinstance(requires_python, str):
            continue
        if not from_index(url) or check_file(project, filename, url, digest, requires_python) is not None:
            continue
        name, version = name_version(filename) or ("", "")
        size = item.get("size")
        known = size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None
        metadata = core_metadata(item.get("core-metadata", item.get("dist-info-metadata")))
        yanked = bool(item.get("yanked"))
        out.append(PypiFile(name, version, filename, url, digest, requires_python, yanked, known, metadata))
    return out


def release_file(files: list[PypiFile], version: str) -> PypiFile | None:
    """The file of this release a lock takes: a pure-Python wheel (py3-none-any) where one exists, else the
    sdist; never a yanked file (PEP 592: an exact pin may take one, but a lock should not choose one)."""
    wanted = str(Version(version))
    mine = [f for f in files if f.version == wanted and not f.yanked]
    wheels = sorted(f.filename for f in mine if f.wheel and f.filename.endswith("-py3-none-any.whl"))
    sdists = sorted(f.filename for f in mine if not f.wheel)
    picks = wheels or sdists
    return next((f for f in mine if f.filename == picks[0]), None) if picks else None


def index_url(environ: Mapping[str, str]) -> str:
    """The simple index make reads: ENVSOLVER_PYPI_INDEX, else pip's PIP_INDEX_URL, else PyPI's."""
    return (environ.get(INDEX_ENV) or environ.get("PIP_INDEX_URL") or PYPI).strip().rstrip("/")


def deadline(environ: Mapping[str, str]) -> Pace:
    """How long one index read may take: $ENVSOLVER_INDEX_DEADLINE seconds, else DEADLINE_S. Raises BadInputError
    (exit 2) for a value that is not a whole number of seconds from 1 to 86400."""
    value = environ.get(DEADLINE_ENV, "").strip()
    if value and not (value.isascii() and value.isdigit() and len(value) <= 5 and 1 <= int(value) <= 86400):
        raise BadInputError(
            f"{DEADLINE_ENV}={value!r} is not a number of seconds. Set it to a whole number from 1 to 86400 (e.g. "
            f"export {DEADLINE_ENV}=120), or unset it for {DEADLINE_S} s."
        )
    seconds = int(value) if value else DEADLINE_S
    fix = f"If the index is only slow, allow it more time (export {DEADLINE_ENV}=SECONDS, now {seconds})."
    from envsolver.net.pace import Pace

    return Pace(deadline_s=float(seconds), deadline_fix=fix)


def fetch(project: str, index: str, environ: Mapping[str, str]) -> list[PypiFile]:
    """PROJECT's lockable files on INDEX, read from its simple page within its deadline (`deadline`). Raises
    IndexUnreadable (exit 2) when the page cannot be fetched in time, is larger than MAX_PAGE_BYTES (the download
    stops there) or is not text; BadInputError for an $ENVSOLVER_INDEX_DEADLINE that is not a number of seconds."""
    from envsolver.net import http  # urllib and ssl: only a live lock with a PyPI part needs them

    page = f"{index.rstrip('/')}/{normalize(project)}/"
    shown = redact_text(page)
    pace = deadline(environ)
    with tempfile.TemporaryDirectory(prefix="envsolver-pypi-") as tmp:
        target = Path(tmp) / "page.html"
        try:
            http.download(
                page, target, timeout=TIMEOUT_S, environ=environ, retry=http.Retry(attempts=2),
                ceiling=MAX_PAGE_BYTES, pace=pace,
            )  # fmt: skip
        except http.TooLarge:
            raise IndexUnreadable(
                f"the index page {shown!r} is larger than {MAX_PAGE_BYTES >> 20} MiB; it is not a simple page"
            ) from None
        except http.DownloadError as exc:
            unreadable = IndexUnreadable(str(exc))
            unreadable.status = exc.status
            raise unreadable from None
        with target.open("rb") as handle:
            data = handle.read(MAX_PAGE_BYTES)  # the download stopped at MAX_PAGE_BYTES
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise IndexUnreadable(f"the index page {shown!r} is not UTF-8 text; it is not a simple page") from None
    return parse_html(text, project, page)


def read_snapshot(path: Path, project: str) -> tuple[str, list[PypiFile]]:
    """(the date it was taken, the lockable files) of a bundled snapshot page. Raises OSError or ValueError
    when it cannot be read (an envsolver bug: tests read every bundled page)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    return str(doc["fetched"]), parse_json(doc, project)
