"""resolve(Target, KB) -> Plan, or ConflictError. Pure: no host probing, no network."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from envsolver.core.errors import ConflictError
from envsolver.kb.model import KnowledgeBase, Toolkit
from envsolver.resolve import archs, driver, full_support, notes, platforms, projectmerge, refusals, ways_out
from envsolver.resolve.candidates import Candidate, pick
from envsolver.resolve.deepspeed import no_conda_text
from envsolver.resolve.plan import Plan, Reason
from envsolver.resolve.specs import assemble
from envsolver.resolve.target import Target

LEGACY_LAST = "2.5.1"


def resolve(target: Target, kb: KnowledgeBase) -> Plan:
    """Choose a consistent stack for the target. Raises ConflictError (exit 1) when none exists; its message
    names the clashing facts, then the option changes that do plan (each tried before it is named)."""
    try:
        return choose(target, kb)
    except ConflictError as exc:
        raise refusal(exc, target, kb, lambda t: choose(t, kb, advise=False), "the knowledge base") from None


def refusal(
    exc: ConflictError, target: Target, kb: KnowledgeBase, planner: Callable[[Target], Plan], where: str
) -> ConflictError:
    """The conflict with its ways out appended (ways_out.find through `planner`, which must not append
    its own): on a line of their own after a list of rejected builds."""
    facts = str(exc).rstrip(". ")
    then = "\n" if "\n" in facts else " "
    if isinstance(exc, platforms.PlatformsConflict):
        return ConflictError(f"{facts}.{then}{ways_out.one_each(target, exc.groups, planner)}", exc.rejected)
    found = ways_out.find(kb, target, planner)
    replaced = _replaced_text(target, found)
    return ConflictError(f"{facts}.{then}{ways_out.sentence(found, where)}{replaced}", exc.rejected, exc.by_reason)


def _replaced_text(target: Target, found: list[ways_out.WayOut]) -> str:
    """' (--torch replaces env.yml's pytorch <2.4.)': said where a way out sets an option a project file gave."""
    flags = {"--torch": "torch", "--python": "python", "--cuda": "cuda"}
    named = [
        f"{flag} replaces {target.origin(key)}"
        for flag, key in flags.items()
        if target.origin(key) and any(flag in (f for f, _ in w.options) for w in found)
    ]
    return f" (On the command line, {'; '.join(named)}.)" if named else ""


def choose(target: Target, kb: KnowledgeBase, advise: bool = True) -> Plan:
    """resolve without the ways out: the message names the clashing facts only. Raises ConflictError.
    With `advise`, a minor-compatibility warning names what `--driver-compat full` plans (each option change
    planned first); plans made only to be tried (ways out, alternatives) pass advise=False."""
    platform, platform_reasons, warnings = platforms.choose(target)
    _check_driver_floors(kb, target)
    chosen, rejected, refused = pick(kb, target, platform)
    if chosen is None:
        message = _no_candidate_message(kb, target, platform, refused)
        raise ConflictError(message, [(r.candidate, r.because) for r in rejected], refusals.by_reason(refused))
    if target.driver is None:
        warnings.append(_no_driver_warning(kb, chosen.toolkit))
    if chosen.compatibility == "minor":
        where = kb.holding.name if kb.holding else "the knowledge base"
        tail = full_support.sentence(target, lambda t: choose(t, kb, advise=False), where) if advise else "."
        warnings.append(_minor_warning(target, chosen.toolkit, tail))
    warnings += notes.multi_gpu(kb, target)
    assembly = assemble(kb, target, chosen, _conda_alternative(target, kb, chosen))
    specs, channels, project_reasons = projectmerge.merge(assembly.specs, target.project, assembly.channels)
    arch_list = archs.arch_list(kb, target.ccs, chosen.toolkit)
    reasons = [
        *platform_reasons,
        *_target_reasons(kb, target),
        _torch_reason(kb, target, chosen),
        *_python_reasons(kb, target, chosen),
        *_cuda_reasons(kb, target, chosen, arch_list),
        *assembly.reasons,
        *project_reasons,
    ]
    include = kb.include_target(platform, chosen.build.arm_variant)
    env = {
        "CUDA_HOME": "${CONDA_PREFIX}",
        "CPATH": f"${{CONDA_PREFIX}}/targets/{include.value}/include",
        "TORCH_CUDA_ARCH_LIST": arch_list,
        "DS_ACCELERATOR": "cuda",
    }
    reasons.append(
        Reason(
            "environment set by the post-install hook: " + ", ".join(env),
            "CUDA_HOME=$CONDA_PREFIX gives DeepSpeed $CUDA_HOME/bin/nvcc; CPATH adds the conda targets include dir, "
            "which torch's extension builder does not search; DS_ACCELERATOR=cuda stops DeepSpeed from choosing its "
            "CPU accelerator on a GPU-less login node.",
            tuple(dict.fromkeys(("PT-CPPEXT", "PT-144690", "DS-BUILDER-NVCC", "DS-5553", *include.source))),
        )
    )
    virtual = _virtual_packages(kb, target, chosen)
    return Plan(
        gpus=target.gpus,
        platform=platform,
        driver=target.driver,
        cuda_version=chosen.toolkit.version,
        torch_cuda=chosen.build.cuda,
        torch_version=str(chosen.torch),
        torch_build=chosen.build.build,
        python_version=chosen.python,
        source=target.source,
        channels=channels,
        specs=specs,
        pip=assembly.pip,
        virtual_packages=virtual,
        torch_cuda_arch_list=arch_list,
        env=env,
        compatibility="full" if chosen.compatibility == "full" else "minor",
        deepspeed=str(chosen.deepspeed.version) if chosen.deepspeed else None,
        reasons=tuple(reasons),
        rejected=tuple(rejected),
        warnings=tuple(warnings),
        sources={**kb.sources, **_project_sources(target)},
        project=target.project,
    )


