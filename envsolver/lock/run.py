"""Lock a plan: pick the channels (live, a site mirror or local channel, or the bundled snapshot), solve
each platform with rattler, check the solution against the plan, and hand back what the writers need.

With the snapshot, a plan the snapshot cannot lock (no solution, or a solution with two CUDA runtimes) is
rejected with the reason in plain words and the next candidate is tried, so `make --offline` ends with a plan
the snapshot can really lock. Where the live channels are out of reach and the snapshot cannot lock the build
`explain` shows, the refusal names that build, says why, and offers ways out that each were tried.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from envsolver.core.errors import ConflictError, EnvsolverError, Kind, RejectedBuilds
from envsolver.core.printable import one_line
from envsolver.core.redact import redact, redact_text
from envsolver.kb.model import KnowledgeBase
from envsolver.lock import lockcheck, snapshot, unsolved
from envsolver.lock.pypi.record import PipRecord
from envsolver.lock.snapshot import restricted as snapshot_restricted
from envsolver.lock.solve import ChannelSource, ChannelsUnreachable, Locked, Record, SolveFailed, solve
from envsolver.net import channels
from envsolver.resolve import ways_out
from envsolver.resolve.plan import Plan, Rejected
from envsolver.resolve.run import advised, choose, refusal, resolve
from envsolver.resolve.target import Target

if TYPE_CHECKING:  # make's kept lock (lock/keep.py), read only when make replaces one
    from envsolver.lock.keep import Keep

Mode = Literal["live", "offline", "custom"]
Progress = Callable[[str], None]
LIVE_BASE = channels.ALIAS  # the public name of a channel in written files: conda's channel_alias
LIVE_LOCATION = LIVE_BASE  # where live repodata is fetched from (tests point it at a closed port)
MAX_SNAPSHOT_RETRIES = 8
UNSOLVED = "the snapshot cannot lock it: "


class Incoherent(SolveFailed):
    """The solution holds more than one CUDA runtime (lockcheck.coherence); the message says how (exit 1)."""

    kind: Kind = "conflict"


class SnapshotRefusal(ConflictError):
    """Nothing within the snapshot locks the target; `unsolved` holds the candidates it could not lock (exit 1)."""

    kind: Kind = "conflict"

    def __init__(
        self,
        message: str,
        rejected: list[tuple[str, str]] | None,
        unsolved: tuple[Rejected, ...],
        by_reason: tuple[RejectedBuilds, ...] = (),
    ) -> None:
        super().__init__(message, rejected, by_reason)
        self.unsolved = unsolved


@dataclass(frozen=True)
class LockResult:
    plan: Plan
    records: dict[str, tuple[Record, ...]]
    channels: tuple[str, ...]
    used: Literal["live", "snapshot", "custom"]
    snapshot_date: str | None
    virtual_packages: dict[str, dict[str, str]]
    warnings: tuple[str, ...] = field(default_factory=tuple)
    pip: dict[str, tuple[PipRecord, ...]] = field(default_factory=dict)  # per platform: the locked PyPI files
    pip_index: str | None = None  # where they were read (public form), when there are any
    pip_sdists: tuple[str, ...] = ()  # the project's PyPI files that are sdists (no wheel fits the target)


def virtual_packages(kb: KnowledgeBase, plan: Plan) -> dict[str, str]:
    """What the solve assumes for the target platform: the platform's base set plus the plan's."""
    base, _ = kb.platform_virtual_packages[plan.platform]
    return {**base, **plan.virtual_packages}


def _live(plan: Plan) -> list[ChannelSource]:
    return [ChannelSource(f"{LIVE_BASE}/{c}", f"{LIVE_LOCATION}/{c}") for c in plan.channels]


class NotInSnapshot(ConflictError):
    """A project's channel that the bundled snapshot holds no copy of (exit 1)."""

    kind: Kind = "conflict"


