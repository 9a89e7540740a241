"""The bundled snapshot of PyPI (scripts/build_pypi_snapshot.py writes it; nothing is edited by hand): real simple
pages (PEP 691 JSON, the files of the releases kept, with their sha256 and, for the files whose requirements a lock
reads, the sha256 of their core metadata) in data/PROJECT.json, and those core metadata files, byte for byte as
their wheels hold them, in data/metadata/SHA256.metadata.

Served to uv on loopback (loopback.py) when the PyPI part is locked offline, and read for the locked files'
requirements; a file uv chose from the loopback index is mapped back to its real PyPI URL by its sha256.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from envsolver.net import pypi_index as index

_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_METADATA = 4 << 20


def data_dir() -> Path:
    from importlib import resources

    return Path(str(resources.files("envsolver.lock.pypi").joinpath("data")))


@lru_cache(maxsize=512)
def page(project: str) -> tuple[str, tuple[index.PypiFile, ...]] | None:
    """(the date it was taken, its lockable files) of PROJECT's bundled page; None when the snapshot has none.
    Raises OSError or ValueError for a page that cannot be read (an envsolver bug: tests read every page)."""
    name = index.normalize(project)
    path = data_dir() / f"{name}.json"
    if not index.valid_name(name) or not path.is_file():
        return None
    date, files = index.read_snapshot(path, name)
    return date, tuple(files)


def date() -> str:
    """The newest date of the bundled pages (the snapshot's date)."""
    return max(index.read_snapshot(p, p.stem)[0] for p in sorted(data_dir().glob("*.json")))


def metadata(sha256: str) -> bytes | None:
    """The bundled core metadata file with this sha256; None when the snapshot holds none."""
    if not _SHA256.fullmatch(sha256):
        return None
    path = data_dir() / "metadata" / f"{sha256}.metadata"
    if not path.is_file():
        return None
    with path.open("rb") as handle:
        return handle.read(MAX_METADATA)


def by_sha256(project: str, sha256: str) -> index.PypiFile | None:
    """The file of PROJECT's bundled page with this sha256 (its real PyPI URL); None when there is none."""
    found = page(project)
    return next((f for f in found[1] if f.sha256 == sha256), None) if found else None
