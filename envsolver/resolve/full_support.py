"""What a plan that runs only through minor-version compatibility can do instead where the driver cannot change:
`--driver-compat full` (with the torch, CUDA or Python the user pinned left to the planner where the pinned ones
have no fully supported build), tried through the planner before it is named. Pure given the planner."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from envsolver.resolve import ways_out
from envsolver.resolve.plan import Plan
from envsolver.resolve.target import Target

# A pinned option the search may leave to the planner, in the order the search frees them, and how the sentence
# names what the user pinned (None where the option is not pinned).
_FREEABLE: tuple[tuple[str, Callable[[Target], str | None]], ...] = (
    ("--torch", lambda t: f"torch {t.torch_text}" if t.torch is not None else None),
    ("--cuda", lambda t: f"CUDA {t.cuda}" if t.cuda is not None else None),
    ("--python", lambda t: f"Python {t.python}" if t.python is not None else None),
)
_FULL: ways_out.Options = (("--driver-compat", "full"),)


def way(target: Target, planner: Callable[[Target], Plan]) -> ways_out.WayOut | None:
    """The options that give this target a plan with full driver support: `--driver-compat full` alone, else with
    the fewest pinned options (torch, CUDA, Python) left to the planner and named with the values it chose. Each
    is planned again as the user will type it before it is returned (ways_out.combine); None where none plans."""
    pinned = [flag for flag, text in _FREEABLE if text(target) is not None]
    for size in range(len(pinned) + 1):
        for freed in itertools.combinations(pinned, size):
            found = ways_out.combine(planner, target, (_FULL, *(((flag, None),) for flag in freed)))
            if found is not None and found.plan.compatibility == "full":
                return found
    return None


def sentence(target: Target, planner: Callable[[Target], Plan], where: str) -> str:
    """The clause that follows 'Upgrade the driver ... for full support': what `--driver-compat full` gives where
    the driver cannot change, or that nothing within WHERE has full support on this driver."""
    found = way(target, planner)
    if found is None:
        return (
            f": no plan within {where} has full support on driver {target.driver}, even with torch, CUDA and "
            "Python left to the planner."
        )
    kept = [text(target) for flag, text in _FREEABLE if any(o[0] == flag for o in found.options)]
    unless = f" (no fully supported plan keeps {' and '.join(k for k in kept if k)})" if kept else ""
    return (
        f"; where the driver cannot change (a cluster's nodes), `{found.text}` gives {ways_out.describe(found.plan)}, "
        f"which driver {target.driver} fully supports{unless}."
    )
