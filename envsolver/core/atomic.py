"""Replace a whole file atomically: the one way envsolver writes a file that a reader may open at any moment.

The data goes into a new file beside the target (mkstemp: created afresh with O_EXCL, so never through a link a
stranger left there), mode 0666 less the umask unless given, flushed and fsynced, then renamed over the target. A
reader sees the old file or the new one, never a part; a crash leaves at most a dot-file beside it, which the next
write does not reuse. Callers that must also survive a crash of the directory entry call fsync_dir after.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def umask() -> int:
    """The process's umask, from /proc/self/status's Umask line (Linux 4.7 and later) without changing it. Elsewhere
    it can only be read by setting it: it is set to 0o077 and put back at once, so a file another thread (rattler's
    extraction, a download) creates in that moment comes out private rather than world-writable, as it would under
    a umask of 0."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8) & 0o777
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def replace(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write `data` to `path` atomically, creating its directory. Raises OSError; the file beside it is removed on
    failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask() if mode is None else mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (creations, renames, removals) durable. Raises OSError."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF):  # file systems that cannot sync a directory
            raise
    finally:
        os.close(fd)
