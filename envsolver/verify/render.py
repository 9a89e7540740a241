"""Print verify's report: one line per check with its fix (markup escaped, control characters spelled out: a
detail can hold what nvidia-smi or a node said); or the JSON document. Text, summary and JSON all render the same
Check (checks_base.Check): its status is the line's mark, the count it adds to, and the JSON's status."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from envsolver.core.printable import printable
from envsolver.verify.checks_base import STATUSES, Check, Status

WORD: dict[Status, str] = {"pass": "pass", "warn": "warn", "fail": "FAIL", "skip": "skip"}
COLOUR: dict[Status, str] = {"pass": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def _said(check: Check) -> str:
    return f"{printable(check.id)}: {printable(check.detail)}"


def _fix_line(check: Check) -> list[str]:
    fix = check.shown_fix
    return [f"     fix: {printable(fix)}"] if fix is not None else []


def line(console: Console, check: Check) -> None:
    """The check's text lines: `WORD id: detail`, the word coloured, then `     fix: FIX` when it shows one."""
    mark = f"[{COLOUR[check.status]}]{WORD[check.status]}[/]"
    console.print(f"{mark} {escape(_said(check))}", highlight=False, emoji=False)
    for more in _fix_line(check):
        console.print(escape(more), highlight=False, emoji=False)


def counts(checks: Sequence[Check]) -> dict[Status, int]:
    return {s: sum(1 for c in checks if c.status == s) for s in STATUSES}


def summary(checks: Sequence[Check]) -> str:
    return ", ".join(f"{n} {s}" for s, n in counts(checks).items())


def check_json(check: Check) -> dict[str, Any]:
    """{"id", "status", "detail", "fix"}: fix is null when the text shows none."""
    return {"id": check.id, "status": check.status, "detail": check.detail, "fix": check.shown_fix}


def as_json(python: Path, prefix: Path | None, checks: Sequence[Check]) -> dict[str, Any]:
    return {
        "ok": not any(c.status == "fail" for c in checks),
        "target": {"python": str(python), "prefix": str(prefix) if prefix else None},
        "checks": [check_json(c) for c in checks],
    }
