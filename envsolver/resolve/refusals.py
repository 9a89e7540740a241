"""What a refusal says about the builds it rejected: each build once, under the reason that decided it.

A refusal can reject dozens of builds (every torch version x CUDA variant on the channel) for a handful of
reasons; it lists one line per reason, the builds it rejects grouped by variant:

    - torch 2.5.1, 2.4.1 cu118: conda-forge has no nvcc or CUDA header packages for CUDA 11.8 (...)

A reason that differs per build only in a fact about that build (its arch list) is one reason; the fact goes with
the build ('torch 2.5.1 cu126 (its arch list is ...)'). `--json` carries the same grouping (RejectedBuilds).
Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from envsolver.core.errors import RejectedBuilds


@dataclass(frozen=True)
class Refused:
    """A rejected build: torch `version` of `variant` ('cu129', 'cu129 tegra', 'cu118 (pytorch channel)'), the
    reason it was refused and what that reason says about this build alone (or None)."""

    version: str
    variant: str
    reason: str
    detail: str | None = None

    @property
    def label(self) -> str:
        """'torch 2.5.1 cu118': how a plan's rejected list names the build."""
        return f"torch {self.version} {self.variant}"

    @property
    def because(self) -> str:
        """The reason with this build's detail, as a plan's rejected list gives it."""
        return f"{self.reason} ({self.detail})" if self.detail else self.reason


def _by_reason(refused: list[Refused]) -> dict[str, list[Refused]]:
    """The builds under each reason, reasons and builds in the order they were tried (newest first)."""
    grouped: dict[str, list[Refused]] = {}
    for item in refused:
        grouped.setdefault(item.reason, []).append(item)
    return grouped


def by_reason(refused: list[Refused]) -> tuple[RejectedBuilds, ...]:
    """The grouping --json shows."""
    return tuple(
        RejectedBuilds(reason, tuple((r.label, r.detail) for r in items))
        for reason, items in _by_reason(refused).items()
    )


def _builds(items: list[Refused]) -> str:
    """'torch 2.5.1, 2.4.1 cu118, torch 2.5.1 cu126 (its arch list is ...)': the builds of one reason, the
    versions of one variant (with one detail) together."""
    runs: dict[tuple[str, str | None], list[str]] = {}
    for item in items:
        runs.setdefault((item.variant, item.detail), []).append(item.version)
    return ", ".join(
        f"torch {', '.join(versions)} {variant}" + (f" ({detail})" if detail else "")
        for (variant, detail), versions in runs.items()
    )


def listing(refused: list[Refused]) -> str:
    """One line per reason, each `  - BUILDS: REASON`, joined by newlines."""
    return "\n".join(f"  - {_builds(items)}: {reason}" for reason, items in _by_reason(refused).items())
