"""Read a file a user hands us (a lock, an installed prefix's records) without ever waiting on it: only a regular
file is read, and only up to a limit. A FIFO is opened without waiting for a writer (O_NONBLOCK) and then refused,
as is a device (/dev/zero never ends), a directory or a socket; with `follow=False` a symbolic link is refused too
(O_NOFOLLOW), so a prefix cannot point its records at another file.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

# What a file that is not a regular one is called in a message.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class Refused(ValueError):
    """The path is not a regular file, is a symbolic link where none is allowed, or is larger than the limit;
    the message says which ("a FIFO", "larger than 1048576 bytes")."""


def kind(mode: int) -> str:
    """What a file of this st_mode is, in words ("a FIFO"); "a regular file" for one."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode) else "special")


def read_regular(path: Path, limit: int, *, follow: bool = True) -> bytes:
    """The bytes of the regular file PATH, at most LIMIT of them. Raises Refused (not a regular file, a symbolic
    link when `follow` is False, larger than LIMIT) or OSError (missing, unreadable)."""
    data = _read(path, limit, follow)
    if len(data) > limit:
        raise Refused(f"larger than {limit} bytes")
    return data


def read_head(path: Path, limit: int, *, follow: bool = True) -> bytes:
    """The first LIMIT bytes of the regular file PATH (all of it when shorter): for the head of a file whose rest is
    not needed (a METADATA's headers). Raises Refused (not a regular file, a symbolic link when `follow` is False)
    or OSError."""
    return _read(path, limit, follow)[:limit]


def open_regular(path: Path, *, follow: bool = True) -> io.BufferedReader:
    """The regular file PATH opened for reading, for a caller that streams it (an archive in the cache, hashed as
    it is copied) and bounds what it reads itself. Raises Refused (not a regular file, a symbolic link when
    `follow` is False) or OSError."""
    return open(_open(path, follow), "rb")


def _open(path: Path, follow: bool) -> int:
    """A blocking descriptor of the regular file PATH, opened without waiting (a FIFO's writer never comes)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise Refused("a symbolic link") from None
        raise exc from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Refused(kind(mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read(path: Path, limit: int, follow: bool) -> bytes:
    """Up to LIMIT + 1 bytes of the regular file PATH (one more tells a caller the file is larger)."""
    fd = _open(path, follow)
    try:
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)
