"""One partition's values, each with where it came from: its GPUs, oldest driver, oldest glibc and platform,
from its groups' GRES, their probes and the --map values. Pure.

GPU of a group: each GPU its probe's nvidia-smi printed, identified as `--gpu auto` identifies one (by its name,
else its PCI device ID, else the compute capability it reports: kb.gpus.identified), where the knowledge base
knows it; else `--map TYPE=GPU`; else the GRES type through the KB's GPU name rules. What none of these names is
a problem with its fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from envsolver.cluster.model import ASSUMED, Partition
from envsolver.cluster.parse import Probe, SmiRow
from envsolver.cluster.survey import Group, ProbeKey, Surveyed
from envsolver.core.errors import UnknownGpuError
from envsolver.core.versions import DriverVersion, MajorMinor
from envsolver.kb import KnowledgeBase, pci
from envsolver.kb.gpus import closest, identified, lookup
from envsolver.kb.model import Gpu, Platform
from envsolver.resolve.detect import host_platform

# What a group's probe step saw: one Probe per node it reached (a lone Probe: one node), or why it could not run.
ProbeResult = Probe | tuple[Probe, ...] | str
# The fixes a problem calls for (draft.py turns them into commands): "--map TYPE=GPU", a probe, a split.
PROBE = "probe"
SPLIT = "split"


@dataclass(frozen=True)
class Inputs:
    partition: Surveyed
    probes: Mapping[ProbeKey, ProbeResult] | None  # None: --no-probe
    maps: Mapping[str, Gpu]
    kb: KnowledgeBase
    arch: Mapping[str, str | None]  # node -> scontrol's Arch


@dataclass
class Decided:
    partition: Partition | None = None
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)


def _nodes(nodes: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(nodes[:3])
    return shown + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")


def _gres(group: Group) -> str:
    items = list(group.gres.items())
    shown = "; ".join(f"{text} on {node}" for node, text in items[:3])
    return f"sinfo GRES {shown}" + (f" and {len(items) - 3} more node(s)" if len(items) > 3 else "")


def _via(group: Group) -> str:
    return "srun " + " ".join(group.options.argv(group.partition))


@dataclass
class _Seen:
    """What the partition's probes saw, node by node, and why a probe saw nothing."""

    drivers: list[tuple[str, DriverVersion, str]] = field(default_factory=list)  # node, driver, via
    glibcs: list[tuple[str, MajorMinor]] = field(default_factory=list)
    machines: list[tuple[str, str]] = field(default_factory=list)
    models: list[tuple[str, str]] = field(default_factory=list)  # GPU key, node
    unknown_driver: list[str] = field(default_factory=list)
    unknown_glibc: list[str] = field(default_factory=list)


def _probe_of(inputs: Inputs, group: Group) -> tuple[tuple[Probe, ...], str | None]:
    """(the probes of the group's nodes, or () and why there are none)."""
    if inputs.probes is None:
        return (), "not probed (--no-probe)"
    result = inputs.probes.get(group.key)
    if result is None:
        return (), "not probed"
    if isinstance(result, str):
        return (), f"the probe failed ({result})"
    probes = (result,) if isinstance(result, Probe) else result
    return probes, None if probes else "the probe reached no node"


def _known(kb: KnowledgeBase, name: str) -> Gpu | None:
    try:
        return lookup(kb, name)
    except UnknownGpuError:
        return None


def _reported(kb: KnowledgeBase, row: SmiRow, claimed: Gpu | None, claim: str) -> tuple[Gpu, str] | None:
    """A GPU a node's nvidia-smi printed, and how it was known as a phrase (its name as printed, and what identified
    it where its name did not): by its name (or the device the driver's table gives that name), else by its PCI
    device ID, else the GPU the partition's GRES type or --map names where it has the CC the node reports, else
    one of that CC. None when none of them is known."""
    cc = str(row.compute_cap) if row.compute_cap is not None else None
    try:
        gpu, how = identified(kb, row.name, row.device_id, cc)
    except UnknownGpuError:
        return None
    if how == "name":
        return gpu, row.name
    if how == "device":
        return gpu, f"{row.name} (by its PCI device ID 0x{pci.device_id(row.device_id)}: {gpu.key})"
    if claimed is not None and claimed.compute_capability == gpu.compute_capability:
        return claimed, f"{row.name} ({claim}, of the compute capability {cc} it reports)"
    return gpu, f"{row.name} (by the compute capability it reports, {cc}: {gpu.key})"


