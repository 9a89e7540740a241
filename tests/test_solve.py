"""envsolver/lock/solve.py, the worker's parent side (worker_call.py) and the worker (rattler_worker.py): answers,
errors, crashes, requests.

The process-level cases (whole `envsolver` runs, interrupts, repeated runs) are in tests/test_rattler_abort.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envsolver.core.errors import EnvsolverError, WorkerCrashed
from envsolver.lock import rattler_worker, solve, worker_call
from envsolver.lock.solve import ChannelSource, ChannelsUnreachable, SolveFailed
from tests.conda_packages import build_channel
from tests.test_rattler_abort import CRASHES, crash_rattler

UNIX = {"__unix": "0"}


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_channel(tmp_path_factory.mktemp("solve"))


def _broken(tmp_path: Path, case: str) -> Path:
    """A channel rattler cannot read: missing, a directory without repodata, a repodata.json cut short."""
    where = tmp_path / "broken"
    if case == "empty-dir":
        where.mkdir()
    elif case == "corrupt-repodata":
        for subdir in ("linux-64", "noarch"):
            (where / subdir).mkdir(parents=True)
            (where / subdir / "repodata.json").write_text('{"info": {"subdir": "' + subdir + '"}, "packages": {')
    return where


def test_solve_names_records_by_their_public_url(channel: Path, tmp_path: Path) -> None:
    public = "https://conda.example.org/tiny"
    records = solve.solve(["tiny-app"], [ChannelSource(public, channel.as_uri())], "linux-64", UNIX, tmp_path)
    assert [r.name for r in records] == ["tiny-app", "tiny-data", "tiny-lib"]
    app = records[0]
    assert app.url == f"{public}/linux-64/tiny-app-0.3-h0_0.tar.bz2"
    assert (app.channel, app.version, app.build, app.subdir) == (public, "0.3", "h0_0", "linux-64")
    assert app.depends == ("tiny-lib >=1", "tiny-data") and len(app.sha256) == 64 and app.size


def test_no_solution_is_solve_failed(channel: Path, tmp_path: Path) -> None:
    with pytest.raises(SolveFailed, match="no solution for linux-64") as info:
        solve.solve(["tiny-app >=9"], [ChannelSource(channel.as_uri(), channel.as_uri())], "linux-64", UNIX, tmp_path)
    assert info.value.exit_code == 1
    assert str(info.value).startswith("no solution for linux-64:\nCannot solve the request")  # rattler's own text


def test_nothing_in_the_working_directory_stands_in_for_rattler(
    channel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("rattler", "json", "runpy"):
        (tmp_path / f"{name}.py").write_text("raise SystemExit('imported from the working directory')\n")
    monkeypatch.chdir(tmp_path)
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    assert len(solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "cache")) == 3


@pytest.mark.parametrize("case", ["missing", "empty-dir", "corrupt-repodata"])
def test_unreadable_channel_is_unreachable(tmp_path: Path, case: str) -> None:
    where = _broken(tmp_path, case)
    source = ChannelSource(where.as_uri(), where.as_uri())
    with pytest.raises(ChannelsUnreachable, match="could not fetch repodata") as info:
        solve.solve(["python"], [source], "linux-64", UNIX, tmp_path / "cache")
    assert info.value.exit_code == 2
    assert str(where) in str(info.value) or "parse" in str(info.value)


def test_install_failure_names_the_prefix(channel: Path, tmp_path: Path) -> None:
    records = solve.solve(["tiny-lib"], [ChannelSource(channel.as_uri(), channel.as_uri())], "linux-64", UNIX, tmp_path)
    from envsolver.lock.lockfile import LockEntry

    lib = records[0]
    entry = LockEntry(lib.name, lib.version, lib.build, lib.subdir, "linux-64", lib.url, None, lib.sha256, lib.depends)
    missing = (tmp_path / "nowhere" / lib.file_name).as_uri()
    with pytest.raises(EnvsolverError, match=r"(?s)installing into .* failed: .*picks up where it stopped") as info:
        solve.install_records([(entry, missing)], tmp_path / "env", "linux-64", tmp_path / "pkgs")
    assert info.value.exit_code == 2


@pytest.mark.parametrize("how", sorted(CRASHES))
def test_a_native_crash_in_rattler_is_a_clean_error(
    channel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(crash_rattler(tmp_path / "site", how)))
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    with pytest.raises(WorkerCrashed) as info:
        solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "cache")
    message = str(info.value)
    assert info.value.exit_code == 2
    assert f"rattler stopped without an answer while solving for linux-64 (killed by {CRASHES[how][1]})" in message
    assert message.endswith("Run the same command again; if it stops the same way, report it.")


def test_the_fix_after_a_crash_works(channel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The crash message says to run the command again: once the cause is gone, the same call succeeds."""
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    monkeypatch.setenv("PYTHONPATH", str(crash_rattler(tmp_path / "site", "abort")))
    with pytest.raises(WorkerCrashed):
        solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "cache")
    monkeypatch.delenv("PYTHONPATH")
    assert len(solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "cache")) == 3


