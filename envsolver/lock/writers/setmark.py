"""Every file of a set names the set it belongs to, so a set mixed from two runs is found by what it says.

make writes one line into the header of each file of a set, just above its `# envsolver-sha256:` line:

    # envsolver-set: 5c1f0e9a2b7d4c38 (environment.yml, conda-lock.yml, virtual-packages.yml, conda-linux-64.lock)

The id is a digest of every file's name and text (before the line and the hash are added), so two runs that write
the same files write the same line, and any change to any file changes it in all of them. writers/fileset.py
replaces a set as one step, so make never leaves a mix; this line is what finds a mix made otherwise (files copied
from two runs into one directory, a set an earlier envsolver left half-written): `install` and `verify` refuse a
lock beside a file of another set (refusal()).

The names a set may hold (MEMBER) are defined here, for writers/fileset.py and every reader. Standard library
and core.boundedread only: the no-op install (cli/fast.py) asks agrees() before click is imported.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

from envsolver.core import boundedread

LINE = "# envsolver-set: "
ID_LENGTH = 16
HEAD_BYTES = 16 << 10  # the header of every file make writes is a few hundred bytes
# The files a set may hold: environment.yml, conda-lock.yml, virtual-packages.yml, conda-<platform>.lock
# (linux-64, osx-arm64, ...) and conda-<platform>.pip.txt (an explicit lock's PyPI part).
MEMBER = re.compile(
    r"environment\.yml|conda-lock\.yml|virtual-packages\.yml|conda-[a-z0-9]+-[a-z0-9]+\.(?:lock|pip\.txt)"
)


def set_id(texts: Mapping[str, str]) -> str:
    """The set's id: the first ID_LENGTH hex digits of a sha256 over every (name, text), in name order."""
    digest = hashlib.sha256(b"envsolver-set 1\0")
    for name in sorted(texts):
        digest.update(f"{name}\0{texts[name]}\0".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:ID_LENGTH]


def line(ident: str, names: list[str]) -> str:
    return f"{LINE}{ident} ({', '.join(names)})\n"


def mark(texts: Mapping[str, str]) -> dict[str, str]:
    """Each text with the set's line added at the end of its leading comment block (where files.stamp then puts
    the hash line, after it)."""
    ident, names = set_id(texts), list(texts)
    out = {}
    for name, text in texts.items():
        lines = text.splitlines(keepends=True)
        split = next((i for i, row in enumerate(lines) if not row.startswith("#")), len(lines))
        if split and not lines[split - 1].endswith("\n"):
            lines[split - 1] += "\n"
        out[name] = "".join([*lines[:split], line(ident, names), *lines[split:]])
    return out


def parse(text: str) -> tuple[str, tuple[str, ...]] | None:
    """(id, the set's file names) from the set line in TEXT's leading comment block; None when it has none (a file
    an earlier envsolver wrote, or one written by hand) or the line is not one make writes."""
    for row in text.splitlines():
        if not row.startswith("#"):
            return None
        if not row.startswith(LINE):
            continue
        ident, _, rest = row[len(LINE) :].partition(" ")
        names = tuple(rest[1:-1].split(", ")) if rest.startswith("(") and rest.endswith(")") else ()
        if len(ident) != ID_LENGTH or not all(c in "0123456789abcdef" for c in ident) or not names:
            return None
        return (ident, names) if all(MEMBER.fullmatch(n) for n in names) else None
    return None


def _of(path: Path) -> tuple[str, tuple[str, ...]] | None:
    """The set PATH says it belongs to; None when it says none or cannot be read as a regular file."""
    try:
        head = boundedread.read_head(path, HEAD_BYTES)
    except (OSError, boundedread.Refused):
        return None
    return parse(head.decode("utf-8", "replace"))


def _disagreeing(lock: Path) -> tuple[str, dict[str, str]]:
    """(LOCK's set id, name -> set id of each file beside LOCK that names another set); ("", {}) when LOCK names
    no set (nothing can disagree with it). Files beside it that name no set are not counted."""
    own = _of(lock)
    if own is None:
        return "", {}
    try:
        names = sorted(n for n in os.listdir(lock.parent) if MEMBER.fullmatch(n) and n != lock.name)
    except OSError:
        return own[0], {}
    found = {}
    for name in names:
        theirs = _of(lock.parent / name)
        if theirs is not None and theirs[0] != own[0]:
            found[name] = theirs[0]
    return own[0], found


def agrees(lock: Path) -> bool:
    """True unless a file beside LOCK names another set than LOCK's (what refusal() refuses)."""
    return not _disagreeing(lock)[1]


def refusal(lock: Path) -> str | None:
    """Why LOCK is not installed or verified when a file beside it names another set, with the fix; None when
    every file beside it that names a set names LOCK's."""
    import shlex

    own, odd = _disagreeing(lock)
    if not odd:
        return None
    directory = lock.parent
    listed = ", ".join(f"{name} of set {ident}" for name, ident in odd.items())
    quoted = " ".join(shlex.quote(str(directory / name)) for name in odd)
    return (
        f"the files in {str(directory)!r} are not one set: {lock.name} is of set {own}, but {listed} (copied from "
        "another run, or left by a make that was stopped); nothing was changed. Write the set again with the "
        f"envsolver make that wrote it (its command is in the header of {lock.name}) and --out "
        f"{shlex.quote(str(directory))}, or move the other set's files away (e.g. rm {quoted}) and run this again."
    )
