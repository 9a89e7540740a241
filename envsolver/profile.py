"""Profiles: named targets in YAML (profiles/*.yaml, shipped as envsolver.profiles), or a path to one."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from envsolver.errors import BadInputError

if TYPE_CHECKING:
    from importlib.abc import Traversable

KEYS = {
    "description",
    "gpus",
    "driver",
    "python",
    "torch",
    "cuda",
    "source",
    "platform",
    "deepspeed",
    "driver_compat",
    "glibc",
}


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


def load(name_or_path: str) -> Profile:
    """Load a profile by name or path. Raises BadInputError (exit 2) naming the fix."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise BadInputError(
                f"cannot read profile {name_or_path!r}: {exc.strerror}. Pass an existing file "
                "or a name from `envsolver make --help`."
            ) from None
        name = path.stem
    else:
        resource = _root().joinpath(f"{name_or_path}.yaml")
        if not resource.is_file():
            raise BadInputError(
                f"unknown profile {name_or_path!r}. Known profiles: {', '.join(available())}. "
                "Pass one of them to --profile, or a path to a YAML file."
            )
        text = resource.read_text(encoding="utf-8")
        name = name_or_path
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadInputError(f"profile {name_or_path!r} is not valid YAML ({exc}). Fix the file.") from None
    if not isinstance(doc, dict):
        raise BadInputError(f"profile {name_or_path!r} must be a mapping of target keys. Fix the file.")
    unknown = sorted(set(doc) - KEYS)
    if unknown:
        raise BadInputError(
            f"profile {name_or_path!r} has unknown key(s) {unknown}; allowed: {sorted(KEYS)}. Fix the file."
        )
    gpus = doc.get("gpus")
    if not isinstance(gpus, list) or not gpus or not all(isinstance(g, str) for g in gpus):
        raise BadInputError(f"profile {name_or_path!r} needs 'gpus:', a non-empty list of GPU names. Fix the file.")
    values = {k: v for k, v in doc.items() if k != "description" and v is not None}
    return Profile(name, str(doc.get("description", "")), values)
