"""Whether a prefix's site-packages holds a locked PyPI file's own files: the proof behind PREFIX/etc/envsolver/
pip-part.json, which install and verify's lock_drift share (issue 32: pip said "already satisfied" when the same
version of another file was installed, and envsolver recorded the new lock's sha256 over it).

pip lists every file it installs in the dist-info's RECORD (the wheel format's RECORD: `path,sha256=DIGEST,size`,
DIGEST the URL-safe base64 of the sha256 without padding). A release is in place when

- pip-part.json holds the lock file's sha256 and the sha256 of the RECORD envsolver found after installing it, and
  the dist-info of that name and version holds that RECORD now (`check`: a reinstall from another file writes
  another RECORD); and
- every file that RECORD lists with a hash has the size and the bytes it gives (a file changed under pip, by hand
  or by a conda package linked over it, is not in place).

Right after pip ran (`prove`), before the sha256 is recorded: the RECORD must be one pip wrote in that run (another
file than the one before it ran: a release pip left alone is not proven), its files as above, and, for a wheel,
the wheel's own RECORD must agree with it for every file the wheel installs into site-packages (its dist-info's
METADATA and WHEEL included), so the files are that wheel's and no other build's of the same version. An sdist is
built by pip, so its files have no hashes to compare; its proof is that pip, given nothing but the staged sdist
(proven by its sha256) and told to reinstall, wrote a new RECORD, and that METADATA names the sdist's release.

Every file is read as core.boundedread reads a prefix's files: regular files only (a FIFO or a device is refused at
once, never waited on), no symbolic link, no path outside the prefix, RECORD itself bounded in size.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import tarfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envsolver.core import boundedread
from envsolver.net import pypi_index as index

MAX_RECORD_BYTES = 16 << 20  # deepspeed's RECORD is about 200 KB: 1,500 files
MAX_ROWS = 200_000
MAX_METADATA_BYTES = 1 << 20
MAX_MEMBER_BYTES = 16 << 20  # a wheel's RECORD, an sdist's PKG-INFO


# Which file a RECORD is: (device, inode, change time). A file pip writes anew differs in one of them from the one it
# replaced (the change time at least: renaming or writing a file sets it), whatever inode the new one got.
Identity = tuple[int, int, int]


class NotProven(Exception):
    """The installed files are not the locked file's; the message says which and how they differ."""


@dataclass(frozen=True)
class Row:
    path: str  # as RECORD gives it: relative to site-packages (a script: ../../../bin/NAME)
    digest: str  # 'sha256=...', '' for a file recorded without one (.pyc, RECORD itself)
    size: int | None


@dataclass(frozen=True)
class Installed:
    """A release's dist-info in a prefix, read: where it is, its RECORD's sha256 and rows, and which file the
    RECORD is (Identity)."""

    info: Path
    record_sha256: str
    rows: tuple[Row, ...]
    identity: Identity


def site_packages(prefix: Path) -> list[Path]:
    return sorted(p for p in (prefix / "lib").glob("python3*/site-packages") if p.is_dir())


def metadata_version(path: Path) -> str | None:
    """Version: from a METADATA (or PKG-INFO) file's headers; None when it cannot be read."""
    try:  # a regular file only: a FIFO or device in site-packages is refused at once (core.boundedread)
        head = boundedread.read_head(path, MAX_METADATA_BYTES).decode("utf-8", "replace")
    except (OSError, boundedread.Refused):
        return None
    return _header(head, "Version")


def _header(text: str, name: str) -> str | None:
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key == name:
            return value.strip() or None
    return None


def dist_infos(prefix: Path, name: str) -> list[tuple[Path, str | None]]:
    """Each *.dist-info of NAME (normalized) in PREFIX's site-packages, with its version (METADATA's, else the
    directory name's), in path order."""
    out = []
    for site in site_packages(prefix):
        for info in sorted(site.glob("*.dist-info")):
            dist, _, version = info.name[: -len(".dist-info")].partition("-")
            if index.normalize(dist) == name:
                out.append((info, metadata_version(info / "METADATA") or version or None))
    return out


