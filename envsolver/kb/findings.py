"""Findings of the KB audit (envsolver/kb/audit.py): a difference between the KB and channel records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from packaging.version import Version

from envsolver.core.printable import printable
from envsolver.core.versions import MajorMinor

Severity = Literal["contradiction", "note"]


@dataclass(frozen=True)
class Finding:
    """One difference: `kb` is what the KB says (the diff's '-' line), `data` what the records say ('+')."""

    severity: Severity
    check: str
    subject: str
    kb: str
    data: str
    fix: str | None = None


@dataclass(frozen=True)
class Report:
    data_name: str
    complete: tuple[str, ...]
    partial: tuple[str, ...]
    findings: tuple[Finding, ...]
    records: int = 0

    @property
    def contradictions(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "contradiction")

    @property
    def notes(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "note")

    @property
    def ok(self) -> bool:
        return not self.contradictions


@dataclass
class Collector:
    """Gathers findings; the same difference seen on several records becomes one finding naming the first
    record and how many more."""

    seen: dict[tuple[Severity, str, str, str, str, str | None], list[str]] = field(default_factory=dict)

    def add(
        self, severity: Severity, check: str, subject: str, kb: str, data: str, fix: str | None, rec: str = ""
    ) -> None:
        self.seen.setdefault((severity, check, subject, kb, data, fix), []).append(rec)

    def findings(self) -> list[Finding]:
        out = []
        for (severity, check, subject, kb, data, fix), recs in self.seen.items():
            named = [r for r in recs if r]
            if named:
                more = f" and {len(named) - 1} more" if len(named) > 1 else ""
                data = f"{data} ({named[0]}{more})"
            out.append(Finding(severity, check, subject, kb, data, fix))
        return out


def missing(
    found: Collector,
    label: str,
    package: str,
    versions: tuple[Version, ...],
    pythons: tuple[MajorMinor, ...],
    held: dict[Version, set[MajorMinor | None]],
    complete: bool,
) -> None:
    """A row's versions and Pythons the data has no build of: in complete data one contradiction each, in partial
    data one note for the row."""
    gone = [str(v) for v in versions if not held.get(v)]
    lacking = {
        str(v): ", ".join(str(p) for p in pythons if p not in held[v])
        for v in versions
        if held.get(v) and any(p not in held[v] for p in pythons)
    }
    if complete:
        parts = [f"{package} {v}" for v in gone] + [f"{package} {v} for Python {p}" for v, p in lacking.items()]
        for part in parts:
            found.add(
                "contradiction",
                "missing",
                label,
                part,
                "no such build in the complete data",
                "Remove it from the row: a build the channel does not serve (or marked broken) cannot be locked.",
            )
    elif gone or lacking:
        said = f"{package} {', '.join(str(v) for v in versions)} for Python {', '.join(str(p) for p in pythons)}"
        parts = ([f"no build of {', '.join(gone)}"] if gone else []) + [
            f"of {v} none for Python {p}" for v, p in lacking.items()
        ]
        found.add("note", "missing", label, said, "partial data: " + "; ".join(parts), None)


def render(report: Report, notes: bool = True) -> list[str]:
    """The human diff: per finding a heading, '-' what the KB says, '+' what the data says, and the fix; then a
    verdict line that ends with what to do."""
    lines = [
        f"KB audit: the knowledge base against {report.data_name} "
        f"({report.records} records of pytorch, deepspeed, cuda-version and CUDA libraries)",
        f"  complete data: {', '.join(report.complete) or 'none'}",
        f"  partial data:  {', '.join(report.partial) or 'none'}"
        + (" (what the KB lists beyond it is a note)" if report.partial else ""),
    ]
    return [printable(line) for line in lines] + diff(report, notes)


def diff(report: Report, notes: bool = True) -> list[str]:
    """The findings as a diff, then the verdict; text from outside (record names, requirements, file names)
    printable (envsolver.core.printable)."""
    lines = []
    for finding in report.contradictions + (report.notes if notes else ()):
        lines += [
            "",
            f"{finding.severity} [{finding.check}] {printable(finding.subject)}",
            f"  - {printable(finding.kb)}",
            f"  + {printable(finding.data)}",
        ]
        if finding.fix:
            lines.append(f"  fix: {printable(finding.fix)}")
    counts = f"{len(report.contradictions)} contradiction(s), {len(report.notes)} note(s)"
    lines.append("")
    if report.ok:
        lines.append(f"{counts}: the KB agrees with the data.")
    else:
        lines.append(
            f"{counts}: the KB contradicts the data. Fix each row above in envsolver/kb/data/ (cite the record in "
            "the row's source), then run the audit again."
        )
    return lines


def to_json(report: Report) -> dict[str, object]:
    def one(f: Finding) -> dict[str, object]:
        return {"check": f.check, "subject": f.subject, "kb": f.kb, "data": f.data, "fix": f.fix}

    return {
        "ok": report.ok,
        "exit_code": 0 if report.ok else 1,
        "data": {
            "name": report.data_name,
            "records": report.records,
            "complete": list(report.complete),
            "partial": list(report.partial),
        },
        "contradictions": [one(f) for f in report.contradictions],
        "notes": [one(f) for f in report.notes],
    }
