"""The target's conda platform, with the reason: --platform, else the platform the GPUs' rows record, else (for
GPUs whose row records none: one known only by its PCI device ID or the compute capability its driver reports) the
platform detection saw on this host, else the default. Pure."""

from __future__ import annotations

from envsolver.core.errors import ConflictError, Kind
from envsolver.kb.model import Gpu, Platform
from envsolver.resolve.plan import Reason
from envsolver.resolve.target import Target

# The platform a target gets when neither --platform, a GPU row nor detection gives one: a PCI card's host, the
# platform every GPU row but the Grace, Jetson and DGX Spark ones records (gpus.yaml).
DEFAULT: Platform = "linux-64"


class PlatformsConflict(ConflictError):
    """The target GPUs run on different platforms; `groups` holds the GPU keys of each platform (exit 1)."""

    kind: Kind = "conflict"

    def __init__(self, message: str, groups: tuple[tuple[str, ...], ...]) -> None:
        super().__init__(message)
        self.groups = groups


def choose(target: Target) -> tuple[Platform, list[Reason], list[str]]:
    """The platform, the reasons that say where it came from, and the warnings. Raises PlatformsConflict when the
    GPUs' platforms differ and --platform does not choose."""
    usual = {g: p for g in target.gpus if (p := _usual(target, g)) is not None}
    wanted = set(usual.values())
    unrecorded = [g.name for g in target.gpus if g.platform is None]
    warnings: list[str] = []
    if target.platform is not None:
        others = [g for g in target.gpus if g.platform is not None and g.platform != target.platform]
        if others:
            warnings.append(
                f"--platform {target.platform}: {', '.join(g.name for g in others)} usually run(s) on another "
                f"platform ({', '.join(sorted({g.platform for g in others if g.platform}))})."
            )
        return target.platform, [Reason(f"platform {target.platform}", "given with --platform", ("NV-GPUS",))], warnings
    if len(wanted) > 1:
        by = {p: [g.name for g, q in usual.items() if q == p] for p in sorted(wanted)}
        detail = "; ".join(f"{', '.join(names)} on {p}" for p, names in by.items())
        raise PlatformsConflict(
            f"the target GPUs need different platforms ({detail}); one conda environment serves one platform",
            groups=tuple(tuple(dict.fromkeys(g.key for g, q in usual.items() if q == p)) for p in sorted(wanted)),
        )
    if not wanted:
        names = "; ".join(f"{g.name}, known only by {_known_by(g)}" for g in target.gpus if g.platform is None)
        because = (
            f"the default (a PCI card's host): the knowledge base records no platform for {names}, and none was "
            "given (--platform) or detected (--gpu auto); pass --platform linux-aarch64 for an Arm host"
        )
        return DEFAULT, [Reason(f"platform {DEFAULT}", because, _sources(target))], warnings
    platform = next(iter(wanted))
    recorded = [g.name for g in target.gpus if g.platform is not None]
    parts = [f"{', '.join(recorded)} run(s) on {platform} hosts"] if recorded else []
    if unrecorded:
        parts.append(
            f"this host is {platform} ({target.host_origin}), where {', '.join(unrecorded)} was detected"
            if target.host_platform == platform
            else f"{', '.join(unrecorded)} (no platform recorded) goes with the others"
        )
    source = ("NV-GPUS",) if recorded else _sources(target)
    return platform, [Reason(f"platform {platform}", "; ".join(parts), source)], warnings


def _known_by(gpu: Gpu) -> str:
    return "the compute capability its driver reports" if gpu.key.startswith("sm_") else "its PCI device ID"


def _sources(target: Target) -> tuple[str, ...]:
    """The sources of the rows that record no platform (what says the GPU is known only by ID or CC)."""
    return tuple(dict.fromkeys(s for g in target.gpus if g.platform is None for s in g.source))


def _usual(target: Target, gpu: Gpu) -> Platform | None:
    """The platform a GPU's row records, else the detected host's for a row that records none."""
    return gpu.platform if gpu.platform is not None else target.host_platform
