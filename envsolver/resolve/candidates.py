"""Choose the torch build: the newest that every hard rule accepts, with one line per rejected newer one.

Pure: takes a Target and the KB, never probes the host.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from envsolver.core.versions import MajorMinor
from envsolver.kb.model import KnowledgeBase, Toolkit, TorchBuild
from envsolver.resolve import archs, companions, driver
from envsolver.resolve.deepspeed import DeepSpeedChoice, choose, conda_choice, no_conda_text
from envsolver.resolve.plan import Rejected
from envsolver.resolve.refusals import Refused
from envsolver.resolve.target import Target

# envsolver's default Python: the newest the torch build supports, at most this one. 3.13 is the
# newest Python with a conda-forge deepspeed CUDA build in the KB (deepspeed-0.18.8-cuda129_py313).
PYTHON_CAP = MajorMinor(3, 13)


@dataclass(frozen=True)
class Problem:
    """Why a candidate cannot be used. What the user can do about it is found by trying option changes
    (resolve.ways_out), so that every fix a message offers is one that plans. `detail` is what the reason says
    about this build alone (its arch list), so that builds refused for one reason are listed under it once."""

    text: str
    detail: str | None = None


@dataclass(frozen=True)
class Candidate:
    build: TorchBuild
    torch: Version
    toolkit: Toolkit
    compatibility: str  # full | minor
    python: MajorMinor
    deepspeed: DeepSpeedChoice | None
    # The newer Python the default passed over because conda-forge builds no DeepSpeed for it (None: not lowered).
    python_passed_over: MajorMinor | None = None

    @property
    def label(self) -> str:
        return label(self.build, self.torch)


def label(build: TorchBuild, torch: Version) -> str:
    """'torch 2.5.1 cu118', 'torch 2.12.1 cu129 tegra', 'torch 2.4.1 cu121 (pytorch channel)'."""
    return f"torch {torch} {variant(build)}"


def variant(build: TorchBuild) -> str:
    """The build's CUDA, with what tells it from another build of the same version and CUDA: a Jetson build
    (tegra, beside the Arm servers' sbsa build before CUDA 13) and the pytorch channel."""
    tegra = " tegra" if build.arm_variant == "tegra" else ""
    channel = "" if build.channel == "conda-forge" else " (pytorch channel)"
    return f"cu{build.cuda.nodot}{tegra}{channel}"


def gpu_names(target: Target, ccs: list[MajorMinor]) -> str:
    names = [g.name for g in target.gpus if g.compute_capability in ccs]
    return ", ".join(dict.fromkeys(names))


def _python(target: Target, build: TorchBuild) -> MajorMinor | Problem:
    if target.python is not None:
        if target.python in build.python:
            return target.python
        offered = ", ".join(str(p) for p in build.python)
        return Problem(f"no Python {target.python} build", f"it has {offered}")
    capped = [p for p in build.python if p <= PYTHON_CAP] or list(build.python)
    return max(capped)


def _toolkit(kb: KnowledgeBase, target: Target, build: TorchBuild) -> Toolkit | Problem:
    if target.cuda is not None and target.cuda != build.cuda and not _nvcc_fits(build, target.cuda):
        if build.channel == "pytorch":
            runs = f"takes an nvcc of CUDA {build.cuda} to {build.cuda.major}.x"
        elif build.cuda_range:
            runs = f"runs with cuda-version {build.cuda_range}"
        else:
            runs = f"needs CUDA {build.cuda}"
        return Problem(f"built for CUDA {build.cuda}, {runs}; the requested CUDA {target.cuda} is outside")
    cuda = target.cuda or _default_toolkit(kb, build)
    toolkit = kb.toolkit(cuda)
    if toolkit is None:
        return Problem(f"CUDA {cuda} is not in the knowledge base")
    return toolkit


def _nvcc_fits(build: TorchBuild, cuda: MajorMinor) -> bool:
    """Whether a toolkit other than the build's own CUDA can serve it."""
    same_major_newer = cuda.major == build.cuda.major and cuda >= build.cuda
    if build.channel == "pytorch":
        # pytorch-channel builds take their CUDA runtime from pytorch-cuda=X.Y; nvcc is a package of its own,
        # and torch's extension builder accepts an nvcc of the same major (another minor only warns).
        return same_major_newer
    # conda-forge CUDA 12+ builds run with cuda-version >=X.Y,<X+1 (their run deps).
    return build.cuda_range is not None and same_major_newer


def _default_toolkit(kb: KnowledgeBase, build: TorchBuild) -> MajorMinor:
    """The build's own CUDA; within a restricted KB (the snapshot), the oldest toolkit it offers that
    serves the build when it lacks the build's own (the build's own CUDA again when none does)."""
    if kb.holding is None:
        return build.cuda
    offered = kb.holding.nvcc_for(build)
    fits = sorted(v for v in offered if v == build.cuda or _nvcc_fits(build, v))
    return fits[0] if fits else build.cuda


def _hard_problem(kb: KnowledgeBase, target: Target, build: TorchBuild, toolkit: Toolkit) -> Problem | None:
    ccs = target.ccs
    no_sass = [cc for cc in ccs if not build.has_sass_for(cc)]
    if no_sass:
        sms = ", ".join(f"sm_{cc.sm}" for cc in no_sass)
        return Problem(f"no {sms}, needed by {gpu_names(target, no_sass)}", f"its arch list is {build.arch_list}")
    variant = _variant_problem(target, build)
    if variant is not None:
        return variant
    missing = archs.unbuildable(kb, toolkit, ccs)
    if missing is None:
        return Problem(f"the SM targets of nvcc {toolkit.version} are not confirmed in the knowledge base")
    if missing:
        sms = ", ".join(f"sm_{archs.cc_for_toolkit(kb, cc, toolkit.version).sm}" for cc in missing)
        return Problem(f"nvcc {toolkit.version} cannot build {sms}, needed by {gpu_names(target, missing)}")
    split_since = MajorMinor(12, 0)
    if build.channel == "conda-forge" and toolkit.version < split_since:
        return Problem(
            f"conda-forge has no nvcc or CUDA header packages for CUDA {toolkit.version} (split packages "
            f"start at 12.0; cudatoolkit-dev stops at {kb.cudatoolkit_dev_last.value} and downloads the "
            "toolkit at install time)"
        )
    if build.glibc is not None and build.glibc > target.glibc:
        return Problem(f"needs glibc >= {build.glibc}, the target has {target.glibc}")
    held = _snapshot_gap(kb, build, toolkit)
    if held is not None:
        return held
    if target.driver is not None:
        level = driver.support(kb, target.driver, toolkit.version)
        if level == "none":
            supports = driver.supports_text(kb, target.driver)
            return Problem(f"{driver.requirement_text(kb, toolkit.version)}; driver {target.driver} {supports}")
        if level == "minor" and target.driver_compat == "full":
            return Problem(
                f"driver {target.driver} runs CUDA {toolkit.version} only through minor-version "
                f"compatibility ({driver.supports_text(kb, target.driver)})"
            )
    return None


def _variant_problem(target: Target, build: TorchBuild) -> Problem | None:
    """Before CUDA 13, Jetson (tegra) and Arm servers (sbsa) are different builds of the same version and build
    string: a Jetson needs a tegra build, and a tegra build (Orin's sm_87 only) is for Jetson alone."""
    if build.cuda.major >= 13:
        return None
    embedded = any(g.segment == "embedded" for g in target.gpus)
    if embedded and build.arm_variant != "tegra":
        return Problem(
            f"CUDA {build.cuda} {build.platform} builds other than tegra are for servers (sbsa), not Jetson; tegra "
            "and sbsa are one platform from CUDA 13.0"
        )
    if not embedded and build.arm_variant == "tegra":
        servers = gpu_names(target, list(target.ccs))
        return Problem(f"a tegra build, for Jetson devices, not for {servers} on an Arm server (sbsa)")
    return None


def _snapshot_gap(kb: KnowledgeBase, build: TorchBuild, toolkit: Toolkit) -> Problem | None:
    """Within a restricted KB (the snapshot): a toolkit whose nvcc it holds no record of, or (conda-forge) one
    for whose CUDA it holds no record of a CUDA-bound package the plan takes (cudnn, nccl, the headers)."""
    if kb.holding is None:
        return None
    offered = kb.holding.nvcc_for(build)
    if toolkit.version not in offered:
        held = ", ".join(str(v) for v in offered) or "none"
        return Problem(
            f"{kb.holding.name} holds no {build.toolkit_channel}-channel nvcc {toolkit.version} for "
            f"{build.platform} (its {build.toolkit_channel} nvcc: {held})"
        )
    if build.channel != "conda-forge":
        # A pytorch-channel plan pins no cuda-version: its CUDA packages come by channel priority (nvidia first).
        return None
    lacking = kb.holding.lacking(build.channel, build.platform, toolkit.version, companions.names(kb, build))
    if not lacking:
        return None
    groups: dict[tuple[MajorMinor, ...], list[str]] = {}
    for name, served in lacking:
        groups.setdefault(served, []).append(name)
    serves = "; ".join(
        f"its {_and(names)}: CUDA {', '.join(str(v) for v in served) or 'none'}" for served, names in groups.items()
    )
    return Problem(
        f"{kb.holding.name} holds no {build.channel}-channel {_and([name for name, _ in lacking])} for CUDA "
        f"{toolkit.version} on {build.platform} ({serves})"
    )


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _compatibility(kb: KnowledgeBase, target: Target, cuda: MajorMinor) -> str:
    if target.driver is None:
        return "full"
    return "full" if driver.support(kb, target.driver, cuda) == "full" else "minor"


def _evaluate(
    kb: KnowledgeBase,
    target: Target,
    build: TorchBuild,
    torch: Version,
) -> tuple[Candidate | None, Problem | None, Problem | None]:
    """(candidate, hard problem, soft problem). A soft problem (no conda DeepSpeed build, with
    --deepspeed-from conda-forge) only loses to a candidate without one."""
    python = _python(target, build)
    if isinstance(python, Problem):
        return None, python, None
    toolkit = _toolkit(kb, target, build)
    if isinstance(toolkit, Problem):
        return None, toolkit, None
    hard = _hard_problem(kb, target, build, toolkit)
    if hard is not None:
        return None, hard, None
    ds_choice = None
    soft = None
    passed_over = None
    if target.deepspeed:
        conda, pypi, why = choose(kb, build, torch, target.ccs, toolkit.version, python)
        older = _python_with_conda_deepspeed(kb, target, build, torch, toolkit, python) if conda is None else None
        if older is not None:
            passed_over, python = python, older
            conda, pypi, why = choose(kb, build, torch, target.ccs, toolkit.version, python)
        if target.deepspeed_from == "pypi":
            conda = None
        if conda is None and pypi is None:
            return None, Problem(why), None
        ds_choice = conda or pypi
        prefer_conda = target.deepspeed_from == "conda-forge" and target.torch is None
        if conda is None and build.channel == "conda-forge" and prefer_conda:
            soft = Problem(no_conda_text(kb, build, torch, toolkit.version, python))
    compat = _compatibility(kb, target, toolkit.version)
    return Candidate(build, torch, toolkit, compat, python, ds_choice, passed_over), None, soft


def _python_with_conda_deepspeed(
    kb: KnowledgeBase, target: Target, build: TorchBuild, torch: Version, toolkit: Toolkit, default: MajorMinor
) -> MajorMinor | None:
    """With no --python, the newest Python older than the default that this build offers and conda-forge builds
    DeepSpeed for (a plan that keeps every part on conda-forge beats a newer Python); None where the default stays:
    a Python was given, DeepSpeed comes from PyPI by request, the build is not conda-forge's, or no older Python has
    a conda-forge DeepSpeed build either."""
    if target.python is not None or target.deepspeed_from == "pypi" or build.channel != "conda-forge":
        return None
    for python in sorted((p for p in build.python if p < default), reverse=True):
        if conda_choice(kb, build, torch, target.ccs, toolkit.version, python) is not None:
            return python
    return None


def _order(kb: KnowledgeBase, target: Target, item: tuple[TorchBuild, Version]) -> tuple[object, ...]:
    build, torch = item
    cuda = target.cuda or _default_toolkit(kb, build)
    rank = 0 if _compatibility(kb, target, cuda) == "full" else 1
    return (-_vkey(torch), rank, -(cuda.major * 100 + cuda.minor))


def _vkey(version: Version) -> int:
    major, minor, micro = [*version.release, 0, 0, 0][:3]
    return major * 1_000_000 + minor * 1_000 + micro


def candidates(kb: KnowledgeBase, target: Target, platform: str) -> list[tuple[TorchBuild, Version]]:
    """Every (build, torch version) on the target's channel and platform within --torch, best first."""
    items = [
        (build, version)
        for build in kb.torch_builds
        if build.channel == target.source and build.platform == platform
        for version in build.versions
        if target.torch is None or target.torch.contains(version, prereleases=True)
    ]
    return sorted(items, key=lambda item: _order(kb, target, item))


def pick(kb: KnowledgeBase, target: Target, platform: str) -> tuple[Candidate | None, list[Rejected], list[Refused]]:
    """The chosen candidate (or None), and the rejected newer candidates (best first) as a plan lists them and
    as a refusal groups them."""
    evaluated = [(b, v, *_evaluate(kb, target, b, v)) for b, v in candidates(kb, target, platform)]
    chosen_index = next((i for i, e in enumerate(evaluated) if e[2] is not None and e[4] is None), None)
    if chosen_index is None:
        chosen_index = next((i for i, e in enumerate(evaluated) if e[2] is not None), None)
    limit = chosen_index if chosen_index is not None else len(evaluated)
    refused = [
        Refused(str(version), variant(build), problem.text, problem.detail)
        for build, version, _cand, hard, soft in evaluated[:limit]
        if (problem := hard or soft) is not None
    ]
    chosen = evaluated[chosen_index][2] if chosen_index is not None else None
    return chosen, [Rejected(r.label, r.because) for r in refused], refused
