"""Replace some files of a directory as one step: a reader that opens them at any moment (cat, conda, conda-lock:
none of them knows envsolver), whether the writer is running, done or was killed at any moment, finds every one
of them old or every one new.

One rename replaces one name, so the step goes through one symbolic link, DIR/.envsolver-swap/current. For the
files that change (M; a file being added or removed is one of them):
  1. .envsolver-swap/old/M is the current file (a hard link to it: the same inode, mode and bytes; a copy where
     the file system has none), .envsolver-swap/new/M the new text, fsynced; `current` -> old.
  2. Each M is replaced by a link M -> .envsolver-swap/current/M: the same bytes as before (a file being added is
     a link to nothing, which reads as no file, as before). DIR fsynced.
  3. The commit: a new link current -> new is renamed over `current`, .envsolver-swap fsynced. Every M reads the
     new set now (a file being removed is a link to nothing: gone).
  4. Each new/M is renamed over its link M (the same bytes before and after), each removed file's link removed;
     DIR fsynced; .envsolver-swap removed.
Each step is durable before the next begins, so a crash between two steps leaves what a SIGKILL there leaves.
recover(), the first thing every later commit does (under the directory's lock), renames the side `current`
names onto the links that remain (or removes a link to nothing) and removes .envsolver-swap: the files are
plain again and hold the set the kill left. It only renames and removes, so it needs no space on a full disk;
replace_all() recovers the same way from an error of its own.

Why this layout (the trade-offs):
  - At rest the files are plain files, as a user expects of a directory they own: `git add`, `cp`, Docker's
    COPY and an editor that saves by rename see what they always did. The links live for the milliseconds of
    a commit, and after a kill until the next envsolver make on the directory (a `git add` then would add
    links: run make first).
  - A directory per set with a link per file for good (swapped by one rename, no step 4) would leave every file
    a link: git stores the link, not the text; an editor that saves by rename replaces a link with a file that
    the next swap leaves behind.
  - Swapping all of --out by renaming a directory over it is not possible: it is the user's, may hold their
    own files, may be a shell's working directory, and its parent need not be writable.
  - A marker of the set in each file (writers/setmark.py) cannot stop conda or cat from reading a mix; it stays
    as the check, in `install` and `verify`, of a set mixed by other means (files copied from two runs).
  - The cost: two renames per changed file, a copy only where hard links are not supported, four directory
    syncs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from envsolver.core import atomic, boundedread
from envsolver.lock.writers import files
from envsolver.lock.writers.setmark import MEMBER

SWAP = ".envsolver-swap"
CURRENT = "current"
SIDES = ("old", "new")
LINK_SUFFIX = ".envsolver-link"  # DIR/.M.envsolver-link: step 2's link before it is renamed over M
MAX_COPY = 256 << 20  # a member copied (where hard links fail) is at most this large: a lock is a few MiB


class Stopped(Exception):
    """replace_all stopped on an OSError (`cause`). `committed`: the new set is what every file reads. `left`:
    links remain, each reading that set, for the next run's recover() (which could not run here)."""

    def __init__(self, cause: OSError, committed: bool, left: bool) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.committed = committed
        self.left = left


def link_target(name: str) -> str:
    """Where step 2's link for member NAME points, relative to the directory."""
    return f"{SWAP}/{CURRENT}/{name}"


def leftover(name: str) -> bool:
    """Whether NAME, an entry of the directory, is something only an unfinished replace_all leaves."""
    return name == SWAP or (
        name.startswith(".") and name.endswith(LINK_SUFFIX) and bool(MEMBER.fullmatch(name[1 : -len(LINK_SUFFIX)]))
    )


def pending(out_dir: Path, names: Sequence[str]) -> bool:
    """Whether the entries NAMES of OUT_DIR hold what recover() has to finish."""
    return any(leftover(name) or _ours(out_dir, name) for name in names)


