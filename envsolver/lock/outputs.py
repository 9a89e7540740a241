"""Write make's outputs: environment.yml, conda-lock.yml, virtual-packages.yml and one explicit lock per
platform.

Every text is rendered by the pure writers first; fileset.commit then writes them as one set (the old
complete set or the new one, one writer at a time), leaves unchanged files alone and refuses to overwrite
hand edits without force.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from envsolver import __version__
from envsolver.core.errors import BadInputError
from envsolver.kb.load import kb_date
from envsolver.kb.model import KnowledgeBase
from envsolver.lock.run import LockResult
from envsolver.lock.solve import cache_dir as cache_dir  # its home is solve; callers import it from here too
from envsolver.lock.writers import condalock, environment, explicit, files, fileset, inputhash, pipreqs, virtualpkgs
from envsolver.resolve.driver import floor_text
from envsolver.resolve.plan import Plan


def refuse_inputs(out_dir: Path, inputs: Sequence[str], command: str) -> None:
    """Refuse an --out directory where make would write (or remove) a file it reads: a project file given to -f
    named as one of the files of a set (environment.yml, conda-lock.yml, ...). Raises BadInputError (exit 2)
    before anything is solved or written."""
    for given in inputs:
        path = Path(given)
        if not fileset.MEMBER.fullmatch(path.name):
            continue
        target = out_dir / path.name
        try:
            same = os.path.samefile(path, target)
        except OSError:
            same = os.path.realpath(path) == os.path.realpath(target)
        if same:
            other = f"{out_dir / 'envsolver-out'}" if str(out_dir) not in ("", ".") else "envsolver-out"
            raise BadInputError(
                f"--out {str(out_dir)!r} is where {given!r} is, and make writes {path.name} there: it never "
                f"overwrites a file it reads, so nothing was written. Pass --out another directory, e.g. "
                f"`{command} --out {shlex.quote(other)}`, or rename your file (e.g. project.yml) and pass that to -f."
            )


def write_environment(
    plan: Plan,
    out_dir: Path,
    command: str,
    name: str | None,
    force: bool,
    *,
    wait_s: float = fileset.WAIT_S,
    on_wait: Callable[[str], None] | None = None,
) -> dict[Path, files.Outcome]:
    """Write environment.yml alone. Raises BadInputError (exit 2) as fileset.commit does."""
    texts = {"environment.yml": environment.render(plan, command, kb_date(), name)}
    return fileset.commit(out_dir, texts, force=force, command=command, wait_s=wait_s, on_wait=on_wait)


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
        "envsolver_driver": str(plan.driver)
        if plan.driver
        else f"not given: the plan needs {floor_text(kb, plan.cuda_version)}",
        "envsolver_driver_min_full": str(toolkit.driver) if toolkit and toolkit.driver else "unknown",
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
    if result.pip_index:
        meta["envsolver_pip_index"] = result.pip_index
    return meta


def render_all(
    result: LockResult, kb: KnowledgeBase, command: str, name: str | None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """File name -> text: environment.yml, conda-lock.yml, virtual-packages.yml (what the lock was solved for,
    from which conda-lock computes the lock's content_hash), then conda-<platform>.lock per platform. `extra`:
    more metadata for conda-lock.yml (make --cluster's partitions). conda-lock.yml names the channels as
    environment.yml does, as conda-lock writes them (its `lock --update` and `--check-input-hash` refuse a lock
    whose channels differ from the environment's); the packages' URLs name where each came from."""
    listed = environment.entries(result.plan)
    hashes = inputhash.content_hashes(listed, result.virtual_packages)
    texts = {
        "environment.yml": environment.render(result.plan, command, kb_date(), name),
        "conda-lock.yml": condalock.render(
            result.records,
            listed.channels,
            hashes,
            {**custom_metadata(result, kb), **(extra or {})},
            command,
            kb_date(),
            result.pip,
        ),
        virtualpkgs.NAME: virtualpkgs.render(result.virtual_packages, command, kb_date()),
    }
    for platform, records in sorted(result.records.items()):
        pip = result.pip.get(platform, ())
        texts[explicit.file_name(platform)] = explicit.render(records, platform, command, kb_date(), pip)
        if pip:
            texts[explicit.pip_file_name(platform)] = pipreqs.render(pip, platform, command, kb_date())
    return texts


def write_all(
    result: LockResult,
    kb: KnowledgeBase,
    out_dir: Path,
    command: str,
    name: str | None,
    force: bool,
    *,
    wait_s: float = fileset.WAIT_S,
    on_wait: Callable[[str], None] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[Path, files.Outcome]:
    """Write the whole set as one. Raises BadInputError (exit 2) as fileset.commit does."""
    texts = render_all(result, kb, command, name, extra)
    return fileset.commit(out_dir, texts, force=force, command=command, wait_s=wait_s, on_wait=on_wait)
