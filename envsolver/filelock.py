"""An advisory lock on a file (fcntl.flock), held for a block: runs that would write the same place take turns.

On Linux NFS clients flock is emulated with POSIX byte-range locks, which need the file open for writing: the
lock file is opened read-write.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from envsolver.errors import EnvsolverError


@contextlib.contextmanager
def held(path: Path, on_wait: Callable[[str], None], what: str) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) for the block. When another process holds it,
    `on_wait` is told once, then this waits. Raises EnvsolverError (exit 2) when the lock file cannot be opened."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise EnvsolverError(
            f"cannot create the lock file {str(path)!r} ({exc.strerror}). Make its directory writable, or point "
            "ENVSOLVER_CACHE_DIR at a writable directory."
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait(f"waiting for another envsolver process {what}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