def replace_all(out_dir: Path, texts: Mapping[str, bytes], removed: Sequence[str]) -> None:
    """Replace each member named in TEXTS by its bytes and remove each one in REMOVED, as one step (the module's
    docstring). OUT_DIR holds nothing of an earlier replace_all (recover() first). Raises Stopped: before the
    commit the files are as they were, after it they are the new set (unless `left`)."""
    swap = out_dir / SWAP
    committed = False
    try:
        for side in SIDES:
            (swap / side).mkdir(parents=True)
        for name in [*texts, *removed]:
            _keep_old(out_dir / name, swap / "old" / name)
        files.write_new_all({swap / "new" / name: text for name, text in texts.items()})
        os.symlink("old", swap / CURRENT)
        for directory in (swap / "old", swap / "new", swap):
            atomic.fsync_dir(directory)
        for name in [*texts, *removed]:
            temp = out_dir / f".{name}{LINK_SUFFIX}"
            temp.unlink(missing_ok=True)
            os.symlink(link_target(name), temp)
            os.replace(temp, out_dir / name)
        atomic.fsync_dir(out_dir)
        os.symlink("new", swap / f"{CURRENT}.next")
        os.replace(swap / f"{CURRENT}.next", swap / CURRENT)  # the commit
        committed = True
        atomic.fsync_dir(swap)
        _settle(out_dir)
    except OSError as exc:
        try:
            recover(out_dir)
        except OSError:
            raise Stopped(exc, committed, left=True) from None
        raise Stopped(exc, committed, left=False) from None


def recover(out_dir: Path) -> bool:
    """Make every member that is a link into .envsolver-swap a plain file again, holding what it reads (or remove it
    where it reads nothing), then remove .envsolver-swap and step 2's stray links; True when there was anything to
    do. Renames and removals only. Raises OSError."""
    names = os.listdir(out_dir)
    if not pending(out_dir, names):
        return False
    _settle(out_dir, names)
    return True


def _settle(out_dir: Path, names: Sequence[str] | None = None) -> None:
    """Steps 4 and after: the side `current` names renamed onto the links, DIR fsynced, the rest removed."""
    swap = out_dir / SWAP
    try:
        side = os.readlink(swap / CURRENT)
    except FileNotFoundError:
        side = "old"  # stopped in step 1: no link into it exists yet
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        side = ""  # not a link: envsolver did not make it; no member can read through it
    for name in os.listdir(out_dir) if names is None else names:
        if _ours(out_dir, name):
            source = swap / side / name if side in SIDES else None
            if source is not None and os.path.lexists(source):
                os.replace(source, out_dir / name)
            else:
                (out_dir / name).unlink()
        elif leftover(name) and name != SWAP:
            (out_dir / name).unlink(missing_ok=True)
    atomic.fsync_dir(out_dir)
    if os.path.lexists(swap):
        shutil.rmtree(swap)


def _ours(out_dir: Path, name: str) -> bool:
    """Whether OUT_DIR/NAME is a member that step 2 made a link."""
    if not MEMBER.fullmatch(name):
        return False
    try:
        return os.readlink(out_dir / name) == link_target(name)
    except OSError:
        return False


def _keep_old(member: Path, kept: Path) -> None:
    """KEPT becomes what MEMBER reads now: a hard link to a plain file (its inode, so its mode and bytes), else a
    copy of what it reads with its mode; nothing where it reads nothing (no file, a link to nothing)."""
    try:
        info = os.lstat(member)
    except FileNotFoundError:
        return
    if stat.S_ISREG(info.st_mode):
        with contextlib.suppress(OSError):
            os.link(member, kept, follow_symlinks=False)
            return
    try:
        data = boundedread.read_regular(member, MAX_COPY)
    except FileNotFoundError:
        return  # a link to nothing
    except boundedread.Refused as exc:
        raise OSError(errno.EINVAL, f"{member.name} is {exc}", str(member)) from None
    files.write_new_all({kept: data})
    os.chmod(kept, stat.S_IMODE(os.stat(member).st_mode))
