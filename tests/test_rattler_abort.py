"""Whole `envsolver` processes against rattler's error and interrupt paths (issue 9): no native abort, no Rust
panic, no traceback, nothing written after an interrupt.

py-rattler's Rust threads used to outlive the call that started them and abort the process at exit (see
envsolver/lock/rattler_worker.py), so each case runs several fresh processes: RUNS in the default suite, FUZZ_RUNS
(the issue's count) under `-m fuzz`.

An interrupt ends with exit 130 and `error: interrupted (Ctrl-C).` on stderr.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envsolver.lock import solve, worker_call
from envsolver.lock.solve import ChannelSource
from envsolver.lock.writers import explicit
from tests import httplab
from tests.conda_packages import build_package

SNAPSHOT = Path(__file__).parent.parent / "envsolver" / "lock" / "snapshot" / "data"
RUNS = 2
FUZZ_RUNS = 16
COUNTS = [
    pytest.param(RUNS, id=f"{RUNS}-runs"),
    pytest.param(FUZZ_RUNS, id=f"{FUZZ_RUNS}-runs", marks=pytest.mark.fuzz),
]
# What a native abort, a Rust panic or an escaped exception leaves on stderr.
NEVER = ("Traceback", "panicked", "Fatal Python error", "Segmentation fault", "stack backtrace", "RUST_BACKTRACE")


CRASHES = {
    "abort": ("import os\nos.abort()\n", "SIGABRT"),
    "segfault": ("import ctypes\nctypes.string_at(0)\n", "SIGSEGV"),
}


def crash_rattler(where: Path, how: str) -> Path:
    """A sitecustomize.py that makes rattler.solve and rattler.install die natively in any Python started with
    PYTHONPATH=WHERE: the way rattler's threads ended processes in issue 9, on demand."""
    body, _ = CRASHES[how]
    where.mkdir(parents=True, exist_ok=True)
    (where / "sitecustomize.py").write_text(
        "import rattler\n\n\nasync def _crash(*args, **kwargs):\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
        + "\n\nrattler.solve = _crash\nrattler.install = _crash\n"
    )
    return where


@dataclass(frozen=True)
class Ended:
    code: int
    stdout: str
    stderr: str

    def unclean(self) -> list[str]:
        return [text for text in NEVER if text in self.stderr]


def interrupted(ended: Ended) -> bool:
    """Exit 130 with the CLI's one-line message (never click's "Aborted!")."""
    return ended.code == 130 and "error: interrupted (Ctrl-C)." in ended.stderr and "Aborted!" not in ended.stderr


