"""The bundled offline snapshot: real channel records (see data/provenance.json) as local channels.

`scripts/build_snapshot.py` writes data/ from shared/realdata; nothing here edits a record.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envsolver.kb.repodata import RepoData


@dataclass(frozen=True)
class SnapshotRecord:
    channel: str
    subdir: str
    name: str
    version: str
    build: str
    depends: tuple[str, ...] = ()
    constrains: tuple[str, ...] = ()


def data_dir() -> Path:
    return Path(str(resources.files("envsolver.lock.snapshot").joinpath("data")))


@lru_cache(maxsize=1)
def provenance() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((data_dir() / "provenance.json").read_text(encoding="utf-8"))
    return doc


def date() -> str:
    """The snapshot's date: the newest record's timestamp, as YYYY-MM-DD."""
    ms = int(provenance()["newest_record_timestamp_ms"])
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).strftime("%Y-%m-%d")


def channels() -> dict[str, str]:
    """Public channel URL -> local file:// URL of its copy in the snapshot."""
    public: dict[str, str] = provenance()["channels"]
    return {url: (data_dir() / name).as_uri() for name, url in public.items()}


@lru_cache(maxsize=1)
def records() -> tuple[SnapshotRecord, ...]:
    out = []
    for name in provenance()["channels"]:
        for path in sorted((data_dir() / name).glob("*/repodata.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            for table in ("packages", "packages.conda"):
                for rec in doc.get(table, {}).values():
                    depends, constrains = tuple(rec.get("depends", ())), tuple(rec.get("constrains", ()))
                    out.append(
                        SnapshotRecord(
                            name, rec["subdir"], rec["name"], rec["version"], rec["build"], depends, constrains
                        )
                    )
    return tuple(out)


@lru_cache(maxsize=1)
def _sizes() -> dict[str, int]:
    out: dict[str, int] = {}
    for name in provenance()["channels"]:
        for path in sorted((data_dir() / name).glob("*/repodata.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            for table in ("packages", "packages.conda"):
                for rec in doc.get(table, {}).values():
                    size = rec.get("size")
                    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
                        for key in ("sha256", "md5"):
                            if isinstance(rec.get(key), str):
                                out[rec[key].lower()] = size
    return out


def size_of(sha256: str | None, md5: str | None) -> int | None:
    """The size in bytes the snapshot's repodata records for the archive with this sha256 (else this md5);
    None when no record of the snapshot is that archive."""
    sizes = _sizes()
    for digest in (sha256, md5):
        if digest and digest.lower() in sizes:
            return sizes[digest.lower()]
    return None


def snapshot_data() -> RepoData:
    """The bundled offline snapshot (envsolver/lock/snapshot/data): real records, but only those that lock files and
    repodata in shared/realdata carried, so partial for every channel and subdir."""
    from envsolver.kb.repodata import combine, read_channel

    parts = [read_channel(name, data_dir() / name, complete=False) for name in provenance()["channels"]]
    return combine(parts, f"the bundled snapshot ({date()})")
