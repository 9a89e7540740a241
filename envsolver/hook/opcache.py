"""A shared cache of built DeepSpeed ops: a directory (on the cluster's shared filesystem) where an op built once
serves every environment with the same key (opkey.py).

Layout: DIR/<key>/ holds the library and manifest.json (op, DeepSpeed module name, versions, the library's
SHA-256). An entry appears whole or not at all: it is assembled in a private temporary directory beside the
entries and renamed into place, an atomic step on local filesystems and NFS alike, so concurrent hooks on several
nodes need no lock; when two build the same key, the first rename wins and the other's copy is dropped. Every
read proves the library against the manifest's SHA-256; an entry that fails (truncated, edited, half-deleted) is
moved aside, never loaded, and the op is built again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envsolver.writers import files

MANIFEST = "manifest.json"
_KEY = re.compile(r"^[0-9a-f]{64}$")
_OP = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_MODULE = re.compile(r"^deepspeed(\.[a-z][a-z0-9_]*)+$")
_LIBRARY = re.compile(r"^[a-z][a-z0-9_]{0,63}\.so$")


@dataclass(frozen=True)
class Entry:
    key: str
    op: str
    module: str  # deepspeed.ops.adam.fused_adam_op
    library: Path  # DIR/<key>/fused_adam_op.so
    sha256: str
    meta: Mapping[str, object]  # deepspeed, torch, torch_info, as op_runner.py install reported them


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_key(key: str) -> None:
    if not _KEY.match(key):
        raise ValueError(f"not an op key: {key!r}")


def _read_manifest(entry_dir: Path, key: str) -> Entry | None:
    """The entry described by its manifest, or None when the manifest is missing or malformed."""
    try:
        doc = json.loads((entry_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    op, module, library, digest = doc.get("op"), doc.get("module"), doc.get("library"), doc.get("sha256")
    meta = doc.get("meta")
    if not (isinstance(op, str) and _OP.match(op) and isinstance(module, str) and _MODULE.match(module)):
        return None
    if not (isinstance(library, str) and _LIBRARY.match(library) and isinstance(digest, str)):
        return None
    if not re.fullmatch(r"[0-9a-f]{64}", digest) or not isinstance(meta, dict):
        return None
    return Entry(key, op, module, entry_dir / library, digest, meta)


def _quarantine(cache: Path, entry_dir: Path) -> None:
    """Move a bad entry out of the way (renamed, so a reader that holds it open is not disturbed)."""
    aside = cache / f".corrupt-{entry_dir.name}-{socket.gethostname()}-{os.getpid()}"
    try:
        os.rename(entry_dir, aside)
    except OSError:
        return  # another hook moved or replaced it first
    shutil.rmtree(aside, ignore_errors=True)


def lookup(cache: Path, key: str) -> Entry | None:
    """The proven entry for key, or None (absent, or bad and moved aside)."""
    _check_key(key)
    entry_dir = cache / key
    if not entry_dir.is_dir():
        return None
    entry = _read_manifest(entry_dir, key)
    try:
        good = entry is not None and sha256_file(entry.library) == entry.sha256
    except OSError:
        good = False
    if not good:
        _quarantine(cache, entry_dir)
        return None
    return entry


def store(cache: Path, key: str, op: str, module: str, library: Path, meta: Mapping[str, object]) -> Entry:
    """Put a built library into the cache under key and return the entry that is there now (ours, or a
    concurrent writer's identical one). Raises OSError when the cache cannot be written, ValueError on a value
    outside its grammar."""
    _check_key(key)
    if not _OP.match(op) or not _MODULE.match(module):
        raise ValueError(f"unexpected op {op!r} or module {module!r}")
    name = module.rsplit(".", 1)[1] + ".so"
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=f".tmp-{key[:16]}-"))
    try:
        os.chmod(tmp, 0o777 & ~files._umask())
        target = tmp / name
        shutil.copyfile(library, target)
        os.chmod(target, 0o666 & ~files._umask())
        digest = sha256_file(target)
        doc = {"key": key, "op": op, "module": module, "library": name, "sha256": digest, "meta": dict(meta)}
        (tmp / MANIFEST).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.chmod(tmp / MANIFEST, 0o666 & ~files._umask())
        for path in (target, tmp / MANIFEST):
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
        for _ in range(2):
            try:
                os.rename(tmp, cache / key)
                files.fsync_dir(cache)
                return Entry(key, op, module, cache / key / name, digest, dict(meta))
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
            existing = lookup(cache, key)  # moves a bad one aside, so the second rename can succeed
            if existing is not None:
                return existing
        raise OSError(errno.EEXIST, f"{cache / key} kept changing while the op was stored")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def install(entry: Entry, destination: Path) -> Path:
    """Copy an entry's library to destination (a file path in the prefix), atomically, and prove the copy against
    the entry's SHA-256. Returns destination. Raises OSError when the copy does not match."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        shutil.copyfile(entry.library, tmp)
        os.chmod(tmp, 0o666 & ~files._umask())
        if sha256_file(tmp) != entry.sha256:
            raise OSError(errno.EIO, f"the copy of {entry.library} does not match its SHA-256 {entry.sha256}")
        os.replace(tmp, destination)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return destination