def _project_sources(target: Target) -> dict[str, str]:
    """The source of each project reason: the files given to -f, the command line's --add."""
    out = {f: f"the project file {f}, as given to -f" for f in target.project.files}
    if target.project.added:
        out["--add"] = "the command line (--add)"
    return out


def _conda_alternative(target: Target, kb: KnowledgeBase, chosen: Candidate) -> str | None:
    """What `--deepspeed-from conda-forge` plans instead, when DeepSpeed comes from PyPI by default and that
    option gives conda-forge's DeepSpeed with another torch (planned, so the sentence is true); else None."""
    ds = chosen.deepspeed
    if target.deepspeed_from != "auto" or ds is None or ds.conda is not None or chosen.build.channel != "conda-forge":
        return None
    try:
        other = choose(replace(target, deepspeed_from="conda-forge"), kb, advise=False)
    except ConflictError:
        return None
    if other.pip or other.deepspeed is None:
        return None
    return (
        f"`--deepspeed-from conda-forge` plans torch {other.torch_version} cu{other.torch_cuda.nodot} with "
        f"conda-forge's deepspeed {other.deepspeed} instead"
    )


MINOR = "compatibility: minor."


def advised(plan: Plan, target: Target, kb: KnowledgeBase, planner: Callable[[Target], Plan], where: str) -> Plan:
    """The plan with its minor-compatibility warning naming what `--driver-compat full` gives through PLANNER (the
    snapshot planner for offline plans, so that what is named locks there); the plan itself where it has none."""
    toolkit = kb.toolkit(plan.cuda_version)
    if plan.compatibility != "minor" or toolkit is None:
        return plan
    tail = full_support.sentence(target, planner, where)
    warnings = tuple(_minor_warning(target, toolkit, tail) if w.startswith(MINOR) else w for w in plan.warnings)
    return replace(plan, warnings=warnings)


def _minor_warning(target: Target, toolkit: Toolkit, tail: str) -> str:
    """The warning of a plan that runs only through minor-version compatibility: the driver that fully supports
    it, then TAIL (full_support.sentence: what `--driver-compat full` plans where the driver cannot change)."""
    upgrade = (
        f"Upgrade the driver to {toolkit.driver}"
        if toolkit.driver is not None
        else f"Use a driver that fully supports CUDA {toolkit.version}"
    )
    return (
        f"{MINOR} Driver {target.driver} runs CUDA {toolkit.version} only through minor-version compatibility: "
        "every target GPU has SASS in this torch build, but PTX JIT of code built with a newer toolkit fails. "
        f"{upgrade} for full support{tail}"
    )


