"""A rattler worker started ahead of its request (solve.prestart, issue 13): the next call takes it, gets the
same answer, and a worker nobody takes never outlives its process or its command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.lock import solve
from envsolver.lock.solve import ChannelSource, WorkerCrashed
from tests.conda_packages import build_channel
from tests.test_rattler_abort import crash_rattler

UNIX = {"__unix": "0"}


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_channel(tmp_path_factory.mktemp("prestart"))


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every worker process solve.py starts during the test."""
    seen: list[subprocess.Popen[bytes]] = []

    class Recorded(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            seen.append(self)

    monkeypatch.setattr(solve.subprocess, "Popen", Recorded)
    yield seen
    solve.discard_spare()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_next_call_takes_the_prestarted_worker(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    expected = solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "a")
    assert len(started) == 1
    solve.prestart()
    solve.prestart()  # one spare at a time
    assert len(started) == 2
    assert solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "b") == expected
    assert len(started) == 2 and started[1].returncode == 0  # the spare answered; no third process
    assert solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "c") == expected
    assert len(started) == 3  # taken once: the next call starts its own


def test_work_meant_for_the_wait_runs_once_while_the_worker_solves(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """solve.meanwhile: the work runs after the request was sent (the worker is alive, its answer not yet read),
    once; one that fails is dropped and the answer still comes; a command's end forgets what no call ran."""
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    seen: list[object] = []

    def work() -> None:
        seen.append(started[-1].poll())  # None: the worker has not exited, so its answer is still to be read

    def broken() -> None:
        raise ImportError("a module that does not import")

    solve.meanwhile(work)
    solve.meanwhile(broken)
    assert len(solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "a")) == 3
    assert seen == [None]
    assert len(solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "b")) == 3
    assert seen == [None]  # once
    solve.meanwhile(work)
    solve.discard_spare()
    solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "c")
    assert seen == [None]


def test_a_spare_that_died_is_replaced_by_a_new_worker(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    solve.prestart()
    started[0].kill()
    started[0].wait()
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    assert len(solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path)) == 3
    assert len(started) == 2


def test_a_spare_started_in_another_environment_is_not_taken(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PYTHONPATH set after the spare started must reach the worker: here it makes rattler crash."""
    solve.prestart()
    monkeypatch.setenv("PYTHONPATH", str(crash_rattler(tmp_path / "site", "abort")))
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    with pytest.raises(WorkerCrashed, match="killed by SIGABRT"):
        solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "cache")
    assert len(started) == 2 and started[0].returncode == -signal.SIGKILL


def test_a_worker_that_crashes_after_taking_its_request_is_still_an_error(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(crash_rattler(tmp_path / "site", "segfault")))
    solve.prestart()
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    with pytest.raises(WorkerCrashed, match=r"while solving for linux-64 \(killed by SIGSEGV\)"):
        solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "cache")
    assert len(started) == 1


def test_a_spare_nobody_takes_ends_with_its_process() -> None:
    code = "from envsolver.lock import solve; solve.prestart(); print(solve._spare[0].pid, flush=True)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    pid = int(done.stdout)
    assert not _alive(pid)  # killed and reaped at exit, not left importing rattler


def test_a_spare_nobody_takes_ends_with_its_command(started: list[subprocess.Popen[bytes]]) -> None:
    """In-process too: `make` refused after it prestarted (an unknown GPU) leaves no worker behind."""
    result = CliRunner().invoke(main, ["make", "--gpu", "a1000", "--offline", "--out", "x"])
    assert result.exit_code == 2, result.output
    assert len(started) == 1 and started[0].returncode == -signal.SIGKILL
    assert solve._spare is None


def test_make_from_the_command_line_starts_its_worker_before_the_cli_and_only_one(
    tmp_path: Path, started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """envsolver.__main__ prestarts for `make` before importing the CLI; make's own prestart then finds the spare,
    and the solve takes it: one worker for the whole command."""
    from envsolver import __main__ as entry

    monkeypatch.setattr(sys, "argv", ["envsolver", "make", "--gpu", "v100", "--offline", "--out", str(tmp_path)])
    entry._prestart(sys.argv)
    assert len(started) == 1 and solve._spare is not None
    with pytest.raises(SystemExit) as done:
        entry.run()
    assert done.value.code in (0, None)
    assert len(started) == 1 and started[0].returncode == 0  # the prestarted worker answered; no second one
    assert (tmp_path / "conda-lock.yml").exists()


@pytest.mark.parametrize("argv", [["make", "--no-lock"], ["make", "--help"], ["explain", "--offline"], []])
def test_the_early_prestart_is_only_for_a_make_that_locks(
    argv: list[str], started: list[subprocess.Popen[bytes]]
) -> None:
    from envsolver import __main__ as entry

    entry._prestart(["envsolver", *argv])
    assert started == [] and solve._spare is None


def test_an_interrupted_make_leaves_no_worker(tmp_path: Path) -> None:
    """Ctrl-C while make works out its plan: exit 130 with the one-line message, and the prestarted worker is
    gone (its pid no longer exists) when the process has exited."""
    hook = tmp_path / "hook"
    hook.mkdir()
    # Interrupt right after the worker was prestarted, while the parent loads the knowledge base.
    (hook / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "from envsolver.lock import solve\n"
        "real = solve.prestart\n"
        "def prestart():\n"
        "    real()\n"
        "    sys.stderr.write(f'spare {solve._spare[0].pid}\\n'); sys.stderr.flush()\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "solve.prestart = prestart\n"
    )
    env = {**os.environ, "PYTHONPATH": str(hook), "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "envsolver", "make", "--gpu", "a100", "--offline", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 130, done.stderr
    assert "error: interrupted (Ctrl-C)." in done.stderr and "Traceback" not in done.stderr
    pid = int(done.stderr.split("spare ")[1].split()[0])
    assert not _alive(pid)  # killed and reaped by the parent before it exited
    assert not (tmp_path / "out").exists()
