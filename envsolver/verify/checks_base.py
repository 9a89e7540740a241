"""The types every check shares (Check, Context) and small readers of the probe's facts."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from envsolver.kb.model import KnowledgeBase
from envsolver.lockfile import LockEntry
from envsolver.pypi.record import PipRecord
from envsolver.versions import DriverVersion
from envsolver.versions import driver as parse_driver

Status = Literal["pass", "fail", "warn", "skip"]


@dataclass(frozen=True)
class Check:
    id: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Context:
    facts: Mapping[str, Any]
    kb: KnowledgeBase
    lock_meta: Mapping[str, str] = field(default_factory=dict)
    lock_entries: tuple[LockEntry, ...] = ()
    deepspeed_wanted: bool = False
    gpu_test: bool = False
    lock_pip: tuple[PipRecord, ...] = ()  # the lock's PyPI part


def driver_version(ctx: Context) -> DriverVersion | None:
    version = (ctx.facts.get("driver") or {}).get("version")
    try:
        return parse_driver(version) if version else None
    except ValueError:
        return None


def torch_facts(ctx: Context) -> dict[str, Any]:
    value = ctx.facts.get("torch")
    return value if isinstance(value, dict) else {}


def prefix_of(ctx: Context) -> str:
    """The environment's prefix as a fix command names it: shell-quoted, or PREFIX when unknown."""
    prefix = (ctx.facts.get("python") or {}).get("prefix")
    return shlex.quote(str(prefix)) if prefix else "PREFIX"
