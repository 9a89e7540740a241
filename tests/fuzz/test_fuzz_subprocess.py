"""Spot checks as real processes (`python -m envsolver ...`), and the YAML alias bombs under a memory limit:
what an in-process runner cannot show (a hard memory bound, the interpreter's own exit)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fuzz.strategies import BOMB_LIST, BOMB_MERGE

MEMORY_LIMIT = 1 << 30  # bytes of address space for the child; envsolver itself needs about 400 MiB
TIME_LIMIT_S = 60  # the hard limit for the child; each case must also finish within FAST_S
FAST_S = 15.0


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(args: list[str], cwd: Path) -> tuple[int, str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVSOLVER_")}
    env["ENVSOLVER_CACHE_DIR"] = str(cwd / "cache")
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "envsolver", *args],
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT_S,
            cwd=cwd,
            env=env,
            preexec_fn=_limited,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"envsolver {args} ran past {TIME_LIMIT_S} s")
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - started


def assert_clean(code: int, output: str, seconds: float, expected: int) -> None:
    assert "Traceback" not in output, output[-2000:]
    assert code == expected, output[-2000:]
    assert output.strip()
    assert seconds < FAST_S, f"took {seconds:.1f} s"


@pytest.mark.parametrize(("bomb", "top"), [(BOMB_LIST, "i"), (BOMB_MERGE, "a8")], ids=["aliases", "merge-keys"])
def test_alias_bomb_profile(tmp_path: Path, bomb: str, top: str) -> None:
    """The anchors sit under allowed keys, so only the expansion can stop the profile."""
    nested = "".join(f"  {line}\n" for line in bomb.splitlines())
    path = tmp_path / "bomb.yaml"
    path.write_text(f"gpus: [a100]\ndriver: '535.104.05'\ntorch:\n{nested}description: *{top}\n")
    assert len(path.read_bytes()) < 2000
    code, output, seconds = run(["explain", "--profile", str(path)], tmp_path)
    assert_clean(code, output, seconds, 2)
    assert "bomb.yaml" in output


@pytest.mark.parametrize("bomb", [BOMB_LIST, BOMB_MERGE], ids=["aliases", "merge-keys"])
def test_alias_bomb_lock(tmp_path: Path, bomb: str) -> None:
    path = tmp_path / "conda-lock.yml"
    path.write_text("version: 1\n" + bomb)
    code, output, seconds = run(["install", str(path), "-p", str(tmp_path / "env"), "--no-hook"], tmp_path)
    assert_clean(code, output, seconds, 2)


def test_endless_lock_file_is_refused(tmp_path: Path) -> None:
    """A character device that never ends (/dev/zero) is refused as not a file, never read into memory."""
    code, output, seconds = run(["install", "/dev/zero", "-p", str(tmp_path / "env"), "--no-hook"], tmp_path)
    assert_clean(code, output, seconds, 2)


SPOT_CHECKS = [
    (["explain", "--gpu", "a100", "--torch", ""], 2),
    (["explain", "--gpu", "a100", "--torch", "2." + "1" * 4400], 2),
    (["explain", "--gpu", "a100", "--driver", "9" * 4400], 2),
    (["explain", "--gpu", "a100", "--json"], 0),
]


@pytest.mark.parametrize(("args", "expected"), SPOT_CHECKS, ids=[str(i) for i in range(len(SPOT_CHECKS))])
def test_spot_checks_as_processes(tmp_path: Path, args: list[str], expected: int) -> None:
    code, output, seconds = run(args, tmp_path)
    assert_clean(code, output, seconds, expected)
