"""Which torch and DeepSpeed builds of the KB the offline snapshot holds records for. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from fnmatch import fnmatchcase

from packaging.version import Version

from envsolver.core.versions import MajorMinor, leading_major_minor
from envsolver.kb.model import Holding, KnowledgeBase
from envsolver.lock.snapshot import SnapshotRecord


def restrict(kb: KnowledgeBase, records: Iterable[SnapshotRecord], name: str) -> KnowledgeBase:
    """The KB with only the torch versions and conda-forge DeepSpeed builds the snapshot has records for,
    and the nvcc versions it holds (`holding`, named `name` in messages).

    A torch build row becomes one row per version with a `pytorch` record whose build matches the row's
    build glob, on its channel and platform, listing only the Pythons those records are for. The resolver
    then chooses among what can be locked, with a toolkit whose nvcc the snapshot holds.
    """
    builds: dict[tuple[str, str, str, str], list[str]] = {}
    nvcc: dict[tuple[str, str], set[MajorMinor]] = {}
    for rec in records:
        if rec.name in ("pytorch", "deepspeed"):
            builds.setdefault((rec.channel, rec.subdir, rec.name, rec.version), []).append(rec.build)
        if rec.name == kb.nvcc_package.value:
            cuda = leading_major_minor(rec.version)
            if cuda is not None:
                nvcc.setdefault((rec.channel, rec.subdir), set()).add(cuda)

    def matching(channel: str, subdir: str, name: str, version: Version, glob: str) -> list[str]:
        return [b for b in builds.get((channel, subdir, name, str(version)), []) if fnmatchcase(b, glob)]

    torch_builds = []
    for row in kb.torch_builds:
        for version in row.versions:
            seen = matching(row.channel, row.platform, "pytorch", version, row.build)
            pythons = tuple(p for p in row.python if any(_for_python(b, p) for b in seen))
            if pythons:
                torch_builds.append(dataclasses.replace(row, versions=(version,), python=pythons))
    ds_builds = []
    for ds in kb.deepspeed_conda_builds:
        glob = f"cuda{ds.cuda.nodot}*"
        kept = tuple(v for v in ds.versions if matching("conda-forge", ds.platform, "deepspeed", v, glob))
        if kept:
            ds_builds.append(dataclasses.replace(ds, versions=kept))
    holding = Holding(name, {key: tuple(sorted(held)) for key, held in sorted(nvcc.items())})
    return dataclasses.replace(
        kb, torch_builds=tuple(torch_builds), deepspeed_conda_builds=tuple(ds_builds), holding=holding
    )


def _for_python(build: str, python: MajorMinor) -> bool:
    """conda-forge builds name the Python as py313, pytorch-channel builds as py3.13."""
    return f"py{python.nodot}" in build or f"py{python}_" in build


def summary(kb: KnowledgeBase) -> list[str]:
    """One line per torch build the (restricted) KB holds: 'conda-forge linux-64 cuda129: 2.7.1, 2.8.0'."""
    lines = []
    for row in sorted(kb.torch_builds, key=lambda r: (r.channel, r.platform, r.cuda)):
        versions = ", ".join(str(v) for v in row.versions)
        pythons = ", ".join(str(p) for p in row.python)
        lines.append(f"{row.channel} {row.platform} CUDA {row.cuda}: torch {versions} (Python {pythons})")
    return lines
