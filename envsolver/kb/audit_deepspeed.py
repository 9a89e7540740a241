"""The KB audit's DeepSpeed part: conda-forge deepspeed CUDA builds against deepspeed.yaml. Pure.

The rules are audit.py's. A row's cuda_version_min (null: its own CUDA) is the lowest cuda-version the build's
run dependencies allow, directly (`cuda-version >=13.0,<14`) or through a CUDA library it needs
(`libcublas >=13.3.0.5`, whose records depend on `cuda-version >=13.2,<13.3.0a0`). The data gives an upper
estimate of it: a library record missing from partial data can only hide a lower floor. So a floor below the
row's is a contradiction on any data, one above it only on complete data.
"""

from __future__ import annotations

from collections import defaultdict
from fnmatch import fnmatchcase

from packaging.version import Version

from envsolver.core.versions import MajorMinor
from envsolver.kb.findings import Collector, Severity, missing
from envsolver.kb.model import DeepSpeedCondaBuild, KnowledgeBase
from envsolver.kb.records import (
    Record,
    cuda_of_build,
    deps_of,
    effective_floor,
    floor,
    is_cuda_build,
    library_index,
    lower_bound,
    major_minor,
    python_of,
    version_of,
)
from envsolver.kb.repodata import RepoData

CHANNEL = "conda-forge"


def row_label(index: int, row: DeepSpeedCondaBuild) -> str:
    versions = ", ".join(str(v) for v in row.versions)
    return f"deepspeed.yaml conda_forge_builds[{index}] ({row.platform} cuda{row.cuda.nodot}*: deepspeed {versions})"


def check(kb: KnowledgeBase, data: RepoData, found: Collector) -> None:
    rows = list(enumerate(kb.deepspeed_conda_builds))
    if not rows:
        return
    oldest = min(v for row in kb.deepspeed_conda_builds for v in row.versions)
    index = library_index(data.records)
    by_row: dict[int, list[tuple[Version, Record]]] = defaultdict(list)
    for rec in data.records:
        if rec.name != "deepspeed" or rec.channel != CHANNEL or not is_cuda_build(rec.build):
            continue
        version = version_of(rec)
        if version is None:
            found.add(
                "note",
                "version",
                f"{CHANNEL}/{rec.subdir} deepspeed",
                "-",
                "a version that does not parse",
                None,
                rec.label,
            )
            continue
        where = [
            (i, row)
            for i, row in rows
            if row.platform == rec.subdir
            and version in row.versions
            and fnmatchcase(rec.build, f"cuda{row.cuda.nodot}*")
        ]
        cuda = cuda_of_build(rec.build)
        subject = f"deepspeed {version} cuda{cuda.nodot if cuda else '?'} on {CHANNEL}/{rec.subdir}"
        if not where:
            if version >= oldest:
                found.add(
                    "contradiction",
                    "uncovered",
                    subject,
                    "no deepspeed.yaml conda_forge_builds row covers this CUDA build",
                    "a CUDA build",
                    f"Add {version} to the row of its torch pin and CUDA, or a new row "
                    "(the audit run again with --derive prints the keys repodata determines).",
                    rec.label,
                )
            else:
                found.add(
                    "note",
                    "older",
                    f"deepspeed on {CHANNEL}/{rec.subdir}",
                    f"deepspeed.yaml conda_forge_builds start at {oldest}",
                    "CUDA builds of older DeepSpeed, not checked",
                    None,
                    rec.label,
                )
            continue
        if len(where) > 1:
            found.add(
                "contradiction",
                "ambiguous",
                subject,
                "rows " + ", ".join(f"conda_forge_builds[{i}]" for i, _ in where) + " all cover it",
                "one build",
                "Narrow the rows' versions so that each build has one row.",
                rec.label,
            )
        i, row = where[0]
        by_row[i].append((version, rec))
        _record(i, row, version, rec, index, (CHANNEL, rec.subdir) in data.complete, found)
    for i, row in rows:
        if (CHANNEL, row.platform) in data.present:
            _row(i, row, by_row[i], (CHANNEL, row.platform) in data.complete, found)


def _record(
    i: int,
    row: DeepSpeedCondaBuild,
    version: Version,
    rec: Record,
    index: dict[tuple[str, str, str], list[Record]],
    complete: bool,
    found: Collector,
) -> None:
    label = row_label(i, row)
    python = python_of(rec)
    if python is None:
        found.add("note", "python", label, "-", "a build that names no Python", None, rec.label)
    elif python not in row.python:
        found.add(
            "contradiction",
            "python",
            label,
            f"python {', '.join(str(p) for p in row.python)}",
            f"a build for Python {python} of deepspeed {version}",
            f"Add {python} to the row's python (split the row where versions differ).",
            rec.label,
        )
    pins = [major_minor(low) for spec, _ in deps_of(rec, "pytorch") if (low := lower_bound(spec))]
    for pin in pins:
        if pin != row.torch:
            found.add(
                "contradiction",
                "torch",
                label,
                f"torch {row.torch} for deepspeed {version}",
                f"a build pinning torch {pin}",
                f"Set the row's torch to {pin} (split the row per version where their pins differ).",
                rec.label,
            )
    row_min = row.cuda_version_min or row.cuda
    direct = floor(rec, "cuda-version")
    if direct is not None and direct[0] > row_min:
        found.add(
            "contradiction",
            "cuda_version_min",
            label,
            f"cuda_version_min {row_min} for deepspeed {version}",
            f"depends {direct[1]}",
            f"Set the row's cuda_version_min to {direct[0]}.",
            rec.label,
        )
    derived = effective_floor(rec, index)
    if derived is None:
        return
    value, why = derived
    severity: Severity | None = None
    if value < row_min:
        severity = "contradiction"
    elif value > row_min:
        severity = "contradiction" if complete else "note"
    if severity is not None:
        found.add(
            severity,
            "cuda_version_min",
            label,
            f"cuda_version_min {row_min} for deepspeed {version}",
            f"its run dependencies allow cuda-version {value} at the lowest: {why}",
            f"Set the row's cuda_version_min to {value}." if severity == "contradiction" else None,
            rec.label,
        )


def _row(
    i: int, row: DeepSpeedCondaBuild, recs: list[tuple[Version, Record]], complete: bool, found: Collector
) -> None:
    held: dict[Version, set[MajorMinor | None]] = defaultdict(set)
    for version, rec in recs:
        held[version].add(python_of(rec))
    missing(found, row_label(i, row), "deepspeed", row.versions, row.python, held, complete)


def newest(kb: KnowledgeBase, data: RepoData, found: Collector) -> None:
    """The newest DeepSpeed in the data (any build) against the newest release deepspeed.yaml knows."""
    kb_top = max((r.latest for r in kb.deepspeed_releases), default=None)
    said = f"deepspeed.yaml releases: {f'newest {kb_top}' if kb_top is not None else 'none'}"
    recs = [(v, r) for r in data.records if r.name == "deepspeed" for v in [version_of(r)] if v is not None]
    if not recs:
        return
    top, rec = max(recs, key=lambda x: (x[0], x[1].build_number))
    if kb_top is None or top > kb_top:
        found.add(
            "contradiction",
            "newest",
            "deepspeed",
            said,
            f"deepspeed {top}",
            f"Add a releases row for {top} (op_builder/builder.py at its tag: the nvcc/torch CUDA allow-list).",
            rec.label,
        )
    elif top < kb_top:
        found.add("note", "newest", "deepspeed", said, f"newest deepspeed {top}", None, rec.label)