def _snapshot(plan: Plan) -> list[ChannelSource]:
    local = snapshot.channels()
    missing = [c for c in plan.channels if f"{LIVE_BASE}/{c}" not in local]
    if missing and not set(missing) <= set(plan.project.channels):
        # the stack's channels are always in the snapshot (tests/test_snapshot.py): an envsolver bug
        raise RuntimeError(f"the bundled snapshot has no copy of channel(s) {', '.join(missing)}")
    if missing:
        held = ", ".join(sorted(c.removeprefix(f"{LIVE_BASE}/") for c in local))
        raise NotInSnapshot(
            f"the bundled snapshot of {snapshot.date()} holds copies of {held} only, not of the project's "
            f"channel(s) {', '.join(missing)} ({', '.join(plan.project.files) or 'the project'}), so it cannot "
            "lock the project. Run make without --offline where the channels can be reached, or with --channel "
            "URLs of a site mirror that holds them."
        )
    return [ChannelSource(f"{LIVE_BASE}/{c}", local[f"{LIVE_BASE}/{c}"]) for c in plan.channels]


def _channel_fix(urls: Sequence[str]) -> str:
    """The fix for --channel URLs whose repodata could not be read: a local directory must be an indexed
    channel; a remote one must be reachable, with its credentials in the URL."""
    if all(url.startswith("file:") for url in urls):
        return (
            "Check that each --channel directory is a conda channel: SUBDIR/repodata.json for the platform and "
            "for noarch (a mirror tool or `conda index DIR` writes them)."
        )
    return (
        "Check the --channel URLs are reachable from this host; a channel that needs credentials takes them in "
        "its URL (https://USER:TOKEN@HOST/... or https://HOST/t/TOKEN/...)."
    )


def _custom(values: Sequence[str]) -> list[ChannelSource]:
    """The --channel values as sources: a channel name (envsolver.net.channels) as conda maps it, onto
    https://conda.anaconda.org/NAME (fetched from LIVE_LOCATION, as the live channels are); a URL fetched as given
    (credentials included), named in files by its public form. Raises BadInputError (exit 2) for a value that is
    neither a channel name nor an http(s) or file:// URL without a query."""
    out = []
    for value in values:
        channels.check(value)
        if channels.is_name(value):
            out.append(ChannelSource(f"{LIVE_BASE}/{value}", f"{LIVE_LOCATION}/{value}"))
        else:
            out.append(ChannelSource(redact(value).rstrip("/"), value.rstrip("/")))
    return out


@functools.lru_cache(maxsize=256)
def _solve_snapshot(
    specs: tuple[str, ...],
    sources: tuple[ChannelSource, ...],
    platform: str,
    virtual: tuple[tuple[str, str], ...],
    cache: Path,
    locked: tuple[Locked, ...] = (),
) -> tuple[Record, ...] | str:
    """A solve against the bundled snapshot (read-only local files, so one answer per process): the
    records, or the solver's explanation. The snapshot planner tries many candidates, and ways out more."""
    try:
        return tuple(solve(list(specs), list(sources), platform, dict(virtual), cache, locked=locked))
    except SolveFailed as exc:
        return str(exc)


def _solve_all(
    plan: Plan,
    kb: KnowledgeBase,
    sources: list[ChannelSource],
    cache: Path,
    progress: Progress,
    local: bool = False,
    keep: Keep | None = None,
) -> dict[str, tuple[Record, ...]]:
    specs = [str(s) for s in plan.specs]
    progress(f"solving {plan.platform} ({len(specs)} specs, channels: {', '.join(s.public for s in sources)})")
    virtual = virtual_packages(kb, plan)
    locked = keep.locked_for(plan.platform) if keep else ()  # the lock make replaces, preferred (lock/keep.py)
    if local:
        answer = _solve_snapshot(
            tuple(specs), tuple(sources), plan.platform, tuple(sorted(virtual.items())), cache, locked
        )
        if isinstance(answer, str):
            raise SolveFailed(answer)
        records: Sequence[Record] = answer
    else:
        records = solve(specs, sources, plan.platform, virtual, cache, locked=locked)
    runtimes = lockcheck.coherence(plan, kb, records)
    if runtimes:
        raise Incoherent("; ".join(runtimes))
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
    target: Target,
    kb: KnowledgeBase,
    mode: Mode,
    channel_urls: Sequence[str],
    cache: Path,
    progress: Progress,
    environ: Mapping[str, str] | None = None,
    keep: Keep | None = None,
    ways: bool = True,
) -> LockResult:
    """Resolve and lock, the conda part and then the PyPI part (lock/pippart.py: the stack's files by their sha256,
    the project's requirements resolved by uv around the conda part). Raises ConflictError (exit 1) when nothing
    can be locked. KEEP: the lock this one replaces, whose packages the solve prefers (lock/keep.py); WAYS: whether
    a PyPI refusal tries ways out that change the conda part (a way out being tried tries none of its own).

    One rule without reachable channels: `offline`, and `live` when the live channels cannot be reached,
    plan within what the bundled snapshot can lock (plan_offline); the live fallback says so in one warning.
    The PyPI part follows the same rule with the bundled snapshot of PyPI's pages.
    """
    conda = _lock_conda(target, kb, mode, channel_urls, cache, progress, keep)
    from envsolver.lock import pippart

    def relock(changed: Target) -> LockResult:  # a way out of the PyPI part: the whole lock again, quietly
        return lock(changed, kb, mode, channel_urls, cache, lambda _: None, environ, keep, ways=False)

    return pippart.lock_pip(
        conda, target, kb, mode, os.environ if environ is None else environ, cache, progress, keep,
        relock if ways else None,
    )  # fmt: skip


