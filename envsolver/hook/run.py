"""`envsolver hook`: verify's probe in the env's python, then activation scripts that follow its facts, the
pre-flight (verify's build checks), then the ops built and proven for the target archs."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envsolver import prefixmeta
from envsolver.archlist import canonical, parse_arch_list
from envsolver.detect import host_platform
from envsolver.errors import BadInputError
from envsolver.hook import activation, build, buildenv
from envsolver.kb.model import KnowledgeBase
from envsolver.procrun import Runner, run
from envsolver.verify import archplan, checks
from envsolver.verify import run as verify_run
from envsolver.verify.checks import Check, Context
from envsolver.writers import files

STATE = "envsolver-ops.json"  # in TORCH_EXTENSIONS_DIR: what was built, for which archs, torch and nvcc


@dataclass
class HookReport:
    prefix: Path
    arch_list: str
    activation: dict[Path, files.Outcome] = field(default_factory=dict)
    findings: list[Check] = field(default_factory=list)
    ops: list[build.OpResult] = field(default_factory=list)
    gpu_check: dict[str, object] | None = None
    unchanged: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return (
            all(f.status != "fail" for f in self.findings)
            and all(o.ok for o in self.ops)
            and (self.gpu_check is None or bool(self.gpu_check.get("ok")))
        )


@dataclass(frozen=True)
class Where:
    """What the hook sets up: the canonical arch list, the conda platform and its include target."""

    arch_list: str
    platform: str
    target: str


def arch_list_and_platform(prefix: Path, lock: Path | None, given: str | None, kb: KnowledgeBase) -> Where:
    """TORCH_CUDA_ARCH_LIST and conda platform: --arch-list, else the lock's metadata (--lock, or the one
    `envsolver install` kept in the prefix). Raises BadInputError when none says, or a value is malformed."""
    platform: str = host_platform() or "linux-64"
    custom: dict[str, str] = {}
    if lock is not None:
        from envsolver import lockfile

        read = lockfile.read(lock, None)
        platform, custom = read.platform, read.metadata
    else:
        kept = prefixmeta.load(prefix)
        if kept is not None:
            platform, custom = kept.platform, kept.custom
    if given is not None:
        try:
            arch = canonical(given)
        except ValueError as exc:
            raise BadInputError(
                f"--arch-list {given!r} is malformed ({exc}). Pass compute capabilities separated by ';', "
                "e.g. --arch-list '8.0;9.0+PTX'."
            ) from None
    elif custom.get(prefixmeta.ARCH_KEY):
        arch = canonical(custom[prefixmeta.ARCH_KEY])
    else:
        raise BadInputError(
            f"no arch list for {str(prefix)!r}: it was not installed by envsolver install and no "
            "--lock was given. Pass --lock conda-lock.yml or --arch-list '8.0;9.0+PTX'."
        )
    return Where(arch, platform, kb.targets_include[platform].value)


def probe(
    prefix: Path, python: Path, where: Where, kb: KnowledgeBase, env: Mapping[str, str], toolkit_only: bool = False
) -> dict[str, Any]:
    """verify's probe in the env's python, asked about the prefix's own toolkit and seeing the prefix as its
    activation would. A python that cannot run it gives {"probe_error": why}."""
    headers = tuple(h.header for h in kb.op_headers)
    query = verify_run.ToolkitQuery(prefix, where.target, only=toolkit_only)
    try:
        return verify_run.probe(python, False, False, 120.0, env, headers, toolkit=query)
    except verify_run.VerifyError as exc:
        return {"probe_error": str(exc)}


def toolkit_in(prefix: Path, python: Path | None, where: Where, kb: KnowledgeBase, environ: Mapping[str, str]) -> bool:
    """Whether the prefix holds the CUDA toolkit (the probe's prefix_toolkit, without torch): what decides
    whether the activation scripts and --print-env set CUDA_HOME and CPATH."""
    py = python or prefix / "bin" / "python"
    env = buildenv.environ_for_build(prefix, where.arch_list, where.target, environ, toolkit=False)
    return py.exists() and buildenv.toolkit_found(probe(prefix, py, where, kb, env, toolkit_only=True))


def preflight(facts: Mapping[str, Any], kb: KnowledgeBase, meta: Mapping[str, str]) -> list[Check]:
    """verify's build checks (checks.BUILD) over the probe's facts. When the probe could not run, torch_import
    says why and the rest skip."""
    if "probe_error" in facts:
        failed = checks.run(Context({"torch": {"error": facts["probe_error"]}}, kb, meta), ("torch_import",))
        skipped = [Check(i, "skip", "skipped: the probe could not run in the env's python") for i in checks.BUILD]
        return failed + [c for c in skipped if c.id != "torch_import"]
    return checks.run(Context(facts, kb, meta), checks.BUILD)


def _metadata(prefix: Path, lock: Path | None) -> dict[str, str]:
    if lock is not None:
        from envsolver import lockfile

        return dict(lockfile.read(lock, None).metadata)
    kept = prefixmeta.load(prefix)
    return dict(kept.custom) if kept else {}


def hook(
    prefix: Path,
    kb: KnowledgeBase,
    lock: Path | None,
    arch: str | None,
    ops: tuple[str, ...],
    jobs: int,
    no_build: bool,
    python: Path | None,
    environ: Mapping[str, str],
    progress: Callable[[str], None],
    runner: Runner = run,
) -> HookReport:
    if not prefix.is_dir():
        raise BadInputError(
            f"prefix {str(prefix)!r} does not exist. Create it first (envsolver install "
            "conda-lock.yml -p PREFIX), then run the hook."
        )
    where = arch_list_and_platform(prefix, lock, arch, kb)
    requested, target = where.arch_list, where.target
    py = python or prefix / "bin" / "python"
    progress("pre-flight")
    # One probe, seen as the activated env would be (CUDA_HOME and CPATH only for a prefix with the toolkit).
    facts = probe(prefix, py, where, kb, buildenv.environ_for_build(prefix, requested, target, environ, False))
    toolkit = buildenv.toolkit_found(facts)
    made = archplan.plan(requested, archplan.buildable(facts, kb))
    fixed = made.value if made is not None else requested
    report = HookReport(prefix, fixed)
    report.activation = activation.write(prefix, fixed, target, force=True, toolkit=toolkit)
    env = buildenv.environ_for_build(prefix, fixed, target, environ, toolkit)
    meta = {**_metadata(prefix, lock), prefixmeta.ARCH_KEY: requested}
    report.findings = preflight({**facts, "env": {**(facts.get("env") or {}), "TORCH_CUDA_ARCH_LIST": fixed}}, kb, meta)
    if no_build or not report.ok:
        return report
    torch = facts.get("torch") or {}
    key = {
        "arch_list": fixed,
        "torch": str(torch.get("version") or ""),
        "torch_cuda": str(torch.get("cuda") or ""),
        "nvcc": str((facts.get("nvcc") or {}).get("version") or ""),
    }
    cuda_home = Path(str((facts.get("cuda_home") or {}).get("path") or "/usr/local/cuda"))
    state_path = Path(env["TORCH_EXTENSIONS_DIR"]) / STATE
    done = build.load_state(state_path, key)
    todo = tuple(op for op in ops if op not in done)
    built = build.build_ops(py, todo, env, jobs, progress, runner) if todo else []
    archs = tuple(a.cc.sm for a in parse_arch_list(fixed))
    progress("proving the ops (cuobjdump, load in a new process)")
    proven = build.prove_all(built, py, cuda_home, archs, env, runner)
    # An op DeepSpeed shipped prebuilt (conda-forge's) is kept when it has SASS for every target arch, and
    # rebuilt for the target archs when one is missing.
    short = tuple(o.op for o in proven if o.prebuilt and o.missing_sass)
    if short:
        progress(f"prebuilt {', '.join(short)} lack a target arch: rebuilding for {fixed}")
        rebuilt = build.build_ops(py, short, env, jobs, progress, runner, mode="jit")
        again = {o.op: o for o in build.prove_all(rebuilt, py, cuda_home, archs, env, runner)}
        proven = [again.get(o.op, o) for o in proven]
    report.ops = [done[op] for op in ops if op in done] + proven
    report.unchanged = tuple(op for op in ops if op in done)
    build.save_state(state_path, key, [o for o in report.ops if o.ok])
    if todo and all(o.ok for o in report.ops) and "fused_adam" in ops and _has_gpu(environ):
        progress("FusedAdam against torch.optim.AdamW on the GPU")
        report.gpu_check = build.adam_check(py, env, runner)
    return report


def _has_gpu(environ: Mapping[str, str]) -> bool:
    return os.path.exists("/proc/driver/nvidia/version") and environ.get("CUDA_VISIBLE_DEVICES", "0") != ""
