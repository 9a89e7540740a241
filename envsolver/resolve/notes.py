"""Plan-time notes about the target GPUs that change nothing in the plan but matter where it runs: multi-GPU nodes
of cards without GPU peer-to-peer (the KB's gpus.yaml multi_gpu rows). Pure."""

from __future__ import annotations

from envsolver.kb.model import KnowledgeBase
from envsolver.resolve.target import Target

PREFIX = "multi-GPU nodes:"


def multi_gpu(kb: KnowledgeBase, target: Target) -> list[str]:
    """One note naming the target GPUs the KB records as without GPU peer-to-peer; [] where it records none. The
    target does not say how many GPUs a node holds, so the note says when it applies."""
    rows = [(g, row) for g in target.gpus for row in kb.multi_gpu if g.key in row.gpus and row.peer_to_peer is False]
    if not rows:
        return []
    names = list(dict.fromkeys(g.name for g, _row in rows))
    no_nvlink = list(dict.fromkeys(g.name for g, row in rows if row.nvlink is False))
    nvlink = f"{_join(no_nvlink)} {'has' if len(no_nvlink) == 1 else 'have'} no NVLink, and " if no_nvlink else ""
    return [
        f"{PREFIX} {nvlink}NVIDIA's NCCL maintainers say GeForce cards do not support GPU peer-to-peer, so between "
        f"several {_join(names)} GPUs in one node NCCL moves data through host memory. Where a driver "
        "still reports peer access between them, NCCL collectives can hang: set NCCL_P2P_DISABLE=1 in the job's "
        "environment on such nodes. With one GPU per node this does not apply."
    ]


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
