"""Whether `envsolver install LOCK -p PREFIX` has nothing to do, decided from what the last install recorded, before
anything a real install needs (conda-lock's models, rattler, the downloader) is imported, and before click (the no-op
in cli/fast.py): the standard library only (core.boundedread to read, core.atomic to record, lock/writers/setmark to
see the lock's set is whole), and none of its slower modules (dataclasses, typing, platform).

After an install that left PREFIX holding exactly the lock, install records (PREFIX/etc/envsolver/installed.json):
  - the request: the sha256 of the lock file's bytes, --platform, the --mirror values as given, this host's
    platform and envsolver's version (so the same command, here, by the same envsolver);
  - the prefix as it was left: its path and a digest of every package record (conda-meta/*.json: name, size,
    mtime), of the PyPI part's record, the prefix's lock metadata, every site-packages *.dist-info (name,
    METADATA's and RECORD's size and mtime) and every file the PyPI part's RECORDs list (size and mtime);
  - what the report said (platform, package count, the PyPI files in place) and whether the lock carries the
    metadata the post-install hook needs (its arch list), so the no-op needs neither the lock nor the prefix's copy
    of its metadata.
A later install whose request and prefix digest are equal prints that report ("already up to date") without
reading the lock. Any difference (an edited lock, another mirror, a package removed or added by conda or pip, a
record touched) takes the full path, which decides from the lock and the records as before and proves what it
changes. The record is only a shortcut to that decision: a wrong or hand-made one can make install skip work, never
install or trust a file (what is installed is what the prefix's owner put there).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from envsolver.core import boundedread
from envsolver.lock.writers import setmark

STATE = Path("etc") / "envsolver" / "installed.json"
# The journal of a link in progress (install/linking.py); a prefix that holds one is never up to date.
LINKING = Path("conda-meta") / ".envsolver-linking"
# 2: `hook` recorded; 3: the full path removes PyPI's copies over the conda part (install/shadowing), which a
# record written before may have called up to date; 4: the PyPI part's files are proven (install/pipfiles) and
# their RECORDs and files are in the prefix digest
FORMAT = 4
MAX_LOCK_BYTES = 32 << 20  # lock/lockfile.py MAX_BYTES: a larger lock is refused the full way, so never recorded
MAX_STATE_BYTES = 1 << 20
MAX_RECORD_BYTES = 16 << 20  # install/pipfiles.MAX_RECORD_BYTES


class Recorded:
    """What the install that left the prefix reported (a plain class: dataclasses imports inspect and ast)."""

    __slots__ = ("hook", "packages", "pip", "platform")

    def __init__(self, platform: str, packages: int, pip: tuple[str, ...], hook: bool) -> None:
        self.platform = platform
        self.packages = packages
        self.pip = pip  # 'deepspeed 0.19.8' for each PyPI file in place
        self.hook = hook  # the lock carries the hook's metadata (its arch list): the hook runs unless --no-hook


def request(lock_path: Path, platform: str | None, mirrors: Sequence[str], version: str) -> str | None:
    """The digest of what is asked: the lock's bytes, the options that change what install does, this host, this
    envsolver. None when the lock cannot be read (or is too large), or when a file beside it names another set
    (lock/writers/setmark.py): then the full path decides (and refuses that)."""
    if not setmark.agrees(lock_path):
        return None
    digest = hashlib.sha256(f"envsolver-install-request {FORMAT}\0{version}\0".encode())
    try:  # a regular file only: a FIFO or /dev/zero as the lock is refused at once (core.boundedread)
        digest.update(boundedread.read_regular(lock_path, MAX_LOCK_BYTES))
    except (OSError, boundedread.Refused):
        return None
    parts = [str(platform), f"{sys.platform}-{os.uname().machine}", *mirrors]  # platform.machine()
    digest.update(_utf8("\0".join(["", *parts])))
    return digest.hexdigest()


def _utf8(text: str) -> bytes:
    """TEXT's bytes for a digest, whatever it holds: a word of argv that was not UTF-8 (`--mirror $'\\xff'`)
    reaches Python as U+DC80..U+DCFF (PEP 383), which strict UTF-8 refuses."""
    return text.encode("utf-8", "surrogatepass")


def _stat(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return "-"
    return f"{st.st_size}:{st.st_mtime_ns}"


def prefix_digest(prefix: Path) -> str | None:
    """The digest of the prefix's package records as they are now; None without conda-meta/."""
    meta = prefix / "conda-meta"
    try:
        records = sorted(e.name for e in os.scandir(meta) if e.name.endswith(".json"))
    except OSError:
        return None
    digest = hashlib.sha256(_utf8(f"envsolver-prefix-records 1\0{prefix.absolute()}\0"))
    for name in records:
        digest.update(_utf8(f"conda-meta/{name}\0{_stat(meta / name)}\0"))
    for name in ("pip-part.json", "lock-metadata.json"):
        digest.update(_utf8(f"etc/envsolver/{name}\0{_stat(prefix / 'etc' / 'envsolver' / name)}\0"))
    digest.update(_utf8(f"{LINKING}\0{_stat(prefix / LINKING)}\0"))
    for site in sorted((prefix / "lib").glob("python3*/site-packages")):
        try:
            infos = sorted(e.name for e in os.scandir(site) if e.name.endswith(".dist-info"))
        except OSError:
            continue
        for info in infos:
            digest.update(_utf8(f"{site.relative_to(prefix)}/{info}\0{_stat(site / info / 'METADATA')}\0"))
            digest.update(_utf8(f"{_stat(site / info / 'RECORD')}\0"))
    for line in _pypi_files(prefix):
        digest.update(_utf8(line))
    return digest.hexdigest()


