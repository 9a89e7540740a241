"""The KB row keys that channel records determine, derived from them for a maintainer to paste. Pure.

torch.yaml: per channel, platform and CUDA variant, the versions, Pythons, cuda-version range, cuDNN, NCCL and
glibc floors (the highest among a version's builds, as the audit compares them) and arm variant; consecutive
versions with the same keys share a row. deepspeed.yaml conda_forge_builds: versions, torch pin, CUDA, the
lowest cuda-version its run dependencies allow, Pythons. What records cannot say (archs: the feedstock's
build.sh; sources) is left for the maintainer, so a pasted row fails to load until it is added.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass

from packaging.version import Version

from envsolver.core.versions import MajorMinor
from envsolver.kb.audit_deepspeed import CHANNEL
from envsolver.kb.model import KnowledgeBase
from envsolver.kb.records import (
    Record,
    arm_variant_of,
    cuda_of_build,
    cudnn_of_build,
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

Keys = tuple[tuple[str, str | list[str] | None], ...]


@dataclass(frozen=True)
class DerivedRow:
    table: str  # "torch.yaml builds" or "deepspeed.yaml conda_forge_builds"
    versions: tuple[str, ...]
    keys: Keys  # in the KB's key order, versions excluded

    def as_dict(self) -> dict[str, object]:
        """The row's keys in the KB's order: torch rows name their channel before the versions."""
        keys = dict(self.keys)
        out: dict[str, object] = {"channel": keys.pop("channel")} if "channel" in keys else {}
        out["versions"] = list(self.versions)
        out.update(keys)
        return out


def derive(kb: KnowledgeBase, data: RepoData) -> list[DerivedRow]:
    return _torch(kb, data) + _deepspeed(kb, data)


def _merge(table: str, per_version: dict[tuple[str, ...], dict[Version, Keys]]) -> list[DerivedRow]:
    """Consecutive versions of a group with the same keys become one row."""
    rows = []
    for group in sorted(per_version):
        run: list[Version] = []
        last: Keys | None = None
        for version in sorted(per_version[group]):
            keys = per_version[group][version]
            if last is not None and keys != last:
                rows.append(DerivedRow(table, tuple(str(v) for v in run), last))
                run = []
            run.append(version)
            last = keys
        if last is not None:
            rows.append(DerivedRow(table, tuple(str(v) for v in run), last))
    return rows


def _pythons(recs: list[Record]) -> list[str]:
    found = {p for p in (python_of(r) for r in recs) if p is not None}
    return [str(p) for p in sorted(found)]


def _top(recs: list[Record], *names: str) -> str | None:
    stated = [s[0] for s in (floor(r, *names) for r in recs) if s is not None]
    return str(max(stated)) if stated else None


def _torch(kb: KnowledgeBase, data: RepoData) -> list[DerivedRow]:
    oldest: dict[str, Version] = {}
    for row in kb.torch_builds:
        oldest[row.channel] = min(min(row.versions), oldest.get(row.channel, min(row.versions)))
    groups: dict[tuple[str, ...], dict[Version, list[Record]]] = defaultdict(lambda: defaultdict(list))
    for rec in data.records:
        version, cuda = version_of(rec), cuda_of_build(rec.build)
        if rec.name != "pytorch" or not is_cuda_build(rec.build) or version is None or cuda is None:
            continue
        if rec.channel in oldest and version < oldest[rec.channel]:
            continue
        arm = arm_variant_of(rec) or ""
        groups[(rec.channel, rec.subdir, f"{cuda.major:03d}.{cuda.minor:03d}", arm)][version].append(rec)
    per_version: dict[tuple[str, ...], dict[Version, Keys]] = defaultdict(dict)
    for group, versions in groups.items():
        channel, subdir, _, arm = group
        for version, recs in versions.items():
            cuda = cuda_of_build(recs[0].build)
            legacy = channel == "pytorch"
            specs = [(low, spec) for r in recs for spec, _ in deps_of(r, "cuda-version") if (low := _low(spec))]
            bundled = [c for c in (cudnn_of_build(r.build) for r in recs) if c is not None]
            per_version[group][version] = (
                ("channel", channel),
                ("cuda", str(cuda)),
                ("cuda_range", None if legacy or not specs else max(specs)[1]),
                ("platform", subdir),
                ("build", f"*cuda{cuda}*" if legacy else f"cuda{cuda.nodot if cuda else ''}*"),
                ("python", _pythons(recs)),
                ("cudnn", (str(max(bundled)) if bundled else None) if legacy else _top(recs, "cudnn", "libcudnn")),
                ("nccl", None if legacy else _top(recs, "nccl")),
                ("glibc", None if legacy else _top(recs, "__glibc")),
                ("arm_variant", arm or None),
            )
    return _merge("torch.yaml builds", per_version)


def _deepspeed(kb: KnowledgeBase, data: RepoData) -> list[DerivedRow]:
    rows = kb.deepspeed_conda_builds
    oldest = min((v for row in rows for v in row.versions), default=None)
    index = library_index(data.records)
    groups: dict[tuple[str, ...], dict[Version, list[Record]]] = defaultdict(lambda: defaultdict(list))
    for rec in data.records:
        version, cuda = version_of(rec), cuda_of_build(rec.build)
        if rec.name != "deepspeed" or rec.channel != CHANNEL or not is_cuda_build(rec.build):
            continue
        if version is None or cuda is None or (oldest is not None and version < oldest):
            continue
        groups[(rec.subdir, f"{cuda.major:03d}.{cuda.minor:03d}")][version].append(rec)
    per_version: dict[tuple[str, ...], dict[Version, Keys]] = defaultdict(dict)
    for group, versions in groups.items():
        for version, recs in versions.items():
            cuda = cuda_of_build(recs[0].build)
            pins = sorted({str(p) for r in recs for spec, _ in deps_of(r, "pytorch") for p in [_pin(spec)] if p})
            lows = [f[0] for f in (effective_floor(r, index) for r in recs) if f is not None]
            low = str(max(lows)) if lows else None
            per_version[group][version] = (
                ("torch", pins[-1] if len(pins) == 1 else None),
                ("cuda", str(cuda)),
                ("cuda_version_min", None if low in (None, str(cuda)) else low),
                ("python", _pythons(recs)),
                ("platform", group[0]),
            )
    return _merge("deepspeed.yaml conda_forge_builds", per_version)


def _low(spec: str) -> MajorMinor | None:
    low = lower_bound(spec)
    return major_minor(low) if low else None


def _pin(spec: str) -> str | None:
    value = _low(spec)
    return str(value) if value else None


def as_yaml(rows: list[DerivedRow], header: str) -> list[str]:
    """Flow-style rows in the KB's layout, grouped by table, under `header` comment lines."""
    lines = [f"# {line}" for line in header.splitlines()]
    for table in ("torch.yaml builds", "deepspeed.yaml conda_forge_builds"):
        chosen = [r for r in rows if r.table == table]
        lines.append(
            f"# {table}: {len(chosen)} row(s)"
            + ("; add archs and source to each" if "torch" in table else "; add source")
        )
        for row in chosen:
            lines.append("- {" + ", ".join(f"{k}: {_scalar(v)}" for k, v in row.as_dict().items()) + "}")
    return lines


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    text = str(value)
    if text in ("conda-forge", "pytorch", "linux-64", "linux-aarch64", "sbsa", "tegra"):
        return text
    return json.dumps(text)
