"""The directory lock: one holder at a time, the lock file removed on release, a waiter that locked a removed
file trying again, a bounded wait."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from envsolver.core import dirlock


def test_release_removes_the_lock_file(tmp_path: Path) -> None:
    path = tmp_path / ".lock"
    lock = dirlock.acquire(path, wait_s=1)
    assert path.exists()
    lock.release()
    assert not path.exists()


def test_a_waiter_never_shares_the_lock_after_the_holder_removes_its_file(tmp_path: Path) -> None:
    path = tmp_path / ".lock"
    first = dirlock.acquire(path, wait_s=1)
    got: list[dirlock.DirLock] = []
    waiter = threading.Thread(target=lambda: got.append(dirlock.acquire(path, wait_s=10)))
    waiter.start()
    threading.Event().wait(0.2)  # the waiter has opened the first holder's file and polls it
    first.release()  # removes that file, then unlocks it
    waiter.join(10)
    assert len(got) == 1
    second = got[0]
    # The waiter holds the file that is at the path now, so a third writer must wait for it.
    assert os.fstat(second._fd).st_ino == os.stat(path).st_ino
    with pytest.raises(TimeoutError):
        dirlock.acquire(path, wait_s=0.2)
    second.release()


def test_the_wait_is_bounded_and_reported_once(tmp_path: Path) -> None:
    path = tmp_path / ".lock"
    held = dirlock.acquire(path, wait_s=1)
    calls: list[None] = []
    now = [0.0]
    try:
        with pytest.raises(TimeoutError, match=r"stayed locked for 5 s"):
            dirlock.acquire(
                path,
                wait_s=5,
                on_wait=lambda: calls.append(None),
                clock=lambda: now[0],
                sleep=lambda s: now.__setitem__(0, now[0] + s),
            )
    finally:
        held.release()
    assert calls == [None]
    assert now[0] >= 5


def test_a_lock_file_that_is_a_symbolic_link_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    (tmp_path / ".lock").symlink_to(target)
    with pytest.raises(OSError):
        dirlock.acquire(tmp_path / ".lock", wait_s=0.1)
    assert target.read_text() == "keep\n"
