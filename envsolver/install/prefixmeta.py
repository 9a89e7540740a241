"""The lock metadata a prefix keeps (PREFIX/etc/envsolver/lock-metadata.json): written by `envsolver install`, read
by the hook and by verify. Values from it reach activation scripts, so they are validated when read and when
written: the platform must be one envsolver supports, the arch list must parse.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envsolver.core import boundedread
from envsolver.core.archlist import canonical
from envsolver.core.errors import BadInputError
from envsolver.kb.model import PLATFORMS
from envsolver.lock.lockfile import ARCH_LIST_KEY
from envsolver.lock.writers import files

METADATA = Path("etc") / "envsolver" / "lock-metadata.json"
ARCH_KEY = ARCH_LIST_KEY
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Kept:
    platform: str
    custom: dict[str, str]


def check(platform: str, custom: Mapping[str, str], where: str) -> None:
    """Raise BadInputError when `platform` is not supported or the arch list in `custom` is malformed."""
    if platform not in PLATFORMS:
        raise BadInputError(
            f"{where} is for platform {platform!r}; envsolver installs and sets up {' and '.join(PLATFORMS)} only. "
            "Use a lock made for one of them (envsolver make --platform linux-64)."
        )
    arch = custom.get(ARCH_KEY)
    if arch is not None:
        try:
            canonical(arch)
        except ValueError as exc:
            raise BadInputError(
                f"{where} has a malformed {ARCH_KEY} {arch!r} ({exc}); it was edited or not written by envsolver. "
                "Regenerate the lock with envsolver make, or pass --arch-list '8.0;9.0+PTX' to envsolver hook."
            ) from None


def save(prefix: Path, platform: str, custom: Mapping[str, str]) -> None:
    """Keep the lock's assumptions in the prefix. Raises BadInputError on values `check` refuses."""
    check(platform, custom, "the lock")
    doc = {"platform": platform, "custom_metadata": dict(sorted((str(k), str(v)) for k, v in custom.items()))}
    files.write(
        prefix / METADATA,
        "# envsolver: the lock this prefix was installed from\n" + json.dumps(doc, indent=2, sort_keys=True) + "\n",
        force=True,
    )


def load(prefix: Path) -> Kept | None:
    """What `save` kept, or None when the prefix has none. Raises BadInputError when the file is unreadable,
    truncated or holds values `check` refuses."""
    path = prefix / METADATA
    fix = (
        f"Run envsolver install LOCK -p {shlex.quote(str(prefix))} again to rewrite it, or delete "
        f"{shlex.quote(str(path))} and pass --lock "
        "conda-lock.yml (or --arch-list) to envsolver hook."
    )
    try:
        if not path.is_file():
            return None
        raw = boundedread.read_head(path, MAX_BYTES + 1)  # a FIFO swapped in after the check is refused at once
    except boundedread.Refused as exc:
        raise BadInputError(f"cannot read {str(path)!r}: it is {exc}. {fix}") from None
    except OSError as exc:
        raise BadInputError(f"cannot read {str(path)!r}: {exc.strerror}. {fix}") from None
    try:
        if len(raw) > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES} bytes")
        text = raw.decode("utf-8")
        doc = json.loads("\n".join(line for line in text.splitlines() if not line.startswith("#")))
        if not isinstance(doc, dict) or not isinstance(doc.get("platform"), str):
            raise ValueError("expected a mapping with a 'platform' string")
        custom = doc.get("custom_metadata", {})
        if not isinstance(custom, dict) or not all(isinstance(v, str) for v in custom.values()):
            raise ValueError("expected 'custom_metadata' to map names to strings")
    except (ValueError, RecursionError) as exc:
        raise BadInputError(f"{str(path)!r} is not the metadata envsolver install writes ({exc}). {fix}") from None
    kept = Kept(doc["platform"], {str(k): v for k, v in custom.items()})
    check(kept.platform, kept.custom, repr(str(path)))
    return kept
