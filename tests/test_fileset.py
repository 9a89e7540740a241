"""The file set writer: one commit per set (swapped in through writers/swap.py), the journal of an earlier envsolver
that repairs its interrupted commit, the directory lock."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shlex
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envsolver.core import atomic, dirlock
from envsolver.core.errors import BadInputError
from envsolver.lock.writers import fileset, setmark, swap
from envsolver.lock.writers.files import Outcome, stamp

COMMAND = "envsolver make --gpu a100"
OLD = {
    "environment.yml": "# old\nname: old\n",
    "conda-lock.yml": "# old\nversion: 1\n",
    "conda-linux-64.lock": "# old\n@EXPLICIT\n",
}
NEW = {name: text.replace("old", "new") for name, text in OLD.items()}


def commit(out: Path, texts: dict[str, str], force: bool = False, **kwargs: object) -> dict[Path, Outcome]:
    return fileset.commit(out, texts, force=force, command=COMMAND, **kwargs)  # type: ignore[arg-type]


def contents(out: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(out.iterdir())}


def stamped(texts: dict[str, str]) -> dict[str, str]:
    """The files a commit of TEXTS leaves: each with the set's line and its hash line."""
    return dict(sorted(fileset.stamped_texts(texts).items()))


def legacy(texts: dict[str, str]) -> dict[str, str]:
    """The files an envsolver from before the swap wrote: the hash line alone."""
    return {name: stamp(text) for name, text in sorted(texts.items())}


def interrupted(out: Path, renamed: int) -> None:
    """The state an envsolver from before the swap left when killed between renames: OLD committed, NEW in
    temps and the journal, the first `renamed` members already renamed into place."""
    commit(out, OLD)
    for name, text in NEW.items():
        (out / fileset.temp_name(name)).write_text(stamp(text))
    (out / fileset.JOURNAL).write_text(fileset.journal_text(tuple(NEW)))
    for name in list(NEW)[:renamed]:
        os.replace(out / fileset.temp_name(name), out / name)


def test_commit_writes_the_set_then_leaves_it_unchanged(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert set(commit(out, OLD).values()) == {Outcome.WRITTEN}
    assert contents(out) == stamped(OLD)
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = commit(out, OLD)
    assert again == {out / name: Outcome.UNCHANGED for name in OLD}
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == mtimes


def test_a_change_to_one_member_rewrites_every_member_with_the_new_sets_line(tmp_path: Path) -> None:
    """Each member names its set (setmark.py), so a set that changes anywhere is written anew as a whole."""
    commit(tmp_path, OLD)
    texts = {**OLD, "conda-lock.yml": NEW["conda-lock.yml"]}
    result = commit(tmp_path, texts)
    assert set(result.values()) == {Outcome.WRITTEN}, result
    assert contents(tmp_path) == stamped(texts)
    idents = {setmark.parse(text) for text in contents(tmp_path).values()}
    assert idents == {(setmark.set_id(texts), tuple(texts))}, idents


@pytest.mark.parametrize("renamed", [0, 1, 2, 3])
def test_repair_rolls_an_interrupted_commit_of_an_earlier_envsolver_forward(tmp_path: Path, renamed: int) -> None:
    interrupted(tmp_path, renamed)
    fileset.repair(tmp_path)
    assert contents(tmp_path) == legacy(NEW)


def test_temporaries_without_a_journal_are_discarded(tmp_path: Path) -> None:
    commit(tmp_path, OLD)
    for name, text in NEW.items():
        (tmp_path / fileset.temp_name(name)).write_text(stamp(text)[:7])  # killed while writing them
    (tmp_path / (fileset.JOURNAL + ".new")).write_text("envsolver-commit 1\n")
    fileset.repair(tmp_path)
    assert contents(tmp_path) == stamped(OLD)


def test_the_next_commit_completes_an_interrupted_one_first(tmp_path: Path) -> None:
    interrupted(tmp_path, renamed=1)
    commit(tmp_path, {"environment.yml": "# third\nname: third\n"})
    # The interrupted set was completed first; the third set, environment.yml alone, then replaced all of it.
    assert contents(tmp_path) == stamped({"environment.yml": "# third\nname: third\n"})


def test_a_journal_envsolver_did_not_write_is_refused_with_the_fix(tmp_path: Path) -> None:
    commit(tmp_path, OLD)
    (tmp_path / fileset.JOURNAL).write_text("envsolver-commit 1\n../../etc/passwd\n")
    before = contents(tmp_path)
    with pytest.raises(BadInputError, match=r"\.envsolver-commit.*rm ") as info:
        commit(tmp_path, NEW)
    assert repr(str(tmp_path / fileset.JOURNAL)) in str(info.value)
    assert contents(tmp_path) == before


@given(st.text(max_size=200))
def test_parse_journal_returns_member_names_or_raises_value_error(text: str) -> None:
    try:
        written, removed = fileset.parse_journal(text)
    except ValueError:
        return
    names = written + removed
    assert names and all(fileset.MEMBER.fullmatch(n) for n in names) and len(set(names)) == len(names)


@given(
    st.lists(st.sampled_from([*OLD, "conda-osx-arm64.lock", "conda-linux-aarch64.lock"]), max_size=5, unique=True),
    st.integers(0, 5),
)
def test_journal_text_round_trips(names: list[str], split: int) -> None:
    written, removed = tuple(names[:split]), tuple(names[split:])
    if names:
        assert fileset.parse_journal(fileset.journal_text(written, removed)) == (written, removed)


@pytest.mark.parametrize("name", ["../environment.yml", "/etc/passwd", "conda-$(id).lock", ".envsolver.lock", ""])
def test_a_member_name_outside_the_grammar_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(BadInputError, match="not a file envsolver writes"):
        commit(tmp_path / "out", {name: "# x\n"})
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_a_symlink_planted_at_a_temporary_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / fileset.temp_name("environment.yml")).symlink_to(victim)
    commit(out, OLD)
    assert victim.read_text() == "precious\n"
    assert contents(out) == stamped(OLD)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.dictionaries(st.sampled_from(list(OLD)), st.text(st.characters(blacklist_categories=["Cs"]), max_size=30)),
        min_size=1,
        max_size=4,
    )
)
def test_every_commit_leaves_exactly_its_texts_and_no_litter(tmp_path: Path, sets: list[dict[str, str]]) -> None:
    """Each commit leaves exactly its own set: members of an earlier set that this one lacks are removed."""
    out = tmp_path / f"out-{time.monotonic_ns()}"
    for texts in sets:
        commit(out, texts, force=True)
        expected = fileset.stamped_texts(texts)
        if out.exists():
            found = {p.name: p.read_bytes().decode() for p in out.iterdir()}
            assert found == dict(sorted(expected.items()))


