"""What a node must show for an environment, derived on the login node from the knowledge base and the lock's
metadata: the one reading of what a lock promises (its driver floor, glibc, target compute capabilities, torch's
CUDA), used by verify's host_vs_lock check, and the document the job's gate (verify/gate.py, run by the
environment's python on each node of a job, where envsolver cannot run) judges a node's facts against. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envsolver.core.versions import DriverVersion, MajorMinor, leading_major_minor
from envsolver.core.versions import driver as parse_driver
from envsolver.kb.model import KnowledgeBase
from envsolver.resolve import driver as driver_rules
from envsolver.verify import gate


@dataclass(frozen=True)
class Promise:
    """What the lock's metadata says a host has: the driver floor (minor-version compatibility of the CUDA it
    was solved for), the __cuda it was solved for, its __glibc, the target compute capabilities, torch's CUDA."""

    driver: DriverVersion | None = None
    solved_cuda: MajorMinor | None = None
    glibc: MajorMinor | None = None
    ccs: tuple[str, ...] = ()
    torch_cuda: MajorMinor | None = None
    archs: tuple[str, ...] = ()  # the TORCH_CUDA_ARCH_LIST it was made with; its target CCs when none is recorded


def _virtual(meta: Mapping[str, str], suffix: str) -> str | None:
    """envsolver_virtual_<platform>_<suffix>: the virtual package the lock was solved with."""
    key = next((k for k in meta if k.startswith("envsolver_virtual_") and k.endswith(suffix)), None)
    return meta[key] if key else None


def _driver(text: str | None) -> DriverVersion | None:
    try:
        return parse_driver(text) if text else None
    except ValueError:
        return None


def promise(meta: Mapping[str, str]) -> Promise:
    """The lock's promise; a value the metadata does not hold (or holds malformed) is None."""
    return Promise(
        driver=_driver(meta.get("envsolver_driver_min_minor_compat")),
        solved_cuda=leading_major_minor(_virtual(meta, "_cuda")),
        glibc=leading_major_minor(_virtual(meta, "_glibc")),
        ccs=tuple(c for c in (meta.get("envsolver_compute_capabilities") or "").split(";") if c),
        torch_cuda=leading_major_minor(meta.get("envsolver_cuda_version")),
        archs=tuple(a for a in re.split(r"[; ]", meta.get("envsolver_torch_cuda_arch_list") or "") if a)
        or tuple(c for c in (meta.get("envsolver_compute_capabilities") or "").split(";") if c),
    )


def cuda_drivers(kb: KnowledgeBase) -> dict[str, dict[str, str | None]]:
    """For each CUDA release the knowledge base knows: the driver that fully supports it and its major's
    minor-version-compatibility floor (resolve.driver.floors, the rule verify's driver_supports_torch_cuda
    applies)."""
    out: dict[str, dict[str, str | None]] = {}
    for toolkit in sorted(kb.toolkits, key=lambda t: t.version):
        full, minor = driver_rules.floors(kb, toolkit.version)
        out[str(toolkit.version)] = {"full": str(full) if full else None, "minor": str(minor) if minor else None}
    return out


def derive(kb: KnowledgeBase, meta: Mapping[str, str] | None) -> dict[str, Any]:
    """The gate's demands: the drivers each CUDA release needs, and the lock's promise (None without metadata)."""
    lock = None
    if meta:
        kept = promise(meta)
        lock = {
            "driver": str(kept.driver) if kept.driver else None,
            "solved_cuda": str(kept.solved_cuda) if kept.solved_cuda else None,
            "glibc": str(kept.glibc) if kept.glibc else None,
            "ccs": list(kept.ccs),
            "archs": list(kept.archs),
            "torch_cuda": str(kept.torch_cuda) if kept.torch_cuda else None,
        }
    return {"version": gate.DEMANDS_VERSION, "cuda_drivers": cuda_drivers(kb), "lock": lock}
