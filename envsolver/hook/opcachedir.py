"""The op cache's directory when `--op-cache` names one that does not exist: made private (0700, or 0750 with the
group `--op-cache-group` names, whatever the umask), each missing parent the same way, and never where another
user could make it first.

The rule (SECURITY.md): the deepest existing directory on the path, and every directory on the way to it, must
belong to root, this user or a uid named with --op-cache-trust (optrust.check_on_the_way: a cache below any
other owner's directory would be refused when read). In a directory that anyone may write (the other-write bit:
/tmp, a /scratch laid out the same way) only a directory named after this user (its login name or uid) is made,
and the cache below it: `--op-cache /tmp/ops` is refused with the fix `--op-cache /tmp/$USER/ops`. Each directory
is made relative to the opened one before it (mkdir, then opened without following a link and given its mode and
group through the descriptor); one that another hook made meanwhile is entered as it is, and its owner is checked
when the cache is read. An existing cache is left as it is, whoever owns it: reading decides (opcache.lookup).
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from envsolver.hook import optrust

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class NotMade(Exception):
    """The op cache directory is not made. str(): why, ending with an --op-cache that works."""


@dataclass(frozen=True)
class Plan:
    base: Path  # the deepest directory on the path that exists
    missing: tuple[str, ...]  # the directories to make, each in the one before, the first in `base`


def parse_group(value: str) -> int:
    """The gid --op-cache-group names: a group name or a numeric gid, one of this user's groups (root may name
    any). Raises ValueError."""
    text = value.strip()
    try:
        gid = int(text) if text.isdecimal() and text.isascii() else grp.getgrnam(text).gr_gid
    except (KeyError, ValueError):
        raise ValueError(f"{value!r} is no group on this machine: pass a group name or a numeric gid") from None
    if os.geteuid() != 0 and gid not in {os.getegid(), *os.getgroups()}:
        raise ValueError(
            f"{value!r}: this user is not a member of {optrust.group(gid)}, so a cache cannot be given to it; pass "
            "one of your groups (`id -Gn` lists them)"
        )
    return gid


def own_names() -> tuple[str, ...]:
    """The names of this user's own directory inside a directory anyone may write: the login name, the uid."""
    uid = os.geteuid()
    try:
        return (pwd.getpwuid(uid).pw_name, str(uid))
    except KeyError:
        return (str(uid),)


def _shown_path(path: Path) -> str:
    text = str(path)
    return shlex.quote(text) if text.isprintable() else optrust.shown(text)


def _not_a_directory(cache: Path, base: Path) -> NotMade:
    kind = "a symbolic link to no directory" if os.path.islink(base) else "not a directory"
    return NotMade(
        f"--op-cache {optrust.shown(cache)}: {optrust.shown(base)} is {kind}. Pass --op-cache a directory, or a "
        "path where one can be made."
    )


def plan(cache: Path, trusted: Iterable[int] = ()) -> Plan | None:
    """What making the cache takes; None when it exists (as a directory, a link to one included). Makes nothing.
    Raises NotMade when it would not be made (see the module's doc)."""
    if os.path.isdir(cache):
        return None
    missing: list[str] = []
    base = cache
    while not os.path.lexists(base):
        missing.insert(0, base.name)
        base = base.parent
    if not os.path.isdir(base):
        raise _not_a_directory(cache, base)
    if ".." in missing:
        raise NotMade(
            f"--op-cache {optrust.shown(cache)}: '..' after a directory that does not exist ({optrust.shown(base)} "
            f"is the last that does). Pass --op-cache {_shown_path(Path(os.path.abspath(cache)))}."
        )
    trust = optrust.Trust.of(trusted)
    try:
        optrust.check_on_the_way(base, trust, itself=True)
    except optrust.Untrusted as exc:
        raise NotMade(f"--op-cache {optrust.shown(cache)} is not made: {exc}") from None
    if os.stat(base).st_mode & stat.S_IWOTH:
        _refuse_in_a_shared_directory(cache, base, tuple(missing), trust)
    return Plan(base, tuple(missing))


def _refuse_in_a_shared_directory(cache: Path, base: Path, missing: tuple[str, ...], trust: optrust.Trust) -> None:
    """In a directory anyone may write, the first directory made is this user's own, and the cache is below it."""
    names = own_names()
    if missing[0] in names and len(missing) > 1:
        return
    rest = missing[1:] if missing[0] in names else missing
    own = base / names[0]
    why = (
        f"--op-cache {optrust.shown(cache)} is not made: it would be made directly in {optrust.shown(base)}, which "
        f"anyone may write (another user could make {optrust.shown(base / missing[0])} first, or again once it is "
        "removed, and own the cache)."
    )
    try:
        st = os.lstat(own)
    except FileNotFoundError:
        st = None
    if st is not None and not (stat.S_ISDIR(st.st_mode) and st.st_uid in trust.uids):
        raise NotMade(
            f"{why} {optrust.shown(own)}, where your own directory would be, belongs to {optrust.user(st.st_uid)}. "
            f"Pass an --op-cache outside {optrust.shown(base)}, in a directory of your own."
        )
    fix = own.joinpath(*rest) if rest else own / "ops"
    raise NotMade(
        f"{why} Pass --op-cache {_shown_path(fix)}: a directory of your own there, made 0700 (0750 with "
        "--op-cache-group)."
    )


def ensure(cache: Path, trusted: Iterable[int] = (), group: int | None = None) -> tuple[Path, ...]:
    """Make the cache when it does not exist (see the module's doc): each missing directory 0700, or 0750 and
    `group`. Returns the directories made (none when it exists). Raises NotMade."""
    made = plan(cache, trusted)
    if made is None:
        return ()
    mode = 0o700 if group is None else 0o750
    path, created = made.base, []
    try:
        fd = os.open(made.base, _OPEN_DIR)
    except OSError as exc:
        raise NotMade(_cannot(cache, made.base, exc)) from None
    try:
        for name in made.missing:
            path = path / name
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
                new = True
            except FileExistsError:
                new = False  # another hook made it meanwhile: its owner is checked when the cache is read
            except OSError as exc:
                raise NotMade(_cannot(cache, path, exc)) from None
            try:
                child = os.open(name, _OPEN_DIR | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise NotMade(_cannot(cache, path, exc)) from None
            os.close(fd)
            fd = child
            if new:
                try:
                    if group is not None:
                        os.fchown(fd, -1, group)
                    os.fchmod(fd, mode)  # after chown, which may clear mode bits; exact, whatever the umask
                except OSError as exc:
                    raise NotMade(_cannot(cache, path, exc)) from None
                created.append(path)
    finally:
        os.close(fd)
    return tuple(created)


def _cannot(cache: Path, path: Path, exc: OSError) -> str:
    return (
        f"--op-cache {optrust.shown(cache)}: cannot make {optrust.shown(path)} ({optrust.shown(exc.strerror)}). "
        "Pass --op-cache a directory you may make, or make it first (mkdir -m 700 DIR)."
    )
