"""Link a lock's packages into a prefix so that a failure (a full disk above all) leaves no half-linked package.

rattler links package after package and writes each one's conda-meta record once its files are in place; a full
disk stops it in the middle of a package, with the packages before it linked and partial files of that one left.
So, before rattler starts, the prefix is surveyed and the survey journaled (PREFIX/conda-meta/.envsolver-linking,
JSON, written aside and fsynced): whether the prefix existed, each conda-meta record (name, size, mtime, inode),
the files and symbolic links that no record claims (pip's, the user's, __pycache__) and the directories. When
linking fails or is interrupted, undo() puts the prefix back as far as it can be:
  - where every record that was there is still there as it was (rattler unlinked nothing, as on a first
    install or one that only adds), everything this run made is removed: its records, their files, the partial
    ones, the directories it created; a prefix that did not exist is removed. The prefix is as it was.
  - else (rattler had already unlinked packages the lock replaces, which cannot be brought back) every file that
    no remaining record claims and that was not there before is removed, and the directories this run made that
    are left empty: the prefix holds whole packages only, each with its record, and the message names those the
    lock has that are not linked. The same command run again links them.
The journal goes last. A run killed while linking (SIGKILL, a crash) leaves it, and the next install into the
prefix undoes first (recover()), with the same rules. A file that cannot be removed is named, and stays in the
journal for the next install.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsolver.core import atomic, boundedread
from envsolver.core.errors import BadInputError, EnvsolverError
from envsolver.install.installstate import LINKING
from envsolver.lock.solve import LinkFailed

FORMAT = 1
MAX_RECORD = 256 << 20  # a conda-meta record (the largest real ones, CUDA toolkits', are a few MiB)
MAX_JOURNAL = 1 << 30  # the survey of a prefix with a million paths
SHOWN = 5  # paths named in a message


@dataclass(frozen=True)
class Survey:
    """A prefix as it was before rattler linked: whether it existed, its records (file name -> identity), the
    files and links no record claims, its directories (paths relative to the prefix)."""

    existed: bool
    records: dict[str, str]
    unclaimed: frozenset[str]
    dirs: frozenset[str]


@dataclass(frozen=True)
class Undone:
    """What undo() did: `whole` when the prefix is as it was; the records this run wrote that are kept (whole
    packages), the paths removed, and those that could not be (with the error)."""

    whole: bool
    kept_new: tuple[str, ...]
    removed: tuple[str, ...]
    stuck: tuple[tuple[str, str], ...]


def link(prefix: Path, run: Callable[[], None], wanted: Iterable[str]) -> None:
    """Journal the prefix, RUN (rattler's link: solve.install_records), then remove the journal. When RUN raises,
    undo first: a LinkFailed is raised again as an EnvsolverError that says what rattler said, what the prefix
    holds now and the fix (another EnvsolverError: its message, then what the prefix holds); an interrupt
    (KeyboardInterrupt, a held signal) goes on as it came. WANTED: the file names of the records the lock wants
    (NAME-VERSION-BUILD.json), for the message. Raises EnvsolverError (exit 2), before anything is linked when the
    journal cannot be written (a full disk: nothing was changed)."""
    before = survey(prefix)
    journal = prefix / LINKING
    try:
        atomic.replace(journal, json.dumps(_to_json(before)).encode())
    except OSError as exc:
        with contextlib.suppress(OSError):
            undo(prefix, before)
        raise EnvsolverError(
            f"cannot write {str(journal)!r} ({exc.strerror or exc}), the record that lets an interrupted link be "
            f"undone; nothing was linked. {_fix(prefix, exc.strerror or '')}"
        ) from None
    try:
        run()
    except LinkFailed as exc:
        state = _state(prefix, undo(prefix, before), wanted)
        raise EnvsolverError(
            f"installing into {str(prefix)!r} failed: {exc.cause}; {state}. {_fix(prefix, exc.cause)}"
        ) from None
    except EnvsolverError as exc:
        state = _state(prefix, undo(prefix, before), wanted)
        raise EnvsolverError(f"{str(exc).rstrip()} (When it stopped, {state}.)") from None
    except BaseException:
        undo(prefix, before)
        raise
    journal.unlink(missing_ok=True)


def recover(prefix: Path) -> Undone | None:
    """Undo the link a killed install left journaled in PREFIX (link()'s rules); None when there is none. Raises
    BadInputError (exit 2) for a journal envsolver did not write, EnvsolverError when files stay."""
    journal = prefix / LINKING
    try:
        data = boundedread.read_regular(journal, MAX_JOURNAL, follow=False)
    except FileNotFoundError:
        return None
    except (OSError, boundedread.Refused) as exc:
        raise _not_ours(journal, str(exc)) from None
    try:
        before = _from_json(json.loads(data))
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise _not_ours(journal, str(exc)) from None
    done = undo(prefix, before)
    if done.stuck:
        raise EnvsolverError(
            f"an earlier install into {str(prefix)!r} stopped while linking, and {_stuck(done)}; {str(journal)!r} "
            "keeps the record. Make them removable, then run the same command again."
        )
    return done


def recovered_note(prefix: Path, done: Undone) -> str:
    """The warning an install that began with recover() gives."""
    what = f"the {len(done.removed)} files it had written were removed" if done.removed else "nothing was left of it"
    kept = f"; the whole packages it had linked were kept: {_names(done.kept_new)}" if done.kept_new else ""
    return f"an earlier install into {prefix} stopped while linking; {what}{kept}"


def survey(prefix: Path) -> Survey:
    """The prefix as it is now (link()'s journal)."""
    if not os.path.lexists(prefix):
        return Survey(False, {}, frozenset(), frozenset())
    records = _records(prefix)
    claimed = _claimed(prefix, records)
    paths, dirs = _walk(prefix)
    return Survey(True, records, frozenset(paths - claimed), frozenset(dirs))


def undo(prefix: Path, before: Survey) -> Undone:
    """Put PREFIX back as far as it can be (the module's docstring), then remove the journal unless a path could
    not be removed."""
    now = _records(prefix) if os.path.lexists(prefix) else {}
    whole = all(now.get(name) == ident for name, ident in before.records.items())
    new = tuple(sorted(name for name in now if before.records.get(name) != now[name]))
    if whole and not before.existed:
        shutil.rmtree(prefix, ignore_errors=True)
        left = (("", "it could not be removed"),) if os.path.lexists(prefix) else ()
        return Undone(True, (), (), left)
    keep_records = {name: ident for name, ident in now.items() if not whole or name in before.records}
    keep = before.unclaimed | _claimed(prefix, keep_records) | {str(LINKING)}
    paths, dirs = _walk(prefix)
    removed: list[str] = []
    stuck: list[tuple[str, str]] = []
    for path in sorted(paths - keep):
        try:
            os.unlink(prefix / path)
            removed.append(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            stuck.append((path, exc.strerror or str(exc)))
    for directory in sorted(dirs - before.dirs, key=lambda d: -d.count("/")):
        with contextlib.suppress(OSError):  # not empty: something kept is in it
            os.rmdir(prefix / directory)
    if not stuck:
        (prefix / LINKING).unlink(missing_ok=True)
    return Undone(whole, () if whole else new, tuple(removed), tuple(stuck))


def _records(prefix: Path) -> dict[str, str]:
    """conda-meta record file name -> "size:mtime_ns:inode"."""
    out = {}
    with contextlib.suppress(OSError), os.scandir(prefix / "conda-meta") as entries:
        for entry in entries:
            if entry.name.endswith(".json") and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    out[entry.name] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
    return out


def _claimed(prefix: Path, records: Mapping[str, str]) -> set[str]:
    """The paths the RECORDS claim: each record file itself and every path its `files` and `paths_data` list."""
    claimed = {f"conda-meta/{name}" for name in records}
    for name in records:
        try:
            doc = json.loads(boundedread.read_regular(prefix / "conda-meta" / name, MAX_RECORD, follow=False))
        except (OSError, boundedread.Refused, ValueError, RecursionError):
            continue
        if not isinstance(doc, dict):
            continue
        listed: list[Any] = list(doc.get("files") or []) if isinstance(doc.get("files"), list) else []
        data = doc.get("paths_data")
        if isinstance(data, dict) and isinstance(data.get("paths"), list):
            listed += [p.get("_path") for p in data["paths"] if isinstance(p, dict)]
        claimed.update(p for p in listed if isinstance(p, str))
    return claimed


def _walk(prefix: Path) -> tuple[set[str], set[str]]:
    """(files and symbolic links, directories) under PREFIX, relative to it; links are not followed."""
    paths: set[str] = set()
    dirs: set[str] = set()
    pending = [""]
    while pending:
        relative = pending.pop()
        with contextlib.suppress(OSError), os.scandir(prefix / relative) as entries:
            for entry in entries:
                path = f"{relative}/{entry.name}" if relative else entry.name
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if is_dir:
                    dirs.add(path)
                    pending.append(path)
                else:
                    paths.add(path)
    return paths, dirs


def _state(prefix: Path, done: Undone, wanted: Iterable[str]) -> str:
    """What the prefix holds after undo(), in words, for the failure's message."""
    partial = ""
    if done.removed:
        more = f" and {len(done.removed) - SHOWN} more" if len(done.removed) > SHOWN else ""
        which = "this run had written" if done.whole else "it had written of the packages it did not finish"
        partial = f"; the {len(done.removed)} files {which} ({', '.join(done.removed[:SHOWN])}{more}) were removed"
    if done.stuck:
        return f"{_stuck(done)}: {str(prefix / LINKING)!r} keeps the record, and the next install removes them first"
    if done.whole and not os.path.lexists(prefix):
        return "nothing of it is left (the prefix did not exist before, and was removed again)"
    if done.whole:
        return "the prefix is as it was" + partial
    missing = sorted(set(wanted) - set(_records(prefix)))
    return (
        "rattler had already unlinked packages that the lock replaces, so the prefix cannot be put back: it holds "
        f"whole packages only, each with its record (linked by this run: {_names(done.kept_new) or 'none'}; not "
        f"linked: {_names(missing) or 'none'}){partial}. It is not usable until the rest is linked"
    )


def _names(records: Iterable[str]) -> str:
    names = [name.removesuffix(".json") for name in records]
    more = f" and {len(names) - 2 * SHOWN} more" if len(names) > 2 * SHOWN else ""
    return ", ".join(names[: 2 * SHOWN]) + more


def _stuck(done: Undone) -> str:
    items = ", ".join(f"{path or 'the prefix'} ({why})" for path, why in done.stuck[:SHOWN])
    return f"{len(done.stuck)} of its files could not be removed: {items}"


def _fix(prefix: Path, cause: str) -> str:
    """The fix for a link that failed for CAUSE: free space for a full disk, else the cause."""
    if "os error 28" in cause or "No space left" in cause or "quota" in cause.lower():
        where = next((p for p in (prefix, *prefix.parents) if p.exists()), prefix)
        return (
            f"Free space on the file system that holds it (df -h {shlex.quote(str(where))}), then run the same "
            "command again."
        )
    return "Fix the cause, then run the same command again."


def _to_json(survey: Survey) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "existed": survey.existed,
        "records": survey.records,
        "unclaimed": sorted(survey.unclaimed),
        "dirs": sorted(survey.dirs),
    }


def _from_json(doc: Any) -> Survey:
    """A journal read back, every field checked. Raises ValueError naming what is wrong."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"it is not format {FORMAT}")
    records, unclaimed, dirs = doc["records"], doc["unclaimed"], doc["dirs"]
    if not isinstance(doc["existed"], bool) or not isinstance(records, dict):
        raise ValueError("'existed' or 'records' is not what envsolver writes")
    for items in (unclaimed, dirs, list(records), list(records.values())):
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError("a path is not text")
    for path in [*unclaimed, *dirs]:
        if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
            raise ValueError(f"{path[:200]!r} is not a path inside the prefix")
    return Survey(doc["existed"], dict(records), frozenset(unclaimed), frozenset(dirs))


def _not_ours(journal: Path, why: str) -> BadInputError:
    return BadInputError(
        f"{str(journal)!r} is not a journal envsolver wrote ({why}); nothing was changed. Look at it, then remove it "
        f"(rm {shlex.quote(str(journal))}) and run the same command again."
    )
