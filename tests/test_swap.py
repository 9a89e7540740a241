"""writers/swap.py: a commit SIGKILLed before each of its file system calls in turn, and its repair SIGKILLed the same
way, leaves files that read one whole set (the old or the new) to a reader that knows nothing of envsolver, and the
repair then leaves that set as plain files. scripts/race_make.py kills real `make` runs at random moments
(tests/test_outputs.py); this takes every moment there is, one call at a time."""

from __future__ import annotations

import errno
import functools
import os
import signal
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from envsolver.lock.writers import fileset, swap
from envsolver.lock.writers.setmark import MEMBER

COMMAND = "envsolver make --gpu a100"
# The old set has a lock for aarch64 that the new one drops, and the new one a pip companion the old one lacks.
OLD = {
    "environment.yml": "# old\nname: old\n",
    "conda-lock.yml": "# old\nversion: 1\n",
    "conda-linux-64.lock": "# old\n@EXPLICIT\n",
    "conda-linux-aarch64.lock": "# old\n@EXPLICIT\n",
}
NEW = {
    "environment.yml": "# new\nname: new\n",
    "conda-lock.yml": "# new\nversion: 1\n",
    "conda-linux-64.lock": "# new\n@EXPLICIT\n",
    "conda-linux-64.pip.txt": "# new\ndeepspeed==0.19.8\n",
}
USER_FILE = ("notes.txt", "mine\n")
# Every call by which a commit or its repair changes the file system (shutil.rmtree's included, os.open's file
# creations, the fsyncs that order them).
CALLS = ("mkdir", "link", "open", "symlink", "replace", "unlink", "rmdir", "fsync", "chmod")


def _read_as_cat(out: Path) -> dict[str, str]:
    """The set's files as a reader who knows nothing of envsolver reads them: through links, a link to nothing
    being no file."""
    return {p.name: p.read_text() for p in sorted(out.iterdir()) if MEMBER.fullmatch(p.name) and p.is_file()}


def _killed_at(step: int, work: Callable[[], object]) -> bool:
    """Run WORK in a forked child that SIGKILLs itself just before its STEP-th file system call (CALLS); True when
    it was killed, False when it finished first."""
    pid = os.fork()
    if pid == 0:  # the child: count the calls, die at the chosen one
        try:
            count = [0]
            for name in CALLS:
                real = getattr(os, name)

                def counted(*args: object, _real: Callable[..., object] = real, **kwargs: object) -> object:
                    count[0] += 1
                    if count[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return _real(*args, **kwargs)

                setattr(os, name, counted)
            work()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def _start(out: Path) -> int:
    """OUT with the old set (its conda-lock.yml of mode 0600) and the user's file; the inode of conda-lock.yml."""
    out.mkdir()
    fileset.commit(out, OLD, force=False, command=COMMAND)
    (out / USER_FILE[0]).write_text(USER_FILE[1])
    (out / "conda-lock.yml").chmod(0o600)
    return (out / "conda-lock.yml").stat().st_ino


def test_a_commit_killed_before_any_of_its_calls_leaves_one_whole_set(tmp_path: Path) -> None:
    """... and where it is the old set, the very files that were there (a hard link kept each: inode and mode)."""
    old, new = fileset.stamped_texts(OLD), fileset.stamped_texts(NEW)
    step, seen = 0, {"old": 0, "new": 0}
    while True:
        step += 1
        out = tmp_path / f"out-{step}"
        inode = _start(out)
        killed = _killed_at(step, functools.partial(fileset.commit, out, NEW, force=False, command=COMMAND))
        found = _read_as_cat(out)
        assert found in (old, new), f"killed before call {step}: a mixed set {found}"
        seen["old" if found == old else "new"] += 1
        fileset.repair(out, COMMAND)
        assert _read_as_cat(out) == found, f"killed before call {step}: the repair changed the set"
        entries = sorted(p.name for p in out.iterdir())
        assert entries == sorted([*found, USER_FILE[0]]), f"killed before call {step}: left {entries}"
        assert not any(p.is_symlink() for p in out.iterdir()), f"killed before call {step}: links left"
        assert (out / USER_FILE[0]).read_text() == USER_FILE[1]
        if found == old:
            kept = (out / "conda-lock.yml").stat()
            assert (kept.st_ino, stat.S_IMODE(kept.st_mode)) == (inode, 0o600), f"killed before call {step}"
        if not killed:
            break
    assert step > 30 and seen["old"] > 5 and seen["new"] > 5, (step, seen)  # the kills fell on both sides


def test_a_repair_killed_before_any_of_its_calls_keeps_the_set_the_commit_left(tmp_path: Path) -> None:
    """A commit killed with links reading the old set, and one killed with links reading the new set; the repair
    of each is killed before its first call, then (on what that left) before its second, and so on."""
    old = fileset.stamped_texts(OLD)
    chosen: dict[str, Path] = {}
    step = 0
    while len(chosen) < 2:
        out = tmp_path / f"out-{(step := step + 1)}"
        _start(out)
        assert _killed_at(step, functools.partial(fileset.commit, out, NEW, force=False, command=COMMAND)), chosen
        if any(p.is_symlink() for p in out.iterdir()):
            chosen.setdefault("old" if _read_as_cat(out) == old else "new", out)
    for side, out in chosen.items():
        left = _read_as_cat(out)
        repairs = 0
        while _killed_at(repairs := repairs + 1, functools.partial(fileset.repair, out, COMMAND)):
            assert _read_as_cat(out) == left, f"links to the {side} set, repair killed at {repairs}: the set changed"
        assert _read_as_cat(out) == left and not any(p.is_symlink() for p in out.iterdir()), side


def test_where_hard_links_fail_the_old_file_is_copied_with_its_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    _start(out)
    (out / "environment.yml").chmod(0o640)

    def no_links(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "link", no_links)
    kept = tmp_path / "kept"
    swap._keep_old(out / "environment.yml", kept)
    assert kept.read_bytes() == (out / "environment.yml").read_bytes()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640


def test_a_fifo_at_a_member_is_refused_not_waited_on(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "virtual-packages.yml")
    (out / swap.SWAP / "old").mkdir(parents=True)
    with pytest.raises(OSError, match=r"virtual-packages\.yml is a FIFO"):
        swap._keep_old(out / "virtual-packages.yml", out / swap.SWAP / "old" / "virtual-packages.yml")


def test_a_fifo_at_a_members_name_ends_the_commit_at_once_with_its_name(tmp_path: Path) -> None:
    from envsolver.core.errors import BadInputError

    out = tmp_path / "out"
    _start(out)
    os.unlink(out / "environment.yml")
    os.mkfifo(out / "environment.yml")
    with pytest.raises(BadInputError) as info:
        fileset.commit(out, NEW, force=True, command=COMMAND)
    assert str(info.value).startswith(f"cannot write to {str(out / 'environment.yml')!r}: it is a FIFO, not a file; ")
    assert "nothing was written" in str(info.value)
