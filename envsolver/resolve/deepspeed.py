"""Which DeepSpeed release fits a torch build and the target CCs, and where it comes from. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.version import Version

from envsolver.core.versions import MajorMinor
from envsolver.kb.model import (
    DeepSpeedCondaBuild,
    DeepSpeedDefaultCcs,
    DeepSpeedRelease,
    DeepSpeedRequirements,
    DeepSpeedSdist,
    KnowledgeBase,
    OpLibrary,
    PypiCondaName,
    TorchBuild,
)

if TYPE_CHECKING:  # packaging's requirement parser costs ~25 ms: imported where a requirement is read
    from packaging.requirements import Requirement


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


def default_ccs(kb: KnowledgeBase, version: Version, cuda_major: int) -> DeepSpeedDefaultCcs | None:
    """What this DeepSpeed release builds for, with an nvcc of this major, when TORCH_CUDA_ARCH_LIST is unset
    (ahead-of-time builds); None where the KB does not know."""
    return next(
        (r for r in kb.deepspeed_default_ccs if r.cuda_major == cuda_major and r.since <= version <= r.latest), None
    )


def op_libraries(kb: KnowledgeBase, version: Version | None = None) -> tuple[OpLibrary, ...]:
    """The CUDA libraries DeepSpeed's ops link in this release (every release's, when None)."""
    return tuple(lib for lib in kb.op_libraries if version is None or lib.since <= version <= lib.latest)


def requirements_row(kb: KnowledgeBase, version: Version) -> DeepSpeedRequirements | None:
    """The KB's row of this release's pip requirements (with its sources); None where it has not read it."""
    return next((r for r in kb.deepspeed_requirements if r.since <= version <= r.latest), None)


def requirements_of(kb: KnowledgeBase, version: Version, cuda_build: bool = True) -> tuple[Requirement, ...] | None:
    """What pip requires when it installs this release's PyPI sdist on Linux; with `cuda_build`, what setup.py adds
    when it is built by a python whose torch imports and whose DeepSpeed accelerator is CUDA (nvidia-ml-py from
    0.15.0; DS_ACCELERATOR=cuda, as the hook's activation sets it). None where the KB has not read the release."""
    from packaging.requirements import Requirement

    row = requirements_row(kb, version)
    if row is None:
        return None
    return tuple(Requirement(text) for text in (*row.requires, *(row.cuda_build_adds if cuda_build else ())))


def torch_floor(kb: KnowledgeBase, version: Version) -> Version | None:
    """The lowest torch pip accepts for this release (its `torch>=X`); None when it sets none or is not known.
    No release sets an upper bound (tests/test_kb.py holds that)."""
    found = requirements_of(kb, version, cuda_build=False) or ()
    floors = [Version(s.version) for r in found if r.name == "torch" for s in r.specifier if s.operator == ">="]
    return max(floors) if floors else None


def sdist_of(kb: KnowledgeBase, version: Version) -> DeepSpeedSdist | None:
    """PyPI's sdist of this release (URL, sha256); None where the KB does not list it."""
    return next((s for s in kb.deepspeed_sdists if s.version == version), None)


def conda_package(kb: KnowledgeBase, pypi_name: str) -> PypiCondaName | None:
    """The conda-forge package that installs the PyPI project `pypi_name` (any spelling); None: unknown."""
    from packaging.utils import canonicalize_name

    key = canonicalize_name(pypi_name)
    return next((row for row in kb.pypi_conda_names if row.pypi == key), None)


def conda_name(kb: KnowledgeBase, pypi_name: str) -> str | None:
    """conda-forge's name for the PyPI project `pypi_name` (torch -> pytorch); None where the KB does not know."""
    row = conda_package(kb, pypi_name)
    return row.conda if row is not None else None


def choose(
    kb: KnowledgeBase,
    build: TorchBuild,
    torch: Version,
    ccs: tuple[MajorMinor, ...],
    nvcc: MajorMinor,
    python: MajorMinor,
) -> tuple[DeepSpeedChoice | None, DeepSpeedChoice | None, str]:
    """(conda choice, PyPI choice, why there is no PyPI choice: the newest release's reason). Either choice may
    be None."""
    why = ""
    pypi = None
    for release in sorted(kb.deepspeed_releases, key=lambda r: r.since, reverse=True):
        problem = _fits(release, torch, ccs, nvcc, build.cuda)
        if problem is None:
            pypi = DeepSpeedChoice(release, release.latest, None)
            break
        why = why or f"DeepSpeed {release.since}-{release.latest}: {problem}"
    return conda_choice(kb, build, torch, ccs, nvcc, python), pypi, why or "no DeepSpeed release in the knowledge base"


def _conda_builds_for(kb: KnowledgeBase, build: TorchBuild, torch: Version) -> list[DeepSpeedCondaBuild]:
    if build.channel != "conda-forge":
        return []
    return list(kb.deepspeed_conda_builds_for(MajorMinor(torch.major, torch.minor), build.cuda, build.platform))


def conda_choice(
    kb: KnowledgeBase,
    build: TorchBuild,
    torch: Version,
    ccs: tuple[MajorMinor, ...],
    nvcc: MajorMinor,
    python: MajorMinor,
) -> DeepSpeedChoice | None:
    offers = [
        (version, cb)
        for cb in _conda_builds_for(kb, build, torch)
        if nvcc >= (cb.cuda_version_min or cb.cuda) and python in cb.python
        for version in cb.versions
    ]
    for version, cb in sorted(offers, key=lambda o: o[0], reverse=True):
        row = release_of(kb, version)
        if row is not None and _fits(row, torch, ccs, nvcc, build.cuda) is None:
            return DeepSpeedChoice(row, version, cb)
    return None


def no_conda_text(kb: KnowledgeBase, build: TorchBuild, torch: Version, nvcc: MajorMinor, python: MajorMinor) -> str:
    """Why conda-forge has no deepspeed build for this candidate, in one clause."""
    builds = _conda_builds_for(kb, build, torch)
    torch_minor = f"{torch.major}.{torch.minor}"
    if not builds:
        return (
            f"conda-forge has no deepspeed build for torch {torch_minor} with CUDA {build.cuda} "
            f"({newest_conda_text(kb, build.platform)})"
        )
    newest = max(builds, key=lambda cb: max(cb.versions))
    label = f"conda-forge's deepspeed {max(newest.versions)} cuda{build.cuda.nodot} build"
    if newest.cuda_version_min is not None and nvcc < newest.cuda_version_min:
        return (
            f"{label} needs cuda-version >= {newest.cuda_version_min}, whose nvcc DeepSpeed's op builder rejects "
            f"against torch built with CUDA {build.cuda} (it has no CUDA {build.cuda.major} minor allow-list)"
        )
    if python not in newest.python:
        offered = ", ".join(str(p) for p in newest.python)
        return f"{label} has no Python {python} build (it has {offered})"
    return f"{label} does not fit the target GPUs"


def newest_conda_text(kb: KnowledgeBase, platform: str) -> str:
    builds = [b for b in kb.deepspeed_conda_builds if b.platform == platform]
    if not builds:
        return f"conda-forge has no deepspeed CUDA builds for {platform}"
    newest = max(builds, key=lambda b: max(b.versions))
    return f"the newest is deepspeed {max(newest.versions)}, built for torch {newest.torch}"
