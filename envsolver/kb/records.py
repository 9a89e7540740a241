"""What a channel record states: its Python, CUDA, arm variant and the floors its run dependencies set. Pure.

A record keeps what the KB audit compares: name, version, build string and number, and its run dependencies
(`depends`), as the channel serves them (hotfixes applied). Sample dependencies, from conda-forge's
pytorch-2.10.0-cuda130_mkl_py313_haca1682_303 and the pytorch channel's pytorch-2.1.0-py3.10_cuda12.1_cudnn8.9.2_0:
    "cuda-version >=13.0,<14"   "libcudnn >=9.19.0.56,<10.0a0"   "__glibc >=2.28,<3.0.a0"
    "python_abi 3.13.* *_cp313"   "arm-variant * sbsa"   "pytorch-cuda >=12.1,<12.2"
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.version import Version

from envsolver.core.versions import MajorMinor

_CUDA_BUILD = re.compile(r"(?:^|_)cuda([0-9]+(?:\.[0-9]+)?)")
_MM = re.compile(r"([0-9]{1,9})(?:\.([0-9]{1,9}))?")
# Dependencies that say nothing about cuda-version (effective_floor does not follow them).
_NOT_CUDA = frozenset({"cuda-version", "python", "python_abi", "pytorch", "libtorch", "__glibc"})


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
        a = major_minor(low) if low else None
        b = major_minor(high) if high else None
        if a is not None and b is not None and b == MajorMinor(a.major, a.minor + 1):
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


def arm_variant_of(rec: Record) -> str | None:
    """The arm variant a linux-aarch64 build is for (`arm-variant * sbsa` -> 'sbsa'); None where it names none."""
    return next((build for _, build in deps_of(rec, "arm-variant") if build), None)


def library_index(records: Iterable[Record]) -> dict[tuple[str, str, str], list[Record]]:
    """The records other than pytorch and deepspeed (CUDA libraries), by channel, subdir and name."""
    index: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for rec in records:
        if rec.name not in ("pytorch", "deepspeed"):
            index[(rec.channel, rec.subdir, rec.name)].append(rec)
    return index


def effective_floor(rec: Record, index: dict[tuple[str, str, str], list[Record]]) -> tuple[MajorMinor, str] | None:
    """The lowest cuda-version `rec`'s run dependencies allow, as the data shows it, and why; None when the data
    shows nothing (no cuda-version dependency, no library record that satisfies one)."""
    best = floor(rec, "cuda-version")
    for dep in rec.depends:
        parts = dep.split()
        if len(parts) < 2 or parts[0] in _NOT_CUDA:
            continue
        candidates = [r for r in index.get((rec.channel, rec.subdir, parts[0]), []) if satisfies(r.version, parts[1])]
        floors = [(f, r) for r in candidates for f in [floor(r, "cuda-version")]]
        if not floors or any(f is None for f, _ in floors):
            continue
        low, lib = min(((f, r) for f, r in floors if f is not None), key=lambda x: x[0][0])
        if best is None or low[0] > best[0]:
            best = (low[0], f"{dep} -> {lib.name}-{lib.version}-{lib.build} depends {low[1]}")
    return best
