"""Which torch and DeepSpeed builds of the KB the offline snapshot holds records for, the nvcc versions it
holds, and which CUDA minors its CUDA-bound packages (cudnn, nccl, the -dev headers ...) install beside. Pure."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from packaging.version import Version

from envsolver.core.versions import MajorMinor, leading_major_minor
from envsolver.kb.model import Holding, KnowledgeBase
from envsolver.lock.snapshot import SnapshotRecord, matchspec


def restrict(kb: KnowledgeBase, records: Sequence[SnapshotRecord], name: str) -> KnowledgeBase:
    """The KB with only the torch versions and conda-forge DeepSpeed builds the snapshot has records for,
    and what it holds (`holding`, named `name` in messages): the nvcc versions, and the CUDA minors of its
    CUDA-bound packages (cuda_bound).

    A torch build row becomes one row per version with a `pytorch` record whose build matches the row's
    build glob, on its channel and platform, listing only the Pythons those records are for. The resolver
    then chooses among what can be locked, with a toolkit whose nvcc the snapshot holds and whose cudnn, nccl
    and headers it holds for that CUDA (resolve.candidates).
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
    holding = Holding(name, {key: tuple(sorted(held)) for key, held in sorted(nvcc.items())}, cuda_bound(records))
    return dataclasses.replace(
        kb, torch_builds=tuple(torch_builds), deepspeed_conda_builds=tuple(ds_builds), holding=holding
    )


Pool = dict[str, list[SnapshotRecord]]


@dataclass(frozen=True)
class _CudaVersion:
    """A cuda-version record: its minor, its version and what it constrains (name -> version specs)."""

    minor: MajorMinor
    version: str
    limits: dict[str, tuple[str, ...]]


def cuda_bound(records: Iterable[SnapshotRecord]) -> dict[tuple[str, str, str], tuple[MajorMinor, ...]]:
    """(channel, platform, name) -> the CUDA minors some record of `name` installs beside, for every package whose
    records are all tied to CUDA, read from their real depends and constrains: a dependency or constraint on
    cuda-version, or a dependency on what a cuda-version record constrains (cudatoolkit). A record serves
    cuda-version X.Y (a record of it in the channel) when each of its cuda-version specs admits X.Y, X.Y's
    constraint on the record's own name (if any) admits it, and each such dependency is met by a record the
    snapshot holds that X.Y's constraint also admits. A spec matchspec cannot read counts as met, so a package
    is only ever said to lack a CUDA that no record of it can serve.
    """
    places: dict[tuple[str, str], Pool] = defaultdict(lambda: defaultdict(list))
    for rec in records:
        places[(rec.channel, rec.subdir)][rec.name].append(rec)
    out: dict[tuple[str, str, str], tuple[MajorMinor, ...]] = {}
    for (channel, subdir), own in sorted(places.items()):
        if subdir == "noarch":
            continue
        pool: Pool = defaultdict(list, {n: list(r) for n, r in places.get((channel, "noarch"), {}).items()})
        for n, recs in own.items():
            pool[n] = pool[n] + recs
        versions = [_cuda_version(v) for v in pool.get("cuda-version", [])]
        known = [v for v in versions if v is not None]
        tying = {n for v in known for n in v.limits if not n.startswith("__")}
        met: dict[tuple[str, str, str], bool] = {}  # (name, spec, cuda-version) -> a record of name fits both
        # Builds of one version share their ties: (name, version, cuda-version specs, needs) -> minors served.
        seen: dict[tuple[str, str, tuple[str, ...], tuple[tuple[str, str], ...]], set[MajorMinor]] = {}
        for package, recs in sorted(pool.items()):
            if package == "cuda-version" or not all(_tied(r, tying) for r in recs):
                continue
            served: set[MajorMinor] = set()
            for rec in recs:
                cuda = tuple(spec for n, spec in _specs(rec.depends + rec.constrains) if n == "cuda-version")
                needs = tuple((n, spec) for n, spec in _specs(rec.depends) if n in tying)
                tie = (rec.name, rec.version, cuda, needs)
                if tie not in seen:
                    seen[tie] = {v.minor for v in known if _serves(rec, cuda, needs, v, pool, met)}
                served |= seen[tie]
            out[(channel, subdir, package)] = tuple(sorted(served))
    return out


def _cuda_version(rec: SnapshotRecord) -> _CudaVersion | None:
    minor = leading_major_minor(rec.version)
    if minor is None:
        return None
    limits: dict[str, list[str]] = defaultdict(list)
    for n, spec in _specs(rec.constrains):
        limits[n].append(spec)
    return _CudaVersion(minor, rec.version, {n: tuple(specs) for n, specs in limits.items()})


def _specs(deps: Iterable[str]) -> list[tuple[str, str]]:
    """(name, version spec) of each dependency: 'cudatoolkit 10.1|10.1.*' -> ('cudatoolkit', '10.1|10.1.*')."""
    out = []
    for dep in deps:
        parts = dep.split()
        if parts:
            out.append((parts[0], parts[1] if len(parts) > 1 else ""))
    return out


def _tied(rec: SnapshotRecord, tying: set[str]) -> bool:
    if any(n == "cuda-version" for n, _ in _specs(rec.depends + rec.constrains)):
        return True
    return any(n in tying for n, _ in _specs(rec.depends))


def _serves(
    rec: SnapshotRecord,
    cuda: tuple[str, ...],
    needs: tuple[tuple[str, str], ...],
    v: _CudaVersion,
    pool: Pool,
    met: dict[tuple[str, str, str], bool],
) -> bool:
    """Whether `rec` (its cuda-version specs `cuda`, its dependencies `needs` on what cuda-version constrains)
    installs beside cuda-version record `v`, as far as their specs say."""
    if any(matchspec.matches(v.version, spec) is False for spec in cuda):
        return False
    if any(matchspec.matches(rec.version, spec) is False for spec in v.limits.get(rec.name, ())):
        return False
    for n, spec in needs:
        known = met.get((n, spec, v.version))
        if known is None:
            limits = (spec, *v.limits.get(n, ()))
            known = any(all(matchspec.matches(t.version, s) is not False for s in limits) for t in pool.get(n, ()))
            met[(n, spec, v.version)] = known
        if not known:
            return False
    return True


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