def _lock_conda(
    target: Target,
    kb: KnowledgeBase,
    mode: Mode,
    channel_urls: Sequence[str],
    cache: Path,
    progress: Progress,
    keep: Keep | None = None,
) -> LockResult:
    if mode == "offline":
        plan, records = plan_offline(target, kb, cache, progress, keep)
        return _snapshot_result(kb, plan, records, [])
    plan = resolve(target, kb)

    def sources_for(chosen: Plan) -> list[ChannelSource]:
        return _custom(channel_urls) if mode == "custom" else _live(chosen)

    sources = sources_for(plan)
    try:
        records = _solve_all(plan, kb, sources, cache, progress, keep=keep)
    except ChannelsUnreachable as exc:
        if mode == "custom":
            raise ChannelsUnreachable(f"{redact_text(str(exc))}. {_channel_fix(channel_urls)}") from None
        return _fall_back(target, kb, plan, one_line(str(exc)), cache, progress, keep)
    except Incoherent as exc:
        raise _incoherent(target, kb, plan, str(exc), sources_for, cache) from None
    except SolveFailed as exc:
        found = _project_clash(target, kb, sources_for, cache, "the --channel URLs" if mode == "custom" else None)
        if found is not None:
            raise found from None
        if mode == "custom":
            raise _unsolvable_here(target, kb, plan, str(exc), sources_for, cache, progress) from None
        raise SolveFailed(f"{exc}\nThe plan's decisions:\n{_reasons(plan)}") from None
    used: Literal["live", "custom"] = "custom" if mode == "custom" else "live"
    return LockResult(
        plan, records, tuple(s.public for s in sources), used, None, {plan.platform: virtual_packages(kb, plan)}
    )


def _project_clash(
    target: Target,
    kb: KnowledgeBase,
    sources_for: Callable[[Plan], list[ChannelSource]],
    cache: Path,
    where: str | None,
) -> ConflictError | None:
    """Where the target has a project whose conda packages are why nothing solves: the refusal naming them and
    the stack packages they clash with (lock/clash.py), with ways out solved against the same channels."""
    if not target.project.conda:
        return None
    from envsolver.lock import clash

    def solver(plan: Plan) -> str | tuple[Record, ...]:
        return _unsolved(plan, kb, sources_for(plan), cache, local=False)

    names = where or ", ".join(redact(s.public) for s in sources_for(choose(target, kb, advise=False)))
    return clash.explain(target, kb, _channels_planner(kb, sources_for, cache), solver, names)


def _snapshot_clash(target: Target, kb: KnowledgeBase, cache: Path) -> ConflictError | None:
    """_project_clash within the bundled snapshot (its plans chosen among what it holds)."""
    if not target.project.conda:
        return None
    from envsolver.lock import clash

    def solver(plan: Plan) -> str | tuple[Record, ...]:
        return _unsolved(plan, kb, _snapshot(plan), cache, local=True)

    return clash.explain(target, kb, _snapshot_planner(kb, cache), solver, f"the bundled snapshot of {snapshot.date()}")


