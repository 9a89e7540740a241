"""Read the upstream facts live: PyPI's simple index (PEP 503, the page pip reads) of torch, deepspeed and NVIDIA's
CUDA runtime, nvcc and crt wheels; each torch release's core metadata (PEP 658, the wheel's METADATA served beside
it); DeepSpeed's sdists and NVIDIA's nvcc and crt wheels, each proven by the sha256 the index gives before it is
read. Every read goes through envsolver.net.http: bounded in size (the ceilings below) and time, proxies and
certificates as for conda downloads.

(PyPI's JSON API, https://pypi.org/pypi/NAME/json, gives the same versions, but only the newest release's
requires_dist, and the per-version URL answers 404 here; the simple index and the metadata files give every
release's.)
"""

from __future__ import annotations

import datetime
import hashlib
import os
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

from packaging.version import Version

from envsolver.core.errors import EnvsolverError, Kind
from envsolver.kb.model import KnowledgeBase
from envsolver.kb.upstream import sdists, wheels
from envsolver.kb.upstream.facts import DeepSpeedSdist, Facts, Nvcc, TorchRelease
from envsolver.net import http
from envsolver.net import pypi_index as index
from envsolver.net.pypi_index import PypiFile

MAX_METADATA = 1 << 20  # torch 2.14.0's METADATA is 37 KiB
MAX_SDIST = 64 << 20  # deepspeed 0.19.8's sdist is 1.6 MiB
MAX_TORCH_WHEEL = 2 << 30  # torch 2.15.0's manylinux x86_64 wheels are 515 MiB
MAX_WHEEL = 512 << 20  # nvidia-cuda-nvcc 13.5.37 (x86_64) is 45 MiB
TIMEOUT_S = 60.0
RUNTIME = ("nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime")
NVCC = ("nvidia-cuda-nvcc-cu11", "nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc")
CRT = "nvidia-cuda-crt"  # holds include/crt/host_config.h from CUDA 13.0 (nvidia-cuda-nvcc requires it)
CACHE_ENV = "ENVSOLVER_KB_AUDIT_CACHE"
Progress = Callable[[str], None]


class SourceUnreadable(EnvsolverError):
    """A source could not be read, or does not hold what the audit reads (exit 2)."""

    kind: Kind = "fetch"


FIX = "Check that https://pypi.org is reachable (proxy settings as for envsolver's downloads) and run it again."


def cache_dir(environ: Mapping[str, str]) -> Path:
    given = environ.get(CACHE_ENV)
    return Path(given) if given else Path.home() / ".cache" / "envsolver-kb-audit"


def collect(
    kb: KnowledgeBase, cache: Path, environ: Mapping[str, str] | None = None, progress: Progress = lambda _: None
) -> Facts:
    """Every fact the upstream audit compares, read now. Raises SourceUnreadable (exit 2)."""
    env = os.environ if environ is None else environ
    sources: dict[str, str] = {}

    def page(project: str) -> list[PypiFile]:
        sources[project] = f"{index.PYPI}/{project}/"
        progress(f"reading {sources[project]}")
        try:
            return index.fetch(project, index.PYPI, env)
        except index.IndexUnreadable as exc:
            raise SourceUnreadable(f"{exc} {FIX}") from None

    try:
        torch_files = page("torch")
        torch_versions = _finals(torch_files)
        kb_top = max(v for row in kb.torch_builds for v in row.versions)
        kb_top = max([kb_top, *(r.version for r in kb.torch_releases)])
        wanted = sorted(
            {str(r.version) for r in kb.torch_releases} | {v for v in torch_versions if Version(v) > kb_top}
        )
        torch = {}
        for version in sorted(wanted, key=Version):
            if version in torch_versions:
                progress(f"reading torch {version}'s wheel metadata")
                torch[version] = _torch_release(torch_files, version, env)
        sources["torch metadata"] = (
            "each release's default wheel: its URL + '.metadata' (PEP 658) where served, else the wheel itself"
        )

        ds_files = page("deepspeed")
        ds_versions = [v for v in _finals(ds_files) if _sdist(ds_files, v) is not None]
        oldest = min((s.version for s in kb.deepspeed_sdists), default=Version("0"))
        deepspeed = {}
        for version in ds_versions:
            if Version(version) >= oldest:
                file = _sdist(ds_files, version)
                assert file is not None
                path = _cached(file, cache / "sdists", env, progress)
                facts = sdists.read(path, version)
                deepspeed[version] = DeepSpeedSdist(
                    file.url,
                    file.sha256,
                    facts.requires,
                    facts.cuda_build_adds,
                    facts.cuda_minor_mismatch_ok,
                    facts.min_torch,
                )

        pages = {project: page(project) for project in (*RUNTIME, *NVCC, CRT)}
        cuda_versions = {
            project: tuple(v for v in _finals(pages[project]) if Version(v).major >= 11)
            for project in (*RUNTIME, *NVCC)
        }
        nvcc = {}
        for project in NVCC:
            for version in cuda_versions[project]:
                nvcc[version] = _nvcc(pages[project], pages[CRT], version, env, progress)
    except (wheels.WheelUnreadable, http.DownloadError, zipfile.BadZipFile, ValueError) as exc:
        # what PyPI served is not what it should be (a wheel that is no zip, a Version: that is no version)
        raise SourceUnreadable(f"{exc} {FIX}") from None
    return Facts(
        read=datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        sources=sources,
        torch_versions=tuple(torch_versions),
        torch=torch,
        deepspeed_versions=tuple(ds_versions),
        deepspeed=deepspeed,
        cuda_versions=cuda_versions,
        nvcc=nvcc,
    )


