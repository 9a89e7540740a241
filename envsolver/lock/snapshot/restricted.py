"""The knowledge base restricted to what the bundled snapshot holds (coverage.restrict), kept compiled.

Restricting reads every repodata file of the snapshot (1.8 MB of JSON) and walks its records: more than the rest
of an offline plan. The result depends only on the KB, the snapshot's files and the restricting code, so it is
kept beside the compiled KB (envsolver/kb/cache.py, same checks on reading) in a file named by the SHA-256 of
the compiled KB's name, the snapshot's content digest (every file under snapshot/data) and the source of the
modules that restrict. A KB that did not come from the compiled cache is restricted afresh each time.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from envsolver.kb import cache
from envsolver.kb.model import KnowledgeBase
from envsolver.lock import snapshot
from envsolver.lock.snapshot import coverage

PREFIX = "snapshot-kb-"
# The modules whose source decides the restriction (relative to the envsolver package).
SOURCES = (
    "lock/snapshot/__init__.py",
    "lock/snapshot/coverage.py",
    "lock/snapshot/matchspec.py",
    "lock/snapshot/restricted.py",
)


def name() -> str:
    """How messages name what a restricted KB can lock: 'the bundled snapshot (2026-07-02)'."""
    return f"the bundled snapshot ({snapshot.date()})"


def compute(kb: KnowledgeBase) -> KnowledgeBase:
    """The restriction itself, uncached."""
    return coverage.restrict(kb, snapshot.records(), name())


@lru_cache(maxsize=1)
def digest() -> str | None:
    """SHA-256 of the snapshot's files (their paths and bytes) and of the restricting modules' source; None
    when one cannot be read."""
    package = Path(__file__).resolve().parent.parent.parent
    data = snapshot.data_dir()
    out = hashlib.sha256(b"envsolver-snapshot-kb 1\0")
    try:
        files = sorted(p for p in data.rglob("*") if p.is_file())
        parts = [(str(p.relative_to(data)), p.read_bytes()) for p in files]
        parts += [(source, (package / source).read_bytes()) for source in SOURCES]
    except OSError:
        return None
    for label, body in parts:
        out.update(f"{label}\0{len(body)}\0".encode())
        out.update(body)
    return out.hexdigest()


def key(kb: KnowledgeBase) -> str | None:
    """The name of `kb`'s restricted file: None when `kb` did not come from the compiled cache."""
    compiled, contents = cache.key_of(kb), digest()
    if compiled is None or contents is None:
        return None
    return hashlib.sha256(f"{compiled}\0{contents}".encode()).hexdigest()


def restricted(kb: KnowledgeBase) -> KnowledgeBase:
    """`compute(kb)`, read from the compiled cache when it holds it, else computed and written there."""
    label = key(kb)
    root = cache.cache_root() if label else None
    if label is None or root is None:
        return compute(kb)
    path = cache.path_for(root, label, PREFIX)
    kept = cache.read(path)
    if kept is not None and kept[1] == snapshot.date():
        return kept[0]
    result = compute(kb)
    cache.write(path, result, snapshot.date(), PREFIX)
    return result
