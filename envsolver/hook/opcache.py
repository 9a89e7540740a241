"""A shared cache of built DeepSpeed ops: a directory (on the cluster's shared filesystem) where an op built once
serves every environment with the same key (opkey.py).

Layout: DIR/<key>/ holds the library and manifest.json (op, DeepSpeed module name, versions, the library's
SHA-256). An entry appears whole or not at all: it is assembled in a private temporary directory beside the
entries, made immutable (files 0444, the directory 0555, whatever the umask) and renamed into place, an atomic step
on local filesystems and NFS alike, so concurrent hooks on several nodes need no lock; when two build the same key,
the first rename wins and the other's copy is dropped.

Who may have written an entry decides whether it is used (optrust.py, SECURITY.md): the cache directory and every
directory on the way to it must belong to a uid the reader trusts (root, itself, --op-cache-trust), and so must the
entry's directory, manifest and library, which nobody else may write, so the SHA-256 in the manifest is one that
only a trusted writer could have written; the library is proven against it as it is read, and its copy in a prefix
as it is copied. Anything else is refused with one line that names the entry (or the cache) and who could have
changed it, and the op is built instead. A reader changes nothing in the cache: an entry it does not trust may
be one another user trusts. A cache refused as a whole is neither read nor written. A writer moves aside an entry
of a trusted uid that is refused (damaged, or made by an older envsolver with group-writable modes) and puts its
own in place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from envsolver.core import atomic
from envsolver.hook import opcachedir, optrust
from envsolver.hook.ds_ops_site import MODULE_NAME, OP

MANIFEST = "manifest.json"
MANIFEST_MAX = 64 * 1024  # a manifest is ~600 bytes
LIBRARY_MAX = 2 << 30  # 2 GiB; DeepSpeed's largest op for every arch is a few hundred MB
_KEY = re.compile(r"[0-9a-f]{64}")  # every pattern is matched whole (fullmatch)
_OP = re.compile(OP)
_MODULE = re.compile(MODULE_NAME)
_LIBRARY = re.compile(r"[a-z][a-z0-9_]{0,63}\.so")
_SHA256 = re.compile(r"[0-9a-f]{64}")

parse_trust = optrust.parse


@dataclass(frozen=True)
class Entry:
    key: str
    op: str
    module: str  # deepspeed.ops.adam.fused_adam_op
    library: Path  # DIR/<key>/fused_adam_op.so
    sha256: str
    meta: Mapping[str, object]  # deepspeed, torch, torch_info, as op_runner.py install reported them; arch_list, sass
    writers: tuple[int, ...] = ()  # the uids owning its directory, manifest and library (none for a fresh build)


@dataclass(frozen=True)
class Refused:
    """An entry that is not used. `line`: "op cache entry DIR: refused: why, and who could have changed it".
    `writer_trusted`: its directory belongs to a trusted uid (so a writer may move it aside)."""

    line: str
    writer_trusted: bool


def _check_key(key: str) -> None:
    if not _KEY.fullmatch(key):
        raise ValueError(f"not an op key: {key!r}")


def _entry(doc: object, entry_dir: Path, key: str, writers: tuple[int, ...]) -> Entry:
    """The entry a manifest describes. Raises Untrusted when it is not one the hook writes for this key."""
    if not isinstance(doc, dict) or doc.get("key") != key:
        raise optrust.Untrusted(f"its {MANIFEST} is for another key")
    op, module, library, digest, meta = (doc.get(k) for k in ("op", "module", "library", "sha256", "meta"))
    if not (isinstance(op, str) and _OP.fullmatch(op) and isinstance(module, str) and _MODULE.fullmatch(module)):
        raise optrust.Untrusted(f"its {MANIFEST} names no op or module")
    if not (isinstance(library, str) and _LIBRARY.fullmatch(library) and isinstance(digest, str)):
        raise optrust.Untrusted(f"its {MANIFEST} names no library")
    if not _SHA256.fullmatch(digest) or not isinstance(meta, dict):
        raise optrust.Untrusted(f"its {MANIFEST} holds no SHA-256 or no facts")
    return Entry(key, op, module, entry_dir / library, digest, meta, writers)


def _read_entry(fd: int, entry_dir: Path, key: str, trust: optrust.Trust) -> Entry:
    """The entry in the opened directory `fd`, each file read through its own checked descriptor. Raises
    Untrusted."""
    handle, size = optrust.open_file(MANIFEST, fd, trust, MANIFEST_MAX, MANIFEST)
    try:
        text = optrust.read(handle, size, MANIFEST)
        writers = {os.fstat(fd).st_uid, os.fstat(handle).st_uid}
    finally:
        os.close(handle)
    try:
        doc = json.loads(text)
    except ValueError:
        raise optrust.Untrusted(f"its {MANIFEST} is not JSON") from None
    entry = _entry(doc, entry_dir, key, ())
    name = entry.library.name
    handle, size = optrust.open_file(name, fd, trust, LIBRARY_MAX, name)
    try:
        digest = optrust.sha256(handle, size, name)
        writers.add(os.fstat(handle).st_uid)
    finally:
        os.close(handle)
    if digest != entry.sha256:
        raise optrust.Untrusted(f"{name} does not match the SHA-256 in its {MANIFEST}")
    return dataclasses.replace(entry, writers=tuple(sorted(writers)))


def _open_cache(cache: Path) -> int | None:
    try:
        return os.open(cache, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None  # no cache yet (or none this user can read): nothing to use


def _cache_refused(cache: Path, root: int, trust: optrust.Trust) -> Refused | None:
    try:
        optrust.check_cache(cache, os.fstat(root), trust)
    except optrust.Untrusted as exc:
        return Refused(f"op cache {optrust.shown(cache)}: refused: {exc}", False)
    return None


def refusal(cache: Path, trusted: Iterable[int] = ()) -> str | None:
    """Why the cache as a whole is not used (the line says who owns what and the --op-cache-trust that trusts them),
    or None when it is trusted or there is none to read. `trusted`: uids trusted besides root and this user."""
    root = _open_cache(cache)
    if root is None:
        return None
    try:
        refused = _cache_refused(cache, root, optrust.Trust.of(trusted))
    finally:
        os.close(root)
    return refused.line if refused is not None else None


def lookup(cache: Path, key: str, trusted: Iterable[int] = ()) -> Entry | Refused | None:
    """The entry for key when it is there and trusted (see the module's doc), a Refused when it is there and not or
    the cache is refused as a whole, None when there is none. `trusted`: uids trusted besides root and this user.
    Reads only."""
    _check_key(key)
    entry_dir = cache / key
    root = _open_cache(cache)
    if root is None:
        return None
    try:
        trust = optrust.Trust.of(trusted)
        refused = _cache_refused(cache, root, trust)
        if refused is not None:
            return refused
        try:
            fd = optrust.open_dir(key, root, trust, "the entry")
        except FileNotFoundError:
            return None
        except optrust.Untrusted as exc:
            return _refused(entry_dir, exc, _owner(key, root) in trust.uids)
        try:
            return _read_entry(fd, entry_dir, key, trust)
        except optrust.Untrusted as exc:
            return _refused(entry_dir, exc, os.fstat(fd).st_uid in trust.uids)
        finally:
            os.close(fd)
    finally:
        os.close(root)


def _owner(name: str, dir_fd: int) -> int | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_uid
    except OSError:
        return None


def _refused(entry_dir: Path, why: optrust.Untrusted, writer_trusted: bool) -> Refused:
    return Refused(f"op cache entry {optrust.shown(entry_dir)}: refused: {why}", writer_trusted)


def taken(entry: Entry, trusted: Iterable[int] = ()) -> str:
    """The note on an entry taken: its op, where it is, and who wrote it (uid, name and why they are trusted)."""
    trust = optrust.Trust.of(trusted)
    writers = " and ".join(trust.writer(uid) for uid in entry.writers) or "nobody known"
    return f"{entry.op}: taken from op cache entry {optrust.shown(entry.library.parent)}, written by {writers}"


def _remove(path: Path) -> None:
    """Remove what `path` names: a link or file itself, a directory with its read-only contents (made writable
    first where this user owns them). Best effort."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return
    with contextlib.suppress(OSError):
        # fwalk: each directory through a descriptor, never through a link, whatever is renamed meanwhile
        for _, _, _, directory in os.fwalk(path):
            with contextlib.suppress(OSError):
                os.fchmod(directory, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def _set_aside(cache: Path, key: str) -> None:
    """Move an entry out of the way (renamed, so a reader that holds it open is not disturbed), then remove it."""
    aside = cache / f".corrupt-{key}-{socket.gethostname()}-{os.getpid()}"
    try:
        os.rename(cache / key, aside)
    except OSError:
        return  # another hook moved or replaced it first, or this user may not
    _remove(aside)


def _copy(source: Path, out: BinaryIO) -> str:
    """Copy the regular file `source` (not followed if a link, at most LIBRARY_MAX bytes) into `out`, fsynced.
    Returns the SHA-256 of exactly the bytes copied. Raises OSError."""
    what = optrust.shown(source)
    try:
        handle, size = optrust.open_file(str(source), None, None, LIBRARY_MAX, what)
    except optrust.Untrusted as exc:
        raise OSError(errno.EPERM, f"refused to copy: {exc}") from None
    digest = hashlib.sha256()
    try:
        for block in optrust.chunks(handle, size, what):
            digest.update(block)
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
    except optrust.Untrusted as exc:
        raise OSError(errno.EIO, str(exc)) from None
    finally:
        os.close(handle)
    return digest.hexdigest()


def store(
    cache: Path,
    key: str,
    op: str,
    module: str,
    library: Path,
    meta: Mapping[str, object],
    trusted: Iterable[int] = (),
) -> Entry:
    """Put a built library into the cache under key and return the entry that is there now (ours, or a
    concurrent writer's identical one); a missing cache is made as opcachedir.ensure makes it (0700). Raises
    OSError when the cache cannot be made or written, is refused as a whole, or holds an entry under key that this
    user does not trust (left for its owner), ValueError on a value outside its grammar."""
    _check_key(key)
    if not _OP.fullmatch(op) or not _MODULE.fullmatch(module):
        raise ValueError(f"unexpected op {op!r} or module {module!r}")
    name = module.rsplit(".", 1)[1] + ".so"
    try:
        opcachedir.ensure(cache, trusted)
    except opcachedir.NotMade as exc:
        raise OSError(errno.EPERM, str(exc)) from None
    why = refusal(cache, trusted)
    if why is not None:
        raise OSError(errno.EPERM, f"{why}; nothing is stored there")
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=f".tmp-{key[:16]}-"))  # 0700 while it is assembled
    try:
        with open(tmp / name, "xb") as out:
            digest = _copy(library, out)
        doc = {"key": key, "op": op, "module": module, "library": name, "sha256": digest, "meta": dict(meta)}
        with open(tmp / MANIFEST, "x", encoding="utf-8") as out:
            out.write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())
        for path in (tmp / name, tmp / MANIFEST):
            os.chmod(path, 0o444)
        os.chmod(tmp, 0o555)
        writers = tuple(sorted({os.lstat(path).st_uid for path in (tmp, tmp / name, tmp / MANIFEST)}))
        for _ in range(2):
            try:
                os.rename(tmp, cache / key)
                atomic.fsync_dir(cache)
                return Entry(key, op, module, cache / key / name, digest, dict(meta), writers)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise
            existing = lookup(cache, key, trusted)
            if isinstance(existing, Entry):
                return existing
            if isinstance(existing, Refused) and not existing.writer_trusted:
                raise OSError(errno.EEXIST, f"{existing.line}; it is left for its owner")
            _set_aside(cache, key)  # a trusted writer's refused entry: ours takes its place
        raise OSError(errno.EEXIST, f"{cache / key} kept changing while the op was stored")
    finally:
        _remove(tmp)


def install(entry: Entry, destination: Path) -> Path:
    """Copy an entry's library to destination (a file path in the prefix), atomically, proving the bytes copied
    against the entry's SHA-256 (read from a manifest only a trusted writer could have written). Returns
    destination. Raises OSError when the library is no regular file within the bound or the copy does not match."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            digest = _copy(entry.library, out)
        if digest != entry.sha256:
            raise OSError(errno.EIO, f"the copy of {entry.library} does not match its SHA-256 {entry.sha256}")
        os.chmod(tmp, 0o666 & ~atomic.umask())
        os.replace(tmp, destination)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return destination


def sha256_file(path: Path) -> str:
    """The SHA-256 of a regular file (not followed if a link, at most LIBRARY_MAX bytes). Raises OSError."""
    try:
        handle, size = optrust.open_file(str(path), None, None, LIBRARY_MAX, optrust.shown(path))
    except optrust.Untrusted as exc:
        raise OSError(errno.EPERM, str(exc)) from None
    try:
        return optrust.sha256(handle, size, optrust.shown(path))
    except optrust.Untrusted as exc:
        raise OSError(errno.EIO, str(exc)) from None
    finally:
        os.close(handle)
