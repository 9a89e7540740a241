"""Frozen row types of the knowledge base. Loading and validation live in load.py."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Literal

from packaging.version import Version

from envsolver.core.archlist import Arch
from envsolver.core.versions import DriverVersion, MajorMinor

Channel = Literal["conda-forge", "pytorch"]
Platform = Literal["linux-64", "linux-aarch64"]
PLATFORMS: tuple[Platform, ...] = ("linux-64", "linux-aarch64")
CHANNELS: tuple[Channel, ...] = ("conda-forge", "pytorch")


@dataclass(frozen=True)
class Gpu:
    key: str
    name: str
    aliases: tuple[str, ...]
    smi_names: tuple[str, ...]
    compute_capability: MajorMinor
    architecture: str
    segment: str
    memory_gb: tuple[int, ...] | None
    bf16: bool | None
    fp8: bool | None
    min_driver: int | None
    # the platform its hosts usually are; None: not recorded (a row built from a PCI device ID or a reported
    # compute capability says nothing about its host), so --platform, the detected host or the default decides
    platform: Platform | None
    source: tuple[str, ...]
    note: str | None = None

    @property
    def all_names(self) -> tuple[str, ...]:
        """Every name `--gpu` accepts for this row: key, name, aliases and the names nvidia-smi prints."""
        return tuple(dict.fromkeys((self.key, self.name, *self.aliases, *self.smi_names)))


@dataclass(frozen=True)
class MultiGpu:
    """What links several of these GPUs in one node: NVLink, and GPU peer-to-peer (None: unknown)."""

    gpus: tuple[str, ...]  # gpu keys
    nvlink: bool | None
    peer_to_peer: bool | None
    source: tuple[str, ...]


@dataclass(frozen=True)
class Chip:
    """A GPU chip as pci.ids names it ("GA102") and the compute capability of the products built on it (None:
    unknown)."""

    chip: str
    compute_capability: MajorMinor | None
    architecture: str
    source: tuple[str, ...]
    note: str | None = None


@dataclass(frozen=True)
class PciDevice:
    """One row of the driver's table: a PCI device ID ("2233"), the subsystem ("10DE 165A") where the driver
    names a board by it, the name the driver gives it, and its chip."""

    device_id: str
    subsystem: str | None
    name: str
    chip: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class CudaMajor:
    major: int
    mvc_driver: DriverVersion
    source: tuple[str, ...]
    note: str | None = None


@dataclass(frozen=True)
class Toolkit:
    version: MajorMinor
    driver: DriverVersion | None  # the full-support minimum; None where NVIDIA publishes none (13.4 on)
    sm: frozenset[int] | None
    gcc_max: int | None
    source: tuple[str, ...]
    note: str | None = None


@dataclass(frozen=True)
class ArchRename:
    old: MajorMinor
    new: MajorMinor
    from_cuda: MajorMinor
    source: tuple[str, ...]


@dataclass(frozen=True)
class TorchBuild:
    channel: Channel
    versions: tuple[Version, ...]
    cuda: MajorMinor
    cuda_range: str | None
    platform: Platform
    build: str
    archs: tuple[Arch, ...]
    python: tuple[MajorMinor, ...]
    cudnn: str | None
    nccl: str | None
    glibc: MajorMinor | None
    arm_variant: str | None
    source: tuple[str, ...]
    note: str | None = None

    @property
    def arch_list(self) -> str:
        return ";".join(str(a) for a in self.archs)

    @property
    def toolkit_channel(self) -> str:
        """Where a plan's nvcc and CUDA headers come from: conda-forge, or for a pytorch-channel build the
        nvidia channel that its pytorch-cuda package depends on."""
        return "conda-forge" if self.channel == "conda-forge" else "nvidia"

    def has_sass_for(self, cc: MajorMinor) -> bool:
        """SASS for X.y runs on X.z with z >= y (same major only)."""
        return any(a.cc.major == cc.major and a.cc.minor <= cc.minor for a in self.archs)


@dataclass(frozen=True)
class DeepSpeedRelease:
    since: Version
    latest: Version
    min_torch: Version
    cc_below: MajorMinor | None
    cuda_minor_mismatch_ok: dict[int, frozenset[MajorMinor]]
    source: tuple[str, ...]

    def accepts_mismatch(self, nvcc: MajorMinor, torch_cuda: MajorMinor) -> bool:
        if nvcc == torch_cuda:
            return True
        if nvcc.major != torch_cuda.major:
            return False
        allowed = self.cuda_minor_mismatch_ok.get(nvcc.major, frozenset())
        return nvcc in allowed and torch_cuda in allowed


@dataclass(frozen=True)
class DeepSpeedDefaultCcs:
    """What DeepSpeed's op builder targets, releases `since`..`latest`, when TORCH_CUDA_ARCH_LIST is unset and
    ops are built ahead of time with an nvcc of `cuda_major`."""

    since: Version
    latest: Version
    cuda_major: int
    ccs: tuple[Arch, ...]
    source: tuple[str, ...]

    @property
    def text(self) -> str:
        return ";".join(str(a) for a in self.ccs)


@dataclass(frozen=True)
class OpLibrary:
    """A CUDA library a DeepSpeed op links (-l`library`) in releases `since`..`latest`, and the conda package
    that holds its unversioned lib`library`.so."""

    op: str
    library: str
    since: Version
    latest: Version
    package: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class DeepSpeedRequirements:
    """What pip requires when it installs DeepSpeed `since`..`latest` from its PyPI sdist on Linux: `requires`
    (setup.py's install_requires: requirements/requirements.txt) and `cuda_build_adds`, which setup.py appends when
    the building python imports torch and DeepSpeed's accelerator is CUDA. PEP 508 strings, no extras or markers
    (the loader checks)."""

    since: Version
    latest: Version
    requires: tuple[str, ...]
    cuda_build_adds: tuple[str, ...]
    source: tuple[str, ...]


@dataclass(frozen=True)
class DeepSpeedSdist:
    """A DeepSpeed release's sdist on PyPI: its file URL and sha256, as PyPI's simple index lists them."""

    version: Version
    sha256: str
    url: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class PypiCondaName:
    """The conda-forge package that installs a PyPI project (`pypi`: its PEP 503 normalised name).
    provides_dist: the package holds the project's Python distribution, so pip sees a requirement on it met."""

    pypi: str
    conda: str
    provides_dist: bool
    source: tuple[str, ...]


@dataclass(frozen=True)
class TorchRelease:
    """An upstream PyTorch release newer than every conda build in the KB: its CUDA variants (None: unknown),
    what its default PyPI wheel requires (CUDA, cuDNN, NCCL, Python; None: unknown) and whether conda-forge has
    builds (None: not confirmed either way)."""

    version: Version
    pypi_cuda: tuple[MajorMinor, ...] | None
    pypi_default_cuda: MajorMinor | None
    cudnn: str | None
    nccl: str | None
    python_min: MajorMinor | None
    conda_forge: bool | None
    source: tuple[str, ...]
    note: str | None = None


@dataclass(frozen=True)
class DeepSpeedCondaBuild:
    """conda-forge deepspeed CUDA builds of these versions, pinned to one torch minor."""

    versions: tuple[Version, ...]
    torch: MajorMinor
    cuda: MajorMinor
    cuda_version_min: MajorMinor | None  # the lowest cuda-version its run deps allow; None: `cuda`
    python: tuple[MajorMinor, ...]
    platform: Platform
    source: tuple[str, ...]


@dataclass(frozen=True)
class OpHeader:
    header: str
    package: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class Fact:
    """A single sourced fact with a value (a version, a name)."""

    value: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class Holding:
    """What a restricted KB can lock: its name for messages ('the bundled snapshot (2026-07-02)'), the
    nvcc versions (major.minor) it holds per (toolkit channel, platform), and for each CUDA-bound package (every
    record of it tied to a cuda-version) per (channel, platform, name) the CUDA minors some record of it
    installs beside. A package it does not list is either not CUDA-bound or not held at all."""

    name: str
    nvcc: dict[tuple[str, str], tuple[MajorMinor, ...]]
    cuda_bound: dict[tuple[str, str, str], tuple[MajorMinor, ...]] = field(default_factory=dict)

    def nvcc_for(self, build: TorchBuild) -> tuple[MajorMinor, ...]:
        return self.nvcc.get((build.toolkit_channel, build.platform), ())

    def lacking(
        self, channel: str, platform: str, cuda: MajorMinor, names: Iterable[str]
    ) -> list[tuple[str, tuple[MajorMinor, ...]]]:
        """Of `names`, the CUDA-bound packages with no record for `cuda` here, each with the minors it serves."""
        out = []
        for name in names:
            served = self.cuda_bound.get((channel, platform, name))
            if served is not None and cuda not in served:
                out.append((name, served))
        return out


@dataclass(frozen=True)
class KnowledgeBase:
    gpus: tuple[Gpu, ...]
    cuda_majors: tuple[CudaMajor, ...]
    toolkits: tuple[Toolkit, ...]
    arch_renames: tuple[ArchRename, ...]
    torch_builds: tuple[TorchBuild, ...]
    deepspeed_releases: tuple[DeepSpeedRelease, ...]
    deepspeed_conda_builds: tuple[DeepSpeedCondaBuild, ...]
    # What an env needs to build a PyPI sdist into itself without build isolation (conda names), with sources.
    pip_build: tuple[tuple[str, ...], tuple[str, ...]]
    deepspeed_requirements: tuple[DeepSpeedRequirements, ...]
    deepspeed_sdists: tuple[DeepSpeedSdist, ...]
    pypi_conda_names: tuple[PypiCondaName, ...]
    op_headers: tuple[OpHeader, ...]
    targets_include: dict[str, Fact]
    split_packages_since: Fact
    cudatoolkit_dev_last: Fact
    no_mixing: tuple[MajorMinor, MajorMinor, tuple[str, ...]]
    nvcc_package: Fact
    cxx_packages: tuple[tuple[str, ...], tuple[str, ...]]
    cxx_packages_nvidia: tuple[tuple[str, ...], tuple[str, ...]]
    platform_virtual_packages: dict[str, tuple[dict[str, str], tuple[str, ...]]]
    deepspeed_arch_suffixes: Fact
    extra_headers: tuple[OpHeader, ...]
    cudnn_cuda12_below: Fact
    deepspeed_default_ccs: tuple[DeepSpeedDefaultCcs, ...]
    op_libraries: tuple[OpLibrary, ...]
    torch_releases: tuple[TorchRelease, ...]
    cuda_global_pin: Fact
    multi_gpu: tuple[MultiGpu, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    chips: tuple[Chip, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()  # the driver's table, in its order
    # None for the shipped KB; the KB restricted to what the bundled snapshot can lock carries its name and
    # nvcc versions (snapshot.coverage.restrict).
    holding: Holding | None = None

    def __getstate__(self) -> dict[str, object]:
        """The fields alone (kb/cache.py pickles a KB): the lookup tables below are built again where used."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @cached_property
    def _toolkits(self) -> dict[MajorMinor, Toolkit]:
        """toolkit()'s table, built once: the resolver looks toolkits up hundreds of thousands of times."""
        table: dict[MajorMinor, Toolkit] = {}
        for t in self.toolkits:
            table.setdefault(t.version, t)
        return table

    @cached_property
    def _cuda_majors(self) -> dict[int, CudaMajor]:
        table: dict[int, CudaMajor] = {}
        for m in self.cuda_majors:
            table.setdefault(m.major, m)
        return table

    @cached_property
    def _deepspeed_conda(self) -> dict[tuple[MajorMinor, MajorMinor, str], tuple[DeepSpeedCondaBuild, ...]]:
        table: dict[tuple[MajorMinor, MajorMinor, str], list[DeepSpeedCondaBuild]] = {}
        for cb in self.deepspeed_conda_builds:
            table.setdefault((cb.torch, cb.cuda, cb.platform), []).append(cb)
        return {key: tuple(rows) for key, rows in table.items()}

    def toolkit(self, version: MajorMinor) -> Toolkit | None:
        """The first toolkit row of this CUDA release."""
        return self._toolkits.get(version)

    def deepspeed_conda_builds_for(
        self, torch: MajorMinor, cuda: MajorMinor, platform: str
    ) -> tuple[DeepSpeedCondaBuild, ...]:
        """conda-forge's DeepSpeed build rows for this torch minor, CUDA and platform, in the KB's order."""
        return self._deepspeed_conda.get((torch, cuda, platform), ())

    def known_drivers(self) -> tuple[DriverVersion, ...]:
        """Every driver version the knowledge base records (cuda.yaml's full-support and minor-version
        compatibility minimums), oldest first: the range a user's driver is checked against."""
        found = {t.driver for t in self.toolkits if t.driver is not None} | {m.mvc_driver for m in self.cuda_majors}
        return tuple(sorted(found))

    def cuda_major(self, major: int) -> CudaMajor | None:
        """The first row of this CUDA major."""
        return self._cuda_majors.get(major)

    def include_target(self, platform: str, arm_variant: str | None = None) -> Fact:
        """The targets/<name> directory conda's CUDA headers go to: per platform, or per arm variant where it
        has its own (tegra)."""
        return self.targets_include.get(f"{platform}:{arm_variant}") or self.targets_include[platform]
