"""Target: what the environment is for. Built from validated values only; no host probing here."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from envsolver.core.errors import BadInputError
from envsolver.core.versions import MAX_DIGITS, DriverVersion, MajorMinor
from envsolver.kb.model import Channel, Gpu, Platform
from envsolver.resolve.project import Project

DriverCompat = Literal["full", "minor"]
# Where DeepSpeed comes from. auto: the newest torch some DeepSpeed release supports, with conda-forge's build of
# DeepSpeed where one exists for that torch, else PyPI's (locked by its sha256). conda-forge: prefer a torch
# that conda-forge builds DeepSpeed for (an older torch), PyPI's only where none has one. pypi: always PyPI's.
DeepSpeedFrom = Literal["auto", "conda-forge", "pypi"]
DEEPSPEED_FROM: tuple[DeepSpeedFrom, ...] = ("auto", "conda-forge", "pypi")
DEFAULT_GLIBC = MajorMinor(2, 28)


@dataclass(frozen=True)
class Target:
    """The cluster the environment must run on, and what the user pinned.

    gpus: every GPU model the environment must serve (a cluster may mix them).
    driver: the oldest driver on the nodes; None means "assume a current driver".
    torch: a version specifier such as ==2.5.* or ==2.3.1; None means newest that fits.
    platform: None means "derive it from the GPUs".
    host_platform: the platform detection saw (--gpu auto) and where (`host_origin`, "uname -m: aarch64"); it
    serves the GPUs whose row records no platform (one known only by PCI ID or reported CC).
    """

    gpus: tuple[Gpu, ...]
    driver: DriverVersion | None = None
    python: MajorMinor | None = None
    torch: SpecifierSet | None = None
    torch_text: str | None = None
    cuda: MajorMinor | None = None
    source: Channel = "conda-forge"
    platform: Platform | None = None
    deepspeed: bool = True
    glibc: MajorMinor = DEFAULT_GLIBC
    driver_compat: DriverCompat = "minor"
    deepspeed_from: DeepSpeedFrom = "auto"
    host_platform: Platform | None = None
    host_origin: str = ""
    project: Project = field(default_factory=Project)
    origins: tuple[tuple[str, str], ...] = ()

    def origin(self, key: str) -> str | None:
        """Where the value of KEY (torch, python, cuda) came from when a project file gave it; None otherwise."""
        return dict(self.origins).get(key)

    @cached_property
    def ccs(self) -> tuple[MajorMinor, ...]:
        """The distinct compute capabilities of the targets, ascending (worked out once: the resolver asks for
        them for every candidate it weighs)."""
        return tuple(sorted({g.compute_capability for g in self.gpus}))


_NUMBER = rf"[0-9]{{1,{MAX_DIGITS}}}"
_PLAIN = re.compile(rf"{_NUMBER}(?:\.{_NUMBER}){{0,2}}")
# One clause of a range: an operator and a release number (a `.*` tail only after == and !=). No `===`
# (arbitrary strings), no pre-release or local tags: torch's conda builds have none.
_CLAUSE = re.compile(
    rf"(?:(?:==|!=)\s*{_NUMBER}(?:\.{_NUMBER}){{0,3}}(?:\.\*)?|(?:>=|<=|>|<|~=)\s*{_NUMBER}(?:\.{_NUMBER}){{0,3}})"
)


def torch_specifier(text: str) -> SpecifierSet:
    """'2.5' -> ==2.5.*, '2.3.1' -> ==2.3.1, '>=2.4,<2.6' as given. Raises BadInputError."""
    value = text.strip()
    if not value:
        raise BadInputError(
            f"--torch {text!r} is empty: expected a version such as '2.5' or '2.3.1', or a range such as "
            "'>=2.4,<2.6'. Pass --torch 2.5, or leave --torch out for the newest build that fits."
        )
    if _PLAIN.fullmatch(value):
        value = f"=={value}.*" if value.count(".") < 2 else f"=={value}"
    elif not all(_CLAUSE.fullmatch(c.strip()) for c in value.split(",")):
        raise _bad_torch(text)
    try:
        return SpecifierSet(value)
    except InvalidSpecifier:
        raise _bad_torch(text) from None


# The release a malformed value still names: `2.4.*`, `2.4.x`, `=2.4` -> 2.4 (conda's and pip's spellings of "any
# 2.4"), which --torch 2.4 means (==2.4.*).
_NAMED_RELEASE = re.compile(rf"\s*=?\s*({_NUMBER}(?:\.{_NUMBER}){{0,2}})(?:\.[*xX])?\s*")


def _bad_torch(text: str) -> BadInputError:
    named = _NAMED_RELEASE.fullmatch(text)
    fix = (
        f"Pass --torch {named.group(1)} (any {named.group(1)}.x release)"
        if named and named.group(1).count(".") < 2
        else f"Pass --torch {named.group(1)}"
        if named
        else "Pass --torch 2.5"
    )
    return BadInputError(
        f"malformed torch version {text!r}: expected a version such as '2.5' or '2.3.1', or a range "
        f"such as '>=2.4,<2.6'. {fix}."
    )
