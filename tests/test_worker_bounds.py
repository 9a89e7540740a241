"""The rattler worker's answer is bounded in time and in size (envsolver/lock/worker_call.py): a worker that stalls is
killed at its limit (ENVSOLVER_RATTLER_TIMEOUT) and `make` ends in exit 2 with a message; an answer past
MAX_ANSWER is refused as it arrives, without reading it all, and the reading process stays small.

The worker is the real one; a sitecustomize.py on its PYTHONPATH (as tests/test_rattler_abort.py does) makes
rattler.solve stall or return an enormous solution, in the worker process only. `make` runs in a fresh process
that reports its own peak RSS (VmHWM)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envsolver.core.errors import BadInputError
from envsolver.lock import worker_call

SITE = """
import sys
if sys.argv[-1:] and sys.argv[-1].endswith("rattler_worker.py"):
    import asyncio
    import types
    import rattler

    async def _stall(*args, **kwargs):
        await asyncio.sleep(3600)

    # One record whose depends take 1 MB, a hundred times: a 100 MB answer.
    _huge = types.SimpleNamespace(
        name=types.SimpleNamespace(normalized="huge"), version="1", build="0", build_number=0, subdir="linux-64",
        url="https://conda.anaconda.org/x/linux-64/huge-1-0.conda", md5=b"", sha256=b"", size=1,
        depends=["d" * 1000] * 1000, constrains=[], noarch=types.SimpleNamespace(python=False, generic=False),
    )

    async def _enormous(*args, **kwargs):
        return [_huge] * 100

    rattler.solve = {how}
"""
# `envsolver make` in this process, then its exit code and peak RSS (kB) as the last line of stderr.
MAKE = """
import json, sys
from envsolver.cli.main import main
try:
    main(sys.argv[1:], prog_name="envsolver")
    code = 0
except SystemExit as exc:
    code = exc.code
status = open("/proc/self/status").read()
sys.stderr.write(json.dumps({"code": code, "vmhwm_kb": int(status.split("VmHWM:")[1].split()[0])}) + "\\n")
"""


def _make(tmp_path: Path, how: str, **env: str) -> tuple[dict[str, int], str, float]:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITE.format(how=how))
    out = tmp_path / "out"
    environ = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": str(tmp_path / "site"),
        **env,
    }
    argv = [sys.executable, "-c", MAKE, "make", "--gpu", "a100", "--offline", "--out", str(out)]
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=environ, timeout=120, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"make did not end within 120 s; stderr: {exc.stderr!r}")
    seconds = time.monotonic() - started
    *said, last = done.stderr.strip().splitlines() or [""]
    assert last.startswith("{"), done.stderr
    assert not out.exists() or not any(out.iterdir()), f"make wrote files: {done.stderr}"
    return json.loads(last), "\n".join(said), seconds


def test_a_stalled_worker_ends_make_with_exit_2_within_its_limit(tmp_path: Path) -> None:
    outcome, stderr, seconds = _make(tmp_path, "_stall", ENVSOLVER_RATTLER_TIMEOUT="3")
    assert outcome["code"] == 2, stderr
    assert "error: rattler gave no answer within 3 s while solving for linux-64, so it was stopped." in stderr
    assert "export ENVSOLVER_RATTLER_TIMEOUT=SECONDS" in stderr, stderr
    assert seconds < 60, f"{seconds:.1f} s: {stderr}"


def test_an_enormous_answer_is_refused_unread(tmp_path: Path) -> None:
    outcome, stderr, _ = _make(tmp_path, "_enormous")
    assert outcome["code"] == 2, stderr
    assert "rattler's answer while solving for linux-64 is larger than 32 MiB, so it was not read" in stderr, stderr
    assert outcome["vmhwm_kb"] < 200 * 1024, f"{outcome}: {stderr}"


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "soon", "9999999"])
def test_a_bad_time_limit_is_refused_with_the_fix(value: str) -> None:
    with pytest.raises(BadInputError, match="export ENVSOLVER_RATTLER_TIMEOUT=3600"):
        worker_call.time_limit(60.0, {"ENVSOLVER_RATTLER_TIMEOUT": value})


def test_the_time_limit_from_the_environment() -> None:
    assert worker_call.time_limit(60.0, {}) == 60.0
    assert worker_call.time_limit(60.0, {"ENVSOLVER_RATTLER_TIMEOUT": " 5 "}) == 5.0
