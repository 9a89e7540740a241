"""Value checks for the KB's PyPI rows (DeepSpeed's requirements and sdists, PyPI -> conda-forge names): converters
that raise ValueError with the reason, and the checks across rows. Pure; load.py applies them. packaging's
requirement parser is imported only when a row is read (a compiled KB never needs it: ~25 ms of a CLI start)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

from packaging.version import Version

_SHA256 = re.compile(r"[0-9a-f]{64}")
# conda package names: lower case letters, digits and . _ - (conda's MatchSpec name grammar, as written here)
_CONDA_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
PYPI_FILES = "https://files.pythonhosted.org/packages/"


def requirement(value: Any) -> str:
    """A PEP 508 requirement without extras or markers (a release's plain run requirement), as written."""
    from packaging.requirements import InvalidRequirement, Requirement

    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a PEP 508 requirement string")
    try:
        parsed = Requirement(value)
    except InvalidRequirement as exc:
        raise ValueError(f"not a PEP 508 requirement: {exc}") from None
    if parsed.extras or parsed.marker is not None or parsed.url:
        raise ValueError("extras or markers or URLs are not allowed here (name and version specifiers only)")
    return value


def requirements(value: Any) -> tuple[str, ...]:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    if not isinstance(value, list):
        raise ValueError("expected a list of PEP 508 requirement strings")
    found = tuple(requirement(v) for v in value)
    names = [canonicalize_name(Requirement(r).name) for r in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)} listed twice")
    return found


def pypi_name(value: Any) -> str:
    """A PyPI project name in its PEP 503 normalised form (py-cpuinfo, not Py_CPUInfo)."""
    from packaging.utils import canonicalize_name

    if not isinstance(value, str) or not value:
        raise ValueError("expected a PyPI project name")
    if canonicalize_name(value) != value:
        raise ValueError(f"{value!r} is not a normalised PyPI name (write {canonicalize_name(value)!r})")
    return value


def conda_name(value: Any) -> str:
    if not isinstance(value, str) or not _CONDA_NAME.fullmatch(value):
        raise ValueError("expected a conda package name (lower case letters, digits, '.', '_', '-')")
    return value


def sha256(value: Any) -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ValueError("expected 64 lower-case hex digits")
    return value


def sdist_url_problem(version: Version, url: str) -> str | None:
    """Why `url` is not PyPI's file for DeepSpeed `version`'s sdist, or None."""
    if not url.startswith(PYPI_FILES) or not url.endswith(f"/deepspeed-{version}.tar.gz"):
        return f"url {url!r} is not PyPI's file deepspeed-{version}.tar.gz ({PYPI_FILES}...)"
    return None


def overlaps(table: str, ranges: Iterable[tuple[Version, Version]]) -> list[str]:
    """Two release ranges (since, latest) that share a release."""
    ordered = sorted(ranges)
    return [
        f"{table} rows overlap: {a_since}-{a_latest} and {b_since}-{b_latest}"
        for (a_since, a_latest), (b_since, b_latest) in itertools.pairwise(ordered)
        if b_since <= a_latest
    ]


def duplicates(table: str, keys: Iterable[str]) -> list[str]:
    seen: list[str] = []
    problems = []
    for key in keys:
        if key in seen:
            problems.append(f"{table}: {key} listed twice")
        seen.append(key)
    return problems
