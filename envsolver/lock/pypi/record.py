"""One locked PyPI file, as the lock holds it: what the writers, the lock reader, install and verify share.
Standard library only, so that importing it costs the commands that never read an index nothing."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PipRecord:
    """One locked PyPI file: the release, its file name and URL (credentials kept for the fetch; written files
    get redact()), its sha256, and its run requirements as conda-lock writes them (name -> specifier, '*' for
    any)."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str
    dependencies: tuple[tuple[str, str], ...] = ()
