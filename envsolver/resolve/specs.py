"""Turn a chosen candidate into channels, conda specs, pip requirements, env and virtual packages. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import Version

from envsolver.kb.model import KnowledgeBase, Toolkit
from envsolver.resolve import companions
from envsolver.resolve import deepspeed as ds_rules
from envsolver.resolve.candidates import Candidate
from envsolver.resolve.deepspeed import no_conda_text
from envsolver.resolve.plan import CondaSpec, Reason
from envsolver.resolve.target import Target


@dataclass(frozen=True)
class Assembly:
    channels: tuple[str, ...]
    specs: tuple[CondaSpec, ...]
    pip: tuple[str, ...]
    reasons: tuple[Reason, ...]


# The characters rattler's strict match-spec parser (the one its solve call uses) accepts in a build glob.
_STRICT_GLOB = re.compile(r"[A-Za-z0-9_*]*")


def channels(candidate: Candidate) -> tuple[str, ...]:
    """conda-forge alone, or the seeds' legacy recipe: pytorch, then nvidia (every CUDA package that
    pytorch-cuda pulls in, and nvcc with the headers), then conda-forge for the rest."""
    if candidate.build.channel == "conda-forge":
        return ("conda-forge",)
    return ("pytorch", candidate.build.toolkit_channel, "conda-forge")


def spec_glob(glob: str) -> str:
    """A build glob the strict parser accepts: cut at the first other character (the dot in
    '*cuda12.1*'), ending in '*'. It matches every build the KB glob matches, and more; a pytorch-channel
    plan then selects the CUDA minor through pytorch-cuda=X.Y, which its CUDA builds depend on."""
    kept = _STRICT_GLOB.match(glob)
    head = kept.group(0) if kept else ""
    return head if head == glob else head.rstrip("*") + "*"


def gcc_max(kb: KnowledgeBase, toolkit: Toolkit) -> tuple[int | None, Toolkit | None]:
    """The newest GCC this nvcc accepts; an unknown value falls back to the nearest older toolkit's
    (nvcc's supported GCC range only grows between minor releases)."""
    known = [t for t in kb.toolkits if t.gcc_max is not None and t.version <= toolkit.version]
    if not known:
        return None, None
    best = max(known, key=lambda t: t.version)
    return best.gcc_max, best


def _links_text(kb: KnowledgeBase) -> str:
    """', and cpu_adam (DeepSpeed 0.14.0-0.19.7) links -lcurand (libcurand-dev), ...' or ''."""
    parts = []
    for op in dict.fromkeys(lib.op for lib in kb.op_libraries):
        rows = [lib for lib in kb.op_libraries if lib.op == op]
        since, latest = min(r.since for r in rows), max(r.latest for r in rows)
        libs = ", ".join(f"-l{r.library} ({r.package})" for r in rows)
        parts.append(f"{op} (DeepSpeed {since}-{latest}) links {libs}")
    return "; " + "; ".join(parts) if parts else ""


def assemble(kb: KnowledgeBase, target: Target, c: Candidate, conda_alternative: str | None = None) -> Assembly:
    """The channels, specs, PyPI requirements and reasons of a candidate. CONDA_ALTERNATIVE: what
    `--deepspeed-from conda-forge` would plan instead, said in the reason when DeepSpeed comes from PyPI."""
    build = c.build
    legacy = build.channel == "pytorch"
    specs: list[CondaSpec] = [CondaSpec("python", f"{c.python}.*")]
    reasons: list[Reason] = []
    specs.append(CondaSpec("pytorch", f"=={c.torch}", spec_glob(build.build)))
    if build.arm_variant == "tegra":
        # The tegra and sbsa builds share version and build string; the arm-variant package tells them apart.
        specs.append(CondaSpec("arm-variant", None, "tegra"))
    nvcc = kb.nvcc_package.value
    headers = companions.header_packages(kb)
    if legacy:
        specs.append(CondaSpec("pytorch-cuda", f"{build.cuda}.*"))
        specs.append(CondaSpec(nvcc, f"{c.toolkit.version}.*"))
    else:
        specs.append(CondaSpec("cuda-version", f"{c.toolkit.version}.*"))
        specs.append(CondaSpec(nvcc))
    specs.extend(CondaSpec(name) for name in headers)
    header_list = ", ".join(f"{h.header} ({h.package})" for h in kb.op_headers)
    links = _links_text(kb)
    where = (
        f"the nvidia channel, {nvcc} pinned to {c.toolkit.version}"
        if legacy
        else f"conda-forge, pinned by cuda-version={c.toolkit.version}"
    )
    reasons.append(
        Reason(
            f"nvcc and CUDA headers: {', '.join([nvcc, *headers])} from {where}",
            f"DeepSpeed's ops and torch's CUDAContext include {header_list}{links}; these packages hold them, and "
            f"{nvcc} puts nvcc at $CONDA_PREFIX/bin/nvcc. cudatoolkit-dev is not used: conda-forge's stops at "
            f"{kb.cudatoolkit_dev_last.value} and downloads the toolkit in a post-link script, so advice such as "
            f"`cudatoolkit-dev={build.cuda}` cannot be satisfied; the packages above replace it.",
            tuple(
                dict.fromkeys(
                    [*(s for h in kb.op_headers for s in h.source), *(s for lib in kb.op_libraries for s in lib.source)]
                )
            )
            + kb.nvcc_package.source
            + kb.cudatoolkit_dev_last.source,
        )
    )
    if legacy:
        first, last, mix_source = kb.no_mixing
        reasons.append(
            Reason(
                f"channels {', '.join(channels(c))} in this order, strict priority",
                f"pytorch-channel builds run on nvidia-channel CUDA packages (pytorch-cuda={build.cuda} depends on "
                f"them); conda-forge and nvidia CUDA packages must not be mixed for CUDA {first}-{last}, so every "
                "CUDA package, nvcc and the headers included, comes from the nvidia channel, ahead of conda-forge.",
                tuple(dict.fromkeys(mix_source + kb.cxx_packages_nvidia[1])),
            )
        )

    limit, limit_row = gcc_max(kb, c.toolkit)
    cxx_family = kb.cxx_packages_nvidia if legacy else kb.cxx_packages
    cxx_names = [n.replace("{platform}", build.platform) for n in cxx_family[0]]
    for name in cxx_names:
        specs.append(CondaSpec(name, f"<{limit + 1}" if limit is not None else None))
    if limit is not None and limit_row is not None:
        inherited = (
            ""
            if limit_row.version == c.toolkit.version
            else f" (known for {limit_row.version}; newer minors accept at least as much)"
        )
        reasons.append(
            Reason(
                f"host compiler {' and '.join(cxx_names)} <{limit + 1}",
                f"nvcc {c.toolkit.version} accepts GCC <= {limit}{inherited}; the gxx_<platform> package sets $CXX, "
                + (
                    "and the nvidia channel's nvcc depends on it."
                    if legacy
                    else "which conda-forge's nvcc activation requires."
                ),
                limit_row.source + cxx_family[1],
            )
        )
    specs.append(CondaSpec("ninja"))

    if not legacy:
        cap = kb.cudnn_cuda12_below
        cudnn_version = f"<{cap.value}" if build.cuda.major == 12 else None
        cudnn, nccl = companions.RUNTIME_LIBRARIES
        specs.append(CondaSpec(cudnn, cudnn_version))
        specs.append(CondaSpec(nccl))
        why_cudnn = (
            f"; cuDNN is kept below {cap.value}: conda-forge keeps CUDA 12 at cuDNN 9.10, because 9.11+ dropped "
            "pre-Turing device code and its CUDA 12 builds were marked broken"
            if cudnn_version
            else ""
        )
        reasons.append(
            Reason(
                "cudnn and nccl from conda-forge",
                f"torch {c.torch} cu{build.cuda.nodot} runs with cuDNN {build.cudnn or '?'}.x and NCCL "
                f"{build.nccl or '?'}.x or newer within the major (its run deps pin them){why_cudnn}.",
                build.source + (cap.source if cudnn_version else ()),
            )
        )
    else:
        reasons.append(
            Reason(
                "cudnn and nccl: bundled",
                f"pytorch-channel builds carry their own cuDNN {build.cudnn or '?'} and NCCL {build.nccl or '?'} "
                "(the build string names the cuDNN), so no separate packages are added.",
                build.source,
            )
        )

    pip: list[str] = []
    ds = c.deepspeed
    if ds is not None and ds.conda is not None:
        specs.append(CondaSpec("deepspeed", f"=={ds.version}", f"cuda{build.cuda.nodot}*"))
        reasons.append(
            Reason(
                f"deepspeed {ds.version} from conda-forge (cuda{build.cuda.nodot} build)",
                f"conda-forge's deepspeed {ds.version} CUDA builds are built for torch {ds.conda.torch}; the build "
                "pin keeps its CPU build out. The hook still builds and proves the ops for the target GPUs.",
                ds.conda.source + ds.release.source,
            )
        )
    elif ds is not None:
        run_deps = pypi_run_specs(kb, ds.version)
        specs.extend(s for s in run_deps if s.name not in {spec.name for spec in specs})
        build_names = [s for s in kb.pip_build[0] if _split(s)[0] not in {spec.name for spec in specs}]
        specs.extend(CondaSpec(*_split(n)) for n in build_names)
        pip.append(f"deepspeed=={ds.version}")
        if legacy:
            why = (
                "the pytorch channel's torch cannot satisfy conda-forge's deepspeed CUDA builds, which need "
                "conda-forge's pytorch"
            )
        elif target.deepspeed_from == "pypi":
            why = "--deepspeed-from pypi"
        else:
            why = no_conda_text(kb, build, c.torch, c.toolkit.version, c.python)
        instead = f"; {conda_alternative}" if conda_alternative else ""
        reasons.append(
            Reason(
                f"deepspeed {ds.version} from PyPI, locked by its sha256; its Python dependencies from conda",
                f"{why}{instead}. PyPI's deepspeed is a source package: `envsolver install` builds it into the "
                f"env's python with pip --no-deps --require-hashes --no-build-isolation and DS_BUILD_OPS=0 (so "
                f"the env holds {', '.join(build_names) or 'pip and setuptools'}), and the post-install hook "
                "builds its CUDA ops for the target GPUs.",
                ds.release.source + _requirements_source(kb, ds.version) + kb.pip_build[1],
            )
        )
    return Assembly(channels(c), tuple(specs), tuple(pip), tuple(reasons))


# PEP 440 operators that conda's match-spec grammar reads the same way.
_CONDA_OPERATORS = ("==", "!=", ">=", "<=", ">", "<")


def pypi_run_specs(kb: KnowledgeBase, version: Version) -> list[CondaSpec]:
    """The conda specs that hold PyPI's deepspeed VERSION's run requirements (KB), torch left out (the plan pins
    pytorch). A requirement's specifier is kept where conda reads it the same way; the lock checks each one
    against the solved records either way (pypi.pins)."""
    out = []
    for requirement in ds_rules.requirements_of(kb, version) or ():
        name = ds_rules.conda_name(kb, requirement.name)
        if name is None or name == "pytorch" or requirement.marker is not None:
            continue
        clauses = [f"{s.operator}{s.version}" for s in requirement.specifier]
        same = all(s.operator in _CONDA_OPERATORS and "*" not in s.version for s in requirement.specifier)
        out.append(CondaSpec(name, ",".join(clauses) if clauses and same else None))
    return out


def _requirements_source(kb: KnowledgeBase, version: Version) -> tuple[str, ...]:
    """The sources of this release's requirements row and of the conda-forge names that hold them."""
    from packaging.utils import canonicalize_name  # imports packaging.tags and logging: only for PyPI's DeepSpeed

    row = ds_rules.requirements_row(kb, version)
    names = {canonicalize_name(r.name) for r in ds_rules.requirements_of(kb, version) or ()}
    mapped = tuple(s for r in kb.pypi_conda_names if r.pypi in names for s in r.source)
    return tuple(dict.fromkeys((row.source if row else ()) + mapped))


def _split(text: str) -> tuple[str, str | None]:
    name, _, version = text.partition(" ")
    return name, version or None
