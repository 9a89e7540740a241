"""Channel records for the KB audit: read from repodata.json files, and the facts a record states.

A record here keeps what the audit compares: name, version, build string and number, and its run
dependencies (`depends`), as the channel serves them (hotfixes applied). Reading raises BadInputError with
the fix; every other function is pure.

Sample dependencies, from conda-forge's pytorch-2.10.0-cuda130_mkl_py313_haca1682_303 and the pytorch
channel's pytorch-2.1.0-py3.10_cuda12.1_cudnn8.9.2_0:
    "cuda-version >=13.0,<14"   "libcudnn >=9.19.0.56,<10.0a0"   "__glibc >=2.28,<3.0.a0"
    "python_abi 3.13.* *_cp313"   "arm-variant * sbsa"   "pytorch-cuda >=12.1,<12.2"
"""

from __future__ import annotations

import bz2
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from envsolver import snapshot
from envsolver.errors import BadInputError
from envsolver.versions import MajorMinor

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
_CUDA_BUILD = re.compile(r"(?:^|_)cuda([0-9]+(?:\.[0-9]+)?)")
_MM = re.compile(r"([0-9]{1,9})(?:\.([0-9]{1,9}))?")


@dataclass(frozen=True)
class Record:
    channel: str
    subdir: str
    name: str
    version: str
    build: str
    build_number: int
    depends: tuple[str, ...]
    timestamp: int | None = None

    @property
    def label(self) -> str:
        """'conda-forge/linux-64 pytorch-2.10.0-cuda130_mkl_py313_haca1682_303'."""
        return f"{self.channel}/{self.subdir} {self.name}-{self.version}-{self.build}"


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


# ---- what a record states (pure) ----


def dep_name(dep: str) -> str:
    return dep.split(maxsplit=1)[0] if dep.strip() else ""


def deps_of(rec: Record, name: str) -> list[tuple[str, str]]:
    """(version spec, build spec) of every dependency of `rec` on `name`; '' where absent."""
    out = []
    for dep in rec.depends:
        parts = dep.split()
        if parts and parts[0] == name:
            out.append((parts[1] if len(parts) > 1 else "", parts[2] if len(parts) > 2 else ""))
    return out


def major_minor(text: str) -> MajorMinor | None:
    """The leading major[.minor] of a conda version: '9.10.2.21' -> 9.10, '12' -> 12.0, '12.2a.0' -> 12.2."""
    match = _MM.match(text.strip())
    return MajorMinor(int(match.group(1)), int(match.group(2) or 0)) if match else None


def lower_bound(spec: str) -> str | None:
    """The lowest version a spec admits: '>=9.7.1.26,<10.0a0' -> '9.7.1.26', '3.13.*' -> '3.13', '2.1.2' ->
    '2.1.2'; None for '*', an upper bound only, or alternatives ('|'), which the audit does not read."""
    if not spec or "|" in spec:
        return None
    for part in spec.split(","):
        part = part.strip()
        if part.startswith(">="):
            return part[2:]
        if part.startswith("=="):
            return part[2:]
        if part and part[0].isdigit():
            return part.removesuffix(".*").removesuffix("*")
    return None


def upper_bound(spec: str) -> str | None:
    """'>=12.9,<13' -> '13'; None when the spec has no '<' bound."""
    for part in spec.split(","):
        part = part.strip()
        if part.startswith("<") and not part.startswith("<="):
            return part[1:]
    return None


def floor(rec: Record, *names: str) -> tuple[MajorMinor, str] | None:
    """The highest major.minor lower bound `rec`'s dependencies on `names` set, and the dependency's text:
    floor(r, 'cudnn', 'libcudnn') -> (9.19, 'libcudnn >=9.19.0.56,<10.0a0'). None when none states one."""
    best: tuple[MajorMinor, str] | None = None
    for name in names:
        for spec, build in deps_of(rec, name):
            low = lower_bound(spec)
            value = major_minor(low) if low else None
            if value is not None and (best is None or value > best[0]):
                best = (value, f"{name} {spec}" + (f" {build}" if build else ""))
    return best


def python_of(rec: Record) -> MajorMinor | None:
    """The Python a build is for: python_abi 3.13.*, else python >=3.13,<3.14, else py313 / py3.13 in the
    build string."""
    for spec, _ in deps_of(rec, "python_abi"):
        low = lower_bound(spec)
        if low and (value := major_minor(low)) is not None:
            return value
    for spec, _ in deps_of(rec, "python"):
        low, high = lower_bound(spec), upper_bound(spec)
        if (
            low
            and high
            and (a := major_minor(low))
            and (b := major_minor(high))
            and (b.major, b.minor)
            == (
                a.major,
                a.minor + 1,
            )
        ):
            return a
    match = re.search(r"(?:^|_|[0-9])py3\.?([0-9]{1,2})(?![0-9])", rec.build)
    return MajorMinor(3, int(match.group(1))) if match else None


def is_cuda_build(build: str) -> bool:
    """conda-forge 'cuda129_mkl_py313_…' or 'cuda112py39h…'; pytorch channel 'py3.10_cuda11.8_cudnn8.7.0_0'."""
    return _CUDA_BUILD.search(build) is not None


def cuda_of_build(build: str) -> MajorMinor | None:
    """The CUDA a build string names: 'cuda129_…' -> 12.9, 'cuda112py39…' -> 11.2, '…_cuda11.8_…' -> 11.8."""
    match = _CUDA_BUILD.search(build)
    if match is None:
        return None
    text = match.group(1)
    if "." in text:
        return major_minor(text)
    if len(text) == 2:
        return MajorMinor(int(text[0]), int(text[1]))
    return MajorMinor(int(text[:2]), int(text[2:])) if len(text) in (3, 4) else None


def cudnn_of_build(build: str) -> MajorMinor | None:
    """The cuDNN a pytorch-channel build string names: 'py3.10_cuda11.8_cudnn8.7.0_0' -> 8.7."""
    match = re.search(r"_cudnn([0-9][0-9.]*)", build)
    return major_minor(match.group(1)) if match else None


def version_of(rec: Record) -> Version | None:
    try:
        return Version(rec.version)
    except ValueError:  # InvalidVersion, and int()'s limit on a component of over 4300 digits
        return None


def satisfies(version: str, spec: str) -> bool | None:
    """Whether a version is within a spec's `>=` and `<` bounds; None where either does not parse."""
    low, high = lower_bound(spec), upper_bound(spec)
    try:
        value = Version(version)
        if low is not None and value < Version(low):
            return False
        return not (high is not None and value >= Version(high))
    except ValueError:  # InvalidVersion, and int()'s limit on a component of over 4300 digits
        return None


def snapshot_data() -> RepoData:
    """The bundled offline snapshot (envsolver/snapshot/data): real records, but only those that lock files and
    repodata in shared/realdata carried, so partial for every channel and subdir."""
    parts = [
        read_channel(name, snapshot.data_dir() / name, complete=False) for name in snapshot.provenance()["channels"]
    ]
    return combine(parts, f"the bundled snapshot ({snapshot.date()})")
