"""Lock a plan: pick the channels (live, a site mirror or local channel, or the bundled snapshot), solve
each platform with rattler, check the solution against the plan, and hand back what the writers need.

With the snapshot, a plan the snapshot cannot solve is rejected with the solver's reason and the next
candidate is tried, so `make --offline` ends with a plan the snapshot can really lock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from envsolver import lockcheck, snapshot
from envsolver.errors import BadInputError, ConflictError
from envsolver.http import check_url
from envsolver.kb.model import KnowledgeBase
from envsolver.plan import Plan, Rejected
from envsolver.redact import redact, redact_text
from envsolver.resolve import resolve
from envsolver.snapshot import coverage
from envsolver.solve import ChannelSource, ChannelsUnreachable, Record, SolveFailed, solve
from envsolver.target import Target

Mode = Literal["live", "offline", "custom"]
Progress = Callable[[str], None]
LIVE_BASE = "https://conda.anaconda.org"  # the public name of a channel in written files
LIVE_LOCATION = LIVE_BASE  # where live repodata is fetched from (tests point it at a closed port)
MAX_SNAPSHOT_RETRIES = 8


@dataclass(frozen=True)
class LockResult:
    plan: Plan
    records: dict[str, tuple[Record, ...]]
    channels: tuple[str, ...]
    used: Literal["live", "snapshot", "custom"]
    snapshot_date: str | None
    virtual_packages: dict[str, dict[str, str]]
    warnings: tuple[str, ...] = field(default_factory=tuple)


def virtual_packages(kb: KnowledgeBase, plan: Plan) -> dict[str, str]:
    """What the solve assumes for the target platform: the platform's base set plus the plan's."""
    base, _ = kb.platform_virtual_packages[plan.platform]
    return {**base, **plan.virtual_packages}


def _live(plan: Plan) -> list[ChannelSource]:
    return [ChannelSource(f"{LIVE_BASE}/{c}", f"{LIVE_LOCATION}/{c}") for c in plan.channels]


def _snapshot(plan: Plan) -> list[ChannelSource]:
    local = snapshot.channels()
    missing = [c for c in plan.channels if f"{LIVE_BASE}/{c}" not in local]
    if missing:
        raise ConflictError(
            f"the bundled snapshot ({snapshot.date()}) has no copy of channel(s) {', '.join(missing)}. "
            "Lock against the live channels or a mirror (--channel URL) instead of --offline."
        )
    return [ChannelSource(f"{LIVE_BASE}/{c}", local[f"{LIVE_BASE}/{c}"]) for c in plan.channels]


def _custom(urls: Sequence[str]) -> list[ChannelSource]:
    """The --channel URLs as sources: fetched as given (credentials included), named in files by their public
    form. Raises BadInputError (exit 2) for anything but an http(s) or file:// URL without a query."""
    out = []
    for url in urls:
        if "://" not in url:
            raise BadInputError(
                f"--channel {redact_text(url)!r} is not a URL. Pass a full URL such as "
                "https://mirror.example.org/conda-forge or file:///srv/channels/conda-forge."
            )
        check_url(url, "--channel", "https://mirror.example.org/conda-forge or file:///srv/channels/conda-forge")
        out.append(ChannelSource(redact(url).rstrip("/"), url.rstrip("/")))
    return out


def _solve_all(
    plan: Plan, kb: KnowledgeBase, sources: list[ChannelSource], cache: Path, progress: Progress
) -> dict[str, tuple[Record, ...]]:
    specs = [str(s) for s in plan.specs]
    progress(f"solving {plan.platform} ({len(specs)} specs, channels: {', '.join(s.public for s in sources)})")
    records = solve(specs, sources, plan.platform, virtual_packages(kb, plan), cache)
    wrong = lockcheck.problems(plan, kb, records)
    if wrong:
        raise ConflictError(
            "the solution does not match the plan, so nothing was written: "
            + "; ".join(wrong)
            + ". Check the channels (--channel) carry the packages the plan needs."
        )
    return {plan.platform: tuple(records)}


def _reasons(plan: Plan) -> str:
    return "\n".join(f"  - {r.decision}: {r.because}" for r in plan.reasons)


