"""Every fix a refusal offers works when the user runs it: with the knowledge base (`explain`) and within the
bundled snapshot (`make --offline`, and `make` without network, which plans the same way).

A sweep of targets (every profile; GPUs x drivers x sources x --torch values; targets with --python, --cuda,
--glibc, --platform and --driver-compat) is run through the CLI in-process. Every refusal (exit 1) must offer
a way out (or say that no change of up to three options plans the target), every `--option` it mentions must
sit inside a backticked suggestion, and every suggestion, put into the same command in place of the same
options, must exit 0.

The default run takes every profile and every EXTRA target, and of the GPUs x drivers x sources x --torch product
a sample drawn with a fixed seed plus one drawn with a fresh seed (named in a failure, with the command that
draws it again: $ENVSOLVER_SWEEP_SEED); the whole product runs under `-m slow`.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.lock import run as lock
from envsolver.resolve import profile

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


PRODUCT = [_target(*combo) for combo in itertools.product(GPUS, DRIVERS, ("conda-forge", "pytorch"), TORCHES)]
FIXED_SEED = 20261201
SEED_ENV = "ENVSOLVER_SWEEP_SEED"


def fresh_seed(environ: Mapping[str, str] = os.environ) -> int:
    """The fresh sample's seed: $ENVSOLVER_SWEEP_SEED when set (to draw a failing sample again), else one seed for
    the whole run (pytest-xdist's workers share PYTEST_XDIST_TESTRUNUID, so they draw the same sample), else a new
    one."""
    given = environ.get(SEED_ENV, "")
    if given.isascii() and given.isdigit():
        return int(given)
    run = environ.get("PYTEST_XDIST_TESTRUNUID", "")
    return int.from_bytes(run.encode(), "big") % 10**9 if run else random.SystemRandom().randrange(10**9)


FRESH_SEED = fresh_seed()


def sample(seed: int, size: int, avoid: int | None = None) -> list[list[str]]:
    """`size` targets of PRODUCT drawn with `seed` (those the fixed sample of `avoid` seed holds are not drawn
    again while others are left)."""
    taken = set(map(tuple, sample(avoid, size))) if avoid is not None else set()
    rest = [t for t in PRODUCT if tuple(t) not in taken]
    return random.Random(seed).sample(rest, size)


def sweep(size: int) -> list[object]:
    """A fixed-seed sample of PRODUCT (ids: the target), a fresh-seed sample (ids: fresh-N, the same on every
    xdist worker; the target is drawn when the test runs) and, under `-m slow`, every target."""
    fixed = [pytest.param(args, id=_id(args)) for args in sample(FIXED_SEED, size)]
    fresh = [pytest.param(i, id=f"fresh-{i}") for i in range(size)]
    every = [pytest.param(args, id=f"all {_id(args)}", marks=pytest.mark.slow) for args in PRODUCT]
    return fixed + fresh + every


def drawn(case: list[str] | int, size: int) -> tuple[list[str], str]:
    """The target of a sweep case, and what a failure adds to say how to draw it again."""
    if isinstance(case, int):
        args = sample(FRESH_SEED, size, avoid=FIXED_SEED)[case]
        return args, f" (fresh sample: {SEED_ENV}={FRESH_SEED} python3 -m pytest {__file__} draws it again)"
    return case, ""


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


def check_refusal(verb: str, args: list[str], out: Path, drawn_as: str = "") -> None:
    """Run the target; on a refusal, check the message and run every suggestion it makes. `drawn_as` ends every
    failure (how a sampled target is drawn again)."""
    result = run(verb, args, out)
    assert result.exit_code in (0, 1), f"{_id(args)}{drawn_as}\n{result.output}"
    if result.exit_code == 0:
        return
    message = result.output
    suggestions = SUGGESTION.findall(message)
    # No way out is acceptable only where the search found none, and the message says so.
    assert suggestions or "No change of up to three options plans this target" in message, (
        f"{_id(args)}{drawn_as}\n{message}"
    )
    loose = OPTION.findall(SUGGESTION.sub("", message))
    assert not loose, f"{loose} named outside a runnable suggestion{drawn_as}: {message}"
    for suggestion in suggestions:
        fixed = apply(args, suggestion)
        again = run(verb, fixed, out)
        assert again.exit_code == 0, (
            f"`{suggestion}` from\n{message}\ndoes not work: {_id(fixed)}{drawn_as}\n{again.output}"
        )


# Sample sizes: the explain sweep is in-process and quick; the offline one runs a rattler solve per command.
EXPLAIN_SAMPLE = 40
OFFLINE_SAMPLE = 8
CURATED = PROFILES + EXTRA


@pytest.mark.parametrize("args", CURATED, ids=[_id(a) for a in CURATED])
def test_explain_refusals_offer_fixes_that_work(args: list[str], tmp_path: Path) -> None:
    check_refusal("explain", args, tmp_path)


@pytest.mark.parametrize("case", sweep(EXPLAIN_SAMPLE))
def test_explain_refusals_offer_fixes_that_work_across_the_product(case: list[str] | int, tmp_path: Path) -> None:
    args, drawn_as = drawn(case, EXPLAIN_SAMPLE)
    check_refusal("explain", args, tmp_path, drawn_as)


@pytest.mark.parametrize("args", EXTRA, ids=[_id(a) for a in EXTRA])
def test_offline_refusals_offer_fixes_that_work(args: list[str], tmp_path: Path) -> None:
    check_refusal("make", args, tmp_path)


@pytest.mark.parametrize("case", sweep(OFFLINE_SAMPLE))
def test_offline_refusals_offer_fixes_that_work_across_the_product(case: list[str] | int, tmp_path: Path) -> None:
    args, drawn_as = drawn(case, OFFLINE_SAMPLE)
    check_refusal("make", args, tmp_path, drawn_as)


def test_the_samples_are_targets_of_the_product_and_the_fresh_one_follows_its_seed() -> None:
    """The sweep's sampling: a sample holds `size` different targets of PRODUCT; the same seed draws the same
    sample; the fresh sample leaves out the fixed one; $ENVSOLVER_SWEEP_SEED names the fresh seed."""
    fixed = sample(FIXED_SEED, EXPLAIN_SAMPLE)
    assert len({tuple(t) for t in fixed}) == EXPLAIN_SAMPLE and all(t in PRODUCT for t in fixed), fixed
    assert sample(FIXED_SEED, EXPLAIN_SAMPLE) == fixed
    fresh = sample(12345, EXPLAIN_SAMPLE, avoid=FIXED_SEED)
    assert not {tuple(t) for t in fresh} & {tuple(t) for t in fixed}, fresh
    assert fresh_seed({SEED_ENV: "12345"}) == 12345
    assert fresh_seed({"PYTEST_XDIST_TESTRUNUID": "abc"}) == fresh_seed({"PYTEST_XDIST_TESTRUNUID": "abc"})


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
    # torch 2.13.0 cu129 is in the snapshot for Python 3.12 only, beside no msgpack-python (a DeepSpeed requirement)
    # for 3.12: without DeepSpeed it locks.
    assert suggestions == ["--no-lock", "--torch 2.12.0", "--no-deepspeed"], result.output
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
