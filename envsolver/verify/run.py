"""Run verify: pick the target python, run the probe in it, read the lock, run the checks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsolver.core import pystart
from envsolver.core.errors import EnvsolverError, Kind
from envsolver.install import envkind, prefixmeta
from envsolver.install import pypi as pypi_install
from envsolver.kb.model import KnowledgeBase
from envsolver.lock import lockfile
from envsolver.lock.pypi.record import PipRecord
from envsolver.verify.checks import HOST_ONLY, IDS, Check, Context, probe_needs, run

PROBE = Path(__file__).with_name("probe.py")
TIMEOUT_S = 120.0  # the probe's limit for each of its children (torch's import, DeepSpeed's, the GPU test)


class VerifyError(EnvsolverError):
    """verify could not run (exit 2): no such prefix or python, or the probe crashed."""

    kind: Kind = "verify"


@dataclass(frozen=True)
class ToolkitQuery:
    """The probe's prefix options: the prefix, its CUDA include target, whether to see it as activated (the
    hook's activation sets CUDA_HOME and CPATH when the prefix holds the toolkit), whether to skip GPU queries."""

    prefix: Path
    target: str
    activate: bool = True
    devices: bool = False
    only: bool = False  # the prefix's toolkit alone, no torch

    def argv(self) -> list[str]:
        # absolute: the probe runs in a private directory (core/pystart)
        out = ["--prefix", os.path.abspath(self.prefix), "--target", self.target]
        out += ["--activate"] if self.activate else []
        out += [] if self.devices else ["--no-devices"]
        return out + (["--toolkit-only"] if self.only else [])


@dataclass(frozen=True)
class Target:
    python: Path
    prefix: Path | None
    chosen_by: str = ""  # why this interpreter: the option or the environment that named it


def target(prefix: Path | None, python: Path | None, environ: Mapping[str, str]) -> Target:
    """-p PREFIX, --python PATH, else the active conda env, else python3 on PATH."""
    if python is not None:
        if not python.exists() and len(python.parts) == 1:  # a bare name (python3): found on PATH, as a shell does
            found = shutil.which(str(python), path=environ.get("PATH"))
            if found:
                return Target(Path(found), prefix, f"given by --python, {python} on PATH")
        if not python.exists():
            raise VerifyError(
                f"no python at {str(python)!r}{' (nor on PATH)' if len(python.parts) == 1 else ''}. Pass --python "
                "with an existing interpreter (a path, or a name on PATH such as python3)."
            )
        return Target(python, prefix, "given by --python")
    if prefix is not None:
        candidate = prefix / "bin" / "python"
        if not candidate.exists():
            raise VerifyError(f"{str(prefix)!r} has no bin/python. Pass an environment prefix (-p) or --python PATH.")
        return Target(candidate, prefix, "bin/python of -p")
    if environ.get("CONDA_PREFIX"):
        active = Path(environ["CONDA_PREFIX"])
        return Target(active / "bin" / "python", active, "the active conda environment, $CONDA_PREFIX")
    for name in ("python3", "python"):
        found = shutil.which(name)
        if found:
            return Target(Path(found), None, f"{name} on PATH: no -p, --python or active conda environment")
    raise VerifyError("no python to verify. Pass -p PREFIX or --python PATH.")


@dataclass(frozen=True)
class Children:
    """What the probe learns besides the host's facts, each in seconds: torch's facts and DeepSpeed's (each
    imported in a child) and the GPU test's."""

    torch: bool
    deepspeed: bool
    gpu_test: bool


def children_for(only: Iterable[str] | None, gpu_test: bool) -> Children:
    """What the probe must learn for the checks ONLY names (None: every check): what they and their prerequisites
    read (checks.probe_needs); the GPU test when it was asked for (--gpu-test) and a check reads it."""
    needs = probe_needs(only)
    return Children("torch" in needs, "deepspeed" in needs, gpu_test and "gpu_test" in needs)


