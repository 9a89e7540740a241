"""`envsolver hook`: verify's probe in the env's python, then activation scripts that follow its facts, the
pre-flight (verify's build checks), then the ops built and proven for the target archs."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envsolver.core.archlist import canonical, parse_arch_list
from envsolver.core.errors import BadInputError
from envsolver.core.procrun import Runner, run, run_build
from envsolver.hook import activation, build, buildenv, opcachedir, opkey
from envsolver.hook import ops as ops_stage
from envsolver.install import prefixmeta
from envsolver.kb.model import KnowledgeBase
from envsolver.lock.lockfile import LockEntry
from envsolver.lock.writers import files
from envsolver.resolve.detect import host_platform
from envsolver.verify import archplan, checks
from envsolver.verify import run as verify_run
from envsolver.verify.checks import Check, Context


@dataclass
class HookReport:
    prefix: Path
    arch_list: str
    activation: dict[Path, files.Outcome] = field(default_factory=dict)
    findings: list[Check] = field(default_factory=list)
    ops: list[build.OpResult] = field(default_factory=list)
    gpu_check: dict[str, object] | None = None
    unchanged: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)

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
        from envsolver.lock import lockfile

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
        _refuse_suffixes(arch, kb)
    elif custom.get(prefixmeta.ARCH_KEY):
        arch = canonical(custom[prefixmeta.ARCH_KEY])
    else:
        raise BadInputError(
            f"no arch list for {str(prefix)!r}: it was not installed by envsolver install and no "
            "--lock was given. Pass --lock conda-lock.yml or --arch-list '8.0;9.0+PTX'."
        )
    return Where(arch, platform, kb.targets_include[platform].value)


def require_python(prefix: Path, python: Path | None) -> None:
    """`envsolver hook` on a prefix without python is refused before anything is written: activation scripts in
    a directory that is not an installed environment set up nothing. (install runs the hook on the prefix it has
    just installed: a lock without python fails the hook's torch_import check there.)"""
    py = python or prefix / "bin" / "python"
    if not py.is_file():
        raise BadInputError(
            f"no python at {str(py)!r}: the hook sets up an installed environment. Install it first "
            "(envsolver install conda-lock.yml -p PREFIX), or pass --python with the env's interpreter."
        )


def _refuse_suffixes(arch: str, kb: KnowledgeBase) -> None:
    """An --arch-list with an arch-specific or family entry (9.0a, 10.0f) is refused: DeepSpeed's op builder reads
    each entry as major.minor integers and stops on the suffix (the KB's deepspeed arch_suffixes row)."""
    archs = parse_arch_list(arch)
    suffixed = [str(a) for a in archs if a.suffix]
    if not suffixed:
        return
    plain = ";".join(str(c) for c in sorted({a.cc for a in archs})) + "+PTX"
    raise BadInputError(
        f"--arch-list {arch!r}: DeepSpeed's op builder cannot parse arch suffixes ({', '.join(suffixed)}; seen with "
        f"DeepSpeed {kb.deepspeed_arch_suffixes.value}: ValueError: invalid literal for int() with base 10). "
        f"Pass plain major.minor entries: --arch-list '{plain}'."
    )


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


def preflight(
    facts: Mapping[str, Any], kb: KnowledgeBase, meta: Mapping[str, str], entries: tuple[LockEntry, ...] = ()
) -> list[Check]:
    """verify's build checks (checks.BUILD) over the probe's facts, with the lock's ENTRIES when --lock names one
    (pip_conda_mix: PyPI's torch where the lock put conda's). When the probe could not run, torch_import says why
    and the rest skip."""
    if "probe_error" in facts:
        failed = checks.run(Context({"torch": {"error": facts["probe_error"]}}, kb, meta), ("torch_import",))
        skipped = [Check(i, "skip", "skipped: the probe could not run in the env's python") for i in checks.BUILD]
        return failed + [c for c in skipped if c.id != "torch_import"]
    return checks.run(Context(facts, kb, meta, entries), checks.BUILD)


def _metadata(prefix: Path, lock: Path | None) -> tuple[dict[str, str], tuple[LockEntry, ...]]:
    """The lock's metadata and entries (--lock), else the metadata `envsolver install` kept in the prefix."""
    if lock is not None:
        from envsolver.lock import lockfile

        read = lockfile.read(lock, None)
        return dict(read.metadata), tuple(read.entries)
    kept = prefixmeta.load(prefix)
    return (dict(kept.custom) if kept else {}), ()


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
    runner: Runner | None = None,
    op_cache: Path | None = None,
    op_cache_trust: frozenset[int] = frozenset(),
    need_python: bool = False,
    op_cache_group: int | None = None,
) -> HookReport:
    """Set up PREFIX's activation and ops. `runner` answers every subprocess (tests); by default probes and proofs
    run with procrun's probe time limit and builds with its build limit. `op_cache_trust`: the uids whose op cache
    and entries are used besides root and this user; a missing `op_cache` is made first (opcachedir.ensure: 0700,
    or 0750 with `op_cache_group`). `need_python` (`envsolver hook`): a prefix without the python is refused
    before anything is written (require_python). Raises BadInputError, an op cache that is not made included."""
    if jobs < 1:
        raise BadInputError(f"--jobs {jobs}: at least one compile job is needed. Pass --jobs 1 or more.")
    # Absolute: the env's python and its tools run in private directories (core/pystart), where a relative path
    # (-p ./env) would name nothing.
    prefix = Path(os.path.abspath(prefix))
    python = Path(os.path.abspath(python)) if python is not None else None
    if not prefix.is_dir():
        raise BadInputError(
            f"prefix {str(prefix)!r} does not exist. Create it first (envsolver install "
            "conda-lock.yml -p PREFIX), then run the hook."
        )
    if op_cache is not None and not no_build:
        try:
            opcachedir.ensure(op_cache, op_cache_trust, op_cache_group)
        except opcachedir.NotMade as exc:
            raise BadInputError(str(exc)) from None
    where = arch_list_and_platform(prefix, lock, arch, kb)
    requested, target = where.arch_list, where.target
    if need_python:
        require_python(prefix, python)
    py = python or prefix / "bin" / "python"
    builds = runner or run_build
    runner = runner or run
    state = ops_stage.load_state(prefix)
    known: tuple[bool, opkey.KeyFacts | None] | None = None  # (toolkit, key facts), once read
    if not no_build and py.exists() and (state is not None or op_cache is not None):
        # Decided without starting torch: nothing changed, or every op is in the op cache. The prefix's toolkit and
        # the key facts are read once, for both.
        toolkit = toolkit_in(prefix, py, where, kb, environ)
        keyed = ops_stage.read_key_facts(
            py, buildenv.environ_for_build(prefix, requested, target, environ, toolkit), runner
        )
        known = (toolkit, keyed)
        done = _unchanged(prefix, where, state, keyed, toolkit, ops) if state is not None else None
        if done is None and op_cache is not None:
            done = _all_cached(
                prefix, py, where, keyed, toolkit, ops, (op_cache, op_cache_trust), environ, progress, runner
            )
        if done is not None:
            return done
    progress("pre-flight")
    # One probe, seen as the activated env would be (CUDA_HOME and CPATH only for a prefix with the toolkit).
    facts = probe(prefix, py, where, kb, buildenv.environ_for_build(prefix, requested, target, environ, False))
    toolkit = buildenv.toolkit_found(facts)
    made = archplan.plan(requested, archplan.buildable(facts, kb))
    fixed = made.value if made is not None else requested
    report = HookReport(prefix, fixed)
    report.activation = activation.write(prefix, fixed, target, force=True, toolkit=toolkit)
    env = buildenv.environ_for_build(prefix, fixed, target, environ, toolkit)
    recorded, entries = _metadata(prefix, lock)
    meta = {**recorded, prefixmeta.ARCH_KEY: requested}
    env_facts = {**facts, "env": {**(facts.get("env") or {}), "TORCH_CUDA_ARCH_LIST": fixed}}
    report.findings = preflight(env_facts, kb, meta, entries)
    if no_build or not report.ok:
        return report
    cuda_home = Path(str((facts.get("cuda_home") or {}).get("path") or "/usr/local/cuda"))
    archs = tuple(a.cc.sm for a in parse_arch_list(fixed))
    # The key facts read above serve when they were read in the same environment (the same toolkit).
    keyed = known[1] if known is not None and known[0] == toolkit else ops_stage.read_key_facts(py, env, runner)
    # Ops DeepSpeed was installed with (conda-forge's) are proven and kept when they have SASS for every target
    # arch; the others, and those short of an arch, are the hook's: from the op cache or built, then registered.
    prebuilt = ops_stage.prebuilt(keyed) & set(ops)
    kept: list[build.OpResult] = []
    if prebuilt:
        loaded = build.build_ops(py, tuple(op for op in ops if op in prebuilt), env, jobs, progress, builds)
        kept = [
            dataclasses.replace(o, source="prebuilt")
            for o in build.prove_all(loaded, py, cuda_home, archs, env, runner)
            if o.ok
        ]
    theirs = {o.op for o in kept}
    todo = tuple(op for op in ops if op not in theirs)
    if prebuilt - theirs:
        progress(f"DeepSpeed's prebuilt {', '.join(sorted(prebuilt - theirs))} lack a target arch: building")
    provided = ops_stage.provide(
        prefix,
        py,
        todo,
        requested,
        fixed,
        where.platform,
        keyed,
        env,
        jobs,
        op_cache,
        cuda_home,
        archs,
        progress,
        runner,
        toolkit,
        builds,
        _has_gpu(environ),
        op_cache_trust,
    )
    report.notes = provided.notes
    by_op = {o.op: o for o in [*kept, *provided.results]}
    report.ops = [by_op[op] for op in ops]
    if todo and not provided.registered:
        report.ops = [
            o if o.op in theirs or not o.ok else dataclasses.replace(o, ok=False, error=NOT_REGISTERED)
            for o in report.ops
        ]
    if any(o.source == "built" for o in report.ops) and all(o.ok for o in report.ops):
        report.gpu_check = provided.gpu_check
    return report