def lock(
    target: Target, kb: KnowledgeBase, mode: Mode, channel_urls: Sequence[str], cache: Path, progress: Progress
) -> LockResult:
    """Resolve and lock. Raises ConflictError (exit 1) when nothing can be locked."""
    if mode == "offline":
        return _lock_snapshot(target, kb, cache, progress, warnings=[])
    plan = resolve(target, kb)
    sources = _custom(channel_urls) if mode == "custom" else _live(plan)
    try:
        records = _solve_all(plan, kb, sources, cache, progress)
    except ChannelsUnreachable as exc:
        if mode == "custom":
            raise ConflictError(
                f"{redact_text(str(exc))}. Check the --channel URLs are reachable from this host; a channel that "
                "needs credentials takes them in its URL (https://USER:TOKEN@HOST/... or https://HOST/t/TOKEN/...)."
            ) from None
        warning = (
            f"the live channels could not be reached ({str(exc).splitlines()[0]}); locked against the "
            f"bundled snapshot of {snapshot.date()} instead"
        )
        progress(warning)
        return _lock_snapshot(target, kb, cache, progress, warnings=[warning], plan=plan)
    except SolveFailed as exc:
        raise SolveFailed(f"{exc}\nThe plan's decisions:\n{_reasons(plan)}") from None
    used: Literal["live", "custom"] = "custom" if mode == "custom" else "live"
    return LockResult(
        plan, records, tuple(s.public for s in sources), used, None, {plan.platform: virtual_packages(kb, plan)}
    )


def _lock_snapshot(
    target: Target, kb: KnowledgeBase, cache: Path, progress: Progress, warnings: list[str], plan: Plan | None = None
) -> LockResult:
    """Lock against the snapshot. With `plan` given (a live lock that fell back), that plan is locked or the
    snapshot's gap is named; without, the resolver chooses among what the snapshot holds, and a candidate the
    snapshot cannot solve is rejected and the next one tried."""
    restricted = coverage.restrict(kb, snapshot.records())
    if plan is not None:
        try:
            records = _solve_all(plan, kb, _snapshot(plan), cache, progress)
        except SolveFailed as exc:
            raise ConflictError(_snapshot_gap(plan, restricted, str(exc))) from None
        return _snapshot_result(kb, plan, records, warnings)
    extra: list[Rejected] = []
    for _ in range(MAX_SNAPSHOT_RETRIES):
        try:
            candidate = resolve(target, restricted)
        except ConflictError as exc:
            raise ConflictError(
                f"the bundled snapshot ({snapshot.date()}) cannot serve this target: {exc}\n"
                f"The snapshot holds: {'; '.join(coverage.summary(restricted))}."
            ) from None
        try:
            records = _solve_all(candidate, kb, _snapshot(candidate), cache, progress)
        except SolveFailed as exc:
            reason = _first_line_of_solver(str(exc))
            progress(f"torch {candidate.torch_version} cu{candidate.torch_cuda.nodot}: {reason}")
            extra.append(
                Rejected(
                    f"torch {candidate.torch_version} cu{candidate.torch_cuda.nodot}",
                    f"the snapshot cannot solve it: {reason}",
                )
            )
            restricted = _without(restricted, candidate)
            continue
        final = dataclasses.replace(candidate, rejected=candidate.rejected + tuple(extra))
        return _snapshot_result(kb, final, records, warnings)
    raise ConflictError(
        f"the bundled snapshot ({snapshot.date()}) could not lock any of the first "
        f"{MAX_SNAPSHOT_RETRIES} candidates: " + "; ".join(f"{r.candidate}: {r.because}" for r in extra)
    )


def _snapshot_result(
    kb: KnowledgeBase, plan: Plan, records: dict[str, tuple[Record, ...]], warnings: list[str]
) -> LockResult:
    channels = tuple(f"{LIVE_BASE}/{c}" for c in plan.channels)
    return LockResult(
        plan,
        records,
        channels,
        "snapshot",
        snapshot.date(),
        {plan.platform: virtual_packages(kb, plan)},
        tuple(warnings),
    )


def _without(kb: KnowledgeBase, plan: Plan) -> KnowledgeBase:
    rows = []
    for row in kb.torch_builds:
        if row.platform == plan.platform and row.cuda == plan.torch_cuda and row.channel == plan.source:
            kept = tuple(v for v in row.versions if str(v) != plan.torch_version)
            if kept:
                rows.append(dataclasses.replace(row, versions=kept))
        else:
            rows.append(row)
    return dataclasses.replace(kb, torch_builds=tuple(rows))


def _first_line_of_solver(text: str) -> str:
    lines = [line.strip(" └─├│") for line in text.splitlines()[1:] if line.strip(" └─├│")]
    return lines[0] if lines else text.splitlines()[0]


def _snapshot_gap(plan: Plan, restricted: KnowledgeBase, solver_text: str) -> str:
    holds = any(
        row.platform == plan.platform
        and row.cuda == plan.torch_cuda
        and row.channel == plan.source
        and any(str(v) == plan.torch_version for v in row.versions)
        and plan.python_version in row.python
        for row in restricted.torch_builds
    )
    why = (
        solver_text
        if holds
        else f"it has no pytorch {plan.torch_version} {plan.torch_build} record for Python {plan.python_version} "
        f"on {plan.platform}"
    )
    return (
        f"the bundled snapshot ({snapshot.date()}) cannot lock this plan: {why}. The snapshot holds: "
        f"{'; '.join(coverage.summary(restricted))}. Use --offline to choose a plan the snapshot can lock, "
        "or --channel with a reachable mirror."
    )