def _unknown(row: SmiRow) -> str:
    """A GPU none of whose name, PCI device ID and compute capability the knowledge base knows, with what it
    reported: 'NVIDIA Mystery 9000' (PCI device ID 0x000110DE; no compute capability reported)."""
    device = f"PCI device ID {row.device_id}" if row.device_id else "no PCI device ID reported"
    cc = f"compute capability {row.compute_cap}" if row.compute_cap else "no compute capability reported"
    return f"{row.name!r} ({device}; {cc})"


def _on(probes: tuple[Probe, ...]) -> str:
    """The nodes that printed GPUs, as a phrase: 'gpu02', 'gpu02, gpu05 and 3 more'."""
    return _nodes([p.node or "?" for p in probes if p.gpus])


def _group_gpus(
    inputs: Inputs, group: Group, probes: tuple[Probe, ...], why: str | None, out: Decided
) -> tuple[list[Gpu], list[str]]:
    """The group's GPUs, and each GPU its probe saw as `_reported` shows it (none: not probed); records a problem
    when nothing names them."""
    name = inputs.partition.name
    kind = group.gres_type
    mapped = inputs.maps.get(kind) if kind is not None else None
    named = _known(inputs.kb, kind) if kind is not None else None
    claimed = mapped or named
    claim = f"--map {kind}={mapped.key}" if mapped else f"the GRES type {kind!r}"
    if any(p.gpus for p in probes):
        seen = list({(g.name, g.compute_cap, g.device_id): g for p in probes for g in p.gpus}.values())
        found = [_reported(inputs.kb, row, claimed, claim) for row in seen]
        known = [f for f in found if f is not None]
        if len(known) == len(found):
            gpus = list(dict.fromkeys(gpu for gpu, _ in known))
            shown = list(dict.fromkeys(text for _, text in known))
            if claimed is not None and {g.key for g in gpus} != {claimed.key}:
                names = ", ".join(dict.fromkeys(row.name for row in seen))
                out.notes.append(
                    f"partition {name!r}: nvidia-smi on {_on(probes)} names {names} where {claim} says "
                    f"{claimed.key}; the file follows nvidia-smi"
                )
            return gpus, shown
        unknown = list(dict.fromkeys(_unknown(row) for row, f in zip(seen, found, strict=True) if f is None))
        out.notes.append(
            f"partition {name!r}: nvidia-smi on {_on(probes)} names {', '.join(unknown)}, which envsolver lacks"
        )
        why = f"nvidia-smi named {', '.join(unknown)}"
    if claimed is not None:
        return [claimed], []
    failed = f"; {why}" if why and why != "not probed (--no-probe)" else ""
    if kind is None:
        out.problems.append(
            f"partition {name!r}: {_gres(group)} declares GPUs without a type, so Slurm does not say which{failed}"
        )
    else:
        near = ", ".join(repr(c) for c in closest(inputs.kb, kind)) or "none"
        out.problems.append(
            f"partition {name!r}: GRES type {kind!r} ({_gres(group)}) names no GPU envsolver knows "
            f"(closest: {near}){failed}"
        )
        out.fixes.append(f"--map {kind}=GPU")
    if inputs.probes is None:
        out.fixes.append(PROBE)
    return [], []