# An op built but not registered (the python's site-packages is outside the prefix): DeepSpeed would not find it.
NOT_REGISTERED = (
    "built, but not registered with DeepSpeed: the python's site-packages is not inside the prefix. Run the hook "
    "with the environment's own python (leave out --python)."
)


def _all_cached(
    prefix: Path,
    py: Path,
    where: Where,
    keyed: opkey.KeyFacts | None,
    toolkit: bool,
    ops: tuple[str, ...],
    cache: tuple[Path, frozenset[int]],
    environ: Mapping[str, str],
    progress: Callable[[str], None],
    runner: Runner,
) -> HookReport | None:
    """Every op is in the shared op cache (`cache`: the directory and the uids trusted there) for exactly this
    request (DeepSpeed, torch, nvcc, compiler, arch list), in entries only trusted users could have written:
    nothing will be compiled, so the pre-flight (which checks what a build needs, and starts torch) is not run;
    the ops are copied in and registered. None when any op is missing from the cache or refused there."""
    if keyed is None or ops_stage.prebuilt(keyed) & set(ops):
        return None
    built_for = ops_stage.cached_arch_list(keyed, ops, where.arch_list, where.platform, *cache)
    if built_for is None:
        return None
    env = buildenv.environ_for_build(prefix, built_for, where.target, environ, toolkit)
    report = HookReport(prefix, built_for)
    report.activation = activation.write(prefix, built_for, where.target, force=True, toolkit=toolkit)
    archs = tuple(a.cc.sm for a in parse_arch_list(built_for))
    provided = ops_stage.provide(
        prefix,
        py,
        ops,
        where.arch_list,
        built_for,
        where.platform,
        keyed,
        env,
        1,
        cache[0],
        ops_stage.cuda_home(env),
        archs,
        progress,
        runner,
        toolkit,
        trusted=cache[1],
    )
    report.notes = provided.notes
    report.ops = [
        o if provided.registered or not o.ok else dataclasses.replace(o, ok=False, error=NOT_REGISTERED)
        for o in provided.results
    ]
    return report


def _unchanged(
    prefix: Path,
    where: Where,
    state: ops_stage.State,
    keyed: opkey.KeyFacts | None,
    toolkit: bool,
    ops: tuple[str, ...],
) -> HookReport | None:
    """The report of a re-run with nothing to do, decided without starting torch: the same request, the
    prefix's toolkit as it was (activation unchanged), and every op's key, library and registration as
    recorded. None when anything differs (or DeepSpeed ships some of the ops prebuilt: those are proven again)."""
    if toolkit != state.toolkit or ops_stage.prebuilt(keyed) & set(ops):
        return None
    if not ops_stage.unchanged(prefix, state, keyed, ops, where.arch_list, where.platform):
        return None
    report = HookReport(prefix, state.arch_list)
    report.activation = activation.write(prefix, state.arch_list, where.target, force=True, toolkit=toolkit)
    kept = {lib.op: lib for lib in state.libraries}
    report.ops = [build.OpResult(op, True, None, str(kept[op].file), None, source="unchanged") for op in ops]
    report.unchanged = ops
    return report


def _has_gpu(environ: Mapping[str, str]) -> bool:
    return os.path.exists("/proc/driver/nvidia/version") and environ.get("CUDA_VISIBLE_DEVICES", "0") != ""
