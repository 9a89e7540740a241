"""What `cluster init` shows: the drafted partitions as lines of text (what Slurm and the nodes said with its
control characters spelled out, printable.py), or one JSON document (as they said it). Pure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envsolver.cluster.discover import Discovery
from envsolver.cluster.file import to_document
from envsolver.cluster.parse import Probe
from envsolver.core.printable import printable


def lines(found: Discovery, path: Path, outcome: str) -> list[str]:
    """A table of the partitions (name, GPUs, driver, platform, glibc), the skipped ones, the file. (The notes
    are warnings: the CLI prints them on stderr.)"""
    cluster = found.draft.cluster
    rows = [("partition", "gpus", "driver", "platform", "glibc")]
    for p in cluster.partitions:
        rows.append(
            (
                p.name,
                ",".join(p.gpu_names),
                str(p.driver) if p.driver is not None else "unknown",
                p.platform,
                str(p.glibc) if p.glibc is not None else "unknown",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    out = [f"cluster {cluster.name}: {len(cluster.partitions)} GPU partition(s)"]
    out += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for skipped in cluster.skipped:
        out.append(f"skipped {printable(skipped.name)}: {printable(skipped.reason)}")
    verb = "unchanged" if outcome == "unchanged" else "wrote"
    out.append(f"{verb} {path} (every value's origin is under `provenance:`); next: envsolver make --cluster {path}")
    return out


def document(found: Discovery, path: Path, outcome: str) -> dict[str, Any]:
    """`{"ok": true, "file", "outcome", "cluster", "notes", "probes"}`: a probe per group, with what each node it
    reached printed and the nodes left out by their state."""
    return {
        "ok": True,
        "file": str(path),
        "outcome": outcome,
        "cluster": to_document(found.draft.cluster),
        "notes": list(found.draft.notes),
        "probes": [
            {
                "partition": run.group.partition,
                "gres_type": run.group.gres_type,
                "argv": ["srun", *run.argv],
                "nodes": [_probe_doc(probe) for probe in run.probes],
                "left_out": [{"node": n.node, "state": n.state, "reason": n.reason} for n in run.left_out],
                "error": run.error,
            }
            for run in found.probes
        ],
    }


def _probe_doc(probe: Probe) -> dict[str, Any]:
    return {
        "node": probe.node,
        "gpus": [g.doc() for g in probe.gpus],
        "glibc": str(probe.glibc) if probe.glibc else None,
        "machine": probe.machine,
    }
