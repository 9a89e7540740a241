"""A rattler worker started ahead of its request (worker_call.prestart, issue 13): the next call takes it, gets the
same answer, and a worker nobody takes never outlives its process or its command. A worker whose solve succeeded
serves the process's next calls (issue 23) while they come from the same Python, working directory and
environment; after a failure, an interrupt, a timeout or an oversized answer it is never used again, one that
died while it waited is replaced, and it never outlives its process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.core.errors import WorkerCrashed
from envsolver.lock import solve, worker_call
from envsolver.lock.solve import ChannelSource, SolveFailed
from tests.conda_packages import build_channel
from tests.test_rattler_abort import HeldChannel, crash_rattler, held  # noqa: F401 (held: a fixture)

UNIX = {"__unix": "0"}


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_channel(tmp_path_factory.mktemp("prestart"))


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every worker process worker_call.py starts during the test, which begins without a spare (an earlier test's kept
    worker would serve its first call)."""
    worker_call.discard_spare()
    seen: list[subprocess.Popen[bytes]] = []

    class Recorded(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            seen.append(self)

    monkeypatch.setattr(worker_call.subprocess, "Popen", Recorded)
    yield seen
    worker_call.discard_spare()


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
    worker_call.discard_spare()  # the worker that answered waits for the next call; without it, prestart starts one
    worker_call.prestart()
    worker_call.prestart()  # one spare at a time
    assert len(started) == 2
    assert solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "b") == expected
    assert len(started) == 2  # the spare answered; no third process
    assert worker_call._spare is not None and worker_call._spare.child is started[1]  # and it waits for the next call


def test_work_meant_for_the_wait_runs_once_while_the_worker_solves(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """worker_call.meanwhile: the work runs after the request was sent (the worker is alive, its answer not yet read),
    once; one that fails is dropped and the answer still comes; a command's end forgets what no call ran."""
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    seen: list[object] = []

    def work() -> None:
        seen.append(started[-1].poll())  # None: the worker has not exited, so its answer is still to be read

    def broken() -> None:
        raise ImportError("a module that does not import")

    worker_call.meanwhile(work)
    worker_call.meanwhile(broken)
    assert len(solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "a")) == 3
    assert seen == [None]
    assert len(solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "b")) == 3
    assert seen == [None]  # once
    worker_call.meanwhile(work)
    worker_call.discard_spare()
    solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "c")
    assert seen == [None]


def test_a_spare_that_died_is_replaced_by_a_new_worker(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    worker_call.prestart()
    started[0].kill()
    started[0].wait()
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    assert len(solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path)) == 3
    assert len(started) == 2