def _unsolved(
    plan: Plan, kb: KnowledgeBase, sources: list[ChannelSource], cache: Path, local: bool
) -> str | tuple[Record, ...]:
    """PLAN's specs solved (the records), or the solver's explanation where they have no solution; unchecked against
    the plan: lock/clash relaxes the stack's specs one at a time to find what a project's package clashes with."""
    specs = [str(s) for s in plan.specs]
    virtual = virtual_packages(kb, plan)
    if local:
        return _solve_snapshot(tuple(specs), tuple(sources), plan.platform, tuple(sorted(virtual.items())), cache)
    try:
        return tuple(solve(specs, sources, plan.platform, virtual, cache))
    except SolveFailed as exc:
        return str(exc)


def _unsolvable_here(
    target: Target,
    kb: KnowledgeBase,
    plan: Plan,
    text: str,
    sources_for: Callable[[Plan], list[ChannelSource]],
    cache: Path,
    progress: Progress,
) -> ConflictError:
    """--channel URLs (a site mirror) that cannot lock the plan: why in plain words (the solver's text under -v),
    then the option changes that do lock against the same channels, each solved and checked before it is named."""
    progress(f"the solver's answer: {text}")
    planner = _channels_planner(kb, sources_for, cache)
    ways = ways_out.find(kb, target, planner) or _within_channels(target, kb, planner)
    return ConflictError(
        f"the --channel URLs cannot lock {ways_out.describe(plan)}: "
        f"{unsolved.plain(text, plan, 'their repodata')}. {ways_out.sentence(ways, 'these channels')}"
    )


MAX_CHANNEL_TRIES = 16


def _channels_planner(
    kb: KnowledgeBase, sources_for: Callable[[Plan], list[ChannelSource]], cache: Path
) -> Callable[[Target], Plan]:
    """A planner for ways_out whose plans are solved and checked against the same channels (it raises when they
    cannot lock one)."""

    def planner(changed: Target) -> Plan:
        chosen = choose(changed, kb, advise=False)  # a way out: its warnings are never shown
        _solve_all(chosen, kb, sources_for(chosen), cache, lambda _: None)
        return chosen

    return planner


def _within_channels(target: Target, kb: KnowledgeBase, planner: Callable[[Target], Plan]) -> list[ways_out.WayOut]:
    """The newest candidate the channels can lock, as the options that give it (`--torch 2.10.0 --cuda 12.9`),
    tried through PLANNER (which solves against the channels) before it is named; [] when none of the first
    MAX_CHANNEL_TRIES candidates locks. A site mirror that lags behind the knowledge base lands here."""
    narrowed = kb
    for _ in range(MAX_CHANNEL_TRIES):
        try:
            candidate = choose(target, narrowed, advise=False)
        except ConflictError:
            return []
        options: ways_out.Options = (("--torch", candidate.torch_version), ("--cuda", str(candidate.cuda_version)))
        try:
            found = planner(ways_out.apply(target, options))
        except EnvsolverError:
            narrowed = _without(narrowed, candidate)
            continue
        return [ways_out.WayOut(options, found)]
    return []


def _incoherent(
    target: Target,
    kb: KnowledgeBase,
    plan: Plan,
    why: str,
    sources_for: Callable[[Plan], list[ChannelSource]],
    cache: Path,
) -> ConflictError:
    """The refusal of a solution with two CUDA runtimes, with the ways out that do lock against the same
    channels (each solved and checked before it is named)."""
    ways = ways_out.find(kb, target, _channels_planner(kb, sources_for, cache))
    return ConflictError(
        f"the solution the channels give for {ways_out.describe(plan)} is not coherent, so nothing was written: "
        f"{why}. {ways_out.sentence(ways, 'these channels')}"
    )


