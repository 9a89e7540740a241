"""Who may have written a shared op cache and its entries, and reading its files so that nobody else could have:
the op cache's trust model (SECURITY.md), as ssh's StrictModes and pip's and ccache's cache ownership checks treat
shared state.

A reader trusts root, itself and the uids it is told to (`--op-cache-trust`): nobody else, whoever made the cache
directory (in a sticky /tmp, whoever makes a name first owns it). It uses the cache only when the cache directory
(checked on the opened descriptor) and every directory the kernel looks in on the way to it (its ancestors, and the
directories holding each symbolic link met on the way) belong to a trusted uid; those directories may be writable
by others, since whatever another user could put in their place is either a directory of their own (refused) or a
link (followed, and its target's directories checked the same way). It uses a part of an entry only when the part
belongs to a trusted uid and nobody else can write it (no group or other write bit; with POSIX ACLs the group bits
are the mask, so no named entry grants write either), and only a regular file, opened without following a link,
read up to a bound. Each check of an entry is made on the opened descriptor (fstat), so a name swapped between the
check and the read changes nothing.
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
    """The uids whose op cache and entries a reader uses: root, itself and those named with --op-cache-trust."""

    uids: frozenset[int]

    @classmethod
    def of(cls, named: Iterable[int] = ()) -> Trust:
        return cls(frozenset({0, os.geteuid(), *named}))

    def writer(self, uid: int) -> str:
        """The uid, its name and why this reader trusts it, for a note on what was taken."""
        if uid == os.geteuid():
            return f"{user(uid)}, you"
        if uid == 0:
            return user(uid)
        return f"{user(uid)}, trusted with {_trust_option(uid)}"

    def check(self, st: os.stat_result, what: str) -> None:
        """Raises Untrusted unless `st` belongs to a trusted uid and nobody else may write it."""
        if st.st_uid not in self.uids:
            raise Untrusted(
                f"{what} belongs to {user(st.st_uid)}, whom this user does not trust; "
                f"pass {_trust_option(st.st_uid)} to use it"
            )
        who = writable_by(st)
        if who is not None:
            anyone = "anyone" if who == "others" else "any of its members"
            raise Untrusted(f"{what} is writable by {who}: {anyone} could have changed it")


def check_cache(path: Path, st: os.stat_result, trust: Trust) -> None:
    """The cache directory at `path`, whose opened descriptor has status `st`: raises Untrusted unless it and every
    directory on the way to it belong to a trusted uid (see the module's doc)."""
    if st.st_uid not in trust.uids:
        raise Untrusted(
            f"the cache directory belongs to {user(st.st_uid)}, whom this user does not trust (whoever makes a "
            f"directory owns it); pass {_trust_option(st.st_uid)} to use it, or point --op-cache at a directory "
            "of your own"
        )
    check_on_the_way(path, trust)


def check_on_the_way(path: Path, trust: Trust, itself: bool = False) -> None:
    """Raises Untrusted unless every directory the kernel looks in on the way to `path` (and, with `itself`, the
    directory `path` names) belongs to a trusted uid: any other owner could rename what `path` names and put a
    directory of their own or a link in its place."""
    try:
        above = _looked_in(path) + ([str(path)] if itself else [])
    except OSError as exc:
        raise Untrusted(f"its path cannot be walked ({shown(exc.strerror)})") from None
    for directory in above:
        try:
            owner = os.stat(directory).st_uid
        except OSError as exc:
            raise Untrusted(f"{shown(directory)} cannot be read ({shown(exc.strerror)})") from None
        if owner not in trust.uids:
            raise Untrusted(
                f"{shown(directory)}, on the way to the cache, belongs to {user(owner)}, whom this user does not "
                f"trust (its owner could put another directory in the cache's place); pass {_trust_option(owner)} "
                "to use it, or point --op-cache at a directory whose parents belong to you or root"
            )


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
