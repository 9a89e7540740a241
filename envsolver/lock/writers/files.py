"""Write generated files atomically, never over a user's edits.

Each generated file carries `# envsolver-sha256: <hex>` on its last header line, the hash of the text
that follows it (`-- envsolver-sha256: <hex>` in a Lua file: `comment` names the line-comment mark).
On rewrite: identical content is left alone; a file whose hash still matches (or that
does not exist) is replaced atomically; anything else was edited by hand and needs `force`.
write() does this for one file; writers/fileset.py for a set of files that must change together.
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from collections.abc import Mapping
from enum import Enum
from pathlib import Path

from envsolver.core import atomic
from envsolver.core.errors import BadInputError

MARK = "# envsolver-sha256: "


class Outcome(str, Enum):
    WRITTEN = "written"
    UNCHANGED = "unchanged"
    REMOVED = "removed"  # a file of an earlier set that the new set does not have


def _mark(comment: str) -> str:
    return MARK if comment == "#" else f"{comment}{MARK[1:]}"


def stamp(text: str, comment: str = "#") -> str:
    """Insert the hash line after the leading comment block (lines starting with `comment`)."""
    lines = text.splitlines(keepends=True)
    split = next((i for i, line in enumerate(lines) if not line.startswith(comment)), len(lines))
    body = "".join(lines[split:])
    digest = hashlib.sha256(body.encode()).hexdigest()
    return "".join(lines[:split]) + f"{_mark(comment)}{digest}\n" + body


def edited_by_hand(text: str, comment: str = "#") -> bool:
    """True when the file has no envsolver hash line or its body no longer matches it."""
    _, sep, body = text.partition(_mark(comment))
    if not sep:
        return True
    digest, _, rest = body.partition("\n")
    return hashlib.sha256(rest.encode()).hexdigest() != digest.strip()


def write(path: Path, text: str, force: bool = False, comment: str = "#") -> Outcome:
    """Write stamped `text` to `path` atomically (`comment`: the file's line-comment mark, for the hash line).
    Raises BadInputError when a hand edit would be lost."""
    stamped = stamp(text, comment)
    if path.exists():
        current = path.read_text(encoding="utf-8", errors="replace")
        if current == stamped:
            return Outcome.UNCHANGED
        if not force:
            refuse_hand_edit(path, current, comment)
    atomic.replace(path, stamped.encode("utf-8"))
    return Outcome.WRITTEN


def refuse_hand_edit(path: Path, current: str | None = None, comment: str = "#") -> None:
    """Raise BadInputError when the file at `path` (its text: `current`, read when None) was edited by hand: a
    command that would overwrite it checks this before its slow work, and write checks it again."""
    if current is None:
        try:
            current = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return
    if edited_by_hand(current, comment):
        raise BadInputError(
            f"{str(path)!r} was edited by hand (or not written by envsolver); it was left as "
            "it is. Move your changes elsewhere, or pass --force to overwrite it."
        )


def write_new(path: Path, text: str) -> None:
    """Create `path` afresh with `text`, mode 0666 less the umask, and fsync it. A file or symbolic link
    already at `path` is removed first, never followed. Raises OSError; a partial file is removed."""
    write_new_all({path: text})


def write_new_all(texts: Mapping[Path, str | bytes]) -> None:
    """write_new for each file of `texts` (a text as UTF-8, bytes as they are): all created and written, then
    fsynced side by side, each in a thread of its own (a journaling file system commits concurrent fsyncs together:
    five files of a lock took 21 ms one after another and 5 ms side by side, medians of 60 on the development
    machine's ext4). Returns when every one is on disk. Raises OSError (the first); every file it created is removed
    then."""
    made: list[Path] = []
    fds: list[int] = []
    try:
        for path, text in texts.items():
            path.unlink(missing_ok=True)
            fds.append(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666))
            made.append(path)
            with open(fds[-1], "wb", closefd=False) as handle:
                handle.write(text.encode("utf-8") if isinstance(text, str) else text)
        failed: list[OSError] = []

        def sync(fd: int) -> None:
            try:
                os.fsync(fd)
            except OSError as exc:
                failed.append(exc)

        threads = [threading.Thread(target=sync, args=(fd,), daemon=True) for fd in fds]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failed:
            raise failed[0]
    except BaseException:
        for path in made:
            path.unlink(missing_ok=True)
        raise
    finally:
        for fd in fds:
            os.close(fd)


def replace_with(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically (core.atomic.replace). Raises OSError."""
    atomic.replace(path, text.encode("utf-8"))


_REASONS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "it is on a read-only file system",
    errno.ENOSPC: "no space is left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.ENAMETOOLONG: "a name in the path is too long",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.EISDIR: "a directory is in the way",
    errno.ELOOP: "a symbolic link is in the way",
    errno.ENOLCK: "the file system cannot lock files",
}


def reason(exc: OSError) -> str:
    """Why a write failed, in words: 'permission denied', 'it is on a read-only file system', ..."""
    if exc.errno in _REASONS:
        return _REASONS[exc.errno]
    return exc.strerror or str(exc)


def blocking_file(path: Path) -> Path | None:
    """The first of `path` and its parents that exists and is not a directory (so `path` cannot be one)."""
    for candidate in (path, *path.parents):
        try:
            if candidate.exists() and not candidate.is_dir():
                return candidate
        except OSError:
            continue
    return None
