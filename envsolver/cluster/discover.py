"""`cluster init` from start to end, without printing: ask Slurm (slurm.py), survey, probe every usable node of
each group in one step per group, draft (draft.py). Progress goes to a callback; the CLI prints it.

A group's step runs one task on each of its usable nodes (fanout.py), so the partition's "oldest driver" and
"oldest glibc" are the oldest over every node; nodes Slurm says a step cannot run on (down, drained, reserved,
not responding, ...) are left out and named. Steps run concurrently (at most MAX_STEPS at once), each bounded
by `--immediate=WAIT` for its nodes to be free and PROBE_TIMEOUT_S to finish.

A probe that cannot run (srun refused or timed out, no usable node, a node that gave no answer) is an error,
never an unknown driver the plan would quietly fill in: `discover` raises one SlurmError naming every such
partition, with the ways out as commands (wait longer, leave the partition out, or --no-probe).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from envsolver.cluster import fanout, slurm
from envsolver.cluster.draft import Draft, build, parse_maps
from envsolver.cluster.nodes import LeftOut
from envsolver.cluster.parse import Probe, parse_probe
from envsolver.cluster.survey import Group, ProbeKey, Survey, facts, survey
from envsolver.core.errors import split_fix
from envsolver.kb import KnowledgeBase

Progress = Callable[[str], None]  # lines holding what Slurm and the nodes said: the CLI prints them escaped
MAX_STEPS = 8  # probe steps running at once: one per group, bounded so a large cluster does not flood the queue
TIME_MIN = 2  # the probe step's time limit in minutes (srun --time)
NAME = "envsolver-probe"


@dataclass(frozen=True)
class Request:
    """What `cluster init` was asked: `command` is its words, for the fixes and the file's header."""

    partitions: tuple[str, ...]
    maps: tuple[str, ...]
    probe: bool
    wait_s: int
    command: tuple[str, ...]


@dataclass(frozen=True)
class ProbeRun:
    """One group's step: its argv (without `srun`), what each node it reached printed, the nodes left out by
    their state, and why the probe failed (None: every usable node answered)."""

    group: Group
    argv: tuple[str, ...]
    probes: tuple[Probe, ...]
    left_out: tuple[LeftOut, ...]
    error: str | None
    waited: bool = False  # the failure may go away with a longer --wait (srun gave up or timed out)


@dataclass(frozen=True)
class Discovery:
    survey: Survey
    probes: tuple[ProbeRun, ...]
    draft: Draft


def _describe(probe: Probe) -> str:
    gpus = ", ".join(dict.fromkeys(f"{g.name} (driver {g.driver})" for g in probe.gpus)) or (
        probe.smi_error or "no GPU"
    )
    return f"{probe.node}: {gpus}; glibc {probe.glibc or 'unknown'}; {probe.machine or 'unknown machine'}"


def read_step(text: str, nodes: Sequence[str]) -> tuple[tuple[Probe, ...], tuple[str, ...]]:
    """(the probe of each node that answered, in `nodes` order; the nodes that gave no answer) from a fan-out
    step's labelled output. A task's node is the name it printed; a name outside `nodes` is not trusted."""
    texts, _ = fanout.split(text)
    found: dict[str, Probe] = {}
    for task_text in texts.values():
        probe = parse_probe(task_text)
        if probe.node is not None and probe.node in nodes and probe.node not in found and probe.complete:
            found[probe.node] = probe
    return tuple(found[n] for n in nodes if n in found), tuple(n for n in nodes if n not in found)


def run_probe(group: Group, wait_s: int, progress: Progress) -> ProbeRun:
    options = group.options.argv(group.partition)
    label = f"{group.partition} ({group.gres_type or 'any GPU'})"
    for node in group.left_out:
        progress(f"  {group.partition}: left out {node.describe()}")
    if not group.usable:
        shown = ", ".join(n.describe() for n in group.left_out)
        progress(f"  {group.partition}: no node a step can run on")
        return ProbeRun(group, options, (), group.left_out, f"no node of it can run a step: {shown}")
    argv = fanout.argv(options, group.usable, wait_s, TIME_MIN, NAME, ("sh", "-c", slurm.PROBE_SCRIPT))
    progress(f"probing {label} on {len(group.usable)} node(s): {' '.join(argv[:-3])}")
    fix = (
        f"Check that `srun {' '.join(options)} --nodes=1 hostname` runs, then run the same command again; or pass "
        "--no-probe to draft from Slurm alone."
    )
    try:
        slurm.check_conf()
        text = slurm.run(argv, wait_s + slurm.PROBE_TIMEOUT_S, f"the probe step ({' '.join(options)})", fix)
    except slurm.SlurmError as exc:
        message = exc.said or split_fix(str(exc))[0]
        progress(f"  {group.partition}: the probe failed: {message}")
        return ProbeRun(group, argv[1:], (), group.left_out, message, waited=True)
    probes, silent = read_step(text, group.usable)
    for probe in probes:
        progress(f"  {group.partition}: {_describe(probe)}")
    error = None
    if silent:
        error = f"{', '.join(silent)} gave no answer (the step ran, but printed no probe for them)"
        progress(f"  {group.partition}: {error}")
    return ProbeRun(group, argv[1:], probes, group.left_out, error, waited=bool(silent))