def test_a_spare_started_in_another_environment_is_not_taken(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PYTHONPATH set after the spare started must reach the worker: here it makes rattler crash."""
    worker_call.prestart()
    monkeypatch.setenv("PYTHONPATH", str(crash_rattler(tmp_path / "site", "abort")))
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    with pytest.raises(WorkerCrashed, match="killed by SIGABRT"):
        solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "cache")
    assert len(started) == 2 and started[0].returncode == -signal.SIGKILL


def test_a_worker_that_crashes_after_taking_its_request_is_still_an_error(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(crash_rattler(tmp_path / "site", "segfault")))
    worker_call.prestart()
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    with pytest.raises(WorkerCrashed, match=r"while solving for linux-64 \(killed by SIGSEGV\)"):
        solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "cache")
    assert len(started) == 1


def test_a_spare_nobody_takes_ends_with_its_process() -> None:
    code = (
        "from envsolver.lock import worker_call; worker_call.prestart(); "
        "print(worker_call._spare.child.pid, flush=True)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    pid = int(done.stdout)
    assert not _alive(pid)  # killed and reaped at exit, not left importing rattler


def test_a_spare_nobody_takes_ends_with_its_command(started: list[subprocess.Popen[bytes]]) -> None:
    """In-process too: `make` refused after it prestarted (an unknown GPU) leaves no worker behind."""
    result = CliRunner().invoke(main, ["make", "--gpu", "a1000", "--offline", "--out", "x"])
    assert result.exit_code == 2, result.output
    assert len(started) == 1 and started[0].returncode == -signal.SIGKILL
    assert worker_call._spare is None


def test_make_from_the_command_line_starts_its_worker_before_the_cli_and_only_one(
    tmp_path: Path, started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """envsolver.__main__ prestarts for `make` before importing the CLI; make's own prestart then finds the spare,
    and the solve takes it: one worker for the whole command. (`--deepspeed-from conda-forge`: a plan whose first
    candidate the snapshot locks; a candidate it cannot solve ends that worker, and the next candidate's solve
    starts another.)"""
    from envsolver import __main__ as entry

    argv = [
        "envsolver",
        "make",
        "--gpu",
        "v100",
        "--deepspeed-from",
        "conda-forge",
        "--offline",
        "--out",
        str(tmp_path),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    entry._prestart(sys.argv)
    assert len(started) == 1 and worker_call._spare is not None
    with pytest.raises(SystemExit) as done:
        entry.run()
    assert done.value.code in (0, None)
    assert len(started) == 1  # the prestarted worker answered; no second one
    assert (
        worker_call._spare is not None and worker_call._spare.child is started[0] and started[0].poll() is None
    )  # kept
    assert (tmp_path / "conda-lock.yml").exists()


@pytest.mark.parametrize("argv", [["make", "--no-lock"], ["make", "--help"], ["explain", "--offline"], []])
def test_the_early_prestart_is_only_for_a_make_that_locks(
    argv: list[str], started: list[subprocess.Popen[bytes]]
) -> None:
    from envsolver import __main__ as entry

    entry._prestart(["envsolver", *argv])
    assert started == [] and worker_call._spare is None


def test_an_interrupted_make_leaves_no_worker(tmp_path: Path) -> None:
    """Ctrl-C while make works out its plan: exit 130 with the one-line message, and the prestarted worker is
    gone (its pid no longer exists) when the process has exited."""
    hook = tmp_path / "hook"
    hook.mkdir()
    # Interrupt right after the worker was prestarted, while the parent loads the knowledge base.
    (hook / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "from envsolver.lock import worker_call\n"
        "real = worker_call.prestart\n"
        "def prestart():\n"
        "    real()\n"
        "    sys.stderr.write(f'spare {worker_call._spare.child.pid}\\n'); sys.stderr.flush()\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "worker_call.prestart = prestart\n"
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


# Worker reuse (issue 23). A sitecustomize.py on the worker's PYTHONPATH (as tests/test_worker_bounds.py does) that
# lets the worker's first solve through and makes its second one misbehave: the second request reaches the worker
# that answered the first, so what goes wrong then goes wrong in a kept worker.
SECOND_SOLVE = """
import sys
if sys.argv[-1:] and sys.argv[-1].endswith("rattler_worker.py"):
    import asyncio, os, types
    import rattler

    _real, _calls = rattler.solve, []
    # One record whose depends take 1 MB, a hundred times: a 100 MB answer.
    _huge = types.SimpleNamespace(
        name=types.SimpleNamespace(normalized="huge"), version="1", build="0", build_number=0, subdir="linux-64",
        url="https://conda.anaconda.org/x/linux-64/huge-1-0.conda", md5=b"", sha256=b"", size=1,
        depends=["d" * 1000] * 1000, constrains=[], noarch=types.SimpleNamespace(python=False, generic=False),
    )

    async def _second(*args, **kwargs):
        _calls.append(1)
        if len(_calls) == 1:
            return await _real(*args, **kwargs)
        {how}

    rattler.solve = _second
"""
SECOND = {"abort": "os.abort()", "stall": "await asyncio.sleep(3600)", "enormous": "return [_huge] * 100"}


def _second_solve(where: Path, how: str) -> str:
    where.mkdir()
    (where / "sitecustomize.py").write_text(SECOND_SOLVE.format(how=SECOND[how]))
    return str(where)


def _solve(channel: Path, cache: Path, spec: str = "tiny-app") -> list[solve.Record]:
    return solve.solve([spec], [ChannelSource(channel.as_uri(), channel.as_uri())], "linux-64", UNIX, cache)


def _kept(started: list[subprocess.Popen[bytes]]) -> int | None:
    """The index in `started` of the worker kept for the next call, None when there is none."""
    spare = worker_call._spare
    return None if spare is None else next(i for i, child in enumerate(started) if child is spare.child)


def test_a_worker_serves_the_next_solves_until_one_fails(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    first = _solve(channel, tmp_path / "a")
    assert len(started) == 1 and _kept(started) == 0, "the worker that answered a solve must wait for the next"
    assert _solve(channel, tmp_path / "b") == first
    assert len(started) == 1 and _kept(started) == 0, "the second solve must be served by the same worker"
    with pytest.raises(SolveFailed):
        _solve(channel, tmp_path / "c", "tiny-app >=9")
    assert len(started) == 1 and started[0].returncode == 0, "the kept worker answers the failure, then exits"
    assert _kept(started) is None, "a worker whose solve failed must not be kept"
    assert _solve(channel, tmp_path / "d") == first
    assert len(started) == 2 and _kept(started) == 1, "after a failure the next call needs a new worker"


def test_a_kept_worker_ends_after_an_index_it_serves(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    _solve(channel, tmp_path / "cache")
    build_channel(tmp_path)  # indexes the new channel
    assert len(started) == 1 and started[0].returncode == 0, "the kept worker serves the index, then exits"
    assert _kept(started) is None


def test_a_changed_environment_or_directory_gets_a_new_worker(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _solve(channel, tmp_path / "a")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "another test (call)")
    _solve(channel, tmp_path / "b")
    assert len(started) == 1, "pytest's name for the running test is not the worker's business"
    monkeypatch.setenv("PYTHONPATH", str(crash_rattler(tmp_path / "site", "abort")))
    with pytest.raises(WorkerCrashed, match="killed by SIGABRT"):  # the new PYTHONPATH reached a new worker
        _solve(channel, tmp_path / "c")
    assert len(started) == 2 and started[0].returncode == -signal.SIGKILL, "the kept worker must have been killed"
    monkeypatch.delenv("PYTHONPATH")
    _solve(channel, tmp_path / "d")
    assert len(started) == 3 and _kept(started) == 2
    monkeypatch.chdir(tmp_path)
    _solve(channel, tmp_path / "e")
    assert len(started) == 4 and started[2].returncode == -signal.SIGKILL, "another working directory, another worker"


@pytest.mark.parametrize("seen_dead", [True, False], ids=["reaped", "not-yet-seen"])
def test_a_kept_worker_that_died_while_it_waited_is_replaced(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]], seen_dead: bool
) -> None:
    """Whether the call sees the worker dead before it writes its request (poll), or only when the write fails
    (the worker died just after the check): a new worker answers, and the call succeeds."""
    expected = _solve(channel, tmp_path / "a")
    started[0].kill()
    started[0].wait()
    if not seen_dead:
        started[0].poll = lambda: None  # type: ignore[method-assign]
    assert _solve(channel, tmp_path / "b") == expected
    assert len(started) == 2 and _kept(started) == 1


def test_a_kept_worker_that_crashes_on_its_next_request_is_an_error(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that took the request and died on it is not retried: the crash is the call's answer."""
    monkeypatch.setenv("PYTHONPATH", _second_solve(tmp_path / "site", "abort"))
    _solve(channel, tmp_path / "a")
    with pytest.raises(WorkerCrashed, match=r"while solving for linux-64 \(killed by SIGABRT\)"):
        _solve(channel, tmp_path / "b")
    assert len(started) == 1 and _kept(started) is None


def test_each_request_to_a_kept_worker_has_its_own_time_limit(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", _second_solve(tmp_path / "site", "stall"))
    _solve(channel, tmp_path / "a")
    monkeypatch.setattr(worker_call, "time_limit", lambda default: 1.0)
    with pytest.raises(WorkerCrashed, match="rattler gave no answer within 1 s while solving for linux-64"):
        _solve(channel, tmp_path / "b")
    assert len(started) == 1 and started[0].returncode == -signal.SIGKILL and _kept(started) is None


def test_an_enormous_answer_from_a_kept_worker_is_refused(
    channel: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", _second_solve(tmp_path / "site", "enormous"))
    _solve(channel, tmp_path / "a")
    with pytest.raises(WorkerCrashed, match="rattler's answer while solving for linux-64 is larger than 32 MiB"):
        _solve(channel, tmp_path / "b")
    assert len(started) == 1 and started[0].returncode == -signal.SIGKILL and _kept(started) is None


def test_an_interrupt_kills_a_kept_worker(
    channel: Path,
    held: HeldChannel,  # noqa: F811
    tmp_path: Path,
    started: list[subprocess.Popen[bytes]],
) -> None:
    _solve(channel, tmp_path / "a")

    held.interrupt_when_asked()
    source = ChannelSource(held.url("conda-forge"), held.url("conda-forge"))
    with pytest.raises(KeyboardInterrupt):
        solve.solve(["python"], [source], "linux-64", UNIX, tmp_path / "b")
    assert len(started) == 1 and started[0].returncode == -signal.SIGKILL and _kept(started) is None


KEPT = """
import os, signal, sys
from pathlib import Path
from envsolver.lock import solve, worker_call
channel = Path(sys.argv[1])
solve.solve(["tiny-app"], [solve.ChannelSource(channel.as_uri(), channel.as_uri())], "linux-64", {}, Path(sys.argv[2]))
print(worker_call._spare.child.pid, flush=True)
if sys.argv[3] == "killed":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _running(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


@pytest.mark.parametrize("end", ["exits", "killed"])
def test_a_kept_worker_ends_with_its_process(channel: Path, tmp_path: Path, end: str) -> None:
    """A process that exits kills and reaps its kept worker (atexit); one killed outright (no atexit) closes the
    worker's stdin, and the worker leaves by itself."""
    done = subprocess.run(
        [sys.executable, "-c", KEPT, str(channel), str(tmp_path / "cache"), end],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == (0 if end == "exits" else -signal.SIGKILL), done.stderr
    pid = int(done.stdout)
    if end == "exits":
        assert not _alive(pid), "killed and reaped at exit"
        return
    deadline = time.monotonic() + 30
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid), "the worker must leave when its parent is gone"
