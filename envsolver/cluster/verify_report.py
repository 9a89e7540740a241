"""What `verify --cluster` shows: one table of checks x partitions (each cell the worst of the partition's nodes),
then every failing or warning check with the nodes that gave it and its fix, the nodes left out, a count naming
every failing node; or one JSON document holding every node's own verify document. Pure.

The lines hold what the nodes said (their names, their checks' ids, details and fixes, what they printed besides
their report) with every control character spelled out (printable.py), a newline too: one line per line, and a
table whose columns line up. The JSON document holds it as it came."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envsolver.cluster import compare, step
from envsolver.cluster.verify import NodeOutcome, Outcome, Report
from envsolver.core.errors import split_fix
from envsolver.core.printable import printable
from envsolver.verify.checks import IDS as NODE_IDS
from envsolver.verify.checks_base import Check

CELL = {"pass": "pass", "warn": "warn", "fail": "FAIL", "skip": "skip"}
RESULT = {"pass": "pass", "warn": "warn", "fail": "FAIL", "error": "ERROR", "skipped": "-"}
NOT_RUN = "-"
ACROSS = "(login node)"


def _rows(checked: list[Outcome]) -> list[str]:
    """The node's check ids in verify's order (ids a node's newer envsolver has, after them), then compare's."""
    seen = [c.id for o in checked for n in o.nodes for c in n.checks]
    node = [i for i in NODE_IDS if i in seen] + [i for i in dict.fromkeys(seen) if i not in NODE_IDS]
    crossed = {c.id for o in checked for n in o.nodes for c in n.cross}
    return node + [i for i in compare.IDS if i in crossed]


def _header(report: Report) -> str:
    lock = (
        f"{report.platform} lock metadata from {report.meta_source}"
        if report.meta_source
        else "no lock metadata (the prefix was not installed with envsolver install)"
    )
    return f"cluster {report.cluster.name} ({report.file}), prefix {report.prefix}: {lock}"


_ORDER = ("fail", "warn", "pass", "skip")


def _cells(outcome: Outcome) -> dict[str, str]:
    """Check id -> the worst status any node of the partition gave it."""
    found: dict[str, set[str]] = {}
    for n in outcome.nodes:
        for c in (*n.checks, *n.cross):
            found.setdefault(c.id, set()).add(c.status)
    return {i: next(s for s in _ORDER if s in statuses) for i, statuses in found.items()}


def _nodes_cell(outcome: Outcome) -> str:
    answered = [n.node for n in outcome.nodes]
    return printable(answered[0]) if len(answered) == 1 else f"{len(answered)} nodes" if answered else "?"


def table(report: Report) -> list[str]:
    """Checks down, partitions across, each cell the worst of the partition's nodes; a partition whose step could
    not run shows '-' and ERROR."""
    checked = [o for o in report.outcomes if o.status != "skipped"]
    if not checked:
        return []
    by_id = [_cells(o) for o in checked]
    body: list[tuple[str, ...]] = [("check", *(o.partition.name for o in checked))]
    body.append(("node", *(_nodes_cell(o) for o in checked)))
    for check_id in _rows(checked):
        label = f"{check_id} {ACROSS}" if check_id in compare.IDS else printable(check_id)
        body.append((label, *(CELL[found[check_id]] if check_id in found else NOT_RUN for found in by_id)))
    body.append(("result", *(RESULT[o.status] for o in checked)))
    widths = [max(len(row[i]) for row in body) for i in range(len(body[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in body]


def _check_lines(check: Check) -> list[str]:
    lines = [f"  {CELL[check.status]} {printable(check.id)}: {printable(check.detail)}"]
    if check.shown_fix is not None:
        lines.append(f"       fix: {printable(check.shown_fix)}")
    return lines


def _named(names: list[str]) -> str:
    return ", ".join(printable(n) for n in names)


def _partition_lines(o: Outcome) -> list[str]:
    """What failed or warned on which nodes (nodes that said the same, together), which nodes gave no report,
    which were left out by their state."""
    out: list[str] = []
    said: dict[tuple[tuple[str, str, str, str], ...], list[str]] = {}
    for n in o.nodes:
        if n.status in ("fail", "warn"):
            shown = [c for c in (*n.checks, *n.cross) if c.status in ("fail", "warn")]
            key = tuple((c.id, str(c.status), c.detail, c.fix) for c in shown)
            said.setdefault(key, []).append(n.node)
    for key, names in said.items():
        status = "fail" if any(c[1] == "fail" for c in key) else "warn"
        out.append(f"{o.partition.name} on {_named(names)}: {RESULT[status]}")
        first = next(n for n in o.nodes if n.node == names[0])
        for check in (*first.checks, *first.cross):
            if check.status in ("fail", "warn"):
                out += _check_lines(check)
    for n in o.nodes:
        if n.status == "error":
            out.append(f"{o.partition.name} on {printable(n.node)}: ERROR, no report: {printable(str(n.error))}")
    for left in o.left_out:
        out.append(f"{o.partition.name}: left out {printable(left.describe())}: not checked")
    return out


def lines(report: Report) -> list[str]:
    """The header, the table, then per partition (file order) what failed or warned and on which nodes, what
    could not run, the nodes left out and the partitions not checked; last, a count naming the failing nodes."""
    out = [_header(report), *table(report)]
    for o in report.outcomes:
        if o.status == "skipped":
            out.append(f"{o.partition.name}: {printable(str(o.error))}")
        elif o.error is not None:
            said = str(o.error).removeprefix(f"partition {o.partition.name}: ")
            out.append(f"{o.partition.name}: ERROR, the step could not run: {printable(said)}")
            out += [f"{o.partition.name}: left out {printable(n.describe())}: not checked" for n in o.left_out]
        else:
            out += _partition_lines(o)
    out.append(count(report))
    return out


def count(report: Report) -> str:
    """'5 partition(s): 3 pass, 1 warn, 1 fail, 0 could not run (1 not checked); 12 node(s), failing: gpu06'."""
    checked = [o for o in report.outcomes if o.status != "skipped"]
    tally = {s: sum(1 for o in checked if o.status == s) for s in ("pass", "warn", "fail", "error")}
    skipped = len(report.outcomes) - len(checked)
    nodes = sum(len(o.nodes) for o in checked)
    failing = [f"{n} ({o.partition.name})" for o in checked for n in o.failing]
    return (
        f"{len(checked)} partition(s): {tally['pass']} pass, {tally['warn']} warn, {tally['fail']} fail, "
        f"{tally['error']} could not run"
        + (f" ({skipped} not checked)" if skipped else "")
        + f"; {nodes} node(s)"
        + (f", failing: {_named(failing)}" if failing else "")
    )


def error_text(report: Report) -> str | None:
    """The error of exit 2: every partition whose step could not run and every node that gave no report, each
    with its fix, on a line of its own (what a node said spelled out, as in lines()); None when none."""
    return _error_text(report, printable)


def _error_text(report: Report, shown: Callable[[str], str]) -> str | None:
    errors = [str(o.error) for o in report.outcomes if o.status == "error" and o.error is not None]
    errors += [
        f"partition {o.partition.name}, node {n.node}: {n.error}"
        for o in report.outcomes
        if o.status != "skipped"
        for n in o.nodes
        if n.status == "error"
    ]
    if not errors:
        return None
    listed = "\n".join(f"  - {shown(e)}" for e in errors)
    where = len({o.partition.name for o in report.outcomes if o.status == "error"})
    return (
        f"the verify step could not run on {where} partition(s):\n{listed}\n"
        "Fix: do what each line says, then run the same command again."
    )


def _check_doc(check: Check, where: str) -> dict[str, str | None]:
    return {"id": check.id, "status": check.status, "detail": check.detail, "fix": check.shown_fix, "on": where}


def _probe_doc(reply: step.Reply | None) -> dict[str, Any] | None:
    if reply is None:
        return None
    probe = reply.probe
    return {
        "gpus": [g.doc() for g in probe.gpus],
        "glibc": str(probe.glibc) if probe.glibc else None,
        "machine": probe.machine,
    }


def _error_doc(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    message, fix = split_fix(text)
    return {"message": message, "fix": fix}


def _node_doc(n: NodeOutcome) -> dict[str, Any]:
    return {
        "node": n.node,
        "status": n.status,
        "checks": [_check_doc(c, "node") for c in n.checks] + [_check_doc(c, "login") for c in n.cross],
        "verify": n.reply.document if n.reply is not None else None,
        "probe": _probe_doc(n.reply),
        "error": _error_doc(n.error),
    }


def _outcome_doc(o: Outcome) -> dict[str, Any]:
    return {
        "name": o.partition.name,
        "platform": o.partition.platform,
        "status": o.status,
        "argv": step.shown(o.argv),
        "seconds": o.seconds,
        "nodes": [_node_doc(n) for n in o.nodes],
        "failing_nodes": list(o.failing),
        "left_out": [{"node": n.node, "state": n.state, "reason": n.reason} for n in o.left_out],
        "error": _error_doc(o.error) if o.status == "error" else None,
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