def find(prefix: Path, name: str, version: str) -> Path | None:
    """The dist-info of NAME VERSION in PREFIX's site-packages, None when there is none."""
    return next((info for info, found in dist_infos(prefix, name) if found == version), None)


def read(info: Path) -> Installed:
    """INFO's RECORD, read and parsed. Raises NotProven when it is missing, not a regular file, too large or not
    a RECORD."""
    path = info / "RECORD"
    try:  # a regular file only, not through a link (core.boundedread), read up to one byte past the limit
        with boundedread.open_regular(path, follow=False) as handle:
            st = os.fstat(handle.fileno())
            data = handle.read(MAX_RECORD_BYTES + 1)
    except boundedread.Refused as exc:
        raise NotProven(f"{info.name}/RECORD is {exc}") from None
    except OSError as exc:
        raise NotProven(f"{info.name} has no readable RECORD ({exc.strerror or exc})") from None
    if len(data) > MAX_RECORD_BYTES:
        raise NotProven(f"{info.name}/RECORD is larger than {MAX_RECORD_BYTES} bytes")
    return Installed(info, hashlib.sha256(data).hexdigest(), parse_record(data, info.name), _identity(st))


def parse_record(data: bytes, what: str) -> tuple[Row, ...]:
    """A RECORD's rows. Raises NotProven when it is not UTF-8 CSV of path, hash, size."""
    try:
        lines = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise NotProven(f"{what}'s RECORD is not readable: {exc}") from None
    if len(lines) > MAX_ROWS:
        raise NotProven(f"{what}'s RECORD lists more than {MAX_ROWS} files")
    rows = []
    for line in lines:
        if not line:
            continue
        if len(line) != 3 or not line[0] or (line[2] and not (line[2].isascii() and line[2].isdigit())):
            raise NotProven(f"{what}'s RECORD has a row that is not path,hash,size: {line[:3]!r:.200}")
        rows.append(Row(line[0], line[1], int(line[2]) if line[2] else None))
    return tuple(rows)


def record_digest(data: bytes) -> str:
    """A file's digest as RECORD writes it."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _file_digest(path: Path, size: int | None) -> str:
    """PATH's digest as RECORD writes it, reading at most SIZE + 1 bytes of a regular file (no link). Raises
    NotProven saying what is there instead."""
    try:  # a regular file only, not through a link (core.boundedread)
        handle = boundedread.open_regular(path, follow=False)
    except boundedread.Refused as exc:
        raise NotProven(f"{path} is {exc}") from None
    except OSError as exc:
        raise NotProven(f"{path}: {exc.strerror or exc}") from None
    with handle:
        st = os.fstat(handle.fileno())
        if size is not None and st.st_size != size:
            raise NotProven(f"{path} has {st.st_size} bytes, RECORD says {size}")
        digest = hashlib.sha256()
        left = st.st_size if size is None else size
        while left >= 0:
            chunk = handle.read(min(1 << 20, left + 1))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk)
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def check_files(prefix: Path, found: Installed) -> None:
    """Every file FOUND's RECORD lists with a hash has its size and bytes, and lies inside PREFIX. Raises
    NotProven naming the first that does not."""
    site = found.info.parent
    top = os.path.normpath(os.path.abspath(prefix))
    for row in found.rows:
        path = os.path.normpath(os.path.join(os.path.abspath(site), row.path))
        if not path.startswith(top + os.sep):
            raise NotProven(f"{found.info.name}/RECORD names {row.path!r}, outside the prefix")
        if not row.digest:
            continue
        if not row.digest.startswith("sha256="):
            raise NotProven(f"{found.info.name}/RECORD gives {row.path!r} a hash other than sha256")
        if _file_digest(Path(path), row.size) != row.digest:
            raise NotProven(f"{path} is not the file pip installed (its sha256 differs from RECORD's)")


def check(prefix: Path, name: str, version: str, record_sha256: str) -> Installed:
    """NAME VERSION's dist-info in PREFIX holds the RECORD whose sha256 is RECORD_SHA256, and every file it lists
    is as it says. Raises NotProven."""
    info = find(prefix, name, version)
    if info is None:
        raise NotProven(f"{name} {version} is not installed")
    found = read(info)
    if not record_sha256 or found.record_sha256 != record_sha256:
        raise NotProven(f"{info.name}/RECORD is not the one envsolver installed from the lock's file")
    check_files(prefix, found)
    return found


def prove(prefix: Path, name: str, version: str, staged: Path, before: Mapping[Path, Identity]) -> Installed:
    """After pip installed the staged file STAGED: NAME VERSION's dist-info is one pip wrote in that run (its
    RECORD is not the file it was before pip ran: BEFORE, from identities), its files are as its RECORD says, and
    they are STAGED's (a wheel: its RECORD agrees; an sdist: METADATA names its release). Raises NotProven."""
    info = find(prefix, name, version)
    if info is None:
        raise NotProven(f"{name} {version} is not installed")
    found = read(info)
    if before.get(info) == found.identity:
        raise NotProven(f"pip left {info.name} as it was (its RECORD is the one from before it ran)")
    check_files(prefix, found)
    if staged.name.endswith(".whl"):
        _against_wheel(found, staged)
    else:
        _against_sdist(found, staged, name, version)
    return found


