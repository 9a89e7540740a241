"""Local channels made of the bundled snapshot's real conda-forge records, for tests of a lock that ages: a copy
of the snapshot's channel without the newest release of some packages stands for the channel as it was when a
lock was made, and the whole copy for the channel as it is now. Nothing here depends on which versions the
snapshot holds: the packages with an older release are found in it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from envsolver.lock import lockfile, snapshot
from envsolver.lock.lockfile import Lock
from envsolver.lock.snapshot import matchspec

SUBDIRS = ("linux-64", "noarch")
CONDA_FORGE = "conda-forge"


def _repodata(subdir: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads((snapshot.data_dir() / CONDA_FORGE / subdir / "repodata.json").read_text())
    return doc


def channel_without(root: Path, dropped: Iterable[tuple[str, str]] = ()) -> Path:
    """ROOT: a channel with the snapshot's conda-forge linux-64 and noarch records, less every record of each
    (name, version) in DROPPED."""
    gone = set(dropped)
    for subdir in SUBDIRS:
        doc = _repodata(subdir)
        for key in ("packages", "packages.conda"):
            records = doc.get(key)
            if isinstance(records, dict):
                doc[key] = {f: r for f, r in records.items() if (r["name"], r["version"]) not in gone}
        (root / subdir).mkdir(parents=True, exist_ok=True)
        (root / subdir / "repodata.json").write_text(json.dumps(doc))
    return root


def versions(subdir: str = "noarch") -> dict[str, set[str]]:
    """name -> the versions the snapshot's conda-forge SUBDIR holds."""
    out: dict[str, set[str]] = {}
    doc = _repodata(subdir)
    for key in ("packages", "packages.conda"):
        records = doc.get(key)
        for record in records.values() if isinstance(records, dict) else ():
            out.setdefault(record["name"], set()).add(record["version"])
    return out


def with_older(lock: Lock, leave_out: Iterable[str]) -> list[str]:
    """The noarch packages of LOCK, not named in LEAVE_OUT, of which the snapshot holds a version older than the
    lock's, by name."""
    held = versions("noarch")
    skip = set(leave_out)
    return sorted(
        e.name
        for e in lock.entries
        if e.subdir == "noarch"
        and e.name not in skip
        and any(matchspec.matches(v, f"<{e.version}") for v in held.get(e.name, ()))
    )


def read(path: Path) -> Lock:
    return lockfile.read(path, None)


def entry(lock: Lock, name: str) -> tuple[str, str]:
    """(version, build) of NAME in LOCK."""
    found = [(e.version, e.build) for e in lock.entries if e.name == name]
    assert len(found) == 1, f"{name} is in the lock once: {found}"
    return found[0]
