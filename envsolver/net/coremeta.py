"""A distribution's core metadata (a wheel's `*.dist-info/METADATA`, PEP 658's `.metadata` file, an sdist's
PKG-INFO), read from untrusted bytes: bounded, every field a lock uses held to its exact grammar.

Sample (accelerate 1.16.0's METADATA, its header block; the description follows a blank line):

    Metadata-Version: 2.1
    Name: accelerate
    Version: 1.16.0
    Requires-Python: >=3.10.0
    Requires-Dist: numpy<3.0.0,>=1.17
    Requires-Dist: torch>=2.0.0
    Requires-Dist: black~=23.1; extra == "quality"

Source: the core metadata specification (packaging.python.org/specifications/core-metadata): RFC 822 style
headers, one field per line, a value continued on lines that start with whitespace, the header block ending at
the first blank line; Name per PEP 503/508, Version per PEP 440, Requires-Dist per PEP 508, Requires-Python a
PEP 440 specifier set; Dynamic (metadata 2.2, PEP 643) names the fields an sdist's build may still change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

MAX_BYTES = 4 << 20  # transformers' METADATA is about 50 KiB, torch's 37 KiB; the description is not read
MAX_HEADER_BYTES = 1 << 20
MAX_REQUIRES = 2000  # the largest seen: a few hundred (extras of meta packages)
MAX_VALUE = 8192

_FIELD = re.compile(r"([A-Za-z][A-Za-z0-9-]{0,63}):[ \t]?(.*)")
_METADATA_VERSION = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")
# PEP 508's name (as pypi_index._NAME): letters, digits, '.', '_', '-', starting and ending with a letter or digit
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?")
# No control character in a value except the tab (a folded line's whitespace becomes one space).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# The fields a lock reads: their values are checked (length, control characters); the others (License, Summary,
# Description, Classifier ...) are kept out of every use, so any text of theirs is let be.
USED = frozenset({"metadata-version", "name", "version", "requires-dist", "requires-python", "dynamic"})


class BadMetadata(ValueError):
    """The bytes are not core metadata envsolver can use; the message says which field and why."""


@dataclass(frozen=True)
class CoreMetadata:
    """What a lock takes from core metadata: the name (normalized), the version (canonical), the run
    requirements (parsed), Requires-Python, and the fields Dynamic names (lowercase; sdists only)."""

    name: str
    version: str
    requires_dist: tuple[Requirement, ...]
    requires_python: SpecifierSet | None
    dynamic: frozenset[str]
    metadata_version: str


def parse(data: bytes, *, name: str | None = None, version: str | None = None) -> CoreMetadata:
    """The core metadata of these bytes; with `name` and `version`, they must be the distribution's own. Raises
    BadMetadata for bytes past MAX_BYTES, not UTF-8, a header line that is not a field, a value with a control
    character, a missing or malformed Metadata-Version, Name or Version, or a Requires-Dist or Requires-Python
    that is not its grammar."""
    if len(data) > MAX_BYTES:
        raise BadMetadata(f"the metadata is {len(data)} bytes, more than the {MAX_BYTES} allowed")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadMetadata(f"the metadata is not UTF-8 (byte {exc.start})") from None
    fields = _fields(text)
    meta_version = _one(fields, "metadata-version")
    if not _METADATA_VERSION.fullmatch(meta_version):
        raise BadMetadata(f"Metadata-Version {meta_version[:40]!r} is not MAJOR.MINOR")
    said_name = _one(fields, "name")
    if not _NAME.fullmatch(said_name):
        raise BadMetadata(f"Name {said_name[:80]!r} is not a distribution name")
    try:
        said_version = str(Version(_one(fields, "version")))
    except InvalidVersion:
        raise BadMetadata(f"Version {_one(fields, 'version')[:80]!r} is not a PEP 440 version") from None
    if name is not None and canonicalize_name(said_name) != canonicalize_name(name):
        raise BadMetadata(f"the metadata is {said_name!r}'s, not {name!r}'s")
    if version is not None and Version(said_version) != Version(version):
        raise BadMetadata(f"the metadata is of {said_name} {said_version}, not {version}")
    requires = fields.get("requires-dist", [])
    if len(requires) > MAX_REQUIRES:
        raise BadMetadata(f"{len(requires)} Requires-Dist fields, more than the {MAX_REQUIRES} allowed")
    parsed = []
    for value in requires:
        try:
            requirement = Requirement(value)
        except InvalidRequirement as exc:
            raise BadMetadata(f"Requires-Dist {value[:120]!r} is not a PEP 508 requirement ({exc})") from None
        if requirement.url is not None:
            raise BadMetadata(f"Requires-Dist {value[:120]!r} names a URL; a locked file's requirements name releases")
        parsed.append(requirement)
    python = None
    if "requires-python" in fields:
        value = _one(fields, "requires-python")
        try:
            python = SpecifierSet(value)
        except InvalidSpecifier:
            raise BadMetadata(f"Requires-Python {value[:80]!r} is not a version specifier") from None
    dynamic = frozenset(v.strip().lower() for v in fields.get("dynamic", []))
    return CoreMetadata(str(canonicalize_name(said_name)), said_version, tuple(parsed), python, dynamic, meta_version)


def _fields(text: str) -> dict[str, list[str]]:
    """Field name (lowercase) -> its values, in order, from the header block."""
    head = text.replace("\r\n", "\n").split("\n\n", 1)[0]
    if len(head.encode("utf-8")) > MAX_HEADER_BYTES:
        raise BadMetadata(f"the header block is more than {MAX_HEADER_BYTES} bytes")
    fields: dict[str, list[str]] = {}
    last: list[str] | None = None
    used = False
    for number, line in enumerate(head.removesuffix("\n").split("\n"), 1):
        if line[:1] in (" ", "\t") and last is not None:  # a folded value goes on
            if used:
                last[-1] = f"{last[-1]} {line.strip()}".strip()
                _check_value(last[-1], number)
            continue
        match = _FIELD.fullmatch(line)
        if match is None:
            raise BadMetadata(f"header line {number} ({line[:80]!r}) is not `Field: value`")
        key, value = match.group(1).lower(), match.group(2).strip()
        used = key in USED
        if used:
            _check_value(value, number)
        last = fields.setdefault(key, [])
        last.append(value if used else "")
    return fields


def _check_value(value: str, number: int) -> None:
    if len(value) > MAX_VALUE:
        raise BadMetadata(f"the value on header line {number} is more than {MAX_VALUE} characters")
    if _CONTROL.search(value):
        raise BadMetadata(f"the value on header line {number} holds a control character")


def _one(fields: dict[str, list[str]], key: str) -> str:
    values = fields.get(key, [])
    if len(values) != 1:
        raise BadMetadata(f"{len(values)} {key.title()} fields; expected one")
    return values[0]
