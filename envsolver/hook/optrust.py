"""Who may have written a shared op cache entry, and reading its files so that nobody else could have: the op
cache's trust model (SECURITY.md), as ssh's StrictModes and pip's and ccache's cache ownership checks treat shared
state.

A reader trusts root, itself, the uids it is told to (`--op-cache-trust`), and the owner of the cache directory,
unless a directory on the way to the cache (symbolic links followed, and the directories holding them) belongs to
an untrusted uid or is writable by others without the sticky bit: whoever can write there could put a cache of
their own in its place. It uses a part of an entry only when the part belongs to a trusted uid and nobody else can
write it (no group or other write bit; with POSIX ACLs the group bits are the mask, so no named entry grants write
either), and only a regular file, opened without following a link, read up to a bound. Each check is made on the
opened descriptor (fstat), so a name swapped between the check and the read changes nothing.
"""

from __future__ import annotations

import errno
import grp
import hashlib
import os
import pwd
import shlex
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer (fstat then refuses it)
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_BLOCK = 1 << 20
_MAX_LINKS = 40  # as the kernel's limit on symbolic links in one path (ELOOP)


class Untrusted(Exception):
    """A part of an entry that someone other than a trusted uid could have written, or that is not what the
    writer writes (a link, a FIFO, too large). str(): what, and who could have changed it."""


