"""Which nodes a step can reach: a node's state (scontrol's State=, else sinfo's) says whether it is usable, and
a partition's Slurm options (a GRES type, a --constraint) say which of its nodes they select. Pure: fed with
parse.py's results.

A node is usable when its base state is IDLE, MIXED, ALLOCATED or COMPLETING and it carries no flag outside
HARMLESS. Every other node (DOWN, DRAIN, RESERVED, NOT_RESPONDING, MAINTENANCE, POWERED_DOWN, ..., and states
this list does not know) is left out with its state and Slurm's Reason=, so the user sees which node and why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envsolver.cluster import grammar
from envsolver.cluster.parse import NodeInfo, SinfoRow

# Source: Slurm's node_state_string() (src/common/slurm_protocol_defs.c, 22.05): the base states and the flags
# `scontrol show node` joins with '+', e.g. IDLE+DRAIN, DOWN+NOT_RESPONDING, MIXED+DRAIN (draining),
# IDLE+RESERVED. A step can start on a node in one of BASES whose flags are all HARMLESS (an ALLOCATED node
# only once its jobs end: the step then waits, bounded by --immediate).
BASES = frozenset({"IDLE", "MIXED", "ALLOCATED", "COMPLETING"})
HARMLESS = frozenset({"COMPLETING", "CLOUD", "DYNAMIC_NORM", "PLANNED", "REBOOT_REQUESTED"})
# sinfo's long states (%T) of a usable node; a suffix (`*` not responding, `~` powered off, `#`, `%`, `!`, `@`,
# `^`, `-`, `$`) makes a state unusable.
SINFO_USABLE = frozenset({"idle", "mixed", "allocated", "completing"})


@dataclass(frozen=True)
class LeftOut:
    """A node no step runs on: its state as Slurm printed it and Slurm's Reason= (None when it gives none)."""

    node: str
    state: str
    reason: str | None

    def describe(self) -> str:
        """'gpu06 (IDLE+DRAIN: bad fan [root@2026-12-01T18:00:00])'."""
        return f"{self.node} ({self.state}{': ' + self.reason if self.reason else ''})"


def left_out(node: str, info: NodeInfo | None, sinfo_state: str | None) -> LeftOut | None:
    """None when a step can run on the node; else why not. A name that cannot reach srun's --nodelist as it
    is (grammar.name) is left out too."""
    try:
        grammar.name(node, "node name")
    except grammar.GrammarError as exc:
        return LeftOut(node, "name not usable", f"its name cannot be passed to srun safely ({exc})")
    if info is not None and info.state is not None:
        base, *flags = info.state.upper().split("+")
        if base in BASES and all(flag in HARMLESS for flag in flags):
            return None
        return LeftOut(node, info.state, info.reason)
    if sinfo_state is not None and sinfo_state.lower() in SINFO_USABLE:
        return None
    return LeftOut(node, sinfo_state or "state unknown", info.reason if info is not None else None)


def split(
    names: Sequence[str], infos: Mapping[str, NodeInfo], sinfo_states: Mapping[str, str]
) -> tuple[tuple[str, ...], tuple[LeftOut, ...]]:
    """(the usable nodes, the others with why), each in the order given."""
    usable: list[str] = []
    out: list[LeftOut] = []
    for name in names:
        why = left_out(name, infos.get(name), sinfo_states.get(name))
        if why is None:
            usable.append(name)
        else:
            out.append(why)
    return tuple(usable), tuple(out)


def gpu_nodes(rows: Sequence[SinfoRow], partition: str, gres_type: str | None) -> tuple[str, ...]:
    """The partition's nodes with a GPU GRES (of `gres_type` when given), by name."""
    found = []
    for row in rows:
        if row.partition != partition or not row.gpus:
            continue
        if gres_type is None or any(g.type == gres_type for g in row.gpus):
            found.append(row.node)
    return tuple(sorted(dict.fromkeys(found)))


def gres_type(gres: str | None) -> str | None:
    """The type a `--gres` value asks for: 'gpu:a100:1' -> 'a100'; 'gpu:1' or None -> None."""
    if gres is None:
        return None
    fields = gres.split(":")
    return fields[1] if len(fields) == 3 and fields[0] == "gpu" else None


_TOKEN = re.compile(r"[A-Za-z0-9_.:\-]+(?:\*[0-9]+)?|[&|()\[\]]")


def matches(constraint: str, features: Sequence[str]) -> bool | None:
    """Whether a node with `features` satisfies a --constraint expression (grammar.constraint's form: '&' and
    '|', '(...)' and '[...]' grouping; a `*COUNT` is read as the feature alone). None: the expression cannot be
    read here (the caller then leaves the choice of nodes to Slurm)."""
    tokens = _TOKEN.findall(constraint)
    if "".join(tokens) != constraint:
        return None
    have = set(features)
    at = 0

    def expr(depth: int) -> bool | None:
        nonlocal at
        value = term(depth)
        while value is not None and at < len(tokens) and tokens[at] in "&|":
            op = tokens[at]
            at += 1
            right = term(depth)
            if right is None:
                return None
            value = (value and right) if op == "&" else (value or right)
        return value

    def term(depth: int) -> bool | None:
        nonlocal at
        if at >= len(tokens) or depth > 8:
            return None
        token = tokens[at]
        at += 1
        if token in ("(", "["):
            value = expr(depth + 1)
            close = ")" if token == "(" else "]"
            if at >= len(tokens) or tokens[at] != close:
                return None
            at += 1
            return value
        if token in "&|)]":
            return None
        return token.split("*")[0] in have

    result = expr(0)
    return result if at == len(tokens) else None
