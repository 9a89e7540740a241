"""Write make's outputs: environment.yml, conda-lock.yml and one explicit lock per platform.

Texts come from the pure writers; files.write makes each write atomic, leaves unchanged files alone and
refuses to overwrite hand edits without force.
"""

from __future__ import annotations

import os
from pathlib import Path

from envsolver import __version__
from envsolver.kb.load import kb_date
from envsolver.kb.model import KnowledgeBase
from envsolver.lock import LockResult
from envsolver.plan import Plan
from envsolver.writers import condalock, environment, explicit, files


def cache_dir() -> Path:
    """Where rattler keeps repodata and packages: ENVSOLVER_CACHE_DIR, else the user cache directory."""
    if os.environ.get("ENVSOLVER_CACHE_DIR"):
        return Path(os.environ["ENVSOLVER_CACHE_DIR"])
    import platformdirs

    return Path(platformdirs.user_cache_dir("envsolver"))


def write_environment(
    plan: Plan, out_dir: Path, command: str, name: str | None, force: bool
) -> dict[Path, files.Outcome]:
    path = out_dir / "environment.yml"
    return {path: files.write(path, environment.render(plan, command, kb_date(), name), force=force)}


def custom_metadata(result: LockResult, kb: KnowledgeBase) -> dict[str, str]:
    """The target's assumptions, recorded in conda-lock.yml for `verify` to compare a host against."""
    plan = result.plan
    toolkit = kb.toolkit(plan.cuda_version)
    major = kb.cuda_major(plan.cuda_version.major)
    meta = {
        "envsolver_version": __version__,
        "envsolver_kb_date": kb_date(),
        "envsolver_gpus": "; ".join(f"{g.name} ({g.compute_capability})" for g in plan.gpus),
        "envsolver_compute_capabilities": ";".join(str(g.compute_capability) for g in plan.gpus),
        "envsolver_driver": str(plan.driver) if plan.driver else "not given (a current driver was assumed)",
        "envsolver_driver_min_full": str(toolkit.driver) if toolkit else "unknown",
        "envsolver_driver_min_minor_compat": str(major.mvc_driver) if major else "unknown",
        "envsolver_compatibility": plan.compatibility,
        "envsolver_cuda_version": str(plan.cuda_version),
        "envsolver_torch": f"{plan.torch_version} (CUDA {plan.torch_cuda} build {plan.torch_build})",
        "envsolver_torch_cuda_arch_list": plan.torch_cuda_arch_list,
        "envsolver_source": plan.source,
        "envsolver_channels_used": result.used,
    }
    for platform, virtual in result.virtual_packages.items():
        for key, value in virtual.items():
            meta[f"envsolver_virtual_{platform}_{key.lstrip('_')}"] = value
    if result.snapshot_date:
        meta["envsolver_snapshot_date"] = result.snapshot_date
    if plan.pip:
        meta["envsolver_pip_not_locked"] = " ".join(plan.pip)
    return meta


def write_all(
    result: LockResult, kb: KnowledgeBase, out_dir: Path, command: str, name: str | None, force: bool
) -> dict[Path, files.Outcome]:
    written = write_environment(result.plan, out_dir, command, name, force)
    hashes = {
        platform: condalock.content_hash([str(s) for s in result.plan.specs], result.channels, virtual)
        for platform, virtual in result.virtual_packages.items()
    }
    text = condalock.render(result.records, result.channels, hashes, custom_metadata(result, kb), command, kb_date())
    path = out_dir / "conda-lock.yml"
    written[path] = files.write(path, text, force=force)
    for platform, records in sorted(result.records.items()):
        path = out_dir / f"conda-{platform}.lock"
        written[path] = files.write(path, explicit.render(records, platform, command, kb_date()), force=force)
    return written
