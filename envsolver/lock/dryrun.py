"""`make --dry-run`: what writing a set of files into a directory would do, decided as writers/fileset.py
decides it, with nothing written.

Each member is `create` (no file yet), `unchanged` (the same stamped text), `overwrite` (a file envsolver wrote,
whose hash still matches), `remove` (a member an earlier run wrote that this set has not), or `refused` (edited by
hand, or not written by envsolver, and no --force). One refused member refuses the whole set, as a real run does.
Pure apart from reading the directory.

With a lock solved, it also says what the new lock changes package by package against the conda-lock.yml it
would replace (`against_lock`: lock/pkgdiff.py's diff, the one `envsolver diff` prints).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envsolver.lock import pkgdiff
from envsolver.lock.writers import files, fileset
from envsolver.lock.writers.fileset import MEMBER

if TYPE_CHECKING:
    from envsolver.lock.run import LockResult

ACTIONS = ("create", "overwrite", "unchanged", "remove", "refused")


def preview(out_dir: Path, texts: Mapping[str, str], force: bool) -> dict[Path, str]:
    """Path -> action (one of ACTIONS) for writing `texts` (member name -> text, unstamped) into `out_dir`."""
    stamped = fileset.stamped_texts(texts)
    try:
        present = {name for name in os.listdir(out_dir) if MEMBER.fullmatch(name)}
    except OSError:
        present = set()  # no directory yet (or unreadable: the real run names that error)
    actions: dict[Path, str] = {}
    for name in [*stamped, *sorted(present - set(stamped))]:
        path = out_dir / name
        try:
            current = fileset.read_member(path)
        except FileNotFoundError:
            actions[path] = "create"
            continue
        except OSError:
            actions[path] = "refused"
            continue
        if name in stamped and current == stamped[name]:
            actions[path] = "unchanged"
        elif files.edited_by_hand(current) and not force:
            actions[path] = "refused"
        else:
            actions[path] = "overwrite" if name in stamped else "remove"
    return actions


def would_write(actions: Mapping[Path, str]) -> bool:
    """False when a refused member stops the whole set."""
    return "refused" not in actions.values()


def lines(actions: Mapping[Path, str]) -> list[str]:
    """The text `make --dry-run` prints: one line per file (action, path), then, when a real run would write
    them, how to write them (when it would refuse, `refusal` is the error)."""
    out = [f"{action:<9}  {path}" for path, action in actions.items()]
    if would_write(actions):
        out.append("dry run: nothing was written. Run the same command without --dry-run to write these files.")
    return out


def refusal(actions: Mapping[Path, str]) -> str | None:
    """The error a dry run ends with (exit 2, as the real run's) when the real run would refuse; None when it
    would write."""
    refused = [str(path) for path, action in actions.items() if action == "refused"]
    return f"dry run: a real run would refuse: {fileset.edited_refusal(refused)}" if refused else None


@dataclass(frozen=True)
class Against:
    """The package diff from the lock a run would replace (`path`, OUT/conda-lock.yml) to what it solved;
    `error` instead where that lock cannot be read."""

    path: Path
    diff: pkgdiff.Diff | None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """{"against": PATH, "differ", "counts", "changes"} (pkgdiff.Diff.to_json), or {"against", "error"}."""
        return {"against": str(self.path), **(self.diff.to_json() if self.diff else {"error": self.error})}


def against_lock(out_dir: Path, result: LockResult, pypi_of_conda: Mapping[str, str]) -> Against | None:
    """What RESULT changes, package by package, against the conda-lock.yml in OUT_DIR that writing it would
    replace; None when OUT_DIR holds none."""
    from envsolver.core.errors import BadInputError
    from envsolver.lock import lockfile

    path = out_dir / "conda-lock.yml"
    if not path.exists() and not path.is_symlink():
        return None
    try:
        old = lockfile.read(path, None)
    except BadInputError as exc:
        return Against(path, None, str(exc))
    platform = result.plan.platform
    new = pkgdiff.of_lock(result.records.get(platform, ()), result.pip.get(platform, ()))
    return Against(path, pkgdiff.diff(pkgdiff.of_lock(old.entries, old.pip), new, pypi_of_conda))


def package_lines(against: Against | None) -> list[str]:
    """The package diff as `make --dry-run` prints it after the files: a heading naming the lock, then its lines."""
    if against is None:
        return []
    if against.diff is None:
        return [f"packages: {against.path} cannot be read, so there is no package diff: {against.error}"]
    return [f"packages against {against.path}:", *pkgdiff.lines(against.diff)]