def shown(text: object) -> str:
    """A path or name for a message: control characters escaped (a directory name may hold any byte)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def user(uid: int) -> str:
    try:
        return f"uid {uid} ({shown(pwd.getpwuid(uid).pw_name)})"
    except KeyError:
        return f"uid {uid}"


def group(gid: int) -> str:
    try:
        return f"group {gid} ({shown(grp.getgrgid(gid).gr_name)})"
    except KeyError:
        return f"group {gid}"


def _trust_option(uid: int) -> str:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return f"--op-cache-trust {shlex.quote(name) if name.isprintable() else uid}"


def parse(values: Iterable[str]) -> frozenset[int]:
    """The uids named by --op-cache-trust values: user names or numeric uids. Raises ValueError on a name that is
    no user here."""
    uids: set[int] = set()
    for value in values:
        text = value.strip()
        if text.isdecimal() and text.isascii():
            uids.add(int(text))
            continue
        try:
            uids.add(pwd.getpwnam(text).pw_uid)
        except (KeyError, ValueError):
            raise ValueError(f"{value!r} is no user on this machine: pass a user name or a numeric uid") from None
    return frozenset(uids)


def writable_by(st: os.stat_result) -> str | None:
    """Who besides the owner may write a file or directory with this status: "others", a group, or None."""
    if st.st_mode & stat.S_IWOTH:
        return "others"
    if st.st_mode & stat.S_IWGRP:
        return group(st.st_gid)
    return None


def _looked_in(path: Path) -> list[str]:
    """Every directory in which the kernel looks up a name on the way to `path`: its real ancestors, and those
    holding each symbolic link met on the way (resolved as the kernel does, `..` after a link included)."""
    text = str(path) if path.is_absolute() else os.path.join(os.getcwd(), path)
    stack = list(reversed(text.split("/")))
    current, seen, links = "/", [], 0
    while stack:
        part = stack.pop()
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        if current not in seen:
            seen.append(current)
        following = os.path.join(current, part)
        if stat.S_ISLNK(os.lstat(following).st_mode):
            links += 1
            if links > _MAX_LINKS:
                raise OSError(errno.ELOOP, "too many symbolic links", str(path))
            target = os.readlink(following)
            if target.startswith("/"):
                current = "/"
            stack.extend(reversed(target.split("/")))
        else:
            current = following
    return seen


@dataclass(frozen=True)
class Trust:
    """The uids whose entries a reader uses. `owner_refused`: why the cache's owner is not among them although
    it owns the cache (a directory above could be changed by someone else), for the refusal's line."""

    uids: frozenset[int]
    owner: int
    owner_refused: str | None = None

    @classmethod
    def of(cls, path: Path, root: os.stat_result, extra: Iterable[int] = ()) -> Trust:
        """The trust of a reader of the cache at `path`, whose opened directory has status `root`."""
        base = frozenset({0, os.geteuid(), *extra})
        owner = root.st_uid
        if owner in base:
            return cls(base, owner)
        allowed = base | {owner}
        try:
            above = _looked_in(path)
        except OSError as exc:
            return cls(base, owner, f"its path cannot be walked ({shown(exc.strerror)})")
        for directory in above:
            try:
                st = os.stat(directory)
            except OSError as exc:
                return cls(base, owner, f"{shown(directory)} cannot be read ({shown(exc.strerror)})")
            who = None if st.st_mode & stat.S_ISVTX else writable_by(st)
            if who is not None:
                return cls(base, owner, f"{shown(directory)} is writable by {who}")
            if st.st_uid not in allowed:
                return cls(base, owner, f"{shown(directory)} belongs to {user(st.st_uid)}")
        return cls(allowed, owner)

    def check(self, st: os.stat_result, what: str) -> None:
        """Raises Untrusted unless `st` belongs to a trusted uid and nobody else may write it."""
        if st.st_uid not in self.uids:
            why = f"{what} belongs to {user(st.st_uid)}, whom this user does not trust"
            if st.st_uid == self.owner and self.owner_refused:
                why = (
                    f"{what} belongs to {user(st.st_uid)}, the cache's owner, who is not trusted because "
                    f"{self.owner_refused} (anyone who can write there could have put another cache in its place)"
                )
            raise Untrusted(f"{why}; pass {_trust_option(st.st_uid)} to use it")
        who = writable_by(st)
        if who is not None:
            anyone = "anyone" if who == "others" else "any of its members"
            raise Untrusted(f"{what} is writable by {who}: {anyone} could have changed it")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_dir(name: str, dir_fd: int, trust: Trust, what: str) -> int:
    """The directory `name` in `dir_fd`, opened without following a link and checked. Raises FileNotFoundError when
    it is absent, Untrusted otherwise."""
    try:
        fd = os.open(name, _OPEN_DIR, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            st = None
        if st is None or stat.S_ISDIR(st.st_mode):  # a directory this user may not open
            raise Untrusted(f"{what} cannot be opened ({shown(exc.strerror)})") from None
        raise Untrusted(f"{what} is {_kind(st.st_mode)}, not a directory ({user(st.st_uid)} put it there)") from None
    try:
        trust.check(os.fstat(fd), what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(name: str, dir_fd: int | None, trust: Trust | None, bound: int, what: str) -> tuple[int, int]:
    """The regular file `name` in the directory `dir_fd` (None: `name` is a path), opened without following a
    link, checked against `trust` (None: not checked) and at most `bound` bytes. Returns (descriptor, size).
    Raises Untrusted."""
    at = dir_fd
    try:
        st = os.stat(name, dir_fd=at, follow_symlinks=False)  # a device or FIFO is never even opened
    except FileNotFoundError:
        raise Untrusted(f"there is no {what}") from None
    except OSError as exc:
        raise Untrusted(f"{what} cannot be read ({shown(exc.strerror)})") from None
    owner = f" ({user(st.st_uid)} put it there)"
    if not stat.S_ISREG(st.st_mode):
        raise Untrusted(f"{what} is {_kind(st.st_mode)}, not a regular file{owner}")
    try:
        fd = os.open(name, _OPEN_FILE, dir_fd=at)
    except OSError as exc:
        raise Untrusted(f"{what} cannot be read ({shown(exc.strerror)})") from None
    try:
        st = os.fstat(fd)  # what was opened, whatever the name holds now
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{what} is {_kind(st.st_mode)}, not a regular file{owner}")
        if trust is not None:
            trust.check(st, what)
        if st.st_size > bound:
            raise Untrusted(f"{what} holds {st.st_size} bytes, more than the {bound} a reader reads{owner}")
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def chunks(fd: int, size: int, what: str) -> Iterable[bytes]:
    """The file's bytes, block by block: exactly `size` of them. Raises Untrusted when it holds more or fewer (it
    changed while it was read)."""
    left = size
    while left > 0:
        block = os.read(fd, min(_BLOCK, left))
        if not block:
            raise Untrusted(f"{what} changed while it was read")
        left -= len(block)
        yield block
    if os.read(fd, 1):
        raise Untrusted(f"{what} changed while it was read")


def read(fd: int, size: int, what: str) -> bytes:
    return b"".join(chunks(fd, size, what))


def sha256(fd: int, size: int, what: str) -> str:
    digest = hashlib.sha256()
    for block in chunks(fd, size, what):
        digest.update(block)
    return digest.hexdigest()
