"""Every fix a refusal offers works when the user runs it: with the knowledge base (`explain`) and within the
bundled snapshot (`make --offline`, and `make` without network, which plans the same way).

A sweep of targets (every profile; GPUs x drivers x sources x --torch values; targets with --python, --cuda,
--glibc, --platform and --driver-compat) is run through the CLI in-process. Every refusal (exit 1) must offer
a way out (or say that no change of up to three options plans the target), every `--option` it mentions must
sit inside a backticked suggestion, and every suggestion, put into the same command in place of the same
options, must exit 0.
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from envsolver import lock, profile
from envsolver.cli import main

SUGGESTION = re.compile(r"`([^`]*)`")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
FLAGS = {"--no-deepspeed", "--deepspeed", "--offline", "--no-lock"}  # options without a value
ENV = {"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None}

PROFILES = [["--profile", name] for name in profile.available()]
GPUS = ["a100", "v100", "t4", "h100", "rtx5090", "b200", "gh200", "l4"]
DRIVERS = [None, "450.80.02", "470.82.01", "520.61.05", "535.104.05", "550.54.14", "570.133.20", "580.65.06"]
TORCHES = [None, "2.3", "2.3.1", "2.5", "2.10", "2.13", ">=2.4,<2.6"]
EXTRA = [
    ["--gpu", "a100", "--python", "3.7"],
    ["--gpu", "a100", "--python", "3.14", "--source", "pytorch"],
    ["--gpu", "v100", "--cuda", "13.0"],
    ["--gpu", "a100", "--torch", "2.3", "--source", "pytorch", "--cuda", "13.0"],
    ["--gpu", "b200", "--driver", "570.133.20", "--driver-compat", "full"],
    ["--gpu", "a100", "--driver", "535.104.05", "--driver-compat", "full", "--torch", "2.10"],
    ["--gpu", "gh200", "--gpu", "h100"],
    ["--gpu", "a100", "--platform", "linux-aarch64", "--torch", "2.4"],
    ["--gpu", "h100", "--glibc", "2.17", "--torch", "2.10"],
    ["--gpu", "jetson-xavier"],
    ["--gpu", "a100", "--torch", "2.3.1", "--source", "pytorch", "--python", "3.9"],
    ["--gpu", "a100", "--torch", "2.1", "--source", "pytorch", "--python", "3.8"],
]


def _target(gpu: str, driver: str | None, source: str, torch: str | None) -> list[str]:
    args = ["--gpu", gpu, "--source", source]
    args += ["--driver", driver] if driver else []
    return args + (["--torch", torch] if torch else [])


def _spread(every: int, offset: int) -> list[list[str]]:
    """Every `every`-th target of GPUs x drivers x sources x --torch values (a fixed, even spread)."""
    product = itertools.product(GPUS, DRIVERS, ("conda-forge", "pytorch"), TORCHES)
    return [_target(*combo) for i, combo in enumerate(product) if i % every == offset]


def _id(args: list[str]) -> str:
    return " ".join(args)


def apply(args: list[str], suggestion: str) -> list[str]:
    """The target options with the suggested ones in place of the same options, as a user edits a command."""
    words = shlex.split(suggestion)
    assert words and words[0].startswith("--"), f"not a set of options: {suggestion!r}"
    given: list[tuple[str, str | None]] = []
    rest = list(args)
    while rest:
        flag = rest.pop(0)
        given.append((flag, None if flag in FLAGS else rest.pop(0)))
    new: list[tuple[str, str | None]] = []
    while words:
        flag = words.pop(0)
        assert flag.startswith("--"), f"{flag!r} in {suggestion!r} is not an option"
        new.append((flag, None if flag in FLAGS else words.pop(0)))
    replaced = {f for f, _ in new} | {"--deepspeed" for f, _ in new if f == "--no-deepspeed"}
    kept = [(f, v) for f, v in given if f not in replaced]
    return [w for f, v in kept + new for w in ([f] if v is None else [f, v])]


def run(verb: str, args: list[str], out: Path) -> Result:
    """`explain ARGS` (the knowledge base) or `make ARGS --offline` (the bundled snapshot)."""
    if verb == "explain":
        return CliRunner().invoke(main, ["explain", *args], env=ENV)
    return CliRunner().invoke(main, ["make", *args, "--offline", "--out", str(out)], env=ENV)


def check_refusal(verb: str, args: list[str], out: Path) -> None:
    """Run the target; on a refusal, check the message and run every suggestion it makes."""
    result = run(verb, args, out)
    assert result.exit_code in (0, 1), result.output
    if result.exit_code == 0:
        return
    message = result.output
    suggestions = SUGGESTION.findall(message)
    # No way out is acceptable only where the search found none, and the message says so.
    assert suggestions or "No change of up to three options plans this target" in message, message
    loose = OPTION.findall(SUGGESTION.sub("", message))
    assert not loose, f"{loose} named outside a runnable suggestion: {message}"
    for suggestion in suggestions:
        fixed = apply(args, suggestion)
        again = run(verb, fixed, out)
        assert again.exit_code == 0, f"`{suggestion}` from\n{message}\ndoes not work: {_id(fixed)}\n{again.output}"


EXPLAIN = PROFILES + _spread(3, 1) + EXTRA


@pytest.mark.parametrize("args", EXPLAIN, ids=[_id(a) for a in EXPLAIN])
def test_explain_refusals_offer_fixes_that_work(args: list[str], tmp_path: Path) -> None:
    check_refusal("explain", args, tmp_path)


OFFLINE = _spread(12, 4) + EXTRA


@pytest.mark.parametrize("args", OFFLINE, ids=[_id(a) for a in OFFLINE])
def test_offline_refusals_offer_fixes_that_work(args: list[str], tmp_path: Path) -> None:
    check_refusal("make", args, tmp_path)


@pytest.mark.parametrize("args", PROFILES, ids=[_id(a) for a in PROFILES])
def test_every_profile_locks_offline(args: list[str], tmp_path: Path) -> None:
    result = run("make", args, tmp_path)
    assert result.exit_code == 0, result.output


def test_without_network_refusals_offer_fixes_that_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make` without reachable channels plans within the snapshot; a suggestion then works the same way."""
    monkeypatch.setattr(lock, "LIVE_LOCATION", "https://127.0.0.1:9")  # nothing listens on loopback port 9
    args = ["--gpu", "a100", "--torch", "2.13"]
    result = CliRunner().invoke(main, ["make", *args, "--out", str(tmp_path)], env=ENV)
    assert result.exit_code == 1 and "could not be reached" in result.output, result.output
    suggestions = SUGGESTION.findall(result.output)
    assert suggestions == ["--no-lock", "--torch 2.10.0"], result.output
    for i, suggestion in enumerate(suggestions):
        out = tmp_path / str(i)
        again = CliRunner().invoke(main, ["make", *apply(args, suggestion), "--out", str(out)], env=ENV)
        assert again.exit_code == 0, again.output


def test_apply_replaces_the_same_options() -> None:
    assert apply(["--profile", "a100", "--torch", "2.13"], "--torch 2.10.0") == [
        "--profile",
        "a100",
        "--torch",
        "2.10.0",
    ]
    assert apply(["--gpu", "a100", "--deepspeed"], "--no-deepspeed") == ["--gpu", "a100", "--no-deepspeed"]
    assert apply(["--gpu", "t4"], "--source pytorch --driver 450.80.02") == [
        "--gpu",
        "t4",
        "--source",
        "pytorch",
        "--driver",
        "450.80.02",
    ]