def _fall_back(
    target: Target, kb: KnowledgeBase, live: Plan, why: str, cache: Path, progress: Progress, keep: Keep | None
) -> LockResult:
    """The live channels are out of reach: plan within the snapshot, and say so in one line."""
    progress(f"the live channels could not be reached ({why}); planning within the bundled snapshot")
    try:
        plan, records = _within_snapshot(target, kb, cache, progress, keep)
    except NotInSnapshot as exc:
        raise NotInSnapshot(f"the live channels could not be reached ({why}); {exc}") from None
    except ConflictError as exc:
        found = _snapshot_clash(target, kb, cache)
        if found is not None:
            raise ConflictError(f"the live channels could not be reached ({why}); within {found}") from None
        unlocked = exc.unsolved if isinstance(exc, SnapshotRefusal) else ()
        # Candidates passed over because the snapshot lacks what they need (resolve.candidates._snapshot_gap),
        # named as the ones it failed to solve are.
        held = snapshot_restricted.name()
        lacking = tuple(Rejected(c, b) for c, b in exc.rejected or () if b.startswith(f"{held} holds no "))
        raise _not_in_snapshot(target, kb, live, lacking + unlocked, cache, progress) from None
    plan = _advised(plan, target, kb, cache)
    same = (plan.torch_version, plan.torch_cuda, plan.cuda_version) == (
        live.torch_version,
        live.torch_cuda,
        live.cuda_version,
    )
    instead = "" if same else f"; the live channels would give {ways_out.describe(live)}"
    warning = (
        f"the live channels could not be reached ({why}); planned and locked within the bundled snapshot of "
        f"{snapshot.date()} instead: {ways_out.describe(plan)}{instead}"
    )
    progress(warning)
    return _snapshot_result(kb, plan, records, [warning])


def _not_in_snapshot(
    target: Target,
    kb: KnowledgeBase,
    live: Plan,
    unlocked: tuple[Rejected, ...],
    cache: Path,
    progress: Progress,
) -> ConflictError:
    """The refusal where the live channels are out of reach and the snapshot locks nothing for the target: one
    sentence naming the build explain shows (the live plan) and why the snapshot cannot lock it (and the
    candidates it tried), then the ways out, each tried: --no-lock (environment.yml for the live plan), and the
    option changes that lock within the snapshot."""
    why = _why_not(live, kb, cache, progress)
    others = [r for r in unlocked if r.candidate != ways_out.label(live)]
    tried = "".join(f"; for {r.candidate}, {r.because.removeprefix(UNSOLVED)}" for r in others)

    def planner(changed: Target) -> Plan:
        return _within_snapshot(changed, kb, cache, lambda _: None)[0]

    ways = [
        f"`--no-lock` writes environment.yml for {ways_out.describe(live)}, to lock where the live channels or a "
        "site mirror can be reached"
    ]
    found = ways_out.find(kb, target, planner)
    ways += [f"`{w.text}` locks {ways_out.describe(w.plan)} within the snapshot" for w in found]
    return ConflictError(
        f"the live channels could not be reached, and the bundled snapshot of {snapshot.date()} cannot lock the "
        f"build explain shows, {ways_out.describe(live)}: {why}{tried}. Ways out: {'; '.join(ways)}.",
        [(r.candidate, r.because) for r in unlocked],
    )


def _why_not(plan: Plan, kb: KnowledgeBase, cache: Path, progress: Progress) -> str:
    """Why the snapshot cannot lock `plan`, in plain words (the solver's text goes to progress, -v)."""
    try:
        _solve_all(plan, kb, _snapshot(plan), cache, lambda _: None, local=True)
    except Incoherent as exc:
        return str(exc)
    except SolveFailed as exc:
        progress(f"{ways_out.label(plan)} within the snapshot: {exc}")
        return unsolved.plain(str(exc), plan)
    return "planning within the snapshot did not reach it"


def plan_offline(
    target: Target,
    kb: KnowledgeBase,
    cache: Path,
    progress: Progress = lambda _: None,
    keep: Keep | None = None,
) -> tuple[Plan, dict[str, tuple[Record, ...]]]:
    """The plan `make --offline` locks and `explain --offline` shows, with its solved records: chosen among
    what the bundled snapshot holds, each candidate solved against it, one it cannot solve rejected and the
    next tried (KEEP's packages preferred). Raises ConflictError (exit 1) naming the ways out that do lock
    within the snapshot."""
    try:
        plan, records = _within_snapshot(target, kb, cache, progress, keep)
    except NotInSnapshot:
        raise
    except ConflictError as exc:
        found = _snapshot_clash(target, kb, cache)
        if found is not None:
            raise found from None
        raise refusal(
            exc, target, kb, _snapshot_planner(kb, cache), f"the bundled snapshot of {snapshot.date()}"
        ) from None
    return _advised(plan, target, kb, cache), records