def _observe(group: Group, probe: Probe, seen: _Seen, gpus: list[Gpu]) -> None:
    node = probe.node or group.nodes[0]
    if probe.gpus:
        seen.drivers.append((node, min(g.driver for g in probe.gpus), _via(group)))
    else:
        seen.unknown_driver.append(f"{probe.smi_error} on {node}")
    if probe.glibc is not None:
        seen.glibcs.append((node, probe.glibc))
    else:
        first = probe.ldd_text.strip().splitlines()[0][:120] if probe.ldd_text.strip() else "nothing"
        seen.unknown_glibc.append(f"ldd --version on {node} printed no glibc version ({first})")
    if probe.machine is not None:
        seen.machines.append((node, probe.machine))
    seen.models.extend((g.key, node) for g in gpus)


def _why(reasons: list[str]) -> str:
    return "; ".join(dict.fromkeys(reasons))


def _driver(seen: _Seen) -> tuple[DriverVersion | None, str]:
    if not seen.drivers:
        return None, f"unknown: {_why(seen.unknown_driver)}; {ASSUMED['driver']}"
    distinct = {d for _, d, _ in seen.drivers}
    lost = f" (unknown elsewhere: {_why(seen.unknown_driver)})" if seen.unknown_driver else ""
    vias = " and ".join(dict.fromkeys(via for _, _, via in seen.drivers))
    if len(distinct) == 1:
        _, version, _ = seen.drivers[0]
        return version, f"nvidia-smi on {_nodes([n for n, _, _ in seen.drivers])} via {vias}{lost}"
    parts = "; ".join(f"{v} on {_nodes([n for n, d, _ in seen.drivers if d == v])}" for v in sorted(distinct))
    count = len({n for n, _, _ in seen.drivers})
    return min(distinct), f"the oldest of what nvidia-smi printed on {count} nodes via {vias}: {parts}{lost}"


def _glibc(seen: _Seen) -> tuple[MajorMinor | None, str]:
    if not seen.glibcs:
        return None, f"unknown: {_why(seen.unknown_glibc)}; {ASSUMED['glibc']}"
    lost = f" (unknown elsewhere: {_why(seen.unknown_glibc)})" if seen.unknown_glibc else ""
    oldest = min(v for _, v in seen.glibcs)
    nodes = [n for n, v in seen.glibcs if v == oldest]
    return oldest, f"ldd --version on {_nodes(nodes)}{lost}"


def _platform(inputs: Inputs, seen: _Seen, gpus: list[Gpu], out: Decided) -> tuple[Platform | None, str]:
    """uname -m of the probed nodes, else scontrol's Arch of every node, else the GPUs' usual platform."""
    name = inputs.partition.name
    if seen.machines:
        found = [(node, machine, f"uname -m on {node}: {machine}") for node, machine in seen.machines]
    else:
        archs = [(n, inputs.arch.get(n)) for n in inputs.partition.nodes]
        found = [(n, a, f"scontrol show node {n}: Arch={a}") for n, a in archs if a]
    if found:
        platforms = {host_platform(machine) for _, machine, _ in found}
        if None in platforms or len(platforms) > 1:
            shown = ", ".join(f"{machine} on {node}" for node, machine, _ in found[:4])
            out.problems.append(
                f"partition {name!r}: its nodes are {shown}; one lock serves one platform "
                "(linux-64 for x86_64, linux-aarch64 for aarch64)"
            )
            out.fixes.append(SPLIT)
            return None, ""
        (platform,) = platforms
        assert platform is not None
        return platform, found[0][2]  # type: ignore[return-value]
    # a GPU known only by its PCI ID or reported CC records no platform: the others' decides, else nothing does
    recorded = [g for g in gpus if g.platform is not None]
    usual = {g.platform for g in recorded}
    if len(usual) == 1:
        return next(iter(usual)), f"the usual platform of {', '.join(g.key for g in recorded)} (`envsolver gpus`)"
    out.problems.append(f"partition {name!r}: neither Slurm nor a probe says its nodes' architecture")
    out.fixes.append(PROBE)
    return None, ""


