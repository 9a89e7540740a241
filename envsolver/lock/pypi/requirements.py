"""The user's PyPI requirements (a `pip:` list, --add-pypi): PEP 508, held to their grammar before any reaches uv.

Each is parsed by packaging; what uv is given is packaging's re-serialization of the name, extras and specifier
only, one per line of its requirements file. A marker is evaluated here for the target (the lock is for one
platform and Python): a requirement whose marker is false for it is left out, one whose marker holds goes to uv
without it, so no string a user wrote in a marker (which may hold any character) reaches uv's files.

Direct references (`name @ https://...`, a path, a VCS URL) are refused: a URL names one file that no index page
vouches for (so no sha256 from the index proves it), it may be any host, an sdist or a repository there must be
built to learn its requirements (running its code where make runs), and it is not reproducible from an index.
Publish the file to an index (a local one is enough) and point ENVSOLVER_PYPI_INDEX at it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envsolver.core.errors import BadInputError
from envsolver.core.printable import printable
from envsolver.lock.pypi.target import Target

MAX_LENGTH = 1000
MAX_REQUIREMENTS = 500


@dataclass(frozen=True)
class UserRequirement:
    """One requirement as the user wrote it (`text`) and as uv gets it (`line`: name, extras, specifier)."""

    text: str
    requirement: Requirement
    name: str  # normalized
    line: str


def parse(texts: Sequence[str], target: Target) -> tuple[tuple[UserRequirement, ...], tuple[str, ...]]:
    """(the requirements for the target, the texts left out because their marker is false for it). Raises
    BadInputError (exit 2) for one that is not a PEP 508 requirement, is too long, holds a control character, or
    is a direct reference."""
    if len(texts) > MAX_REQUIREMENTS:
        raise BadInputError(f"{len(texts)} PyPI requirements, more than the {MAX_REQUIREMENTS} make takes at once.")
    kept: list[UserRequirement] = []
    left_out: list[str] = []
    env = target.environment()
    for text in texts:
        requirement = one(text)
        if requirement.marker is not None and not requirement.marker.evaluate({**env, "extra": ""}):
            left_out.append(text)
            continue
        bare = Requirement(str(requirement))
        bare.marker = None
        kept.append(UserRequirement(text, requirement, str(canonicalize_name(requirement.name)), str(bare)))
    return tuple(kept), tuple(left_out)


def one(text: str) -> Requirement:
    """The requirement `text` names. Raises BadInputError (see parse)."""
    shown = printable(text[:200])
    if len(text) > MAX_LENGTH:
        raise BadInputError(f"the PyPI requirement {shown!r}... is longer than {MAX_LENGTH} characters.")
    if printable(text) != text or "\n" in text:
        raise BadInputError(
            f"the PyPI requirement {shown!r} holds a control character or a line break. Write one PEP 508 "
            "requirement per entry, such as 'accelerate>=1.0'."
        )
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise BadInputError(
            f"{shown!r} is not a PEP 508 requirement ({printable(str(exc)).splitlines()[0][:200]}). Write it as "
            "NAME[EXTRAS] SPECIFIER, such as 'accelerate>=1.0' or 'peft[test]==0.17.0'."
        ) from None
    if requirement.url is not None:
        raise BadInputError(
            f"the PyPI requirement {shown!r} is a direct reference (a URL): make locks files from an index only, "
            "where the index's sha256 proves each file and no build is needed to read its requirements. Publish "
            f"it to an index and point ENVSOLVER_PYPI_INDEX at it, or name a release: '{requirement.name}==VERSION'."
        )
    return requirement
