"""Every minor-compatibility warning names a full-support alternative when one exists, and that alternative plans
with full compatibility when the user runs it (issue 22).

A sweep of GPUs x drivers x sources x `--torch` values through the CLI in-process (`explain`). For each target that
plans with `compatibility: minor`, the test looks for a full-support plan on its own (the target with
`--driver-compat full`, then with `--torch` also left out) and holds the warning to it: where one exists the warning
names `--driver-compat full ...`, which, put into the same command, exits 0 with `compatibility: full` and the torch
and CUDA the warning said; where none exists it says so in words. The default run takes a sample (a fixed seed and a
fresh one, named in every failure message); `-m sweep` runs every target.
"""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from tests.test_suggestions import DRIVERS, ENV, GPUS, TORCHES, apply

SUGGESTION = re.compile(r"`([^`]*)`")
GIVES = re.compile(r"`[^`]*` gives torch (\S+) cu\d+(?: \(pytorch channel\))? with CUDA (\d+\.\d+)")
FIXED_SEED = 22
SAMPLE = 12  # targets per seed in the default run
SOURCES = ("conda-forge", "pytorch")
TARGETS = [
    ["--gpu", gpu, "--source", source, "--driver", driver, *(["--torch", torch] if torch else [])]
    for gpu, driver, source, torch in itertools.product([*GPUS, "l40s"], DRIVERS[1:], SOURCES, TORCHES)
]


def _explain(args: list[str]) -> Result:
    return CliRunner().invoke(main, ["explain", *args, "--json"], env=ENV)


def _document(result: Result) -> dict[str, object]:
    found: dict[str, object] = json.loads(result.stdout)
    return found


def _full_plan_exists(args: list[str]) -> bool:
    """The test's own search: `--driver-compat full` as given, then with `--torch` left to the planner."""
    tries = [args]
    if "--torch" in args:
        at = args.index("--torch")
        tries.append(args[:at] + args[at + 2 :])
    return any(_explain([*a, "--driver-compat", "full"]).exit_code == 0 for a in tries)


def check(args: list[str], seed: str) -> None:
    """Explain the target; where its plan is minor, hold its warning to what a full-support search finds."""
    why = f"(seed {seed}) envsolver explain {' '.join(args)}"
    result = _explain(args)
    assert result.exit_code in (0, 1), f"{why}\n{result.output}"
    if result.exit_code == 1:
        return
    plan = _document(result)
    if plan["compatibility"] != "minor":
        return
    warnings = plan["warnings"]
    assert isinstance(warnings, list), f"{why}: {plan}"
    minor = [w for w in warnings if w.startswith("compatibility: minor")]
    assert len(minor) == 1, f"{why}: one minor-compatibility warning expected, got {warnings}"
    warning = minor[0]
    suggestions = SUGGESTION.findall(warning)
    if not _full_plan_exists(args):
        assert not suggestions and "no plan within the knowledge base has full support" in warning, (
            f"{why}: no full-support plan exists, yet the warning does not say so plainly:\n{warning}"
        )
        return
    assert len(suggestions) == 1 and suggestions[0].startswith("--driver-compat full"), (
        f"{why}: a full-support plan exists, yet the warning names none:\n{warning}"
    )
    gives = GIVES.search(warning)
    assert gives, f"{why}: the warning does not say what the alternative gives:\n{warning}"
    fixed = apply(args, suggestions[0])
    again = _explain(fixed)
    assert again.exit_code == 0, f"{why}: `{suggestions[0]}` from\n{warning}\ndoes not plan:\n{again.output}"
    full = _document(again)
    got = (full["compatibility"], full["torch_version"], full["cuda_version"])
    assert got == ("full", gives.group(1), gives.group(2)), (
        f"{why}: `{suggestions[0]}` gives {got}, the warning said:\n{warning}"
    )


def _sample(seed: int) -> list[list[str]]:
    return random.Random(seed).sample(TARGETS, SAMPLE)


@pytest.mark.parametrize("fresh", [False, True], ids=["fixed-seed", "fresh-seed"])
def test_minor_warnings_name_a_full_support_plan_sample(fresh: bool) -> None:
    seed = random.SystemRandom().randrange(2**32) if fresh else FIXED_SEED
    for args in _sample(seed):
        check(args, str(seed))


@pytest.mark.sweep
@pytest.mark.parametrize("args", TARGETS, ids=[" ".join(a) for a in TARGETS])
def test_minor_warnings_name_a_full_support_plan(args: list[str]) -> None:
    check(args, "none: the full sweep")


def test_the_sweep_meets_both_kinds_of_warning() -> None:
    """The sweep is not vacuous: it holds minor plans with a full-support alternative and minor plans without."""
    with_way = ["--gpu", "l40s", "--source", "conda-forge", "--driver", "535.104.05"]
    without = ["--gpu", "v100", "--source", "pytorch", "--driver", "470.82.01"]
    assert with_way in TARGETS and without in TARGETS
    assert _full_plan_exists(with_way) and not _full_plan_exists(without)
    for args in (with_way, without):
        assert _document(_explain(args))["compatibility"] == "minor", args
        check(args, "none: a pinned target")


@pytest.mark.parametrize(
    "args",
    [["--gpu", "l40s", "--driver", "535.104.05"], ["--gpu", "a100", "--gpu", "h100", "--driver", "550.54.15"]],
    ids=["l40s-535", "a100-h100-550"],
)
def test_an_offline_warning_is_held_to_what_the_snapshot_locks(args: list[str]) -> None:
    """Offline, the alternative is tried through the snapshot planner (each candidate solved against the bundled
    records): the knowledge base's torch 2.5.1 cu120 does not lock there, and the warning must not name it."""
    result = _explain([*args, "--offline"])
    assert result.exit_code == 0, result.output
    warnings = _document(result)["warnings"]
    assert isinstance(warnings, list), result.output
    warning = next(w for w in warnings if w.startswith("compatibility: minor"))
    full = _explain([*args, "--offline", "--driver-compat", "full"])
    if full.exit_code == 0:
        assert "`--driver-compat full`" in warning, f"{warning}\n{full.output}"
    else:
        assert "no plan within the bundled snapshot" in warning and "`" not in warning, f"{warning}\n{full.output}"
