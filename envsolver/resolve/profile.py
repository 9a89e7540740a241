"""Profiles: named targets in YAML (profiles/*.yaml, shipped as envsolver.profiles), or a path to one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envsolver.core.errors import BadInputError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from importlib.abc import Traversable

# A profile is a handful of lines; these bounds are far above any real one.
MAX_BYTES = 64 * 1024

# The keys and the YAML type each value must have. Versions are quoted strings: unquoted, `python: 3.10` is the
# float 3.1.
STRINGS = (
    "description", "driver", "python", "torch", "cuda", "source", "platform", "driver_compat", "glibc",
    "deepspeed_from",
)  # fmt: skip
KEYS = {*STRINGS, "gpus", "deepspeed"}
_EXAMPLES = {"driver": "'535.104.05'", "python": "'3.11'", "torch": "'2.5'", "cuda": "'12.4'", "glibc": "'2.28'"}


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    values: dict[str, Any]


def _root() -> Traversable:
    """The profiles: the installed `envsolver.profiles` package, or profiles/ of a source checkout."""
    try:
        return resources.files("envsolver.profiles")
    except ModuleNotFoundError:
        return resources.files("envsolver").joinpath("..").joinpath("profiles")


def available() -> list[str]:
    return sorted(p.name.removesuffix(".yaml") for p in _root().iterdir() if p.name.endswith(".yaml"))


def _is_file_path(name_or_path: str) -> bool:
    """A path ends in .yaml/.yml, or names a file that exists and is not a known profile's name; a name is
    anything else (a directory called `gh200` in the working directory does not hide the gh200 profile). A path
    the OS refuses (too long, NUL) is a name."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        return True
    try:
        return path.is_file() or (path.exists() and name_or_path not in available())
    except (OSError, ValueError):
        return False


def load(name_or_path: str) -> Profile:
    """Load a profile by name or path. Raises BadInputError (exit 2) naming the fix."""
    from envsolver.core import safeyaml  # a YAML parser only when a profile is read (not for --help's names)

    limits = safeyaml.Limits(chars=MAX_BYTES, depth=8, aliases=100, nodes=10_000)
    if _is_file_path(name_or_path):
        path = Path(name_or_path)
        try:
            text = safeyaml.read_text(path, MAX_BYTES)
        except OSError as exc:
            raise BadInputError(
                f"cannot read profile {name_or_path!r}: {exc.strerror}. Pass an existing file "
                "or a name from `envsolver make --help`."
            ) from None
        except safeyaml.SafeYamlError as exc:
            raise BadInputError(f"profile {name_or_path!r}: {exc}. Fix the file.") from None
        name = path.stem
    elif name_or_path in available():
        text = _root().joinpath(f"{name_or_path}.yaml").read_text(encoding="utf-8")
        name = name_or_path
    else:
        raise BadInputError(
            f"unknown profile {name_or_path!r}. Known profiles: {', '.join(available())}. "
            "Pass one of them to --profile, or a path to a YAML file."
        )
    try:
        doc = safeyaml.load(text, limits)
    except safeyaml.SafeYamlError as exc:
        raise BadInputError(f"profile {name_or_path!r}: {exc}. Fix the file.") from None
    checked = values(name_or_path, doc, safeyaml.top_level_scalars(text, limits))
    return Profile(name, doc.get("description") or "", checked)


def values(where: str, doc: Any, written: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The target values of a profile document, every key and type checked; `written`: each plain scalar's
    text as in the file (safeyaml.top_level_scalars), so that the fix for an unquoted `python: 3.10` quotes
    '3.10', not the float 3.1 YAML reads. Raises BadInputError."""
    if not isinstance(doc, dict):
        raise BadInputError(f"profile {where!r} must be a mapping of target keys. Fix the file.")
    unknown = sorted((k for k in doc if k not in KEYS), key=repr)
    if unknown:
        raise BadInputError(f"profile {where!r} has unknown key(s) {unknown}; allowed: {sorted(KEYS)}. Fix the file.")
    gpus = doc.get("gpus")
    if not isinstance(gpus, list) or not gpus or not all(isinstance(g, str) and g.strip() for g in gpus):
        raise BadInputError(f"profile {where!r} needs 'gpus:', a non-empty list of GPU names. Fix the file.")
    for key in STRINGS:
        value = doc.get(key)
        if value is not None and not isinstance(value, str):
            example = _quoted_as_written((written or {}).get(key)) or _EXAMPLES.get(key, "'...'")
            raise BadInputError(
                f"profile {where!r}: {key!r} must be a quoted string, not {_as_read(value, written, key)}; write "
                f"{key}: {example}. Fix the file."
            )
    if doc.get("deepspeed") is not None and not isinstance(doc["deepspeed"], bool):
        raise BadInputError(
            f"profile {where!r}: 'deepspeed' must be true or false, not {doc['deepspeed']!r}. Fix the file."
        )
    return {k: v for k, v in doc.items() if k != "description" and v is not None}


_VERSION_LIKE = re.compile(r"[0-9][0-9.]{0,30}")


def _quoted_as_written(text: str | None) -> str | None:
    """`'3.10'` for a value written `3.10` (digits and dots only, so that it is safe to quote back), else None."""
    return f"'{text}'" if text is not None and _VERSION_LIKE.fullmatch(text) else None


def _as_read(value: object, written: Mapping[str, str] | None, key: str) -> str:
    """`3.10 (which YAML reads as the number 3.1)` where the file's text differs from the value read, else the
    value's repr."""
    text = (written or {}).get(key)
    if text is not None and _VERSION_LIKE.fullmatch(text) and text != repr(value):
        return f"{text} (which YAML reads as the number {value!r})"
    return repr(value)
