"""The knowledge base checked against channel records: audit(kb, data) -> Report. Pure.

What counts as a contradiction, and what as a note:
  A record the data has contradicts the KB wherever the KB says it cannot exist or states less than it needs:
  a CUDA build of torch (>= the KB's oldest version on that channel) or of DeepSpeed that no row covers, or
  that two rows cover (on linux-aarch64 the arm variant is part of what a row covers: audit_torch.py); a
  Python, CUDA, cuda-version range or torch pin other than its row's; a cuDNN, NCCL or glibc floor above its
  row's (the plan says the build "runs with cuDNN X or newer"); a pytorch-channel cuDNN other than its row's
  (the build bundles it); a newer torch, DeepSpeed or cuda-version than the KB's newest.
  Where the KB states more than the data shows (a version or Python with no build, a floor above every build's
  of that version), it is a contradiction only for a (channel, subdir) whose data is complete (a repodata.json
  as the channel serves it); in partial data (the bundled snapshot, a mirror of a subset) it is a note, since
  the build may merely be absent. Older builds than the KB covers, and null KB values the data could fill
  (an unknown cuDNN, NCCL, glibc or arm variant), are notes: null says "not known", never "none". (cuda_range
  null is not unknown: torch.yaml defines it as "not selected through cuda-version".)
A row's floor is thus the highest any build of a version states (rebuilds raise it: 2.8.0 cuda129 build 301
needs NCCL 2.27, build 302 2.28). Floors compare major.minor: a row's cudnn "9.10" agrees with
`libcudnn >=9.10.2.21`. A record without a `__glibc` dependency states no glibc floor and is not compared on it.
"""

from __future__ import annotations

import re

from envsolver.kb import audit_deepspeed, audit_torch
from envsolver.kb.findings import Collector, Report
from envsolver.kb.model import KnowledgeBase
from envsolver.kb.records import major_minor
from envsolver.kb.repodata import RepoData


def audit(kb: KnowledgeBase, data: RepoData) -> Report:
    found = Collector()
    audit_torch.check(kb, data, found)
    audit_deepspeed.check(kb, data, found)
    _newest_cuda(kb, data, found)
    audit_torch.newest(kb, data, found)
    audit_deepspeed.newest(kb, data, found)
    order = {"contradiction": 0, "note": 1}
    findings = sorted(
        found.findings(), key=lambda f: (order[f.severity], _natural(f.subject), f.check, _natural(f.kb), f.data)
    )
    return Report(
        data.name,
        tuple(f"{c}/{s}" for c, s in sorted(data.present & data.complete)),
        tuple(f"{c}/{s}" for c, s in sorted(data.present - data.complete)),
        tuple(findings),
        len(data.records),
    )


def _natural(text: str) -> tuple[tuple[int, str], ...]:
    """A sort key that puts builds[6] before builds[10] and 2.9 before 2.10."""
    parts = [part for part in re.split(r"([0-9]+)", text) if part]
    return tuple((int(part), "") if part.isascii() and part.isdigit() else (-1, part) for part in parts)


def _newest_cuda(kb: KnowledgeBase, data: RepoData, found: Collector) -> None:
    """The newest cuda-version in the data against the newest toolkit cuda.yaml lists."""
    toolkit = max((t.version for t in kb.toolkits), default=None)
    known = [(v, r) for r in data.records if r.name == "cuda-version" for v in [major_minor(r.version)] if v]
    said = f"cuda.yaml toolkits: {f'newest {toolkit}' if toolkit is not None else 'none'}"
    if not known:
        found.add("note", "newest", "cuda-version", said, "no cuda-version records", None)
        return
    top, rec = max(known, key=lambda x: x[0])
    if toolkit is None or top > toolkit:
        found.add(
            "contradiction",
            "newest",
            "cuda-version",
            said,
            f"cuda-version {top}",
            f"Add a toolkits row for CUDA {top} (driver floor, SM list and GCC limit from NVIDIA's release notes).",
            rec.label,
        )
    elif top < toolkit:
        found.add("note", "newest", "cuda-version", said, f"newest cuda-version {top}", None, rec.label)
