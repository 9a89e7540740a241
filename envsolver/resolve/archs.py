"""Compute-capability arithmetic: renames between toolkits, what a toolkit can build, the arch list."""

from __future__ import annotations

from envsolver.core.versions import MajorMinor
from envsolver.kb.model import KnowledgeBase, Toolkit


def cc_for_toolkit(kb: KnowledgeBase, cc: MajorMinor, cuda: MajorMinor) -> MajorMinor:
    """The name a toolkit uses for a CC: Jetson Thor is 11.0 from CUDA 13.0 and 10.1 before."""
    for rename in kb.arch_renames:
        if cc == rename.new and cuda < rename.from_cuda:
            return rename.old
        if cc == rename.old and cuda >= rename.from_cuda:
            return rename.new
    return cc


def unbuildable(kb: KnowledgeBase, toolkit: Toolkit, ccs: tuple[MajorMinor, ...]) -> list[MajorMinor] | None:
    """The CCs this toolkit's nvcc cannot compile for, or None when its SM list is unknown."""
    if toolkit.sm is None:
        return None
    return [cc for cc in ccs if cc_for_toolkit(kb, cc, toolkit.version).sm not in toolkit.sm]


def first_toolkit_for(kb: KnowledgeBase, cc: MajorMinor) -> Toolkit | None:
    """The oldest toolkit in the KB that can compile for this CC."""
    able = [t for t in kb.toolkits if t.sm is not None and cc_for_toolkit(kb, cc, t.version).sm in t.sm]
    return min(able, key=lambda t: t.version) if able else None


def arch_list(kb: KnowledgeBase, ccs: tuple[MajorMinor, ...], toolkit: Toolkit) -> str:
    """TORCH_CUDA_ARCH_LIST: the target CCs this toolkit builds, ascending, +PTX on the highest."""
    names = sorted({cc_for_toolkit(kb, cc, toolkit.version) for cc in ccs})
    if toolkit.sm is not None:
        names = [cc for cc in names if cc.sm in toolkit.sm]
    if not names:
        return ""
    return ";".join([str(cc) for cc in names[:-1]] + [f"{names[-1]}+PTX"])
