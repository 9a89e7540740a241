"""The upstream audit's report (compare.py) as text and as JSON: the sources read, then findings.diff."""

from __future__ import annotations

from envsolver.core.printable import printable
from envsolver.kb.findings import Report, diff, to_json
from envsolver.kb.upstream.facts import Facts


def render(report: Report, facts: Facts, notes: bool = True) -> list[str]:
    lines = [
        f"KB audit: the knowledge base against {report.data_name} ({len(facts.torch)} torch releases, "
        f"{len(facts.deepspeed)} DeepSpeed sdists, {len(facts.nvcc)} nvcc wheels read)",
        *(f"  {printable(name)}: {printable(url)}" for name, url in sorted(facts.sources.items())),
    ]
    return lines + diff(report, notes)


def as_json(report: Report, facts: Facts) -> dict[str, object]:
    doc = to_json(report)
    doc["data"] = {
        "name": report.data_name,
        "read": facts.read,
        "sources": dict(sorted(facts.sources.items())),
        "torch_releases": sorted(facts.torch),
        "deepspeed_sdists": len(facts.deepspeed),
        "nvcc_wheels": len(facts.nvcc),
    }
    return doc