def _finals(files: list[PypiFile]) -> list[str]:
    """The final releases (no pre-, dev- or post-release) with a file that is not yanked, oldest first."""
    found = {f.version for f in files if not f.yanked}
    return sorted((v for v in found if not Version(v).is_prerelease and not Version(v).is_postrelease), key=Version)


def _sdist(files: list[PypiFile], version: str) -> PypiFile | None:
    return next((f for f in files if f.version == version and not f.wheel and not f.yanked), None)


def _x86_64(files: list[PypiFile], version: str) -> list[PypiFile]:
    return sorted(
        (
            f
            for f in files
            if f.version == version
            and f.wheel
            and not f.yanked
            and "manylinux" in f.filename
            and f.filename.endswith("_x86_64.whl")
        ),
        key=lambda f: f.filename,
    )


def _torch_release(files: list[PypiFile], version: str, env: Mapping[str, str]) -> TorchRelease:
    """The release's default wheel: manylinux x86_64 for the lowest CPython (not free-threaded), and its METADATA."""
    linux = [f for f in _x86_64(files, version) if wheels.python_tag(f.filename) is not None]
    tags = sorted({t for f in linux if (t := wheels.python_tag(f.filename)) is not None})
    plain = [f for f in linux if f.filename.split("-")[-3] == f.filename.split("-")[-2]]
    if not plain:
        raise SourceUnreadable(f"torch {version} has no manylinux x86_64 CPython wheel on PyPI. {FIX}")
    wheel = min(plain, key=lambda f: (wheels.python_tag(f.filename) or tags[0], f.filename))
    text, metadata_from = _metadata(wheel, env)
    name, said = wheels.metadata_field(text, "Name"), wheels.metadata_field(text, "Version")
    if (name or "").lower() != "torch" or said is None or Version(said) != Version(version):
        raise SourceUnreadable(f"{wheel.filename}.metadata is not torch {version}'s (Name {name!r}, Version {said!r})")
    return TorchRelease(
        wheel.filename,
        metadata_from,
        wheel.requires_python,
        wheels.cuda_requirements(wheels.requires_dist(text)),
        tuple(str(t) for t in tags),
    )


def _metadata(wheel: PypiFile, env: Mapping[str, str]) -> tuple[str, str]:
    """The wheel's METADATA: its PEP 658 file where the server has one (PyPI's index gives no hash for it here, so
    its Name and Version are checked by the caller), else read from the wheel itself, proven by its sha256."""
    with tempfile.TemporaryDirectory(prefix="envsolver-audit-") as tmp:
        target = Path(tmp) / "METADATA"
        try:
            http.download(wheel.url + ".metadata", target, timeout=TIMEOUT_S, environ=env, ceiling=MAX_METADATA)
            return target.read_bytes()[:MAX_METADATA].decode("utf-8", errors="replace"), "PEP 658 file"
        except http.DownloadError:
            pass  # not served for every wheel (404): the wheel itself holds it
        path = Path(tmp) / wheel.filename
        http.download(wheel.url, path, timeout=TIMEOUT_S, environ=env, ceiling=MAX_TORCH_WHEEL, sha256=wheel.sha256)
        with zipfile.ZipFile(path) as archive:
            info = wheels.member(archive, ".dist-info/METADATA")
            if info is None:
                raise SourceUnreadable(f"{wheel.filename} holds no .dist-info/METADATA. {FIX}")
            return wheels.read_member(archive, info, MAX_METADATA).decode("utf-8", errors="replace"), "wheel"


def _cached(file: PypiFile, folder: Path, env: Mapping[str, str], progress: Progress) -> Path:
    """The file in `folder`, proven by the index's sha256 (downloaded when missing or different)."""
    path = folder / file.filename
    if path.is_file() and _sha256(path) == file.sha256:
        return path
    progress(f"downloading {file.filename}")
    folder.mkdir(parents=True, exist_ok=True)
    part = folder / f".{file.filename}.part"
    http.download(file.url, part, timeout=TIMEOUT_S, environ=env, ceiling=MAX_SDIST, sha256=file.sha256)
    part.replace(path)
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _nvcc(files: list[PypiFile], crt: list[PypiFile], version: str, env: Mapping[str, str], progress: Progress) -> Nvcc:
    """nvcc --list-gpu-code of the version's x86_64 wheel, and the GCC limit of its host_config.h (in the wheel,
    else in nvidia-cuda-crt's of the same version)."""
    wheel = next(iter(_x86_64(files, version)), None)
    if wheel is None:
        raise SourceUnreadable(f"nvcc {version} has no manylinux x86_64 wheel on PyPI. {FIX}")
    progress(f"reading {wheel.filename}")
    with tempfile.TemporaryDirectory(prefix="envsolver-audit-") as tmp:
        path = Path(tmp) / wheel.filename
        http.download(wheel.url, path, timeout=TIMEOUT_S, environ=env, ceiling=MAX_WHEEL, sha256=wheel.sha256)
        sm, how = wheels.gpu_targets(path)
        gcc, where = wheels.host_config(path), wheel.filename
        if gcc is None:
            other = next(iter(_x86_64(crt, version)), None)
            if other is None:
                raise SourceUnreadable(f"{wheel.filename} holds no host_config.h and {CRT} {version} has no wheel")
            where = other.filename
            crt_path = Path(tmp) / other.filename
            http.download(other.url, crt_path, timeout=TIMEOUT_S, environ=env, ceiling=MAX_WHEEL, sha256=other.sha256)
            gcc = wheels.host_config(crt_path)
            if gcc is None:
                raise SourceUnreadable(f"{other.filename} holds no include/crt/host_config.h with a GCC limit")
    return Nvcc(wheel.filename, tuple(sorted(sm)), how, gcc, where)
