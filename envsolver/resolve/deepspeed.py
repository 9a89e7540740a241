"""Which DeepSpeed release fits a torch build and the target CCs, and where it comes from. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from envsolver.kb.model import DeepSpeedCondaBuild, DeepSpeedRelease, KnowledgeBase, TorchBuild
from envsolver.versions import MajorMinor


@dataclass(frozen=True)
class DeepSpeedChoice:
    release: DeepSpeedRelease
    version: Version
    conda: DeepSpeedCondaBuild | None  # None: from PyPI (pure Python; the hook builds the ops)


def _fits(
    release: DeepSpeedRelease, torch: Version, ccs: tuple[MajorMinor, ...], nvcc: MajorMinor, torch_cuda: MajorMinor
) -> str | None:
    """None when the release fits, else why not (one clause)."""
    if torch < release.min_torch:
        return f"needs torch >= {release.min_torch}"
    if release.cc_below is not None and any(cc >= release.cc_below for cc in ccs):
        return f"builds only compute capability < {release.cc_below}"
    if not release.accepts_mismatch(nvcc, torch_cuda):
        return f"its op builder rejects nvcc {nvcc} with torch built for CUDA {torch_cuda}"
    return None


def release_of(kb: KnowledgeBase, version: Version) -> DeepSpeedRelease | None:
    rows = sorted(kb.deepspeed_releases, key=lambda r: r.since)
    found = None
    for row in rows:
        if row.since <= version:
            found = row
    return found if found and version <= found.latest else None


def choose(
    kb: KnowledgeBase,
    build: TorchBuild,
    torch: Version,
    ccs: tuple[MajorMinor, ...],
    nvcc: MajorMinor,
    python: MajorMinor,
) -> tuple[DeepSpeedChoice | None, DeepSpeedChoice | None, str]:
    """(conda choice, PyPI choice, why-not text). Either choice may be None."""
    why = "no DeepSpeed release in the knowledge base"
    pypi = None
    for release in sorted(kb.deepspeed_releases, key=lambda r: r.since, reverse=True):
        problem = _fits(release, torch, ccs, nvcc, build.cuda)
        if problem is None:
            pypi = DeepSpeedChoice(release, release.latest, None)
            break
        why = f"DeepSpeed {release.since}-{release.latest} {problem}"
    conda = None
    if build.channel == "conda-forge":
        torch_minor = MajorMinor(torch.major, torch.minor)
        offers = [
            (v, cb)
            for cb in kb.deepspeed_conda_builds
            for v in cb.versions
            if cb.torch == torch_minor
            and build.cuda in cb.cuda
            and cb.platform == build.platform
            and python in cb.python
        ]
        for version, cb in sorted(offers, key=lambda o: o[0], reverse=True):
            row = release_of(kb, version)
            if row is not None and _fits(row, torch, ccs, nvcc, build.cuda) is None:
                conda = DeepSpeedChoice(row, version, cb)
                break
    return conda, pypi, why


def newest_conda_text(kb: KnowledgeBase, platform: str) -> str:
    builds = [b for b in kb.deepspeed_conda_builds if b.platform == platform]
    if not builds:
        return f"conda-forge has no deepspeed CUDA builds for {platform}"
    newest = max(builds, key=lambda b: max(b.versions))
    return f"the newest is deepspeed {max(newest.versions)}, built for torch {newest.torch}"
