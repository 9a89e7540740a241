"""Why a plan has no solution in a set of channels, in plain words, from rattler's explanation. Pure.

rattler explains a failed solve as a tree (solve.SolveFailed's message; this module reads its first fact):

    no solution for linux-64:
    Cannot solve the request because of: cuda-profiler-api * cannot be installed because there are no viable options:
    ├─ cuda-profiler-api 12.9.79 would require
    │  └─ cuda-version >=12.9,<12.10.0a0, for which no candidates were found.
    └─ cuda-profiler-api 12.8.90 would require
       └─ cuda-version >=12.8,<12.9.0a0, for which no candidates were found.

    Cannot solve the request because of: No candidates were found for pytorch ==2.5.1 cuda120*.

and this module turns that into "the snapshot holds no cuda-profiler-api for CUDA 12.6" or "the snapshot
holds no torch 2.5.1 cu120 build". What it cannot read becomes a plain sentence that says so; the text itself
is shown with -v.
"""

from __future__ import annotations

import re

from envsolver.resolve.plan import Plan
from envsolver.resolve.ways_out import label

_HEAD = "Cannot solve the request because of: "
_MISSING = re.compile(r"No candidates were found for (?P<spec>.+?)\.?")
_NOT_VIABLE = re.compile(r"(?P<name>\S+)(?: .*)? cannot be installed because there are no viable options:?")
_NEEDS_MISSING = re.compile(r"[│ ]*[├└]─ (?P<dep>\S+) .*, for which no candidates were found\.?")


def first_fact(text: str) -> str:
    """The solver's first fact, as one line: 'cuda-profiler-api * cannot be installed because ...'."""
    for line in text.splitlines():
        if line.startswith(_HEAD):
            return line[len(_HEAD) :].rstrip(":")
    lines = [line for line in text.splitlines()[1:] if line.strip()]
    return (lines[0] if lines else text).strip()


def plain(text: str, plan: Plan, holder: str = "the snapshot") -> str:
    """One clause: why `plan`'s specs have no solution in `holder`, read from rattler's explanation `text`."""
    head = first_fact(text)
    missing = _MISSING.fullmatch(head)
    if missing:
        spec = missing["spec"]
        name, _, constraint = spec.partition(" ")
        if name == "pytorch":
            return f"{holder} holds no {label(plan)} build"
        exact = constraint not in ("", "*")
        return f"{holder} holds no {name} matching {constraint}" if exact else f"{holder} holds no {name}"
    not_viable = _NOT_VIABLE.fullmatch(head)
    if not_viable:
        name = not_viable["name"]
        needs = {m["dep"] for m in map(_NEEDS_MISSING.fullmatch, text.splitlines()) if m}
        if needs == {"cuda-version"}:
            return f"{holder} holds no {name} for CUDA {plan.cuda_version}"
        if needs == {"python"}:
            return f"{holder} holds no {name} for Python {plan.python_version}"
        return f"{holder} holds no {name} that installs beside the rest of the plan"
    return f"the packages {holder} holds for it do not install together"
