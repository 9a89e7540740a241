"""The knowledge base checked against channel records: audit(kb, data) -> Report. Pure.

What counts as a contradiction, and what as a note:
  A record the data has contradicts the KB wherever the KB says it cannot exist or states less than it needs:
  a CUDA build of torch (>= the KB's oldest version on that channel) or of DeepSpeed that no row covers, or
  that two rows cover; a Python, CUDA, cuda-version range, arm variant or torch pin other than its row's; a
  cuDNN, NCCL or glibc floor above its row's (the plan says the build "runs with cuDNN X or newer"); a
  pytorch-channel cuDNN other than its row's (the build bundles it); a newer torch, DeepSpeed or
  cuda-version than the KB's newest.
  Where the KB states more than the data shows (a version or Python with no build, a floor above every build's
  of that version), it is a contradiction only for a (channel, subdir) whose data is complete (a repodata.json
  as the channel serves it); in partial data (the bundled snapshot, a mirror of a subset) it is a note, since
  the build may merely be absent. Older builds than the KB covers, and null KB values the data could fill,
  are notes.
Floors compare major.minor: a row's cudnn "9.10" agrees with `libcudnn >=9.10.2.21`. A record without a
`__glibc` dependency states no glibc floor and is not compared on it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from fnmatch import fnmatchcase

from packaging.version import Version

from envsolver.kb import audit_deepspeed
from envsolver.kb.findings import Collector, Report, Severity
from envsolver.kb.model import KnowledgeBase, TorchBuild
from envsolver.kb.repodata import (
    Record,
    RepoData,
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
from envsolver.versions import MajorMinor


def audit(kb: KnowledgeBase, data: RepoData) -> Report:
    found = Collector()
    _torch(kb, data, found)
    audit_deepspeed.check(kb, data, found)
    _newest(kb, data, found)
    order = {"contradiction": 0, "note": 1}
    findings = sorted(
        found.findings(), key=lambda f: (order[f.severity], _natural(f.subject), f.check, _natural(f.kb), f.data)
    )
    return Report(
        data.name,
        tuple(f"{c}/{s}" for c, s in sorted(data.present & data.complete)),
        tuple(f"{c}/{s}" for c, s in sorted(data.present - data.complete)),
        tuple(findings),
        len(data.records),
    )


def _natural(text: str) -> tuple[tuple[int, str], ...]:
    """A sort key that puts builds[6] before builds[10] and 2.9 before 2.10."""
    return tuple((int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"([0-9]+)", text) if part)


def row_label(index: int, row: TorchBuild) -> str:
    versions = ", ".join(str(v) for v in row.versions)
    return f"torch.yaml builds[{index}] ({row.channel} {row.platform} {row.build}: torch {versions})"


def covering(rec: Record, version: Version, rows: Iterable[tuple[int, TorchBuild]]) -> list[tuple[int, TorchBuild]]:
    return [
        (i, row)
        for i, row in rows
        if row.channel == rec.channel
        and row.platform == rec.subdir
        and version in row.versions
        and fnmatchcase(rec.build, row.build)
    ]


def _torch(kb: KnowledgeBase, data: RepoData, found: Collector) -> None:
    rows = list(enumerate(kb.torch_builds))
    channels = {row.channel for row in kb.torch_builds}
    oldest = {c: min(v for row in kb.torch_builds if row.channel == c for v in row.versions) for c in channels}
    by_row: dict[int, list[tuple[Version, Record]]] = defaultdict(list)
    for rec in data.records:
        if rec.name != "pytorch" or not is_cuda_build(rec.build):
            continue
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
        where = covering(rec, version, rows)
        cuda = cuda_of_build(rec.build)
        subject = f"torch {version} cuda{cuda.nodot if cuda else '?'} on {rec.channel}/{rec.subdir}"
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
        if not where:
            if version >= oldest[rec.channel]:
                found.add(
                    "contradiction",
                    "uncovered",
                    subject,
                    f"no torch.yaml row covers this CUDA build ({rec.channel} {rec.subdir})",
                    "a CUDA build",
                    f"Add {version} to the row of its CUDA variant, or a new row "
                    "(the audit run again with --derive prints the keys repodata determines).",
                    rec.label,
                )
            else:
                found.add(
                    "note",
                    "older",
                    f"pytorch on {rec.channel}/{rec.subdir}",
                    f"torch.yaml starts at {oldest[rec.channel]} on {rec.channel}",
                    "CUDA builds of older torch, not checked",
                    None,
                    rec.label,
                )
            continue
        if len(where) > 1:
            found.add(
                "contradiction",
                "ambiguous",
                subject,
                "rows " + ", ".join(f"builds[{i}]" for i, _ in where) + " all cover it",
                "one build",
                "Narrow the rows' versions or build globs so that each build has one row.",
                rec.label,
            )
        index, row = where[0]
        by_row[index].append((version, rec))
        _record(index, row, version, rec, found)
    for index, row in rows:
        if (row.channel, row.platform) in data.present:
            _row(index, row, by_row[index], (row.channel, row.platform) in data.complete, found)


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
    variants = [build for _, build in deps_of(rec, "arm-variant") if build]
    if variants and row.arm_variant not in variants:
        clash(
            "arm_variant",
            f"arm_variant {row.arm_variant}",
            f"depends arm-variant * {variants[0]}",
            "Narrow the row's build glob to its arm variant, or add a row for the other.",
        )
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
    specs = [spec for spec, _ in deps_of(rec, "cuda-version") if spec]
    if row.channel == "pytorch":
        return
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
    missing(
        found,
        label,
        "torch",
        row.versions,
        row.python,
        {v: {python_of(r) for r in b} for v, b in by_version.items()},
        complete,
    )
    for version in row.versions:
        builds = by_version[version]
        if not builds:
            continue
        if row.channel == "pytorch":
            continue
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


def missing(
    found: Collector,
    label: str,
    package: str,
    versions: tuple[Version, ...],
    pythons: tuple[MajorMinor, ...],
    held: dict[Version, set[MajorMinor | None]],
    complete: bool,
) -> None:
    """A row's versions and Pythons the data has no build of: in complete data one contradiction each, in partial
    data one note for the row."""
    gone = [str(v) for v in versions if not held.get(v)]
    lacking = {
        str(v): ", ".join(str(p) for p in pythons if p not in held[v])
        for v in versions
        if held.get(v) and any(p not in held[v] for p in pythons)
    }
    if complete:
        parts = [f"{package} {v}" for v in gone] + [f"{package} {v} for Python {p}" for v, p in lacking.items()]
        for part in parts:
            found.add(
                "contradiction",
                "missing",
                label,
                part,
                "no such build in the complete data",
                "Remove it from the row: a build the channel does not serve (or marked broken) cannot be locked.",
            )
    elif gone or lacking:
        said = f"{package} {', '.join(str(v) for v in versions)} for Python {', '.join(str(p) for p in pythons)}"
        parts = ([f"no build of {', '.join(gone)}"] if gone else []) + [
            f"of {v} none for Python {p}" for v, p in lacking.items()
        ]
        found.add("note", "missing", label, said, "partial data: " + "; ".join(parts), None)


def _newest(kb: KnowledgeBase, data: RepoData, found: Collector) -> None:
    """The newest cuda-version, CUDA torch (per channel) and DeepSpeed in the data against the KB's newest."""
    toolkit = max(t.version for t in kb.toolkits)
    versions = [(major_minor(r.version), r) for r in data.records if r.name == "cuda-version"]
    known = [(v, r) for v, r in versions if v is not None]
    if not known:
        found.add(
            "note", "newest", "cuda-version", f"cuda.yaml toolkits: newest {toolkit}", "no cuda-version records", None
        )
    else:
        top, rec = max(known, key=lambda x: x[0])
        if top > toolkit:
            found.add(
                "contradiction",
                "newest",
                "cuda-version",
                f"cuda.yaml toolkits: newest {toolkit}",
                f"cuda-version {top}",
                f"Add a toolkits row for CUDA {top} (driver floor, SM list and GCC limit from NVIDIA's release notes).",
                rec.label,
            )
        elif top < toolkit:
            found.add(
                "note",
                "newest",
                "cuda-version",
                f"cuda.yaml toolkits: newest {toolkit}",
                f"newest cuda-version {top}",
                None,
                rec.label,
            )
    for channel in sorted({row.channel for row in kb.torch_builds}):
        kb_top = max(v for row in kb.torch_builds if row.channel == channel for v in row.versions)
        recs = [
            (v, r)
            for r in data.records
            if r.name == "pytorch" and r.channel == channel and is_cuda_build(r.build)
            for v in [version_of(r)]
            if v is not None
        ]
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
    audit_deepspeed.newest(kb, data, found)