def envsolver(*args: str, cache: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    environ = {**os.environ, "ENVSOLVER_CACHE_DIR": str(cache), **(env or {})}
    environ.pop("ENVSOLVER_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "envsolver", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )


def finish(process: subprocess.Popen[str]) -> Ended:
    out, err = process.communicate(timeout=300)
    return Ended(process.returncode, out, err)


def files(where: Path) -> dict[str, bytes]:
    return {str(p.relative_to(where)): p.read_bytes() for p in sorted(where.rglob("*")) if p.is_file()}


class HeldChannel(http.server.ThreadingHTTPServer):
    """Serves a directory over http and holds every request until `release` is set: a solve that is surely
    still fetching when `requested` is set."""

    daemon_threads = True

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), functools.partial(_Held, directory=str(root)))
        self.requested = threading.Event()
        self.release = threading.Event()

    def url(self, channel: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{channel}"

    def interrupt_when_asked(self) -> None:
        """Send this process SIGINT (Ctrl-C) once a request has reached the channel, from a thread of its own."""

        def interrupt() -> None:
            if self.requested.wait(120):
                os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()


class _Held(http.server.SimpleHTTPRequestHandler):
    server: HeldChannel

    def do_GET(self) -> None:
        self.server.requested.set()
        self.server.release.wait(60)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client interrupted: the point
            super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def held() -> Iterator[HeldChannel]:
    server = HeldChannel(SNAPSHOT)
    with httplab.serving(server):
        try:
            yield server
        finally:
            server.release.set()


@pytest.fixture(scope="module")
def old_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete file set from an earlier make, as an --out that an interrupted make must leave exactly."""
    out = tmp_path_factory.mktemp("old-set")
    ended = finish(envsolver("make", "--gpu", "a100", "--offline", "--out", str(out), cache=out.with_name("cache")))
    assert ended.code == 0, ended.stderr
    return out


def _out_from(old_set: Path, where: Path) -> tuple[Path, dict[str, bytes]]:
    shutil.copytree(old_set, where)
    return where, files(where)


def _broken_channel(where: Path, case: str) -> Path:
    if case == "empty-dir":
        where.mkdir(parents=True)
    elif case == "corrupt-repodata":
        for subdir in ("linux-64", "noarch"):
            (where / subdir).mkdir(parents=True)
            (where / subdir / "repodata.json").write_text('{"info": {"subdir": "' + subdir + '"}, "packages": {"a')
    return where


@pytest.mark.parametrize("runs", COUNTS)
@pytest.mark.parametrize("case", ["missing", "empty-dir", "corrupt-repodata"])
def test_make_against_an_unreadable_channel_exits_2_every_time(
    old_set: Path, tmp_path: Path, case: str, runs: int
) -> None:
    channel = _broken_channel(tmp_path / "nonexistent" / "conda-forge", case)
    out, before = _out_from(old_set, tmp_path / "out")
    seen = []
    for run in range(runs):
        ended = finish(
            envsolver("make", "--gpu", "a100", "--channel", channel.as_uri(), "--out", str(out), cache=tmp_path / "c")
        )
        seen.append((run, ended.code, ended.unclean()))
        assert ended.code == 2 and "error: could not fetch repodata" in ended.stderr, (seen, ended.stderr)
        assert "Check that each --channel directory is a conda channel" in ended.stderr
        assert not ended.unclean(), (seen, ended.stderr)
        assert files(out) == before


@pytest.mark.parametrize("runs", COUNTS)
def test_an_interrupted_make_writes_nothing(old_set: Path, held: HeldChannel, tmp_path: Path, runs: int) -> None:
    """SIGINT while make waits for repodata: the interrupt ends it, no panic, the old set stays exactly."""
    out, before = _out_from(old_set, tmp_path / "out")
    seen = []
    for run in range(runs):
        held.requested.clear()
        held.release.clear()
        make = envsolver(
            "make", "--gpu", "a100", "--channel", held.url("conda-forge"), "--out", str(out), cache=tmp_path / f"c{run}"
        )
        assert held.requested.wait(120), "make never asked for repodata"
        time.sleep(random.uniform(0.0, 0.3))
        make.send_signal(signal.SIGINT)
        held.release.set()  # the fetch that was cut off may now complete: its result must go nowhere
        ended = finish(make)
        seen.append((run, ended.code, ended.unclean()))
        assert interrupted(ended), (seen, ended.stderr)
        assert not ended.unclean(), (seen, ended.stderr)
        assert files(out) == before, seen


@pytest.mark.parametrize("how", ["abort", "segfault"])
def test_a_native_crash_in_rattler_ends_make_with_exit_2(old_set: Path, tmp_path: Path, how: str) -> None:
    out, before = _out_from(old_set, tmp_path / "out")
    site = str(crash_rattler(tmp_path / "site", how))
    ended = finish(
        envsolver(
            "make", "--gpu", "a100", "--offline", "--out", str(out), cache=tmp_path / "c", env={"PYTHONPATH": site}
        )
    )
    assert ended.code == 2, ended.stderr
    assert "error: rattler stopped without an answer while solving for linux-64 (killed by SIG" in ended.stderr
    assert "Traceback" not in ended.stderr and files(out) == before


@pytest.fixture(scope="module")
def big_lock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An explicit lock of 120 small packages (3,000 files): linking takes about a second, time to interrupt it."""
    root = tmp_path_factory.mktemp("big")
    channel = root / "channel"
    for i in range(120):
        build_package(channel, f"many{i}", "1.0", {f"share/many{i}/f{j}.txt": f"{i} {j}\n" * 20 for j in range(25)})
    (channel / "noarch").mkdir()
    solve.index_channel(channel)
    records = solve.solve(
        [f"many{i}" for i in range(120)], [ChannelSource(channel.as_uri(), channel.as_uri())], "linux-64", {}, root
    )
    lock = root / "conda-linux-64.lock"
    lock.write_text(explicit.render(records, "linux-64", "test", "test"))
    return lock


def _installed(prefix: Path) -> set[str]:
    return {p.name.rsplit("-", 2)[0] for p in (prefix / "conda-meta").glob("*.json")}


@pytest.mark.parametrize("runs", COUNTS)
def test_an_interrupted_install_stops_cleanly_and_the_next_one_completes(
    big_lock: Path, tmp_path: Path, runs: int
) -> None:
    """SIGINT once rattler has begun linking: the interrupt ends it cleanly; running the same command again (the
    fix the install messages give) completes the prefix."""
    seen = []
    for run in range(runs):
        prefix, cache = tmp_path / f"env{run}", tmp_path / f"cache{run}"
        command = ("install", str(big_lock), "-p", str(prefix), "--no-hook")
        install = envsolver(*command, cache=cache)
        while not (prefix / "share").exists() and install.poll() is None:  # the first package is being linked
            time.sleep(0.001)
        time.sleep(random.uniform(0.0, 0.05))
        install.send_signal(signal.SIGINT)
        ended = finish(install)
        linked = len(_installed(prefix))
        seen.append((run, ended.code, linked, ended.unclean()))
        assert interrupted(ended), (seen, ended.stderr)
        assert not ended.unclean(), (seen, ended.stderr)
        again = finish(envsolver(*command, cache=cache))
        assert again.code == 0, (seen, again.stderr)
        assert _installed(prefix) == {f"many{i}" for i in range(120)}
    assert any(linked < 120 for _, _, linked, _ in seen), f"no run was interrupted before linking ended: {seen}"


def test_a_native_crash_while_linking_ends_install_with_exit_2(big_lock: Path, tmp_path: Path) -> None:
    prefix, cache = tmp_path / "env", tmp_path / "cache"
    command = ("install", str(big_lock), "-p", str(prefix), "--no-hook")
    site = str(crash_rattler(tmp_path / "site", "abort"))
    ended = finish(envsolver(*command, cache=cache, env={"PYTHONPATH": site}))
    assert ended.code == 2, ended.stderr
    assert "rattler stopped without an answer while installing into" in ended.stderr
    assert "it picks up where it stopped" in ended.stderr and "Traceback" not in ended.stderr
    assert finish(envsolver(*command, cache=cache)).code == 0
    assert len(_installed(prefix)) == 120


def test_keyboard_interrupt_in_solve_kills_the_worker(
    held: HeldChannel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process: SIGINT while solve() waits raises KeyboardInterrupt there, after the worker was killed and
    reaped; solve() never returns a result for an interrupted call."""
    worker_call.discard_spare()  # a worker an earlier test left waiting would take this call (tests/test_prestart.py)
    started: list[subprocess.Popen[bytes]] = []

    class Recorded(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(worker_call.subprocess, "Popen", Recorded)

    held.interrupt_when_asked()
    source = ChannelSource(held.url("conda-forge"), held.url("conda-forge"))
    with pytest.raises(KeyboardInterrupt):
        solve.solve(["python"], [source], "linux-64", {"__unix": "0"}, tmp_path)
    # Reaped before KeyboardInterrupt went on: killed while it waited (-SIGKILL), or, where the machine was slow
    # enough that the worker had already answered, exited; either way no worker is left and no result returned.
    assert len(started) == 1 and started[0].returncode in (-signal.SIGKILL, 0)
    assert worker_call._spare is None
