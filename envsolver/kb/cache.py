"""A compiled copy of the validated knowledge base, so a process does not parse and check the YAML each time.

Parsing and validating the five data files takes longer than everything else `explain` and `gpus` do; the
result is the same for the same files. So the loaded KnowledgeBase is kept, pickled, in the user cache
directory (ENVSOLVER_CACHE_DIR, else the platform's), in a file named by the SHA-256 of what produced it:
every data file's bytes and the source of the modules that turn them into rows (the loader, the model, the
version and arch-list parsers), so an edit to any of them names another file and the KB is loaded from the
YAML again. Only a KB that loaded without a problem is ever written, atomically (a temporary file, then
os.replace).

The KB restricted to the bundled snapshot (envsolver/lock/snapshot/restricted.py) is kept the same way, in a file
named by the compiled KB's name, the snapshot's content digest and the restricting modules' source (PREFIX
`snapshot-kb-`); `key_of` gives the name of a KB this module read or wrote, so that file can be found.

Nothing read back is trusted blindly: the file must be a regular file that this user owns and nobody else can
write (checked on the opened file, which is opened without following a link and read up to MAX_BYTES), so that
only this user could have written it; it carries the SHA-256 of its payload, which must match, and the payload is
unpickled with only the KB's own classes allowed (any other global, such as a function a tampered file names, is
refused), and must be a KnowledgeBase. A file that fails any check is ignored, without a word, and replaced.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
import stat
from collections.abc import Mapping
from pathlib import Path

from envsolver import __version__
from envsolver.core import atomic
from envsolver.kb.model import KnowledgeBase

FORMAT = b"envsolver-kb-cache 1\n"
MAX_BYTES = 64 << 20  # the compiled KB is ~0.3 MB
PREFIX = "kb-"
SUFFIX = ".pickle"
# The modules whose source decides what the YAML becomes (relative to the envsolver package).
SOURCES = ("kb/load.py", "kb/pypi_rows.py", "kb/model.py", "kb/cache.py", "core/versions.py", "core/archlist.py")
# Every class a KnowledgeBase pickle needs: its row types and the values inside them.
ALLOWED = frozenset(
    {
        ("envsolver.kb.model", name)
        for name in (
            "ArchRename",
            "Chip",
            "CudaMajor",
            "DeepSpeedCondaBuild",
            "DeepSpeedDefaultCcs",
            "DeepSpeedRelease",
            "DeepSpeedRequirements",
            "DeepSpeedSdist",
            "Fact",
            "Gpu",
            "Holding",
            "KnowledgeBase",
            "MultiGpu",
            "OpHeader",
            "OpLibrary",
            "PciDevice",
            "PypiCondaName",
            "Toolkit",
            "TorchBuild",
            "TorchRelease",
        )
    }
    | {
        ("envsolver.core.archlist", "Arch"),
        ("envsolver.core.versions", "DriverVersion"),
        ("envsolver.core.versions", "MajorMinor"),
        ("packaging.version", "Version"),
    }
)


# id(kb) -> (kb, the name of its compiled file), for the KBs this process read or wrote (the KB is kept
# alive with its entry, so an id is never reused for another KB while it is listed).
_NAMES: dict[int, tuple[KnowledgeBase, str]] = {}


def key_of(kb: KnowledgeBase) -> str | None:
    """The name (key) of the compiled file `kb` was read from or written to in this process; None for a KB
    that did not pass through the cache (a test's own KB, a restricted copy)."""
    kept = _NAMES.get(id(kb))
    return kept[1] if kept is not None and kept[0] is kb else None


def _remember(kb: KnowledgeBase, path: Path) -> None:
    name = path.name
    if name.startswith(PREFIX) and name.endswith(SUFFIX):
        _NAMES[id(kb)] = (kb, name[len(PREFIX) : -len(SUFFIX)])


class _Refused(pickle.UnpicklingError):
    """The payload names a global that a KnowledgeBase never holds."""


class _KbUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in ALLOWED:
            raise _Refused(f"{module}.{name}")
        found: type = super().find_class(module, name)
        return found


def cache_root() -> Path | None:
    """ENVSOLVER_CACHE_DIR, else the platform's user cache directory for envsolver; None when neither is known."""
    if os.environ.get("ENVSOLVER_CACHE_DIR"):
        return Path(os.environ["ENVSOLVER_CACHE_DIR"])
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("envsolver"))
    except Exception:  # no home directory or an unusual platform: run without the cache
        return None


def key(texts: Mapping[str, bytes]) -> str | None:
    """The SHA-256 naming the compiled KB of these data files (name -> bytes) with this envsolver's loader;
    None when the loader's source cannot be read (then nothing is cached)."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(FORMAT + __version__.encode() + b"\0")
    try:
        sources = [(name, (package / name).read_bytes()) for name in SOURCES]
    except OSError:
        return None
    for name, data in [*sources, *sorted(texts.items())]:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def path_for(root: Path, name: str, prefix: str = PREFIX) -> Path:
    return root / "kb" / f"{prefix}{name}{SUFFIX}"


def _own_bytes(path: Path) -> bytes | None:
    """The bytes of `path` when it is a regular file that this user owns and nobody else may write, at most
    MAX_BYTES of them (checked on the opened file, opened without following a link); else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        if st.st_size > MAX_BYTES:
            return None
        data = b""
        while len(data) <= st.st_size:
            block = os.read(fd, st.st_size + 1 - len(data))
            if not block:
                break
            data += block
        return data if len(data) == st.st_size else None
    except OSError:
        return None
    finally:
        os.close(fd)


def read(path: Path) -> tuple[KnowledgeBase, str] | None:
    """The KnowledgeBase in `path` and its date, or None when the file is missing, unreadable, not this user's
    alone, corrupt or not a KB."""
    data = _own_bytes(path)
    if data is None:
        return None
    head, digest, payload = data[: len(FORMAT)], data[len(FORMAT) : len(FORMAT) + 65], data[len(FORMAT) + 65 :]
    if head != FORMAT or digest != hashlib.sha256(payload).hexdigest().encode() + b"\n":
        return None
    try:
        doc = _KbUnpickler(io.BytesIO(payload)).load()
    except Exception:  # refused, truncated or otherwise broken: load from the YAML instead
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("kb"), KnowledgeBase):
        return None
    if not isinstance(doc.get("date"), str):
        return None
    _remember(doc["kb"], path)
    return doc["kb"], doc["date"]


def write(path: Path, kb: KnowledgeBase, date: str, prefix: str = PREFIX) -> None:
    """Write `kb` (validated already) and its date to `path` atomically and remove older files of the same
    `prefix` beside it. Best effort: a cache that cannot be written is skipped, never an error."""
    _remember(kb, path)
    payload = pickle.dumps({"kb": kb, "date": date}, protocol=pickle.HIGHEST_PROTOCOL)
    data = FORMAT + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
    with contextlib.suppress(OSError):
        atomic.replace(path, data, mode=0o600)  # a private cache: only its owner reads it
        for old in path.parent.glob(f"{prefix}*{SUFFIX}"):
            if old != path:
                with contextlib.suppress(OSError):
                    old.unlink()