def _worker(stdin: bytes) -> tuple[int, bytes, bytes]:
    """Run the worker as worker_call.py does: the request written, stdin kept open until the answer is in."""
    child = subprocess.Popen(
        worker_call.worker_command(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    child.stdin.write(stdin)
    child.stdin.flush()
    out = child.stdout.read()
    code = child.wait(timeout=60)
    child.stdin.close()
    errors = child.stderr.read()
    child.stdout.close()
    child.stderr.close()
    return code, out, errors


@pytest.mark.parametrize(
    "stdin",
    [b"\n", b"not json\n", b'{"op": "format-disk"}\n', b'{"op": "solve", "specs": "python"}\n', b"\xff\xfe\n"],
    ids=["empty", "not-json", "unknown-op", "wrong-type", "not-utf8"],
)
def test_the_worker_answers_a_bad_request_and_exits_0(stdin: bytes) -> None:
    code, out, errors = _worker(stdin)
    assert code == 0, errors
    answer = worker_call.read_answer(out)
    assert answer is not None and answer["ok"] is False and answer["kind"] == "bad-request"
    assert b"Traceback" not in errors


def test_a_bad_request_is_a_bug_not_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeError, match="refused envsolver's request"):
        solve._failure({"ok": False, "kind": "bad-request", "message": "'specs' must be list"})


def test_the_worker_keeps_stdout_for_its_answer(channel: Path, tmp_path: Path) -> None:
    request = {"op": "index", "path": str(channel)}
    code, out, errors = _worker(json.dumps(request).encode() + b"\n")
    assert code == 0 and out.count(b"\n") == 1, (out, errors)
    assert worker_call.read_answer(out) == {"ok": True, "warnings": [], "next": False}


def test_the_worker_answers_solves_one_line_each_and_leaves_when_its_stdin_closes(
    channel: Path, tmp_path: Path
) -> None:
    """After a solve that succeeded the worker says so ("next") and waits: it answers the next request, one line
    each, and when its stdin closes while it waits (its parent gone) it exits by itself, EXIT_ORPHANED."""
    request = {
        "op": "solve",
        "channels": [channel.as_uri()],
        "specs": ["tiny-app"],
        "platforms": ["linux-64", "noarch"],
        "virtual_packages": [],
        "cache_dir": str(tmp_path),
        "timeout_s": 60,
    }
    child = subprocess.Popen(
        worker_call.worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        answers = []
        for _ in range(2):
            child.stdin.write(json.dumps(request).encode() + b"\n")
            child.stdin.flush()
            answers.append(worker_call.read_answer(child.stdout.readline()))
        assert all(a is not None and a["ok"] is True and a["next"] is True for a in answers), answers
        assert answers[0] == answers[1] and child.poll() is None, "the same answer twice, and it waits again"
        child.stdin.close()
        assert child.wait(timeout=30) == rattler_worker.EXIT_ORPHANED, child.stderr.read()
        assert child.stdout.read() == b"", "nothing after the answers"
    finally:
        child.kill()
        child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def test_the_worker_leaves_when_its_parent_is_gone(tmp_path: Path) -> None:
    """Its stdin closing (a parent killed, even by SIGKILL) ends the worker instead of leaving it running."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # never accepted, never answered: a fetch that waits
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/channel"
    request = {
        "op": "solve",
        "channels": [url],
        "specs": ["python"],
        "platforms": ["linux-64", "noarch"],
        "virtual_packages": [],
        "cache_dir": str(tmp_path),
        "timeout_s": 300,
    }
    child = subprocess.Popen(
        worker_call.worker_command(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(request).encode() + b"\n")
        child.stdin.flush()
        time.sleep(1.0)  # the worker is waiting for the silent channel now
        assert child.poll() is None
        child.stdin.close()
        assert child.wait(timeout=30) == rattler_worker.EXIT_ORPHANED
        assert child.stdout.read() == b""
        child.stdout.close()
    finally:
        child.kill()
        child.wait()
        silent.close()


# The answer and the request are parsed; any text gets an answer or a clean refusal.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=30,
)
TEXT = st.text(max_size=12)
# A well-formed value for each key of a solved record, mixed below with any JSON value.
WELL_FORMED: dict[str, st.SearchStrategy[Any]] = {
    "name": TEXT,
    "version": TEXT,
    "build": TEXT,
    "build_number": st.integers(min_value=0),
    "subdir": TEXT,
    "url": TEXT,
    "md5": TEXT,
    "sha256": TEXT,
    "size": st.none() | st.integers(min_value=0),
    "depends": st.lists(TEXT, max_size=3),
    "constrains": st.lists(TEXT, max_size=3),
    "noarch": st.sampled_from([None, "python", "generic"]),
}
RECORD_KEYS = list(WELL_FORMED)


def _record_like() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({k: v | JSON for k, v in WELL_FORMED.items()}, optional={"extra": JSON})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | JSON.map(lambda d: json.dumps(d).encode()))
def test_read_answer_returns_an_answer_or_none(raw: bytes) -> None:
    answer = worker_call.read_answer(raw)
    assert answer is None or (isinstance(answer, dict) and isinstance(answer["ok"], bool))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(JSON, st.fixed_dictionaries({"records": st.lists(_record_like(), max_size=3)})))
def test_records_from_any_answer_are_records_or_worker_crashed(doc: Any) -> None:
    if not isinstance(doc, dict):
        doc = {"records": doc}
    try:
        records = solve.records_from_answer(doc, [])
    except WorkerCrashed as exc:
        assert exc.exit_code == 2 and str(exc).endswith("Run the same command again.")
        return
    assert sorted(r.name for r in records) == sorted(d["name"] for d in doc["records"])
    assert [r.name for r in records] == sorted(r.name for r in records)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.text(max_size=200)
    | JSON.map(json.dumps)
    | st.fixed_dictionaries({"op": st.sampled_from(rattler_worker.OPS)}, optional={k: JSON for k in RECORD_KEYS}).map(
        json.dumps
    )
)
def test_parse_request_returns_a_request_or_bad_request(text: str) -> None:
    try:
        request = rattler_worker.parse_request(text)
    except rattler_worker.BadRequest as exc:
        assert str(exc)
        return
    assert request["op"] in rattler_worker.OPS


# --- locked packages: what an existing lock keeps (lock/keep.py) -------------------------------------------------


@pytest.fixture(scope="module")
def two_libs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-lib 1.0 (which needs tiny-data) and tiny-lib 1.1 (which needs nothing) beside tiny-app, which needs
    tiny-lib: a fresh solve takes 1.1 and no tiny-data."""
    from tests.conda_packages import build_package

    channel = tmp_path_factory.mktemp("two-libs") / "channel"
    build_package(channel, "tiny-lib", "1.0", {"lib/tiny.txt": "1.0\n"}, depends=("tiny-data",))
    build_package(channel, "tiny-lib", "1.1", {"lib/tiny.txt": "1.1\n"})
    build_package(channel, "tiny-data", "2.1", {"share/tiny/data.txt": "data\n"})
    build_package(channel, "tiny-app", "0.3", {"bin/tiny-app": "#!/bin/sh\n"}, depends=("tiny-lib >=1",))
    (channel / "noarch").mkdir(exist_ok=True)
    solve.index_channel(channel)
    return channel


def _old_lib(channel: Path) -> solve.Locked:
    import hashlib

    archive = channel / "linux-64" / "tiny-lib-1.0-h0_0.tar.bz2"
    return solve.Locked("tiny-lib", "linux-64", archive.name, hashlib.sha256(archive.read_bytes()).hexdigest(), "")


def _solved(channel: Path, tmp_path: Path, locked: tuple[solve.Locked, ...]) -> dict[str, str]:
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    records = solve.solve(["tiny-app"], [source], "linux-64", UNIX, tmp_path / "cache", locked=locked)
    return {r.name: r.version for r in records}


def test_a_locked_package_is_kept_with_the_channels_own_record(two_libs: Path, tmp_path: Path) -> None:
    assert _solved(two_libs, tmp_path, ()) == {"tiny-app": "0.3", "tiny-lib": "1.1"}, "a fresh solve: the newest"
    kept = _solved(two_libs, tmp_path, (_old_lib(two_libs),))
    assert kept["tiny-lib"] == "1.0", f"the locked 1.0 is preferred over the newer 1.1: {kept}"
    assert kept.get("tiny-data") == "2.1", (
        "the request names the locked package by file and hash only; tiny-data comes in because the worker passed "
        f"the channel's own record of tiny-lib 1.0, with its depends: {kept}"
    )


@pytest.mark.parametrize(
    "change",
    [{"sha256": "0" * 64}, {"file_name": "tiny-lib-1.0-h0_0.conda"}, {"subdir": "noarch"}],
    ids=["another-archive", "another-file", "another-subdir"],
)
def test_a_locked_package_the_channels_do_not_hold_is_solved_anew(
    two_libs: Path, tmp_path: Path, change: dict[str, str]
) -> None:
    import dataclasses

    gone = dataclasses.replace(_old_lib(two_libs), **change)
    assert _solved(two_libs, tmp_path, (gone,))["tiny-lib"] == "1.1", f"{change}: not the channel's archive, not kept"


def test_the_answer_counts_the_locked_records_found(two_libs: Path, tmp_path: Path) -> None:
    old = _old_lib(two_libs)
    locked = [[old.name, old.subdir, old.file_name, old.sha256, old.md5], ["tiny-x", "linux-64", "x.conda", "", ""]]
    request = {
        "op": "solve", "channels": [two_libs.as_uri()], "specs": ["tiny-app"], "platforms": ["linux-64", "noarch"],
        "virtual_packages": [], "cache_dir": str(tmp_path), "timeout_s": 60,
        "locked": locked,
    }  # fmt: skip
    child = subprocess.Popen(
        worker_call.worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(request).encode() + b"\n")
        child.stdin.flush()
        answer = worker_call.read_answer(child.stdout.readline())
    finally:
        child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    assert answer is not None and answer["ok"] is True, answer
    assert answer["kept"] == 1, f"tiny-lib 1.0 found, tiny-x (in no channel) not: {answer.get('kept')}"


@pytest.mark.parametrize(
    "locked",
    ["tiny-lib", [["tiny-lib", "linux-64", "f.conda", ""]], [["", "linux-64", "f.conda", "", ""]], [[1, 2, 3, 4, 5]]],
    ids=["not-a-list", "four-fields", "no-name", "not-strings"],
)
def test_a_malformed_locked_field_is_a_bad_request(locked: object) -> None:
    request = {
        "op": "solve", "channels": [], "specs": [], "platforms": [], "virtual_packages": [], "cache_dir": "/tmp",
        "timeout_s": 1, "locked": locked,
    }  # fmt: skip
    with pytest.raises(rattler_worker.BadRequest, match="'locked' must be a list of"):
        rattler_worker.parse_request(json.dumps(request))


def test_a_request_without_locked_locks_nothing() -> None:
    request = {
        "op": "solve", "channels": [], "specs": [], "platforms": [], "virtual_packages": [], "cache_dir": "/tmp",
        "timeout_s": 1,
    }  # fmt: skip
    assert rattler_worker.parse_request(json.dumps(request))["locked"] == [], "absent: no package is preferred"
