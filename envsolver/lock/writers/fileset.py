"""Write make's files into one directory as a set: a reader finds the old complete set or the new one, at any moment.

A commit, under the directory's lock (envsolver/core/dirlock.py), with SIGHUP, SIGINT, SIGQUIT and SIGTERM held
(signals_held):
  1. finish what an interrupted commit left: links into .envsolver-swap made plain files again (swap.recover),
     or the journal of an envsolver from before the swap rolled forward; stray temporaries deleted;
  2. mark every text with the set's line (setmark.py) and its hash (files.stamp), and compare each with its
     file: identical files are left alone, and a hand edit in any member refuses the whole set (unless forced)
     before anything is written;
  3. replace the changed members and remove the stale ones as one step (swap.replace_all: through one symbolic
     link, so that a reader who knows nothing of envsolver, a SIGKILL at any moment, or a crash, leaves every
     file of the old set or every file of the new one; its docstring says how and why so).
Held signals arrive once the commit is done.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from envsolver.core import atomic, boundedread, dirlock
from envsolver.core.errors import BadInputError
from envsolver.lock.writers import files, setmark, swap
from envsolver.lock.writers.files import Outcome
from envsolver.lock.writers.setmark import MEMBER as MEMBER  # the names a set may hold; its home is setmark

LOCK = ".envsolver.lock"
# An envsolver from before the swap wrote each member aside, then this journal naming them, then renamed them
# one by one: a run of it killed between two renames left a journal that the next run here still rolls forward.
JOURNAL = ".envsolver-commit"
JOURNAL_NEW = JOURNAL + ".new"
TEMP_SUFFIX = ".envsolver-new"
HEADER = "envsolver-commit 1"
MAX_MEMBER = 64 << 20  # a larger file at a member's name is not one envsolver wrote (a lock is a few MiB)
HELD = {signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM}
WAIT_S = 120.0


def temp_name(member: str) -> str:
    return f".{member}{TEMP_SUFFIX}"


REMOVE = "remove "


def journal_text(members: tuple[str, ...], removed: tuple[str, ...] = ()) -> str:
    return "\n".join([HEADER, *members, *(REMOVE + name for name in removed)]) + "\n"


def parse_journal(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(members to rename into place, members to remove) as a journal names them, in order.

        envsolver-commit 1
        environment.yml
        conda-lock.yml
        remove conda-linux-aarch64.lock

    Raises ValueError naming what is wrong."""
    if not text.endswith("\n"):
        raise ValueError("it does not end with a newline")
    header, *lines = text[:-1].split("\n")
    if header != HEADER:
        raise ValueError(f"its first line is not {HEADER!r}")
    if not lines:
        raise ValueError("it names no file")
    written = tuple(line for line in lines if not line.startswith(REMOVE))
    removed = tuple(line[len(REMOVE) :] for line in lines if line.startswith(REMOVE))
    for name in written + removed:
        if not MEMBER.fullmatch(name):
            raise ValueError(f"{name!r} is not a file envsolver writes")
    if len(set(written + removed)) != len(written) + len(removed):
        raise ValueError("it names a file twice")
    return written, removed