def _pypi_files(prefix: Path) -> list[str]:
    """`PATH\0SIZE:MTIME\0` of every file the RECORD of each PyPI-part dist-info lists (pip-part.json names the
    dist-infos): a file changed by hand, or by a conda package linked over it, changes the digest, so install takes
    the full path, which proves the files (install/pipfiles) and installs them again. Stat calls only (deepspeed:
    1,500); nothing at all when the record cannot be read."""
    try:  # a regular file only: a FIFO at pip-part.json is refused at once (core.boundedread), never waited on
        raw = boundedread.read_regular(prefix / "etc" / "envsolver" / "pip-part.json", MAX_STATE_BYTES)
        packages = json.loads(raw).get("packages")
        infos = sorted(str(v.get("dist_info") or "") for v in packages.values() if isinstance(v, dict))
    except (OSError, ValueError, AttributeError, RecursionError):  # boundedread.Refused is a ValueError
        return []
    import csv  # only when there is a PyPI part
    import io

    out = []
    for info in infos:
        if not info or info.startswith("/") or ".." in Path(info).parts:
            continue
        try:
            text = boundedread.read_regular(prefix / info / "RECORD", MAX_RECORD_BYTES, follow=False).decode()
            rows = list(csv.reader(io.StringIO(text, newline="")))
        except (OSError, ValueError, csv.Error):  # Refused and UnicodeDecodeError are ValueErrors
            out.append(f"{info}\0-\0")
            continue
        site = (prefix / info).parent
        out += [f"{info}/{row[0]}\0{_stat(site / row[0])}\0" for row in rows if row and row[0]]
    return out


def unchanged(prefix: Path, asked: str | None) -> Recorded | None:
    """What the last install reported, when the request digest `asked` and the prefix's records are what it
    recorded; None otherwise (then the full path decides)."""
    if asked is None:
        return None
    try:
        doc = json.loads(boundedread.read_regular(prefix / STATE, MAX_STATE_BYTES))
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("request") != asked:
            return None
        if doc.get("prefix") != prefix_digest(prefix):
            return None
        pip = doc["pip"]
        if not isinstance(pip, list) or not all(isinstance(p, str) for p in pip):
            return None
        if not isinstance(doc["platform"], str) or type(doc["packages"]) is not int or type(doc["hook"]) is not bool:
            return None
        return Recorded(doc["platform"], doc["packages"], tuple(pip), doc["hook"])
    except (OSError, ValueError, KeyError, RecursionError):  # boundedread.Refused is a ValueError
        return None


def record(prefix: Path, asked: str | None, done: Recorded) -> None:
    """Keep the request and the prefix's records as this install left them. Best effort: a record that cannot be
    written only means the next install takes the full path."""
    from envsolver.core import atomic  # only when an install wrote something

    if asked is None:
        return
    doc = {
        "format": FORMAT,
        "request": asked,
        "prefix": prefix_digest(prefix),
        "platform": done.platform,
        "packages": done.packages,
        "pip": list(done.pip),
        "hook": done.hook,
    }
    try:
        atomic.replace(prefix / STATE, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
    except OSError:
        return
