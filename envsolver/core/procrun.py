"""Run a subprocess and get (exit code, stdout + stderr): the one runner the hook's build and proof steps call.

Injectable (the `Runner` type), so tests answer with fake tools instead of compilers.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping

Runner = Callable[[list[str], Mapping[str, str]], tuple[int, str]]


# A probe or a proof answers in seconds; a cold op build on a small login node can take many minutes.
PROBE_TIMEOUT = 120
BUILD_TIMEOUT = 3600


def run(argv: list[str], env: Mapping[str, str], timeout: float = PROBE_TIMEOUT) -> tuple[int, str]:
    """(exit code, stdout + stderr); 127 with the error text when the program cannot start or runs past timeout."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=dict(env), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, done.stdout + done.stderr


def run_build(argv: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    """run() with the build's time limit (BUILD_TIMEOUT)."""
    return run(argv, env, BUILD_TIMEOUT)