def decide(inputs: Inputs) -> Decided:
    """The partition with its provenance, or the problems that stop it (with their fixes), and the notes."""
    out = Decided()
    part = inputs.partition
    seen = _Seen()
    gpus: list[Gpu] = []
    gpu_lines: list[str] = []
    left_out: list[str] = []
    for group in part.groups:
        probes, why = _probe_of(inputs, group)
        found, shown = _group_gpus(inputs, group, probes, why, out)
        gpus.extend(g for g in found if g not in gpus)
        if found:
            line = f"{_gres(group)} (type {group.gres_type!r} is the GPU {found[0].key})"
            if shown:
                line = f"{_gres(group)}; nvidia-smi on {_on(probes)} via {_via(group)}: {', '.join(shown)}"
            elif group.gres_type in inputs.maps:
                line = f"--map {group.gres_type}={found[0].key} for {_gres(group)}"
            gpu_lines.append(line)
        if inputs.probes is not None:
            left_out.extend(n.describe() for n in group.left_out if n.describe() not in left_out)
        if probes:
            for probe in probes:
                _observe(group, probe, seen, found)
        else:
            seen.unknown_driver.append(str(why))
            seen.unknown_glibc.append(str(why))
            if why != "not probed (--no-probe)":
                out.notes.append(f"partition {part.name!r}: {why} ({_via(group)}); its driver and glibc are unknown")
            seen.models.extend((g.key, n) for g in found for n in group.nodes)
    platform, platform_origin = _platform(inputs, seen, gpus, out)
    if out.problems or platform is None:
        return out
    driver, driver_origin = _driver(seen)
    glibc, glibc_origin = _glibc(seen)
    if seen.drivers and seen.unknown_driver and inputs.probes is not None:
        out.notes.append(
            f"partition {part.name!r}: {_why(seen.unknown_driver)}: the driver recorded ({driver}) is the oldest of "
            "the other nodes only; check that node (nvidia-smi), or leave it out of the partition"
        )
    if left_out:
        skipped = f" (not probed, left out by their state: {', '.join(left_out)})"
        driver_origin, glibc_origin = driver_origin + skipped, glibc_origin + skipped
        out.notes.append(
            f"partition {part.name!r}: left out {len(left_out)} node(s) Slurm says a step cannot run on: "
            f"{', '.join(left_out)}; its oldest driver and glibc are those of the other nodes"
        )
    _differences(part.name, seen, out)
    if part.available != "up":
        out.notes.append(f"partition {part.name!r} is {part.available} in sinfo")
    types = ", ".join(g.gres_type or "untyped" for g in part.groups)
    out.partition = Partition(
        name=part.name,
        gpu_names=tuple(g.key for g in gpus),
        gpus=tuple(gpus),
        driver=driver,
        platform=platform,
        glibc=glibc,
        slurm=part.slurm,
        provenance={
            "gpus": "; ".join(gpu_lines),
            "driver": driver_origin,
            "platform": platform_origin,
            "glibc": glibc_origin,
            "slurm": f"sinfo: partition {part.name} on {_nodes(part.nodes)}; --gres for a GPU of type {types}",
        },
    )
    return out


def _differences(name: str, seen: _Seen, out: Decided) -> None:
    models = list(dict.fromkeys(seen.models))
    drivers = {d for _, d, _ in seen.drivers}
    parts = []
    if len({m for m, _ in models}) > 1:
        parts.append("GPUs " + ", ".join(f"{m} on {n}" for m, n in models[:6]))
    if len(drivers) > 1:
        parts.append("drivers " + ", ".join(f"{d} on {n}" for n, d, _ in seen.drivers[:6]))
    if len({g for _, g in seen.glibcs}) > 1:
        parts.append("glibc " + ", ".join(f"{g} on {n}" for n, g in seen.glibcs[:6]))
    if parts:
        out.notes.append(
            f"partition {name!r}: its nodes differ: {'; '.join(parts)} (one lock serves them all: the file keeps "
            "every GPU, the oldest driver and the oldest glibc)"
        )
