"""How many bytes a download may bring: the file's own size where it is known, else a ceiling.

A server that streams without end, or announces more than the file can hold, must not fill the disk. Each
download gets a Limit: the exact size of the file where its record says it (the bundled snapshot's repodata
record for a conda archive, a PyPI file's `size`), else the ceiling, $ENVSOLVER_MAX_DOWNLOAD, by default
DEFAULT_CEILING. The largest conda archive in the snapshot and in shared/realdata is 1,647,154,314 bytes
(pytorch-1.10.0-py3.8_cuda11.1_cudnn8.0.5_0.tar.bz2, the pytorch channel's repodata), so 4 GiB leaves room.
envsolver.net.http refuses a body past its limit (DownloadError, exit 2; the partial file is removed) and never
tries it again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from envsolver.core.errors import BadInputError
from envsolver.net.progress import size as shown_size

ENV = "ENVSOLVER_MAX_DOWNLOAD"
DEFAULT_CEILING = 4 << 30
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"([0-9]{1,16})([KMGT]?)(?:i?B)?", re.IGNORECASE)


@dataclass(frozen=True)
class Limit:
    """At most `bytes` bytes. `exact`: the file's size is known, so any byte past it is not the file."""

    bytes: int
    exact: bool = False

    def what(self) -> str:
        if self.exact:
            return f"{self.bytes} bytes, the size its record gives"
        return f"{shown_size(self.bytes)}, the download limit ({ENV})"

    def fix(self) -> str:
        if self.exact:
            return (
                "The server sends something other than the file the lock names: check the server, or fetch from "
                "another with --mirror FROM=TO."
            )
        return (
            f"If the file really is larger, raise the limit (e.g. export {ENV}=16G: bytes, or K, M, G, T) and run "
            "the same command again; else check the server, or fetch from another with --mirror FROM=TO."
        )


def for_file(known_size: int | None, ceiling: int) -> Limit:
    """The limit for one file: its size when known, else the ceiling."""
    return Limit(known_size, True) if known_size is not None else Limit(ceiling)


def ceiling(environ: Mapping[str, str]) -> int:
    """$ENVSOLVER_MAX_DOWNLOAD in bytes (K, M, G, T 1024-based), else DEFAULT_CEILING. Raises BadInputError
    (exit 2) for a value that is not a size of at least 1 KiB."""
    value = environ.get(ENV, "").strip()
    if not value:
        return DEFAULT_CEILING
    match = _SIZE.fullmatch(value)
    number = int(match.group(1)) * _UNITS[match.group(2).upper()] if match else 0
    if number < 1024:
        raise BadInputError(
            f"{ENV}={value!r} is not a download limit. Set it to a size of at least 1K, in bytes or with K, M, G or "
            f"T (1024-based), e.g. export {ENV}=16G, or unset it for {shown_size(DEFAULT_CEILING)}."
        )
    return number
