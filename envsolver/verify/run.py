"""Run verify: pick the target python, run the probe in it, read the lock, run the checks."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsolver import lockfile
from envsolver.errors import EnvsolverError
from envsolver.hook.run import load_lock_metadata
from envsolver.kb.model import KnowledgeBase
from envsolver.verify.checks import Check, Context, run

PROBE = Path(__file__).with_name("probe.py")


class VerifyError(EnvsolverError):
    """verify could not run (exit 2): no such prefix or python, or the probe crashed."""


@dataclass(frozen=True)
class Target:
    python: Path
    prefix: Path | None


def target(prefix: Path | None, python: Path | None, environ: Mapping[str, str]) -> Target:
    """-p PREFIX, --python PATH, else the active conda env, else python3 on PATH."""
    if python is not None:
        if not python.exists():
            raise VerifyError(f"no python at {str(python)!r}. Pass --python with an existing interpreter.")
        return Target(python, prefix)
    if prefix is not None:
        candidate = prefix / "bin" / "python"
        if not candidate.exists():
            raise VerifyError(f"{str(prefix)!r} has no bin/python. Pass an environment prefix (-p) or --python PATH.")
        return Target(candidate, prefix)
    if environ.get("CONDA_PREFIX"):
        active = Path(environ["CONDA_PREFIX"])
        return Target(active / "bin" / "python", active)
    found = shutil.which("python3") or shutil.which("python")
    if not found:
        raise VerifyError("no python to verify. Pass -p PREFIX or --python PATH.")
    return Target(Path(found), None)


def probe(
    python: Path,
    deepspeed: bool,
    gpu_test: bool,
    timeout: float,
    environ: Mapping[str, str],
    headers: tuple[str, ...] = (),
) -> dict[str, Any]:
    argv = [str(python), str(PROBE), "--timeout", str(timeout)]
    argv += ["--headers", ",".join(headers)] if headers else []
    argv += ["--deepspeed"] if deepspeed else []
    argv += ["--gpu-test"] if gpu_test else []
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout * 3 + 60, env=dict(environ), check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VerifyError(f"the probe could not run in {python}: {exc}. Check the interpreter works.") from None
    try:
        facts = json.loads(done.stdout)
    except ValueError:
        tail = (done.stderr or done.stdout).strip()[-800:]
        raise VerifyError(
            f"the probe crashed in {python} (exit {done.returncode}): {tail}. Check the interpreter "
            "runs `python -c 'import json'`."
        ) from None
    if not isinstance(facts, dict):
        raise VerifyError(f"the probe in {python} printed no facts. Check the interpreter.")
    return facts


def context(
    facts: Mapping[str, Any], kb: KnowledgeBase, prefix: Path | None, lock: Path | None, gpu_test: bool
) -> Context:
    meta: dict[str, str] = {}
    entries: tuple[lockfile.LockEntry, ...] = ()
    if lock is not None:
        _, read = lockfile.read(lock, None)
        entries = tuple(read)
        meta = lockfile.metadata(lock)
    elif prefix is not None:
        kept = load_lock_metadata(prefix)
        custom = kept.get("custom_metadata") if kept else None
        meta = {str(k): str(v) for k, v in custom.items()} if isinstance(custom, dict) else {}
    return Context(facts, kb, meta, entries, deepspeed_wanted=bool(meta), gpu_test=gpu_test)


def verify(
    kb: KnowledgeBase,
    prefix: Path | None,
    python: Path | None,
    lock: Path | None,
    gpu_test: bool,
    only: tuple[str, ...],
    environ: Mapping[str, str],
    timeout: float = 120.0,
) -> tuple[Target, dict[str, Any], list[Check]]:
    chosen = target(prefix, python, environ)
    wanted = tuple(h.header for h in (*kb.extra_headers, *kb.op_headers))
    facts = probe(chosen.python, True, gpu_test, timeout, environ, wanted)
    if chosen.prefix is None and facts.get("python", {}).get("prefix"):
        guessed = Path(facts["python"]["prefix"])
        chosen = Target(chosen.python, guessed if (guessed / "conda-meta").exists() else None)
    ctx = context(facts, kb, chosen.prefix, lock, gpu_test)
    return chosen, facts, run(ctx, only)