def _hold(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_second_writer_waits_for_the_first(tmp_path: Path) -> None:
    fd = _hold(tmp_path / fileset.LOCK)
    notices: list[str] = []
    threading.Timer(0.3, os.close, [fd]).start()
    started = time.monotonic()
    assert set(commit(tmp_path, OLD, wait_s=10, on_wait=notices.append).values()) == {Outcome.WRITTEN}
    assert time.monotonic() - started >= 0.25
    assert len(notices) == 1 and repr(str(tmp_path)) in notices[0]
    assert contents(tmp_path) == stamped(OLD)


def test_a_writer_that_waits_too_long_fails_cleanly(tmp_path: Path) -> None:
    fd = _hold(tmp_path / fileset.LOCK)
    try:
        with pytest.raises(BadInputError, match=r"another envsolver .* --out") as info:
            commit(tmp_path, OLD, wait_s=0.2)
    finally:
        os.close(fd)
    assert repr(str(tmp_path)) in str(info.value)
    assert [p.name for p in tmp_path.iterdir()] == [fileset.LOCK]


def test_a_lock_file_left_by_a_killed_run_is_reused_and_removed(tmp_path: Path) -> None:
    (tmp_path / fileset.LOCK).write_text("")
    commit(tmp_path, OLD)
    assert contents(tmp_path) == stamped(OLD)


def test_a_directory_in_a_members_place_is_named_with_a_fix(tmp_path: Path) -> None:
    (tmp_path / "environment.yml").mkdir()
    with pytest.raises(BadInputError, match=r"environment\.yml'?: a directory is in the way.*--out") as info:
        commit(tmp_path, OLD)
    assert repr(str(tmp_path / "environment.yml")) in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["environment.yml"]


def test_signals_that_come_while_held_arrive_after(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    came: list[int] = []
    previous = signal.signal(signal.SIGHUP, lambda signum, _frame: came.append(signum))
    try:
        with fileset.signals_held():
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.01)
            assert came == []
        assert came == [signal.SIGHUP]
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("envsolver-commit 1\nenvironment.yml", "it does not end with a newline"),  # a journal cut mid-write
        ("envsolver-commit 2\nenvironment.yml\n", "its first line is not 'envsolver-commit 1'"),  # another format
        ("\nenvironment.yml\n", "its first line is not 'envsolver-commit 1'"),
        ("envsolver-commit 1\n", "it names no file"),
        ("envsolver-commit 1\nenvironment.yml\nremove environment.yml\n", "it names a file twice"),
    ],
)
def test_parse_journal_says_what_is_wrong(text: str, why: str) -> None:
    """Each refusal for its own reason (the journal's message reaches the user's fix), not a later one's."""
    with pytest.raises(ValueError) as info:
        fileset.parse_journal(text)
    assert str(info.value) == why