def _no_driver_warning(kb: KnowledgeBase, toolkit: Toolkit) -> str:
    """The plan's driver floor, which the lock records as __cuda (the solve assumes no newer driver)."""
    fix = "pass --driver with the compute nodes' version, or use --gpu auto there."
    if toolkit.driver is not None:
        return (
            f"no --driver given: the plan assumes a driver that runs CUDA {toolkit.version} (its lock records "
            f"__cuda {toolkit.version}). This plan needs driver >= {toolkit.driver} (CUDA {toolkit.version}); {fix}"
        )
    return (
        f"no --driver given: the plan assumes a driver that runs CUDA {toolkit.version} (its lock records __cuda "
        f"{toolkit.version}). The knowledge base does not know the driver that fully supports CUDA "
        f"{toolkit.version}: {driver.requirement_text(kb, toolkit.version)}; {fix}"
    )


def _check_driver_floors(kb: KnowledgeBase, target: Target) -> None:
    if target.driver is None:
        return
    for gpu in target.gpus:
        first = archs.first_toolkit_for(kb, gpu.compute_capability)
        needs_branch = gpu.min_driver is not None and target.driver.branch < gpu.min_driver
        no_cuda = first is not None and driver.support(kb, target.driver, first.version) == "none"
        if not (needs_branch or no_cuda) or first is None:
            continue
        sm = f"sm_{gpu.compute_capability.sm}"
        oldest = min(t.version for t in kb.toolkits)
        needs = (
            f": every stack in the knowledge base needs CUDA >= {oldest}"
            if first.version == oldest
            else (f" needs CUDA >= {first.version}")
        )
        branch = f" ({gpu.architecture} GPUs need driver branch R{gpu.min_driver} or newer)" if gpu.min_driver else ""
        raise ConflictError(
            f"{gpu.name} ({sm}){needs}, which needs {driver.full_driver_text(kb, first.version)}{branch}; "
            f"driver {target.driver} {driver.supports_text(kb, target.driver)}"
        )


def _no_candidate_message(kb: KnowledgeBase, target: Target, platform: str, refused: list[refusals.Refused]) -> str:
    """What refuses the target: that the channel has no build within the options, or every build it rejected,
    each once, under the reason that decided it (refusals.listing)."""
    gpus = ", ".join(g.name for g in target.gpus)
    holder = kb.holding.name if kb.holding else "the knowledge base"
    if not refused:
        if target.source == "pytorch" and platform != "linux-64":
            return f"the pytorch channel has no {platform} CUDA builds"
        if target.source == "pytorch" and target.torch is not None and kb.holding is None:
            return f"the pytorch channel has no torch {target.torch_text}: it stopped at {LEGACY_LAST}"
        wanted = f" {target.torch_text}" if target.torch_text else ""
        return f"{_asked(target)}{holder} has no {target.source} torch{wanted} CUDA build for {platform}"
    channel = "pytorch-channel" if target.source == "pytorch" else target.source
    return f"{_asked(target)}no {channel} torch build fits {gpus} on {platform}:\n{refusals.listing(refused)}"


def _asked(target: Target) -> str:
    """'pytorch <2.4 from env.yml: ', where a project file constrains the torch the candidates come from."""
    origin = target.origin("torch")
    return f"{origin}: " if origin else ""


def _target_reasons(kb: KnowledgeBase, target: Target) -> list[Reason]:
    reasons = [
        Reason(
            f"{g.name} -> compute capability {g.compute_capability} ({g.architecture})",
            f"sm_{g.compute_capability.sm}",
            g.source,
        )
        for g in target.gpus
    ]
    if target.driver is not None:
        reasons.append(
            Reason(
                f"driver {target.driver}", driver.supports_text(kb, target.driver) + " fully", kb.toolkits[0].source[:1]
            )
        )
    return reasons