def _probe_all(groups: Sequence[Group], wait_s: int, progress: Progress) -> list[ProbeRun]:
    if not groups:
        return []
    pool = ThreadPoolExecutor(max_workers=min(MAX_STEPS, len(groups)), thread_name_prefix="envsolver-probe")
    try:
        futures = [pool.submit(run_probe, group, wait_s, progress) for group in groups]
        return [future.result() for future in futures]
    finally:
        # On Ctrl-C the steps' srun got the terminal's SIGINT too and quit (--quit-on-interrupt); steps not yet
        # started are dropped.
        pool.shutdown(wait=False, cancel_futures=True)


def discover(request: Request, kb: KnowledgeBase, progress: Progress) -> Discovery:
    """Raises BadInputError (a bad --map or --partition, a type that names no GPU) and SlurmError (Slurm could
    not answer; a probe that could not run, with the ways out)."""
    maps = parse_maps(request.maps, kb)
    progress("asking Slurm for its partitions and nodes (sinfo, scontrol)")
    surveyed = survey(facts(slurm.sinfo(), slurm.nodes(), slurm.config()), request.partitions)
    runs: list[ProbeRun] = []
    results: dict[ProbeKey, tuple[Probe, ...]] | None = None
    if request.probe:
        runs = _probe_all(surveyed.groups, request.wait_s, progress)
        failed = [r for r in runs if r.error is not None]
        if failed:
            raise slurm.SlurmError(_refusal(failed, surveyed, request))
        results = {r.group.key: r.probes for r in runs}
    drafted = build(surveyed, results, maps, kb, request.command)
    return Discovery(surveyed, tuple(runs), drafted)


def _refusal(failed: Sequence[ProbeRun], surveyed: Survey, request: Request) -> str:
    """Every partition whose probe failed, then the ways out, each a command that runs."""
    lines = "\n".join(
        f"  - partition {r.group.partition} ({r.group.gres_type or 'any GPU'}): {r.error}" for r in failed
    )
    bad = {r.group.partition for r in failed}
    ways = []
    if any(r.waited for r in failed):
        longer = max(request.wait_s * 4, 120)
        ways.append(f"wait longer for busy nodes: `{shlex.join(_with_wait(request.command, longer))}`")
    rest = [p.name for p in surveyed.partitions if p.name not in bad]
    if rest:
        kept = [w for name in rest for w in ("--partition", name)]
        ways.append(f"leave {', '.join(sorted(bad))} out: `{shlex.join([*_without(request.command), *kept])}`")
    no_probe = [w for w in _with_wait(request.command, None) if w != "--no-probe"] + ["--no-probe"]
    ways.append(
        f"draft from Slurm alone, drivers and glibc unknown (make --cluster then assumes a current driver): "
        f"`{shlex.join(no_probe)}`"
    )
    return (
        f"the probe could not run on {len(failed)} partition(s), so their oldest driver and glibc are not known:\n"
        f"{lines}\nRun one of these: " + "; or ".join(ways) + "."
    )


def _without(command: Sequence[str]) -> list[str]:
    """The command without its --partition words."""
    out: list[str] = []
    words = iter(command)
    for word in words:
        if word == "--partition":
            next(words, None)
        else:
            out.append(word)
    return out


def _with_wait(command: Sequence[str], wait_s: int | None) -> list[str]:
    """The command with --wait set to `wait_s` (None: removed)."""
    out: list[str] = []
    words = iter(command)
    for word in words:
        if word == "--wait":
            next(words, None)
        else:
            out.append(word)
    return out + (["--wait", str(wait_s)] if wait_s is not None else [])


def words(partitions: Sequence[str], maps: Sequence[str], probe: bool, wait_s: int, out: str) -> tuple[str, ...]:
    """The command's words as a user would type them again (no --json, no --force)."""
    command = ["envsolver", "cluster", "init"]
    if out != "cluster.yaml":
        command += ["--out", out]
    for name in partitions:
        command += ["--partition", name]
    for value in maps:
        command += ["--map", value]
    if not probe:
        command.append("--no-probe")
    if wait_s != slurm.IMMEDIATE_S:
        command += ["--wait", str(wait_s)]
    return tuple(command)
