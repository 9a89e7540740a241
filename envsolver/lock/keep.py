"""The lock `make` would replace, kept: what a re-solve into the same directory holds on to.

When OUT/conda-lock.yml exists, make solves preferring every package of it (rattler's locked packages, see
solve.Locked): each stays at its locked version and build unless the new inputs need it to move, so a re-run
with the same inputs keeps the lock as it is even where the channels have newer builds, and an edit to the inputs
moves only what it must. `--update NAME` (conda-lock's flag; repeatable) takes NAME out of what is kept: NAME
moves to the newest build that fits, and only what its new version needs moves with it. A NAME the lock does not
hold is refused, naming the closest names it holds; `--update` without a lock is refused with the fix. To solve
every package anew, remove OUT/conda-lock.yml first.

The PyPI part is kept the same way (uv's model: the old lock's versions are preferences, `--update` names the
ones to upgrade): `pip_preferences` and `pip_upgrade` are what the PyPI resolver takes.
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envsolver.core.errors import BadInputError
from envsolver.lock.solve import Locked
from envsolver.net.pypi_index import normalize

LOCK = "conda-lock.yml"


@dataclass(frozen=True)
class Keep:
    """What a solve keeps of the lock at `path`: its conda packages but the updated ones (`conda`), and its PyPI
    versions but the updated ones (`pip_preferences`: name -> version), for the lock's `platform`."""

    path: Path
    platform: str
    conda: tuple[Locked, ...]
    updates: tuple[str, ...]  # the --update names, as the lock spells them
    pip_preferences: tuple[tuple[str, str], ...] = ()
    pip_upgrade: frozenset[str] = frozenset()  # the --update names that are PyPI packages of the lock

    def preferences(self) -> dict[str, str]:
        """PyPI name -> the old lock's version, for every PyPI package not updated (the PyPI resolver's
        `preferences`)."""
        return dict(self.pip_preferences)

    def locked_for(self, platform: str) -> tuple[Locked, ...]:
        """The packages a solve for PLATFORM prefers: the kept ones for the lock's own platform, none for another.
        Raises BadInputError (exit 2) where --update names packages of a lock for another platform."""
        if platform == self.platform:
            return self.conda
        if self.updates:
            raise BadInputError(
                f"--update {' '.join(self.updates)} keeps the {self.platform} packages of {str(self.path)!r}, but "
                f"this plan is for {platform}. Pass --platform {self.platform} to update that lock, or --out "
                f"another directory (without --update) to lock for {platform}."
            )
        return ()


def existing(out_dir: Path, updates: Sequence[str]) -> tuple[Keep | None, str | None]:
    """What make keeps of OUT_DIR/conda-lock.yml, and a warning when it exists but cannot be read (without
    --update nothing is kept then). Raises BadInputError (exit 2): --update without a lock, with a lock that
    cannot be read, or naming a package the lock does not hold."""
    path = out_dir / LOCK
    named = " ".join(f"--update {shlex.quote(u)}" for u in updates)
    if not path.exists() and not path.is_symlink():
        if updates:
            raise BadInputError(
                f"{named} re-solves the lock in {str(out_dir)!r}, but it holds none ({LOCK} does not exist). Run the "
                "same command without --update to write the lock, or pass --out the directory of the existing lock."
            )
        return None, None
    from envsolver.lock import lockfile  # with conda-lock's models: only where there is a lock to read

    try:
        lock = lockfile.read(path, None)
    except BadInputError as exc:
        if updates:
            raise BadInputError(f"{named} needs the lock it updates: {exc}") from None
        return None, f"the lock make replaces could not be read, so none of its packages were kept: {exc}"
    conda_names = {e.name for e in lock.entries}
    pip_names = {r.name for r in lock.pip}
    chosen: list[str] = []
    for update in updates:
        found = update.lower() if update.lower() in conda_names else normalize(update)
        if found not in conda_names | pip_names:
            raise _unknown(update, path, sorted(conda_names | pip_names))
        chosen.append(found)
    kept = tuple(
        Locked(e.name, e.subdir, e.file_name, e.sha256 or "", e.md5 or "") for e in lock.entries if e.name not in chosen
    )
    preferences = tuple(sorted((r.name, r.version) for r in lock.pip if r.name not in chosen))
    upgrade = frozenset(name for name in chosen if name in pip_names)
    return Keep(path, lock.platform, kept, tuple(dict.fromkeys(chosen)), preferences, upgrade), None


def _unknown(update: str, path: Path, held: list[str]) -> BadInputError:
    closest = difflib.get_close_matches(update.lower(), held, n=3, cutoff=0.0)
    return BadInputError(
        f"--update {update[:128]!r}: {str(path)!r} holds no package of that name (the closest it holds: "
        f"{', '.join(closest) or 'none'}). Pass the name of a package the lock holds, e.g. --update "
        f"{shlex.quote(closest[0]) if closest else 'NAME'}."
    )