def _torch_reason(kb: KnowledgeBase, target: Target, c: Candidate) -> Reason:
    sms = ", ".join(f"sm_{cc.sm}" for cc in target.ccs)
    python = (
        (f"{target.origin('python')}" if target.origin("python") else "given with --python")
        if target.python
        else "the newest this build offers, at most 3.13"
    )
    if c.python_passed_over is not None:
        python += ", that keeps DeepSpeed on conda-forge"
    return Reason(
        f"pytorch {c.torch} from {c.build.channel}, pinned to its CUDA {c.build.cuda} build ({c.build.build})",
        f"the newest build with SASS for {sms} (its arch list is {c.build.arch_list}) that the driver, the "
        f"glibc and Python {c.python} ({python}) allow; the build-string pin means a CPU build can never be "
        "chosen.",
        c.build.source,
    )


def _python_reasons(kb: KnowledgeBase, target: Target, c: Candidate) -> list[Reason]:
    """Why the default Python is older than the newest the build offers (conda-forge builds DeepSpeed for it, not
    for the newer one), and what that newer Python plans instead (planned before it is named); [] where the default
    was not lowered."""
    newer = c.python_passed_over
    if newer is None or c.deepspeed is None or c.deepspeed.conda is None:
        return []
    why = no_conda_text(kb, c.build, c.torch, c.toolkit.version, newer)
    instead = ""
    try:
        other = choose(replace(target, python=newer), kb, advise=False)
    except ConflictError:
        other = None
    if other is not None:
        source = "from PyPI" if other.pip else "from conda-forge"
        deepspeed = f" with deepspeed {other.deepspeed} {source}" if other.deepspeed else ""
        instead = f" `--python {newer}` plans Python {other.python_version}{deepspeed} instead."
    return [
        Reason(
            f"Python {c.python}, not {newer}",
            f"{why}: with Python {newer} DeepSpeed would come from PyPI, and a plan that keeps every part on "
            f"conda-forge comes before a newer Python.{instead}",
            c.deepspeed.conda.source,
        )
    ]


def _cuda_reasons(kb: KnowledgeBase, target: Target, c: Candidate, arch_list: str) -> list[Reason]:
    toolkit = c.toolkit
    legacy = c.build.channel == "pytorch"
    deepspeed = c.deepspeed is not None
    source = toolkit.source
    if toolkit.version == c.build.cuda:
        how = "the same major.minor as torch.version.cuda, which torch's and DeepSpeed's extension checks accept"
    elif legacy:
        how = (
            f"a package of its own beside pytorch-cuda={c.build.cuda}, which keeps the {c.build.cuda} runtime; "
            f"torch's extension builder accepts an nvcc of the same major as torch.version.cuda"
            + (", and DeepSpeed's op builder has both in its allow-list" if deepspeed else "")
        )
        source += ("PT-CUDA-CHECK",) + (c.deepspeed.release.source if c.deepspeed else ())
    else:
        ds = " and accepted by DeepSpeed's op builder" if deepspeed else ""
        how = f"within the build's range ({c.build.cuda_range}){ds} for torch built with {c.build.cuda}"
    what = f"nvcc and headers; the runtime is pytorch-cuda's {c.build.cuda}" if legacy else "nvcc, runtime and headers"
    reasons = [Reason(f"CUDA {toolkit.version} ({what})", f"nvcc {toolkit.version} is {how}.", source)]
    dropped = [cc for cc in target.ccs if archs.cc_for_toolkit(kb, cc, toolkit.version).sm not in (toolkit.sm or set())]
    reasons.append(
        Reason(
            f"TORCH_CUDA_ARCH_LIST={arch_list}",
            "the target GPUs' compute capabilities that nvcc "
            f"{toolkit.version} and this torch build both support, +PTX on the highest"
            + (f"; dropped: {', '.join(map(str, dropped))}" if dropped else ""),
            toolkit.source,
        )
    )
    return reasons


def _virtual_packages(kb: KnowledgeBase, target: Target, c: Candidate) -> dict[str, str]:
    """__cuda: what the given driver fully supports; with no --driver, the plan's own CUDA (its driver floor),
    never a newer CUDA than the plan needs."""
    if target.driver is not None:
        newest = driver.newest_full_cuda(kb, target.driver)
        cuda = str(newest.version) if newest else str(c.toolkit.version)
    else:
        cuda = str(c.toolkit.version)
    return {
        "__cuda": cuda,
        "__glibc": str(target.glibc),
        "__cuda_arch": str(min(target.ccs)),
    }