def _snapshot_planner(kb: KnowledgeBase, cache: Path) -> Callable[[Target], Plan]:
    """A planner for ways out and advice whose plans are chosen and locked within the snapshot, quietly."""

    def planner(changed: Target) -> Plan:
        return _within_snapshot(changed, kb, cache, lambda _: None)[0]

    return planner


def _advised(plan: Plan, target: Target, kb: KnowledgeBase, cache: Path) -> Plan:
    """A snapshot plan whose minor-compatibility warning names what `--driver-compat full` locks within the
    snapshot (tried there before it is named)."""
    return advised(plan, target, kb, _snapshot_planner(kb, cache), f"the bundled snapshot of {snapshot.date()}")


_RESTRICTED: dict[int, tuple[KnowledgeBase, KnowledgeBase]] = {}


def snapshot_kb(kb: KnowledgeBase) -> KnowledgeBase:
    """The knowledge base restricted to what the bundled snapshot holds: what offline plans choose among."""
    return _restricted(kb)


def _restricted(kb: KnowledgeBase) -> KnowledgeBase:
    """The KB restricted to what the snapshot holds, once per KB in a process (the snapshot never changes), and
    kept compiled across processes (snapshot/restricted.py)."""
    kept = _RESTRICTED.get(id(kb))
    if kept is None or kept[0] is not kb:
        kept = (kb, snapshot_restricted.restricted(kb))
        _RESTRICTED.clear()
        _RESTRICTED[id(kb)] = kept
    return kept[1]


def _within_snapshot(
    target: Target, kb: KnowledgeBase, cache: Path, progress: Progress, keep: Keep | None = None
) -> tuple[Plan, dict[str, tuple[Record, ...]]]:
    restricted = _restricted(kb)
    extra: list[Rejected] = []
    for _ in range(MAX_SNAPSHOT_RETRIES):
        try:
            candidate = choose(target, restricted, advise=False)
        except ConflictError as exc:
            raise _unlockable(exc, extra) from None
        try:
            records = _solve_all(candidate, kb, _snapshot(candidate), cache, progress, local=True, keep=keep)
        except SolveFailed as exc:
            label = ways_out.label(candidate)
            if isinstance(exc, Incoherent):
                reason = str(exc)
            else:
                progress(f"{label}: {exc}")
                reason = unsolved.plain(str(exc), candidate)
            extra.append(Rejected(label, f"{UNSOLVED}{reason}"))
            restricted = _without(restricted, candidate)
            continue
        final = dataclasses.replace(
            candidate, rejected=candidate.rejected + tuple(extra), snapshot_date=snapshot.date()
        )
        return final, records
    raise SnapshotRefusal(
        f"the bundled snapshot ({snapshot.date()}) could not lock any of the first {MAX_SNAPSHOT_RETRIES} "
        "candidates: " + "; ".join(r.candidate for r in extra),
        None,
        tuple(extra),
    )


def _unlockable(exc: ConflictError, unlocked: list[Rejected]) -> SnapshotRefusal:
    """The snapshot's refusal: the candidates it could not lock, and why the rest do not fit (a refusal
    without rejected candidates only says that nothing is left once the unlockable ones are taken out)."""
    if not unlocked:
        return SnapshotRefusal(str(exc), exc.rejected, (), exc.by_reason)
    locked_out = "; ".join(f"{r.candidate} ({r.because.removeprefix(UNSOLVED)})" for r in unlocked)
    facts = f"; {str(exc).rstrip('. ')}" if exc.rejected else ""
    return SnapshotRefusal(
        f"the bundled snapshot ({snapshot.date()}) could not lock {locked_out}{facts}",
        exc.rejected,
        tuple(unlocked),
        exc.by_reason,
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
