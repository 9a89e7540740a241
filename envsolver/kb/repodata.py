"""Channel records for the KB audit, read from repodata.json files (records.py says what a record states).

Reading raises BadInputError with the fix. Sample document (conda-forge linux-64, trimmed):
    {"info": {"subdir": "linux-64"}, "packages": {}, "packages.conda": {
      "pytorch-2.10.0-cuda130_mkl_py313_haca1682_303.conda": {"name": "pytorch", "version": "2.10.0",
        "build": "cuda130_mkl_py313_haca1682_303", "build_number": 303, "depends": ["cuda-version >=13.0,<14", …]}}}
"""

from __future__ import annotations

import bz2
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsolver.core.errors import BadInputError
from envsolver.kb.records import Record, dep_name

# conda-forge's linux-64 repodata.json was a few hundred MB in 2026; the limit stops /dev/zero, not it.
MAX_BYTES = 4 << 30
TABLES = ("packages", "packages.conda")
# The records the audit reads; of the others, only packages with a build that depends on cuda-version are kept
# (CUDA libraries, whose cuda-version floors a DeepSpeed build inherits).
AUDITED = frozenset({"pytorch", "deepspeed", "cuda-version"})
_FIX = (
    "Pass a repodata.json as the channel serves it, e.g. "
    "`curl -LO https://conda.anaconda.org/conda-forge/linux-64/repodata.json` "
    "(or its .bz2), as --repodata conda-forge=PATH."
)


@dataclass(frozen=True)
class RepoData:
    """Records of some channels and subdirs. `complete` names the (channel, subdir) pairs whose data holds every
    record the channel serves; in the others, a build the KB lists but the data lacks may merely be absent."""

    name: str
    records: tuple[Record, ...]
    present: frozenset[tuple[str, str]]
    complete: frozenset[tuple[str, str]]


def read_channel(channel: str, path: Path, complete: bool) -> RepoData:
    """The records of `path`: a repodata.json (or .json.bz2) file, a subdir folder holding one, or a channel
    folder with one per subdir. `complete`: the files hold every record the channel serves (a download of
    repodata.json); a current_repodata.json (the newest versions only) never does. Raises BadInputError
    (unreadable, not repodata) with the fix."""
    records: list[Record] = []
    present: set[tuple[str, str]] = set()
    whole: set[tuple[str, str]] = set()
    for file in _repodata_files(path):
        doc = _load(file)
        subdir = _subdir(doc, file)
        present.add((channel, subdir))
        if complete and not file.name.startswith("current_repodata"):
            whole.add((channel, subdir))
        records.extend(_records(doc, channel, subdir, file))
    return RepoData(f"{channel}={path}", _unique(records), frozenset(present), frozenset(whole))


def combine(parts: Iterable[RepoData], name: str | None = None) -> RepoData:
    """One RepoData of several; a record given twice (.tar.bz2 and .conda, or two files) is kept once."""
    parts = list(parts)
    return RepoData(
        name or ", ".join(p.name for p in parts),
        _unique(rec for part in parts for rec in part.records),
        frozenset().union(*(p.present for p in parts)),
        frozenset().union(*(p.complete for p in parts)),
    )


def _unique(records: Iterable[Record]) -> tuple[Record, ...]:
    seen: dict[tuple[str, str, str, str, str], Record] = {}
    for rec in records:
        seen.setdefault((rec.channel, rec.subdir, rec.name, rec.version, rec.build), rec)
    return tuple(seen.values())


def _repodata_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        for name in ("repodata.json", "repodata.json.bz2"):
            if (path / name).is_file():
                return [path / name]
        found = sorted(p for p in path.glob("*/repodata.json*") if p.name in ("repodata.json", "repodata.json.bz2"))
        if found:
            return found
    raise BadInputError(
        f"no repodata at {str(path)!r}: expected a repodata.json file, a subdir folder holding one, or a channel "
        f"folder with <subdir>/repodata.json. {_FIX}"
    )


def _load(file: Path) -> dict[str, Any]:
    try:
        opener: Any = bz2.open if file.name.endswith(".bz2") else open
        with opener(file, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise BadInputError(f"{str(file)!r} is larger than {MAX_BYTES >> 30} GiB: not a repodata.json. {_FIX}")
        doc = json.loads(data)
    except BadInputError:
        raise
    except (OSError, EOFError, ValueError, RecursionError) as exc:
        what = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise BadInputError(f"cannot read repodata {str(file)!r}: {what}. {_FIX}") from None
    if not isinstance(doc, dict) or not any(isinstance(doc.get(t), dict) for t in TABLES):
        raise BadInputError(f"{str(file)!r} is not a repodata.json: no 'packages' mapping. {_FIX}")
    return doc


def _subdir(doc: dict[str, Any], file: Path) -> str:
    info = doc.get("info")
    subdir = info.get("subdir") if isinstance(info, dict) else None
    if isinstance(subdir, str) and subdir:
        return subdir
    folder = file.parent.name
    if folder:
        return folder
    raise BadInputError(f"{str(file)!r} names no subdir (info.subdir) and is not in a subdir folder. {_FIX}")


def _records(doc: dict[str, Any], channel: str, subdir: str, file: Path) -> list[Record]:
    """The audited records of one repodata document, and every record of a package that has a build depending
    on cuda-version (the CUDA libraries whose floors a DeepSpeed build inherits). Raises BadInputError."""
    entries: list[tuple[str, dict[str, Any]]] = []
    cuda_names: set[str] = set()
    for table in TABLES:
        table_entries = doc.get(table, {})
        if not isinstance(table_entries, dict):
            raise BadInputError(f"{str(file)!r}: {table!r} is not a mapping of file name -> record. {_FIX}")
        for filename, raw in table_entries.items():
            where = f"{str(file)!r}: {table}[{str(filename)[:200]!r}]"
            if not isinstance(raw, dict):
                raise BadInputError(f"{where} is not a record (a mapping). {_FIX}")
            name, depends = raw.get("name"), raw.get("depends", [])
            if not isinstance(name, str) or not isinstance(depends, list):
                raise BadInputError(f"{where}: 'name' must be a string and 'depends' a list. {_FIX}")
            if not all(isinstance(d, str) for d in depends):
                raise BadInputError(f"{where}: 'depends' must hold strings only. {_FIX}")
            if any(dep_name(d) == "cuda-version" for d in depends):
                cuda_names.add(name)
            entries.append((where, raw))
    out = []
    for where, raw in entries:
        name = raw["name"]
        if name not in AUDITED and name not in cuda_names:
            continue
        version, build, number = raw.get("version"), raw.get("build"), raw.get("build_number", 0)
        stamp, rec_subdir = raw.get("timestamp"), raw.get("subdir", subdir)
        if not isinstance(version, str) or not isinstance(build, str) or type(number) is not int:
            raise BadInputError(f"{where}: 'version' and 'build' must be strings, 'build_number' an integer. {_FIX}")
        out.append(
            Record(
                channel,
                rec_subdir if isinstance(rec_subdir, str) else subdir,
                name,
                version,
                build,
                number,
                tuple(raw.get("depends", [])),
                stamp if type(stamp) is int else None,
            )
        )
    return out
