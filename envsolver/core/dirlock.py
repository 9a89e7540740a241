"""An advisory lock that serialises the writers of one directory: flock on a lock file in it.

The lock file is opened for writing: Linux NFS clients emulate flock with POSIX locks, which need that.
The holder removes the file before it lets go, so no lock file stays behind after a run that ends; a
waiter that then locks the removed file (or finds a new one in its place) opens the path again. A lock
file left by a killed holder is no longer locked by anyone and is simply taken over.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

POLL_S = 0.05


class DirLock:
    """A held lock; release() removes the lock file, then unlocks it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    def release(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass  # a lock file that stays is taken over by the next writer
        finally:
            os.close(self._fd)


def acquire(
    path: Path,
    wait_s: float,
    on_wait: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DirLock:
    """Lock `path`, waiting up to `wait_s` seconds; `on_wait` is called once when another holder makes us
    wait. Raises TimeoutError when the wait runs out, OSError when the lock file cannot be opened or locked."""
    deadline = clock() + wait_s
    waiting = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        try:
            while not _try_lock(fd):
                if not waiting and on_wait is not None:
                    on_wait()
                waiting = True
                if clock() >= deadline:
                    raise TimeoutError(f"{str(path)!r} stayed locked for {wait_s:g} s")
                sleep(POLL_S)
            if _still_at(fd, path):
                return DirLock(path, fd)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _still_at(fd: int, path: Path) -> bool:
    """True when `path` still names the file `fd` locked (the previous holder did not remove it meanwhile)."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)