def commit(
    out_dir: Path,
    texts: Mapping[str, str],
    *,
    force: bool,
    command: str,
    wait_s: float = WAIT_S,
    on_wait: Callable[[str], None] | None = None,
) -> dict[Path, Outcome]:
    """Write `texts` (member name -> text, stamped here) to `out_dir` as one set; `command` is the make
    command that wrote them, for the fix in messages. `on_wait` gets a one-line notice when another writer
    makes this one wait. Raises BadInputError (exit 2) for a hand edit, a directory that cannot be written
    (naming it, with a fix), or another writer that holds the directory longer than `wait_s`."""
    for name in texts:
        if not MEMBER.fullmatch(name):
            raise BadInputError(
                f"refusing to write {name!r}: it is not a file envsolver writes (environment.yml, conda-lock.yml, "
                "virtual-packages.yml, conda-<platform>.lock, conda-<platform>.pip.txt). Pass --platform linux-64 or "
                "linux-aarch64."
            )
    stamped = stamped_texts(texts)
    _make_dir(out_dir, command)
    notice = None if on_wait is None else lambda: on_wait(_waiting(out_dir, wait_s))
    try:
        lock = dirlock.acquire(out_dir / LOCK, wait_s, notice)
    except TimeoutError:
        raise BadInputError(
            f"another envsolver is still writing to {str(out_dir)!r} after {wait_s:g} s (it holds "
            f"{str(out_dir / LOCK)!r}); nothing was written. "
            + _out_fix("Wait for it to finish and run this again, or pass --out another directory", out_dir, command)
        ) from None
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and not _pending(out_dir):
            try:
                unchanged = _changes(out_dir, stamped, force, command) == ([], [])
            except BadInputError:
                unchanged = False
            if unchanged:  # an up-to-date set where nothing may be written: nothing to do
                return {out_dir / name: Outcome.UNCHANGED for name in stamped}
        raise _cannot_write(out_dir, exc, command) from None
    with _holding(lock):
        _roll_forward(out_dir, command)
        changed, stale = _changes(out_dir, stamped, force, command)
        if changed or stale:
            _write(out_dir, {name: stamped[name] for name in changed}, tuple(stale), command)
    result = {out_dir / name: Outcome.WRITTEN if name in changed else Outcome.UNCHANGED for name in stamped}
    return result | {out_dir / name: Outcome.REMOVED for name in stale}


def stamped_texts(texts: Mapping[str, str]) -> dict[str, str]:
    """Each member's text as a commit writes it: the set's line (setmark.mark), then its hash line (files.stamp)."""
    return {name: files.stamp(text) for name, text in setmark.mark(texts).items()}