def _lock_fails(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    """The directory lock cannot be created (a read-only file system, EROFS; a full disk, ENOSPC): as root here,
    permissions cannot refuse it, so the lock's creation is made to fail with that error."""

    def refuse(path: Path, *args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(dirlock, "acquire", refuse)


def test_an_up_to_date_set_on_a_read_only_file_system_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit(tmp_path, OLD)
    _lock_fails(monkeypatch, errno.EROFS)
    assert commit(tmp_path, OLD) == {tmp_path / name: Outcome.UNCHANGED for name in OLD}


@pytest.mark.parametrize(
    ("code", "setup"),
    [
        (errno.EROFS, "changed"),  # something to write
        (errno.EROFS, "edited"),  # a member edited by hand: refused as unwritable, not a traceback
        (errno.EROFS, "journal"),  # an interrupted commit to finish first
        (errno.ENOSPC, "same"),  # not a read-only refusal: the set being current does not excuse it
    ],
)
def test_a_directory_that_cannot_be_locked_is_named_with_a_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, setup: str
) -> None:
    commit(tmp_path, OLD)
    if setup == "edited":
        (tmp_path / "environment.yml").write_text("name: mine\n")
    if setup == "journal":
        (tmp_path / fileset.JOURNAL).write_text(fileset.journal_text(("environment.yml",)))
    before = contents(tmp_path)
    _lock_fails(monkeypatch, code)
    with pytest.raises(BadInputError) as info:
        commit(tmp_path, NEW if setup == "changed" else OLD)
    assert str(info.value).startswith(f"cannot write to {str(tmp_path)!r}: ")
    assert "nothing was written" in str(info.value) and contents(tmp_path) == before


def test_repair_names_a_directory_it_cannot_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _lock_fails(monkeypatch, errno.EROFS)
    with pytest.raises(BadInputError, match=r"^cannot write to .*nothing was written"):
        fileset.repair(tmp_path, COMMAND)


def test_repair_waits_for_another_writer_then_says_so(tmp_path: Path) -> None:
    fd = _hold(tmp_path / fileset.LOCK)
    try:
        with pytest.raises(BadInputError) as info:
            fileset.repair(tmp_path, COMMAND, wait_s=0.2)
    finally:
        os.close(fd)
    assert str(info.value) == (
        f"another envsolver is still writing to {str(tmp_path)!r} after 0.2 s; nothing was repaired. "
        "Run this again when it has finished."
    )


def test_changes_in_a_directory_that_cannot_be_listed_names_it(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"^cannot write to .*missing"):
        fileset._changes(tmp_path / "missing", stamped(OLD), False, COMMAND)


@pytest.mark.parametrize("count", [1, 2])
def test_hand_edits_are_named_in_one_sentence(tmp_path: Path, count: int) -> None:
    commit(tmp_path, OLD)
    edited = sorted(OLD)[:count]
    for name in edited:
        (tmp_path / name).write_text("mine\n")
    with pytest.raises(BadInputError) as info:
        commit(tmp_path, NEW)
    names = ", ".join(repr(str(tmp_path / name)) for name in edited)
    verb, them = ("was", "it") if count == 1 else ("were", "them")
    assert str(info.value) == (
        f"{names} {verb} edited by hand (or not written by envsolver); nothing was written. Move your changes "
        f"elsewhere, or pass --force to overwrite {them}."
    )


def test_signals_are_blocked_in_a_thread_that_is_not_the_main_one() -> None:
    """Python sets handlers only in the main thread: elsewhere the thread's signal mask holds them."""
    import signal

    seen: dict[str, object] = {}

    def work() -> None:
        try:
            before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
            with fileset.signals_held():
                seen["inside"] = signal.pthread_sigmask(signal.SIG_BLOCK, [])
            seen["after"] = signal.pthread_sigmask(signal.SIG_BLOCK, [])
            seen["before"] = before
        except Exception as exc:  # a failure here must fail the test, not vanish with the thread
            seen["error"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert "error" not in seen, seen
    assert set(seen["inside"]) >= fileset.HELD  # type: ignore[call-overload]
    assert seen["after"] == seen["before"]


def _entries(directory: Path) -> list[str]:
    """DIR's entries, a symbolic link as NAME->TARGET, the lock file left out."""
    return sorted(
        f"{p.name}->{os.readlink(p)}" if p.is_symlink() else p.name
        for p in directory.iterdir()
        if p.name != fileset.LOCK
    )


def test_each_step_of_a_commit_is_made_durable_before_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What each directory held at each sync, in order (writers/swap.py's steps): a crash between any two syncs
    leaves a state whose files read one whole set, which the next run makes plain files again."""
    out = tmp_path / "out"
    commit(out, OLD)
    seen: list[tuple[str, list[str]]] = []
    real = atomic.fsync_dir

    def record(directory: Path) -> None:
        seen.append((str(directory.relative_to(out)), _entries(directory)))
        real(directory)

    monkeypatch.setattr(atomic, "fsync_dir", record)
    commit(out, NEW)
    names = sorted(OLD)
    links = sorted(f"{n}->{swap.link_target(n)}" for n in names)
    assert seen == [
        (".envsolver-swap/old", names),  # 1. the old files (hard links to them) and the new ones, written
        (".envsolver-swap/new", names),
        (".envsolver-swap", ["current->old", "new", "old"]),
        (".", sorted([".envsolver-swap", *links])),  # 2. every member a link that reads the old set
        (".envsolver-swap", ["current->new", "new", "old"]),  # 3. the commit: every member reads the new set
        (".", sorted([".envsolver-swap", *names])),  # 4. each renamed onto its link: plain files again
    ], seen
    assert contents(out) == stamped(NEW)


def _failing(monkeypatch: pytest.MonkeyPatch, name: str, code: int, function: str = "open") -> None:
    """os.FUNCTION fails with CODE for a path named NAME (as root here, permissions cannot refuse it); os.open only
    where it creates the file."""
    real = getattr(os, function)

    def fail(*args: object, **kwargs: object) -> object:
        creates = function != "open" or int(args[1]) & os.O_CREAT  # type: ignore[call-overload]
        if creates and any(Path(str(a)).name == name for a in args[:2]):
            raise OSError(code, os.strerror(code), str(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(os, function, fail)


def test_a_commit_that_cannot_write_its_new_files_leaves_the_set_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit(tmp_path, OLD)
    before = contents(tmp_path)
    _failing(monkeypatch, "conda-lock.yml", errno.ENOSPC)  # the new conda-lock.yml cannot be created
    with pytest.raises(BadInputError) as info:
        commit(tmp_path, NEW)
    assert str(info.value).startswith(f"cannot write to {str(tmp_path)!r}: no space is left on the device; ")
    assert "nothing was written" in str(info.value)
    assert contents(tmp_path) == before  # no copy, link or swap directory left behind


def test_a_commit_stopped_between_two_links_is_put_back_and_says_nothing_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second member's link cannot replace it: the first one's link is renamed back (its old file)."""
    commit(tmp_path, OLD)
    before = contents(tmp_path)
    _failing(monkeypatch, sorted(OLD)[1], errno.EIO, "replace")
    with pytest.raises(BadInputError) as info:
        commit(tmp_path, NEW)
    assert str(info.value).startswith(f"cannot write to {str(tmp_path)!r}: ")
    assert "nothing was written" in str(info.value)
    assert contents(tmp_path) == before
    assert not any(p.is_symlink() for p in tmp_path.iterdir())


def test_a_commit_that_cannot_put_back_says_each_file_reads_one_set_and_the_next_run_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second member's link fails, and so does every rename after it (the put-back's too): the files stay
    links, each reading the old set, and the message says so; the next run's repair makes them plain again."""
    commit(tmp_path, OLD)
    before = contents(tmp_path)
    real = os.replace
    calls: list[object] = []

    def failing(src: object, dst: object) -> None:
        calls.append(dst)
        if len(calls) >= 2:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(dst))
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(BadInputError) as info:
        commit(tmp_path, NEW)
    monkeypatch.undo()
    assert str(info.value) == (
        f"writing the files in {str(tmp_path)!r} stopped halfway (Input/output error); each of them reads the old "
        f"set through a link into {str(tmp_path / swap.SWAP)!r}. Fix the cause, then run the same envsolver make "
        "again: it makes them plain files first."
    )
    assert {name: (tmp_path / name).read_text() for name in OLD} == before  # through the link, as cat reads it
    fileset.repair(tmp_path, COMMAND)  # what the next run does first
    assert contents(tmp_path) == before
    assert not any(p.is_symlink() for p in tmp_path.iterdir())


def test_repair_names_a_directory_it_cannot_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.listdir

    def failing(path: object = ".") -> list[str]:
        if Path(str(path)) == tmp_path:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
        return real(path)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(os, "listdir", failing)
    with pytest.raises(BadInputError, match=rf"^cannot write to {re.escape(repr(str(tmp_path)))}: "):
        fileset.repair(tmp_path, COMMAND)


@pytest.mark.parametrize("exists", [True, False])
def test_permission_denied_names_the_directory_to_make_writable(tmp_path: Path, exists: bool) -> None:
    """The chmod names the output directory when it exists, else the parent it would be created in."""
    out = tmp_path / "out"
    if exists:
        out.mkdir()
    error = fileset._cannot_write(out, OSError(errno.EACCES, "Permission denied", str(out)), COMMAND)
    target = out if exists else tmp_path
    assert str(error).startswith(
        f"cannot write to {str(out)!r}: permission denied; nothing was written. Make it writable "
        f"(chmod u+w {target}), or pass --out a directory you can write to"
    )


@pytest.mark.parametrize(
    ("leaf", "suggested"),
    [
        ("cluster-a", "cluster-a"),  # the user's own name, under a directory they can write
        ("a" * 64, "a" * 64),  # at the limit: kept
        ("a" * 65, "env"),  # longer: a plain name instead
        ("é" * 32, "é" * 32),  # 64 bytes in UTF-8: kept
        ("é" * 33, "env"),
        ("..", "env"),
        ("bad\nname", "env"),
    ],
)
def test_the_out_fix_suggests_a_directory_the_user_can_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leaf: str, suggested: str
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    fix = fileset._out_fix("Pass --out another directory", Path("/readonly") / leaf, COMMAND)
    where = shlex.quote(str(tmp_path / "home" / "envs" / suggested))  # quoted where the shell needs it
    assert fix == f"Pass --out another directory, e.g.: {COMMAND} --out {where}"


def _suggest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: Path) -> str:
    """_out_fix with HOME and the temporary directory under tmp_path."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return fileset._out_fix("Lead", out, COMMAND)


def _taken(directory: Path) -> None:
    directory.mkdir(parents=True)
    (directory / "environment.yml").write_text("name: theirs\n")


@pytest.mark.parametrize(
    ("taken", "expected"),
    [
        ((), "home/envs/cluster-a"),
        (("",), "home/envs/cluster-a-2"),  # a non-empty directory is never suggested
        (("", "-2"), "home/envs/cluster-a-3"),
        (("", "-2", "-3", "-4", "-5", "-6", "-7", "-8"), "home/envs/cluster-a-9"),  # the last numbered one
        (("", "-2", "-3", "-4", "-5", "-6", "-7", "-8", "-9"), "tmp/envsolver/cluster-a"),  # then the temporary dir
    ],
)
def test_the_out_fix_numbers_a_taken_name_then_tries_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: tuple[str, ...], expected: str
) -> None:
    for suffix in taken:
        _taken(tmp_path / "home" / "envs" / f"cluster-a{suffix}")
    assert _suggest(tmp_path, monkeypatch, Path("/readonly/cluster-a")) == (
        f"Lead, e.g.: {COMMAND} --out {tmp_path / expected}"
    )


def test_the_out_fix_takes_an_empty_directory_and_never_the_failing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "home" / "envs" / "cluster-a").mkdir(parents=True)  # empty: fine to suggest
    assert _suggest(tmp_path, monkeypatch, Path("/readonly/cluster-a")).endswith(
        f"--out {tmp_path / 'home' / 'envs' / 'cluster-a'}"
    )
    failing = tmp_path / "home" / "envs" / "cluster-a"  # the directory that could not be written
    assert _suggest(tmp_path, monkeypatch, failing).endswith(f"--out {tmp_path / 'home' / 'envs' / 'cluster-a-2'}")


def test_the_out_fix_without_a_directory_to_suggest_is_the_lead_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for blocker in (tmp_path / "home", tmp_path / "tmp"):  # files, writable and executable: still not directories
        blocker.write_text("a file, so nothing can be created under it\n")
        blocker.chmod(0o755)
    assert _suggest(tmp_path, monkeypatch, Path("/readonly/cluster-a")) == "Lead."
