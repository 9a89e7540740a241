"""The TORCH_CUDA_ARCH_LIST an op build can use: which SMs this nvcc builds, and the requested list made
buildable (archs nvcc cannot build dropped, arch suffixes dropped because DeepSpeed's op builder cannot parse
them, PTX for the newest). Pure; shared by verify's torch_cuda_arch_list check and the hook, which builds with
and activates the plan's list."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envsolver.core.archlist import parse_arch_list
from envsolver.core.versions import leading_major_minor
from envsolver.kb.model import KnowledgeBase


@dataclass(frozen=True)
class ArchPlan:
    value: str  # the list to build with
    dropped: tuple[str, ...] = ()  # compute capabilities nvcc cannot build
    suffixed: tuple[str, ...] = ()  # entries given with an arch suffix (9.0a), built plain


def buildable(facts: Mapping[str, Any], kb: KnowledgeBase) -> set[int] | None:
    """The SM numbers this nvcc builds: from `nvcc --list-gpu-arch`, else the KB row for its version; None when
    neither says."""
    n = facts.get("nvcc") or {}
    if n.get("archs"):
        return {int(a) for a in n["archs"]}
    nvcc = leading_major_minor(n.get("version"))
    toolkit = kb.toolkit(nvcc) if nvcc else None
    return set(toolkit.sm) if toolkit and toolkit.sm is not None else None


def plan(requested: str, able: set[int] | None) -> ArchPlan | None:
    """`requested` made buildable by an nvcc that builds `able` (None: unknown, keep every arch). None when the
    list is malformed or nvcc builds none of it."""
    try:
        archs = parse_arch_list(requested)
    except ValueError:
        return None
    keep = sorted({a.cc for a in archs if able is None or a.cc.sm in able})
    if not keep:
        return None
    dropped = tuple(dict.fromkeys(str(a.cc) for a in archs if able is not None and a.cc.sm not in able))
    suffixed = tuple(str(a) for a in archs if a.suffix)
    return ArchPlan(";".join([str(cc) for cc in keep[:-1]] + [f"{keep[-1]}+PTX"]), dropped, suffixed)