def identities(prefix: Path, name: str) -> dict[Path, Identity]:
    """Which file the RECORD of each dist-info of NAME in PREFIX is now, by dist-info path (for prove)."""
    out = {}
    for info, _ in dist_infos(prefix, name):
        try:
            out[info] = _identity(os.stat(info / "RECORD", follow_symlinks=False))
        except OSError:
            continue
    return out


def _identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


def _against_wheel(found: Installed, wheel: Path) -> None:
    """Every file the wheel installs into site-packages (not its .data/ trees, whose scripts pip rewrites) is in
    the installed RECORD with the wheel RECORD's hash. Raises NotProven."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            member = f"{found.info.name}/RECORD"
            try:
                entry = archive.getinfo(member)
            except KeyError:
                raise NotProven(f"{wheel.name} has no {member}: it is not the release installed") from None
            if entry.file_size > MAX_MEMBER_BYTES:
                raise NotProven(f"{wheel.name}'s {member} is larger than {MAX_MEMBER_BYTES} bytes")
            data = archive.read(entry)
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise NotProven(f"{wheel.name} cannot be read as a wheel: {exc}") from None
    installed = {row.path: row.digest for row in found.rows}
    data_dir = found.info.name.removesuffix(".dist-info") + ".data/"
    for row in parse_record(data, wheel.name):
        if not row.digest or row.path.startswith(data_dir):
            continue
        if installed.get(row.path) != row.digest:
            raise NotProven(f"{row.path} is not {wheel.name}'s (RECORD: {installed.get(row.path) or 'absent'})")


def _against_sdist(found: Installed, sdist: Path, name: str, version: str) -> None:
    """The installed METADATA names the release of the sdist's PKG-INFO. Raises NotProven."""
    pkg_info = _sdist_pkg_info(sdist)
    release = (index.normalize(_header(pkg_info, "Name") or ""), _header(pkg_info, "Version"))
    if release != (name, version) or metadata_version(found.info / "METADATA") != version:
        raise NotProven(f"{found.info.name} is not the release of {sdist.name} ({release[0]} {release[1]})")


def _sdist_pkg_info(sdist: Path) -> str:
    """The top-level PKG-INFO of an sdist (.tar.gz or .zip). Raises NotProven."""
    try:
        if sdist.name.endswith(".zip"):
            with zipfile.ZipFile(sdist) as archive:
                names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/PKG-INFO")]
                if names and archive.getinfo(names[0]).file_size <= MAX_MEMBER_BYTES:
                    return archive.read(names[0]).decode("utf-8", "replace")
        else:
            with tarfile.open(sdist) as archive:
                for member in archive:
                    if member.name.count("/") == 1 and member.name.endswith("/PKG-INFO") and member.isfile():
                        handle = archive.extractfile(member) if member.size <= MAX_MEMBER_BYTES else None
                        if handle is not None:
                            return handle.read().decode("utf-8", "replace")
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise NotProven(f"{sdist.name} cannot be read: {exc}") from None
    raise NotProven(f"{sdist.name} has no PKG-INFO at its top")