def probe_options(
    deepspeed: bool,
    gpu_test: bool,
    timeout: float,
    headers: tuple[str, ...] = (),
    toolkit: ToolkitQuery | None = None,
    dists: tuple[str, ...] = (),
    stream: bool = True,
    op_runner: str | None = None,
    torch: bool = True,
) -> list[str]:
    """The probe's options (probe.py's usage): the one place that writes them, for a probe run here and for one
    run as source on a cluster node (cluster/step.py). Without `torch` the probe starts no torch child."""
    argv = ["--timeout", str(timeout)] + (["--stream"] if stream else [])
    argv += ["--headers", ",".join(headers)] if headers else []
    argv += toolkit.argv() if toolkit is not None else []
    argv += [] if torch else ["--no-torch"]
    argv += ["--deepspeed"] if deepspeed else []
    argv += ["--gpu-test"] if gpu_test else []
    argv += ["--op-runner", op_runner] if gpu_test and op_runner else []
    return argv + (["--dists", ",".join(dists)] if dists else [])


def headers_of(kb: KnowledgeBase) -> tuple[str, ...]:
    """The headers verify asks the probe about: the knowledge base's extra and op headers."""
    return tuple(h.header for h in (*kb.extra_headers, *kb.op_headers))


def dists_of(lock: lockfile.Lock | None) -> tuple[str, ...]:
    """The distributions verify asks the probe about: the lock's PyPI part."""
    return tuple(r.name for r in lock.pip) if lock is not None else ()


def probe(
    python: Path,
    deepspeed: bool,
    gpu_test: bool,
    timeout: float,
    environ: Mapping[str, str],
    headers: tuple[str, ...] = (),
    on_partial: Callable[[dict[str, Any]], None] | None = None,
    toolkit: ToolkitQuery | None = None,
    dists: tuple[str, ...] = (),
    torch: bool = True,
) -> dict[str, Any]:
    """Run the probe in `python`. `on_partial` gets the host facts as soon as the probe has them (before
    torch has finished importing in its child). `toolkit` asks about a prefix's own CUDA toolkit (the hook's
    question); without `torch` there is no torch child (no `torch` fact). Raises VerifyError when the probe
    cannot run or crashes."""
    options = probe_options(deepspeed, gpu_test, timeout, headers, toolkit, dists, torch=torch)
    # Not -I: the probe must see the PYTHONPATH the user's jobs see (a torch there shadows the env's: pip_conda_mix).
    argv, env = pystart.keeping_environment(python, environ, str(PROBE), *options)
    with pystart.workdir() as where:
        return _probe(python, argv, env, where, timeout, on_partial)


def _probe(
    python: Path,
    argv: list[str],
    env: dict[str, str],
    where: Path,
    timeout: float,
    on_partial: Callable[[dict[str, Any]], None] | None,
) -> dict[str, Any]:
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=where)
    except OSError as exc:
        raise VerifyError(f"the probe could not run in {python}: {exc}. Check the interpreter works.") from None
    assert proc.stdout is not None and proc.stderr is not None
    limit = timeout * 3 + 60
    killer = threading.Timer(limit, proc.kill)
    errors: list[str] = []
    drain = threading.Thread(target=lambda: errors.append(proc.stderr.read() if proc.stderr else ""), daemon=True)
    killer.start()
    drain.start()
    lines: list[str] = []
    try:
        # One reader for every line the probe prints: the host facts first (streamed), the full facts last.
        for line in proc.stdout:
            if not line.strip():
                continue
            lines.append(line)
            doc = _json(line)
            if on_partial is not None and isinstance(doc, dict) and isinstance(doc.get("partial"), dict):
                on_partial(doc["partial"])
        proc.wait()
    finally:
        timed_out = not killer.is_alive() and proc.returncode is not None and proc.returncode < 0
        killer.cancel()
        drain.join(timeout=5)
    if timed_out:
        raise VerifyError(
            f"the probe in {python} did not finish in {limit:.0f} s. Check the "
            "interpreter, or the GPU (a hung CUDA initialisation)."
        )
    facts = _json(lines[-1]) if lines else None
    if not isinstance(facts, dict) or "partial" in facts:
        tail = ("".join(errors) or "".join(lines)).strip()[-800:]
        raise VerifyError(
            f"the probe crashed in {python} (exit {proc.returncode}): {tail}. Check the interpreter "
            "runs `python -c 'import json'`."
        )
    return facts


