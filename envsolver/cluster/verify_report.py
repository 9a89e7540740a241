"""What `verify --cluster` shows: one table of checks x partitions, then every failing or warning check with its
node and fix; or one JSON document holding every partition's own verify document. Pure.

The lines hold what the nodes said (their names, their checks' ids, details and fixes, what they printed besides
their report) with every control character spelled out (printable.py), a newline too: one line per line, and a
table whose columns line up. The JSON document holds it as it came."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envsolver.cluster import compare, step
from envsolver.cluster.verify import Outcome, Report
from envsolver.errors import split_fix
from envsolver.printable import printable
from envsolver.verify.checks import IDS as NODE_IDS
from envsolver.verify.checks_base import Check

CELL = {"pass": "pass", "warn": "warn", "fail": "FAIL", "skip": "skip"}
RESULT = {"pass": "pass", "warn": "warn", "fail": "FAIL", "error": "ERROR", "skipped": "-"}
NOT_RUN = "-"
ACROSS = "(login node)"


def _rows(checked: list[Outcome]) -> list[str]:
    """The node's check ids in verify's order (ids a node's newer envsolver has, after them), then compare's."""
    seen = [c.id for o in checked for c in o.checks]
    node = [i for i in NODE_IDS if i in seen] + [i for i in dict.fromkeys(seen) if i not in NODE_IDS]
    return node + [i for i in compare.IDS if any(c.id == i for o in checked for c in o.cross)]


def _header(report: Report) -> str:
    lock = (
        f"{report.platform} lock metadata from {report.meta_source}"
        if report.meta_source
        else "no lock metadata (the prefix was not installed with envsolver install)"
    )
    return f"cluster {report.cluster.name} ({report.file}), prefix {report.prefix}: {lock}"


def table(report: Report) -> list[str]:
    """Checks down, partitions across; a partition whose step could not run shows '-' and ERROR."""
    checked = [o for o in report.outcomes if o.status != "skipped"]
    if not checked:
        return []
    by_id = [{c.id: c for c in (*o.checks, *o.cross)} for o in checked]
    body: list[tuple[str, ...]] = [("check", *(o.partition.name for o in checked))]
    body.append(("node", *(printable(o.node or "?") for o in checked)))
    for check_id in _rows(checked):
        label = f"{check_id} {ACROSS}" if check_id in compare.IDS else printable(check_id)
        body.append((label, *(CELL[found[check_id].status] if check_id in found else NOT_RUN for found in by_id)))
    body.append(("result", *(RESULT[o.status] for o in checked)))
    widths = [max(len(row[i]) for row in body) for i in range(len(body[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in body]


def _check_lines(check: Check) -> list[str]:
    lines = [f"  {CELL[check.status]} {printable(check.id)}: {printable(check.detail)}"]
    if check.fix:
        lines.append(f"       fix: {printable(check.fix)}")
    return lines


def lines(report: Report) -> list[str]:
    """The header, the table, then per partition (file order) what failed or warned, what could not run and what
    was not checked; last, a count."""
    out = [_header(report), *table(report)]
    for o in report.outcomes:
        if o.status in ("fail", "warn"):
            out.append(f"{o.partition.name} on {printable(o.node or 'unknown node')}: {RESULT[o.status]}")
            for check in (*o.checks, *o.cross):
                if check.status in ("fail", "warn"):
                    out += _check_lines(check)
        elif o.status == "error":
            said = str(o.error).removeprefix(f"partition {o.partition.name}: ")
            out.append(f"{o.partition.name}: ERROR, the step could not run: {printable(said)}")
        elif o.status == "skipped":
            out.append(f"{o.partition.name}: {printable(str(o.error))}")
    out.append(count(report))
    return out


def count(report: Report) -> str:
    """'5 partitions: 3 pass, 1 warn, 1 fail, 0 could not run (1 not checked)'."""
    checked = [o for o in report.outcomes if o.status != "skipped"]
    tally = {s: sum(1 for o in checked if o.status == s) for s in ("pass", "warn", "fail", "error")}
    skipped = len(report.outcomes) - len(checked)
    return (
        f"{len(checked)} partition(s): {tally['pass']} pass, {tally['warn']} warn, {tally['fail']} fail, "
        f"{tally['error']} could not run" + (f" ({skipped} not checked)" if skipped else "")
    )


def error_text(report: Report) -> str | None:
    """The error of exit 2: every partition whose step could not run, each with its fix, on a line of its own
    (what a node said spelled out, as in lines()); None when none."""
    return _error_text(report, printable)


def _error_text(report: Report, shown: Callable[[str], str]) -> str | None:
    errors = [o for o in report.outcomes if o.status == "error"]
    if not errors:
        return None
    listed = "\n".join(f"  - {shown(str(o.error))}" for o in errors)
    return (
        f"the verify step could not run on {len(errors)} partition(s):\n{listed}\n"
        "Fix: do what each partition's line says, then run the same command again."
    )


def _check_doc(check: Check, where: str) -> dict[str, str]:
    return {"id": check.id, "status": check.status, "detail": check.detail, "fix": check.fix, "on": where}


def _outcome_doc(o: Outcome) -> dict[str, Any]:
    probe = o.reply.probe if o.reply is not None else None
    error = None
    if o.error is not None and o.status == "error":
        message, fix = split_fix(o.error)
        error = {"message": message, "fix": fix}
    return {
        "name": o.partition.name,
        "platform": o.partition.platform,
        "status": o.status,
        "node": o.node,
        "argv": step.shown(o.argv),
        "seconds": o.seconds,
        "checks": [_check_doc(c, "node") for c in o.checks] + [_check_doc(c, "login") for c in o.cross],
        "verify": o.reply.document if o.reply is not None else None,
        "probe": (
            {
                "gpus": [
                    {"name": g.name, "driver": str(g.driver), "compute_cap": str(g.compute_cap)} for g in probe.gpus
                ],
                "glibc": str(probe.glibc) if probe.glibc else None,
                "machine": probe.machine,
            }
            if probe is not None
            else None
        ),
        "error": error,
        "reason": o.error if o.status == "skipped" else None,
    }


def document(report: Report) -> dict[str, Any]:
    """`{"ok", "exit_code", "cluster", "file", "prefix", "python", "lock", "partitions": [...]}`, and `error`
    ({"kind", "message", "fix"}) when a step could not run (exit 2)."""
    code = report.exit_code
    doc: dict[str, Any] = {
        "ok": code == 0,
        "exit_code": code,
        "cluster": report.cluster.name,
        "file": report.file,
        "prefix": report.prefix,
        "python": report.python,
        "lock": (
            {
                "source": report.meta_source,
                "platform": report.platform,
                "cluster": report.meta.get(compare.CLUSTER_KEY),
                "partitions": [p for p in report.meta.get(compare.PARTITIONS_KEY, "").split(";") if p],
            }
            if report.meta_source
            else None
        ),
        "partitions": [_outcome_doc(o) for o in report.outcomes],
    }
    text = _error_text(report, str)  # as the nodes said it: JSON spells out control characters itself
    if text is not None:
        message, fix = split_fix(text)
        doc["error"] = {"kind": "failed", "message": message, "fix": fix}
    return doc
