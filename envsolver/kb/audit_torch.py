"""The KB audit's torch part: CUDA builds of pytorch against torch.yaml's rows. Pure.

The rules are audit.py's. A row covers a record of its channel and platform whose version it lists and whose
build string its glob matches; on linux-aarch64 the record's `arm-variant` dependency must also be the row's
arm_variant (sbsa and tegra builds share build strings). A row with arm_variant null covers either (null is
unknown), and a record that names no arm variant (builds before the split) is covered by either row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from fnmatch import fnmatchcase

from packaging.version import Version

from envsolver.core.versions import MajorMinor
from envsolver.kb.findings import Collector, Severity, missing
from envsolver.kb.model import KnowledgeBase, TorchBuild
from envsolver.kb.records import (
    Record,
    arm_variant_of,
    cuda_of_build,
    cudnn_of_build,
    deps_of,
    floor,
    is_cuda_build,
    lower_bound,
    major_minor,
    python_of,
    upper_bound,
    version_of,
)
from envsolver.kb.repodata import RepoData

PACKAGE = "pytorch"


def row_label(index: int, row: TorchBuild) -> str:
    versions = ", ".join(str(v) for v in row.versions)
    arm = f" {row.arm_variant}" if row.arm_variant == "tegra" else ""
    return f"torch.yaml builds[{index}] ({row.channel} {row.platform}{arm} {row.build}: torch {versions})"


def covering(rec: Record, version: Version, rows: Iterable[tuple[int, TorchBuild]]) -> list[tuple[int, TorchBuild]]:
    arm = arm_variant_of(rec)
    return [
        (i, row)
        for i, row in rows
        if row.channel == rec.channel
        and row.platform == rec.subdir
        and version in row.versions
        and fnmatchcase(rec.build, row.build)
        and (arm is None or row.arm_variant in (None, arm))
    ]


def _cuda_records(data: RepoData) -> Iterable[Record]:
    return (r for r in data.records if r.name == PACKAGE and is_cuda_build(r.build))


def check(kb: KnowledgeBase, data: RepoData, found: Collector) -> None:
    rows = list(enumerate(kb.torch_builds))
    oldest: dict[str, Version] = {}
    for row in kb.torch_builds:
        oldest[row.channel] = min(min(row.versions), oldest.get(row.channel, min(row.versions)))
    by_row: dict[int, list[tuple[Version, Record]]] = defaultdict(list)
    for rec in _cuda_records(data):
        version = version_of(rec)
        if version is None:
            found.add(
                "note",
                "version",
                f"{rec.channel}/{rec.subdir} pytorch",
                "-",
                "a version that does not parse",
                None,
                rec.label,
            )
            continue
        if rec.channel not in oldest:
            found.add(
                "note",
                "channel",
                f"pytorch on {rec.channel}/{rec.subdir}",
                f"no torch.yaml row is for the {rec.channel} channel",
                "CUDA builds, not checked",
                None,
                rec.label,
            )
            continue
        where = covering(rec, version, rows)
        if not where:
            _uncovered(rec, version, oldest[rec.channel], found)
            continue
        if len(where) > 1:
            found.add(
                "contradiction",
                "ambiguous",
                _subject(rec, version),
                "rows " + ", ".join(f"builds[{i}]" for i, _ in where) + " all cover it",
                "one build",
                "Narrow the rows' versions, build globs or arm variants so that each build has one row.",
                rec.label,
            )
        index, row = where[0]
        by_row[index].append((version, rec))
        _record(index, row, version, rec, found)
    for index, row in rows:
        if (row.channel, row.platform) in data.present:
            _row(index, row, by_row[index], (row.channel, row.platform) in data.complete, found)


def _subject(rec: Record, version: Version) -> str:
    cuda = cuda_of_build(rec.build)
    arm = arm_variant_of(rec)
    return f"torch {version} cuda{cuda.nodot if cuda else '?'}{f' {arm}' if arm else ''} on {rec.channel}/{rec.subdir}"


def _uncovered(rec: Record, version: Version, oldest: Version, found: Collector) -> None:
    if version < oldest:
        found.add(
            "note",
            "older",
            f"pytorch on {rec.channel}/{rec.subdir}",
            f"torch.yaml starts at {oldest} on {rec.channel}",
            "CUDA builds of older torch, not checked",
            None,
            rec.label,
        )
        return
    arm = arm_variant_of(rec)
    found.add(
        "contradiction",
        "uncovered",
        _subject(rec, version),
        f"no torch.yaml row covers this CUDA build ({rec.channel} {rec.subdir}{f', arm_variant {arm}' if arm else ''})",
        "a CUDA build",
        f"Add {version} to the row of its CUDA variant, or a new row "
        "(the audit run again with --derive prints the keys repodata determines).",
        rec.label,
    )


def _record(index: int, row: TorchBuild, version: Version, rec: Record, found: Collector) -> None:
    """What one record says that its row must not contradict."""
    label = row_label(index, row)

    def clash(check: str, kb: str, data: str, fix: str) -> None:
        found.add("contradiction", check, label, kb, data, fix, rec.label)

    python = python_of(rec)
    if python is None:
        found.add("note", "python", label, "-", "a build that names no Python", None, rec.label)
    elif python not in row.python:
        clash(
            "python",
            f"python {', '.join(str(p) for p in row.python)}",
            f"a build for Python {python} of torch {version}",
            f"Add {python} to the row's python (split the row where versions differ), or narrow its build glob.",
        )
    cuda = cuda_of_build(rec.build)
    if cuda != row.cuda:
        clash("cuda", f"cuda {row.cuda}", f"a build string naming CUDA {cuda}", "Narrow the row's build glob.")
    for spec, _ in deps_of(rec, "pytorch-cuda"):
        low = lower_bound(spec)
        if low and major_minor(low) != row.cuda:
            clash("cuda", f"cuda {row.cuda}", f"depends pytorch-cuda {spec}", "Narrow the row's build glob.")
    _range(row, rec, clash)
    arm = arm_variant_of(rec)
    if arm is not None and row.arm_variant is None:
        found.add("note", "arm_variant", label, "arm_variant null", f"depends arm-variant * {arm}", None, rec.label)
    if row.channel == "pytorch":
        bundled = cudnn_of_build(rec.build)
        if bundled is not None and bundled != (major_minor(row.cudnn) if row.cudnn else None):
            clash(
                "cudnn",
                f"cudnn {row.cudnn} (bundled)",
                f"a build bundling cuDNN {bundled}",
                f"Set the row's cudnn to {bundled}.",
            )
        return
    for key, names, value in _floors(row):
        stated = floor(rec, *names)
        if stated is not None and value is not None and stated[0] > value:
            clash(
                key,
                f"{key} {value} for torch {version}",
                f"depends {stated[1]}",
                f"Set the row's {key} to {stated[0]} (split the row per version where their floors differ).",
            )


def _floors(row: TorchBuild) -> list[tuple[str, tuple[str, ...], MajorMinor | None]]:
    def mm(text: str | None) -> MajorMinor | None:
        return major_minor(text) if text else None

    return [
        ("cudnn", ("cudnn", "libcudnn"), mm(row.cudnn)),
        ("nccl", ("nccl",), mm(row.nccl)),
        ("glibc", ("__glibc",), row.glibc),
    ]


def _range(row: TorchBuild, rec: Record, clash: Callable[[str, str, str, str], None]) -> None:
    """conda-forge: the row's cuda_range against the record's cuda-version dependency (null: the build selects
    its runtime another way, e.g. cudatoolkit for CUDA 11)."""
    if row.channel == "pytorch":
        return
    specs = [spec for spec, _ in deps_of(rec, "cuda-version") if spec]
    if row.cuda_range is None:
        if specs:
            clash(
                "cuda_range", "cuda_range null", f"depends cuda-version {specs[0]}", f"Set cuda_range to {specs[0]!r}."
            )
        return
    if not specs:
        clash("cuda_range", f"cuda_range {row.cuda_range}", "no cuda-version dependency", "Set cuda_range to null.")
        return

    def bounds(spec: str) -> tuple[MajorMinor | None, MajorMinor | None]:
        low, high = lower_bound(spec), upper_bound(spec)
        return (major_minor(low) if low else None, major_minor(high) if high else None)

    if bounds(specs[0]) != bounds(row.cuda_range):
        clash(
            "cuda_range",
            f"cuda_range {row.cuda_range}",
            f"depends cuda-version {specs[0]}",
            f"Set cuda_range to {specs[0]!r}.",
        )


def _row(index: int, row: TorchBuild, recs: list[tuple[Version, Record]], complete: bool, found: Collector) -> None:
    """What the row states beyond its records: versions and Pythons with no build, floors above every build's."""
    label = row_label(index, row)
    severity: Severity = "contradiction" if complete else "note"
    by_version: dict[Version, list[Record]] = defaultdict(list)
    for version, rec in recs:
        by_version[version].append(rec)
    held = {v: {python_of(r) for r in b} for v, b in by_version.items()}
    missing(found, label, "torch", row.versions, row.python, held, complete)
    if row.channel == "pytorch":
        return
    for version in row.versions:
        builds = by_version[version]
        for key, names, value in _floors(row):
            stated = [s for s in (floor(r, *names) for r in builds) if s is not None]
            if not stated:
                continue
            top = max(stated, key=lambda s: s[0])
            if value is None:
                found.add("note", key, label, f"{key} null for torch {version}", f"depends {top[1]}", None)
            elif top[0] < value:
                found.add(
                    severity,
                    key,
                    label,
                    f"{key} {value} for torch {version}",
                    f"every build of {version} depends {key} below it; the highest: {top[1]}",
                    f"Set the row's {key} to {top[0]}." if complete else None,
                )


def newest(kb: KnowledgeBase, data: RepoData, found: Collector) -> None:
    """The newest CUDA build of torch in the data, per channel, against the newest version torch.yaml lists."""
    for channel in sorted({row.channel for row in kb.torch_builds}):
        kb_top = max(v for row in kb.torch_builds if row.channel == channel for v in row.versions)
        recs = [(v, r) for r in _cuda_records(data) if r.channel == channel for v in [version_of(r)] if v is not None]
        if not recs:
            continue
        top_v, top_rec = max(recs, key=lambda x: (x[0], x[1].build_number))
        if top_v > kb_top:
            found.add(
                "contradiction",
                "newest",
                f"pytorch on {channel}",
                f"torch.yaml: newest {kb_top}",
                f"torch {top_v}",
                f"Add rows for torch {top_v} on {channel} (the audit run again with --derive prints their keys).",
                top_rec.label,
            )
        elif top_v < kb_top:
            found.add(
                "note",
                "newest",
                f"pytorch on {channel}",
                f"torch.yaml: newest {kb_top}",
                f"newest CUDA build: torch {top_v}",
                None,
                top_rec.label,
            )