def _json(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def context(
    facts: Mapping[str, Any], kb: KnowledgeBase, prefix: Path | None, lock: lockfile.Lock | None, gpu_test: bool
) -> Context:
    meta: dict[str, str] = {}
    entries: tuple[lockfile.LockEntry, ...] = ()
    pip: tuple[PipRecord, ...] = ()
    if lock is not None:
        entries = tuple(lock.entries)
        meta = lock.metadata
        pip = lock.pip
    elif prefix is not None:
        kept = prefixmeta.load(prefix)
        meta = kept.custom if kept else {}
    files: dict[str, tuple[str, str]] = {}
    if prefix is not None and pip:
        recorded = pypi_install.recorded(prefix)
        files = {r.name: pypi_install.standing(prefix, r, recorded) for r in pip}
    return Context(
        facts, kb, meta, entries, deepspeed_wanted=bool(meta), gpu_test=gpu_test, lock_pip=pip, pip_files=files
    )


def checks_of(
    facts: Mapping[str, Any],
    kb: KnowledgeBase,
    prefix: Path | None,
    lock: lockfile.Lock | None,
    gpu_test: bool,
    only: tuple[str, ...] = (),
) -> list[Check]:
    """verify's checks over one probe's facts (every check, or only the named ones): the one evaluation, for a
    probe run here and for the facts a cluster node's probe printed (evaluated on the login node)."""
    return run(context(facts, kb, prefix, lock, gpu_test), only or None)


def verify(
    kb: KnowledgeBase,
    prefix: Path | None,
    python: Path | None,
    lock: Path | None,
    gpu_test: bool,
    only: tuple[str, ...],
    environ: Mapping[str, str],
    timeout: float = TIMEOUT_S,
    on_check: Callable[[Check], None] | None = None,
    on_target: Callable[[Target], None] | None = None,
) -> tuple[Target, dict[str, Any], list[Check]]:
    """Probe and check: the probe learns what the checks asked for read (children_for: no torch child when they
    read host facts only). `on_check` sees each check once, in the stable order, as soon as it and every check
    before it are known: the leading host-only ones while torch is still importing in the probe's child, the
    rest at the end. `on_target` sees the interpreter chosen, before the probe runs. Returns the checks
    `on_check` saw, in that order."""
    chosen = target(prefix, python, environ)
    if on_target is not None:
        on_target(chosen)
    read = lockfile.read_whole(lock, None) if lock is not None else None
    wanted = headers_of(kb)
    selected = tuple(i for i in IDS if not only or i in only)
    known: dict[str, Check] = {}
    shown: list[Check] = []

    def show_ready() -> None:
        for check_id in selected[len(shown) :]:
            if check_id not in known:
                return
            shown.append(known[check_id])
            if on_check is not None:
                on_check(known[check_id])

    def host_checks(partial: dict[str, Any]) -> None:
        ids = tuple(i for i in HOST_ONLY if i in selected)
        if ids:
            known.update((c.id, c) for c in run(context(partial, kb, _prefix_of(chosen, partial), read, gpu_test), ids))
            show_ready()

    asked = children_for(selected, gpu_test)
    facts = probe(
        chosen.python,
        asked.deepspeed,
        asked.gpu_test,
        timeout,
        environ,
        wanted,
        host_checks,
        dists=dists_of(read),
        torch=asked.torch,
    )
    chosen = Target(chosen.python, _prefix_of(chosen, facts), chosen.chosen_by)
    for check in checks_of(facts, kb, chosen.prefix, read, gpu_test, only):
        known.setdefault(check.id, check)  # a check already shown stays what it said
    show_ready()
    return chosen, facts, shown


def _prefix_of(chosen: Target, facts: Mapping[str, Any]) -> Path | None:
    """The given prefix, else the interpreter's sys.prefix when it is a conda environment (envkind)."""
    if chosen.prefix is not None:
        return chosen.prefix
    guessed = (facts.get("python") or {}).get("prefix")
    return Path(guessed) if guessed and envkind.of_path(Path(guessed)) == "conda" else None
