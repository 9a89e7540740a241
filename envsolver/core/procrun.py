"""Run a subprocess and get (exit code, stdout + stderr): the one runner the hook's build and proof steps call.

Every child starts in a private working directory (core/pystart.workdir, or the caller's own private `cwd`): a
Python among them finds nothing of the caller's directory to import. Injectable (the `Runner` type), so tests
answer with fake tools instead of compilers.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from envsolver.core import pystart

Runner = Callable[[list[str], Mapping[str, str]], tuple[int, str]]


# A probe or a proof answers in seconds; a cold op build on a small login node can take many minutes.
PROBE_TIMEOUT = 120
BUILD_TIMEOUT = 3600


def run(
    argv: list[str], env: Mapping[str, str], timeout: float = PROBE_TIMEOUT, cwd: Path | None = None
) -> tuple[int, str]:
    """(exit code, stdout + stderr), run in `cwd` (a private directory of the caller's), else in a fresh private
    one; 127 with the error text when the program cannot start or runs past timeout."""
    if cwd is not None:
        return _run(argv, env, timeout, cwd)
    try:
        with pystart.workdir() as where:
            return _run(argv, env, timeout, where)
    except OSError as exc:
        return 127, f"no private directory to run it in: {exc}"


def _run(argv: list[str], env: Mapping[str, str], timeout: float, cwd: Path) -> tuple[int, str]:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=dict(env), cwd=cwd, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, done.stdout + done.stderr


def run_build(argv: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    """run() with the build's time limit (BUILD_TIMEOUT)."""
    return run(argv, env, BUILD_TIMEOUT)
