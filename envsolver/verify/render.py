"""Print verify's report: one line per check with its fix (markup escaped, control characters spelled out: a
detail can hold what nvidia-smi or a node said); or the JSON document, as the checks say it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from envsolver.printable import printable
from envsolver.verify.checks import Check

MARK = {"pass": "[green]pass[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]", "skip": "[dim]skip[/]"}


def line(console: Console, check: Check) -> None:
    shown = f"{MARK[check.status]} {escape(printable(check.id))}: {escape(printable(check.detail))}"
    console.print(shown, highlight=False, emoji=False)
    if check.fix and check.status in ("fail", "warn"):
        console.print(f"     fix: {escape(printable(check.fix))}", highlight=False, emoji=False)


def summary(checks: list[Check]) -> str:
    counts = {s: sum(1 for c in checks if c.status == s) for s in ("pass", "warn", "fail", "skip")}
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def as_json(python: Path, prefix: Path | None, checks: list[Check]) -> dict[str, Any]:
    return {
        "ok": not any(c.status == "fail" for c in checks),
        "target": {"python": str(python), "prefix": str(prefix) if prefix else None},
        "checks": [{"id": c.id, "status": c.status, "detail": c.detail, "fix": c.fix} for c in checks],
    }