def repair(out_dir: Path, command: str = "envsolver make", wait_s: float = WAIT_S) -> None:
    """What every commit does first: finish the set an interrupted commit left in `out_dir`, or delete its
    temporaries. Raises BadInputError like commit."""
    try:
        lock = dirlock.acquire(out_dir / LOCK, wait_s)
    except TimeoutError:
        raise BadInputError(
            f"another envsolver is still writing to {str(out_dir)!r} after {wait_s:g} s; nothing was repaired. "
            "Run this again when it has finished."
        ) from None
    except OSError as exc:
        raise _cannot_write(out_dir, exc, command) from None
    with _holding(lock):
        _roll_forward(out_dir, command)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGHUP, SIGINT, SIGQUIT and SIGTERM over the block, then deliver those that came, once each.

    Blocking them with pthread_sigmask is not enough: the kernel hands a process-wide signal to any thread
    that does not block it (rattler's worker threads), and the default action ends the whole process. So
    in the main thread a recording handler replaces each one's handler; elsewhere, where Python cannot set
    handlers, this thread blocks them."""
    if threading.current_thread() is not threading.main_thread():
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        return
    came: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: came.append(signum)) for sig in HELD}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(came):
            signal.raise_signal(signum)


@contextlib.contextmanager
def _holding(lock: dirlock.DirLock) -> Iterator[None]:
    """The critical section: signals held, and the lock let go before they arrive."""
    with signals_held():
        try:
            yield
        finally:
            lock.release()


def _make_dir(out_dir: Path, command: str) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot_write(out_dir, exc, command) from None


def _pending(out_dir: Path) -> bool:
    """True when an interrupted commit left something in `out_dir` that a writer must clear first."""
    try:
        names = os.listdir(out_dir)
    except OSError:
        return True
    return any(_leftover(name) for name in names) or swap.pending(out_dir, names)


def _leftover(name: str) -> bool:
    if name in (JOURNAL, JOURNAL_NEW):
        return True
    return name.startswith(".") and name.endswith(TEMP_SUFFIX) and bool(MEMBER.fullmatch(name[1 : -len(TEMP_SUFFIX)]))


def _changes(out_dir: Path, stamped: Mapping[str, str], force: bool, command: str) -> tuple[list[str], list[str]]:
    """(members whose file differs from their text, members an earlier run wrote that this set has not: a lock
    for another platform, or the locks a --no-lock run leaves out). Raises BadInputError, before anything is
    written, when any of them was edited by hand and `force` is off."""
    changed: list[str] = []
    stale: list[str] = []
    edited: list[str] = []
    try:
        present = sorted(name for name in os.listdir(out_dir) if MEMBER.fullmatch(name))
    except OSError as exc:
        raise _cannot_write(out_dir, exc, command) from None
    for name in sorted(set(stamped) | set(present)):
        path = out_dir / name
        try:
            current = read_member(path)
        except FileNotFoundError:
            changed.append(name)
            continue
        except OSError as exc:
            raise _cannot_write(path, exc, command, out_dir) from None
        if name in stamped and current == stamped[name]:
            continue
        (changed if name in stamped else stale).append(name)
        if files.edited_by_hand(current):
            edited.append(str(path))
    if edited and not force:
        raise BadInputError(edited_refusal(edited, hand_additions(out_dir, stamped), command))
    return [n for n in stamped if n in changed], stale


def read_member(path: Path) -> str:
    """The text of the member at PATH, never waiting on it: a file larger than MAX_MEMBER is read as "" (so not
    written by envsolver). Raises OSError: FileNotFoundError, IsADirectoryError, or EINVAL for a FIFO, a device or
    a socket, naming it."""
    try:
        return boundedread.read_regular(path, MAX_MEMBER).decode("utf-8", "replace")
    except boundedread.Refused as exc:
        if str(exc).startswith("larger than"):
            return ""
        code = errno.EISDIR if str(exc) == "a directory" else errno.EINVAL
        raise OSError(code, f"it is {exc}, not a file", str(path)) from None


def hand_additions(out_dir: Path, stamped: Mapping[str, str]) -> tuple[str, ...]:
    """The --add/--add-pypi options that carry the packages a user added by hand to OUT/environment.yml."""
    if "environment.yml" not in stamped:
        return ()
    from envsolver.core import safeyaml
    from envsolver.lock.writers import environment

    try:
        current = safeyaml.read_text(out_dir / "environment.yml", 1 << 20)
    except (OSError, safeyaml.SafeYamlError):
        return ()
    return environment.additions(current, stamped["environment.yml"])


def edited_refusal(edited: Sequence[str], additions: Sequence[str] = (), command: str = "") -> str:
    """Why a set with files edited by hand is not written, and the fix (a real run and `make --dry-run` alike):
    where the edit added packages to environment.yml, the make command that keeps them as the project's own."""
    them = "it" if len(edited) == 1 else "them"
    head = (
        f"{', '.join(repr(e) for e in edited)} {'was' if len(edited) == 1 else 'were'} edited by hand (or not "
        "written by envsolver); nothing was written."
    )
    if additions and command:
        return (
            f"{head} make writes environment.yml anew each run; packages of your own go in as the project's: "
            f"`{command} {' '.join(additions)} --force` rewrites {them} with them (or list them in a file of your "
            f"own, e.g. project.yml, and pass -f project.yml)."
        )
    return f"{head} Move your changes elsewhere, or pass --force to overwrite {them}."


def _write(out_dir: Path, stamped: Mapping[str, str], stale: tuple[str, ...], command: str) -> None:
    try:
        swap.replace_all(out_dir, {name: text.encode("utf-8") for name, text in stamped.items()}, stale)
    except swap.Stopped as stopped:
        if stopped.left:
            which = "new" if stopped.committed else "old"
            raise BadInputError(
                f"writing the files in {str(out_dir)!r} stopped halfway ({files.reason(stopped.cause)}); each of "
                f"them reads the {which} set through a link into {str(out_dir / swap.SWAP)!r}. Fix the cause, "
                "then run the same envsolver make again: it makes them plain files first."
            ) from None
        if not stopped.committed:
            raise _cannot_write(out_dir, stopped.cause, command) from None


def _apply(out_dir: Path, members: tuple[str, ...], stale: tuple[str, ...]) -> None:
    """Rename the journal's temporaries onto their members, remove the stale members, then the journal."""
    try:
        for name in members:
            try:
                os.replace(out_dir / temp_name(name), out_dir / name)
            except FileNotFoundError:
                continue  # renamed before the interruption
        for name in stale:
            (out_dir / name).unlink(missing_ok=True)
        atomic.fsync_dir(out_dir)
        (out_dir / JOURNAL).unlink()
        atomic.fsync_dir(out_dir)
    except OSError as exc:
        raise BadInputError(
            f"writing the files in {str(out_dir)!r} stopped halfway ({files.reason(exc)}); the journal "
            f"{str(out_dir / JOURNAL)!r} keeps the rest. Fix the cause, then run the same envsolver make "
            "again: it completes the set first."
        ) from None


def _roll_forward(out_dir: Path, command: str) -> None:
    """Make the links an interrupted commit left plain files again; complete the commit the journal of an earlier
    envsolver names; then delete temporaries no journal names."""
    try:
        swap.recover(out_dir)
    except OSError as exc:
        raise _cannot_write(out_dir, exc, command) from None
    journal = out_dir / JOURNAL
    try:
        members, stale = parse_journal(journal.read_text(encoding="utf-8"))
    except FileNotFoundError:
        members, stale = (), ()
    except (ValueError, OSError) as exc:
        raise BadInputError(
            f"{str(journal)!r} is not a journal envsolver wrote ({exc}); nothing was changed. Look at it, "
            f"then remove it: rm {shlex.quote(str(journal))}"
        ) from None
    if members or stale:
        _apply(out_dir, members, stale)
    try:
        for name in os.listdir(out_dir):
            if _leftover(name):
                (out_dir / name).unlink(missing_ok=True)
    except OSError as exc:
        raise _cannot_write(out_dir, exc, command) from None


def _waiting(out_dir: Path, wait_s: float) -> str:
    return f"waiting for another envsolver that is writing to {str(out_dir)!r} (up to {wait_s:g} s)"


def _cannot_write(path: Path, exc: OSError, command: str, out_dir: Path | None = None) -> BadInputError:
    """The error for a path that cannot be written, naming it, with a fix the user can run."""
    out_dir = out_dir or path
    blocker = files.blocking_file(path)
    if blocker is not None and blocker != path and exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return BadInputError(
            f"cannot create {str(path)!r}: {str(blocker)!r} is a file, not a directory; nothing was written. "
            + _out_fix("Pass --out a directory that does not go through a file", out_dir, command)
        )
    lead = "Pass --out a directory you can write to"
    if exc.errno in (errno.EACCES, errno.EPERM):
        target = next((p for p in (out_dir, *out_dir.parents) if p.is_dir()), out_dir.parent)  # what exists
        lead = f"Make it writable (chmod u+w {shlex.quote(str(target))}), or pass --out a directory you can write to"
    return BadInputError(
        f"cannot write to {str(path)!r}: {files.reason(exc)}; nothing was written. " + _out_fix(lead, out_dir, command)
    )


def _out_fix(lead: str, out_dir: Path, command: str) -> str:
    """`lead`, then ', e.g.: <command> --out <a directory this user can create>' when one is found. A command
    that has its own `--out DIR` (make --cluster: it writes DIR/<platform>) has it replaced, and the directory
    suggested stands for DIR."""
    command, given = _without_out(command)
    if given is not None and (out_dir == given or given in out_dir.parents):
        out_dir = given
    leaf = out_dir.name
    if leaf in ("", ".", "..") or len(leaf.encode("utf-8", "surrogateescape")) > 64 or not leaf.isprintable():
        leaf = "env"
    bases = [Path(tempfile.gettempdir()) / "envsolver"]
    with contextlib.suppress(RuntimeError):  # no home directory
        bases.insert(0, Path.home() / "envs")
    for base in bases:
        for candidate in [base / leaf, *(base / f"{leaf}-{n}" for n in range(2, 10))]:
            if candidate != out_dir and out_dir not in candidate.parents and _can_create(candidate):
                return f"{lead}, e.g.: {command} --out {shlex.quote(str(candidate))}"
    return f"{lead}."


def _without_out(command: str) -> tuple[str, Path | None]:
    """(the command without its `--out DIR`, DIR), or (the command, None) when it has none or cannot be split."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command, None
    if "--out" not in words[:-1]:
        return command, None
    at = words.index("--out")
    given = Path(words[at + 1])
    return shlex.join(words[:at] + words[at + 2 :]), given


def _can_create(path: Path) -> bool:
    """True when `path` is an empty writable directory, or could be made as one by this user."""
    try:
        if path.exists():
            return path.is_dir() and not any(path.iterdir()) and os.access(path, os.W_OK | os.X_OK)
        existing = next(p for p in path.parents if p.exists())
        return existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)
    except (OSError, StopIteration):
        return False
