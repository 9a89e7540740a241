"""Write generated files atomically, never over a user's edits.

Each generated file carries `# envsolver-sha256: <hex>` on its last header line, the hash of the text
that follows it. On rewrite: identical content is left alone; a file whose hash still matches (or that
does not exist) is replaced atomically; anything else was edited by hand and needs `force`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from enum import Enum
from pathlib import Path

from envsolver.errors import BadInputError

MARK = "# envsolver-sha256: "


class Outcome(str, Enum):
    WRITTEN = "written"
    UNCHANGED = "unchanged"


def stamp(text: str) -> str:
    """Insert the hash line after the leading comment block."""
    lines = text.splitlines(keepends=True)
    split = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    body = "".join(lines[split:])
    digest = hashlib.sha256(body.encode()).hexdigest()
    return "".join(lines[:split]) + f"{MARK}{digest}\n" + body


def edited_by_hand(text: str) -> bool:
    """True when the file has no envsolver hash line or its body no longer matches it."""
    _, sep, body = text.partition(MARK)
    if not sep:
        return True
    digest, _, rest = body.partition("\n")
    return hashlib.sha256(rest.encode()).hexdigest() != digest.strip()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write(path: Path, text: str, force: bool = False) -> Outcome:
    """Write stamped `text` to `path` atomically. Raises BadInputError when a hand edit would be lost."""
    stamped = stamp(text)
    if path.exists():
        current = path.read_text(encoding="utf-8", errors="replace")
        if current == stamped:
            return Outcome.UNCHANGED
        if edited_by_hand(current) and not force:
            raise BadInputError(
                f"{str(path)!r} was edited by hand (or not written by envsolver); it was left as "
                "it is. Move your changes elsewhere, or pass --force to overwrite it."
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(stamped)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Outcome.WRITTEN
