"""Every refusal lists each rejected build once, under the reason that decided it (envsolver/resolve/refusals.py),
in the text on stderr and in `--json`'s `error.rejected`.

The sweep runs GPUs x drivers x sources x --torch values (the axes of tests/test_suggestions.py) through
`envsolver explain --json` in-process. The default run takes a sample: a fixed seed and a fresh one (printed in
every failure message, and taken from ENVSOLVER_SWEEP_SEED when set, to run a failure again); `-m sweep` runs every
target.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
from typing import Any

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.core.errors import ConflictError
from envsolver.kb import KnowledgeBase
from envsolver.resolve import refusals
from envsolver.resolve.inputs import Options, build_target
from envsolver.resolve.refusals import Refused
from envsolver.resolve.run import resolve
from tests.test_suggestions import DRIVERS, ENV, GPUS, TORCHES

V100_470 = (
    "no conda-forge torch build fits NVIDIA V100 on linux-64:\n"
    "  - torch 2.13.0, 2.12.1, 2.12.0, 2.11.0, 2.10.0 cu130 (its arch list is 7.5;8.0;8.6;9.0;10.0;11.0;12.0+PTX): "
    "no sm_70, needed by NVIDIA V100\n"
    "  - torch 2.13.0, 2.12.1, 2.12.0, 2.11.0, 2.10.0, 2.9.1, 2.8.0, 2.7.1 cu129: CUDA 12.9 needs driver >= "
    "575.51.03 (>= 525.60.13 through minor-version compatibility); driver 470.82.01 supports CUDA <= 11.4\n"
    "  - torch 2.7.1, 2.7.0, 2.6.0, 2.5.1 cu126: CUDA 12.6 needs driver >= 560.28.03 (>= 525.60.13 through "
    "minor-version compatibility); driver 470.82.01 supports CUDA <= 11.4\n"
    "  - torch 2.5.1, 2.4.1, 2.4.0, 2.3.1, 2.3.0, 2.1.2, 2.1.0, 2.0.0 cu120: CUDA 12.0 needs driver >= 525.60.13 "
    "(>= 525.60.13 through minor-version compatibility); driver 470.82.01 supports CUDA <= 11.4\n"
    "  - torch 2.5.1, 2.4.1, 2.4.0, 2.3.1, 2.3.0, 2.1.2, 2.1.0, 2.0.0 cu118: conda-forge has no nvcc or CUDA header "
    "packages for CUDA 11.8 (split packages start at 12.0; cudatoolkit-dev stops at 11.7 and downloads the toolkit "
    "at install time)\n"
    "  - torch 2.1.2, 2.1.0, 2.0.0 cu112: conda-forge has no nvcc or CUDA header packages for CUDA 11.2 (split "
    "packages start at 12.0; cudatoolkit-dev stops at 11.7 and downloads the toolkit at install time).\n"
)
RTX5090_25 = (
    "no conda-forge torch build fits GeForce RTX 5090 on linux-64:\n"
    "  - torch 2.5.1 cu126 (its arch list is 5.0;6.0;6.1;7.0;7.5;8.0;8.6;8.9;9.0+PTX), torch 2.5.1 cu120 (its arch "
    "list is 5.0;6.0;6.1;7.0;7.5;8.0;8.6;8.9;9.0+PTX), torch 2.5.1 cu118 (its arch list is "
    "3.5;5.0;6.0;6.1;7.0;7.5;8.0;8.6;8.9+PTX): no sm_120, needed by GeForce RTX 5090.\n"
    "Ways out: `--torch 2.7.1` gives torch 2.7.1 cu129 with CUDA 12.9; `--torch 2.13.0` gives torch 2.13.0 cu130 "
    "with CUDA 13.0.\n"
)


def explain(args: list[str]) -> tuple[Result, dict[str, Any]]:
    """`envsolver explain ARGS --json` in-process: the result (stderr holds the text) and the JSON document."""
    result = CliRunner().invoke(main, ["explain", *args, "--json"], env=ENV)
    assert result.exit_code in (0, 1), f"explain {' '.join(args)}: exit {result.exit_code}\n{result.stderr}"
    return result, json.loads(result.stdout)


def test_the_v100_refusal_on_driver_470_names_every_build_and_the_deciding_reason() -> None:
    """conda-forge has cu118 builds that driver 470 runs through minor-version compatibility: what refuses them is
    that conda-forge has no nvcc for CUDA 11.8, which the message must say (it used to show only two reasons)."""
    result, doc = explain(["--gpu", "Tesla V100-SXM2-32GB", "--driver", "470.82.01"])
    assert result.exit_code == 1, result.stderr
    assert result.stderr.startswith("error: " + V100_470), result.stderr
    assert doc["error"]["message"].startswith(V100_470.rstrip("\n")), doc["error"]["message"]


def test_one_reason_over_builds_with_different_arch_lists_is_said_once() -> None:
    result, doc = explain(["--gpu", "rtx5090", "--torch", "2.5"])
    assert result.exit_code == 1, result.stderr
    assert result.stderr == "error: " + RTX5090_25, result.stderr
    assert result.stderr.count("no sm_120") == 1, result.stderr
    assert doc["error"]["rejected"] == [
        {
            "because": "no sm_120, needed by GeForce RTX 5090",
            "candidates": [
                {
                    "candidate": "torch 2.5.1 cu126",
                    "detail": "its arch list is 5.0;6.0;6.1;7.0;7.5;8.0;8.6;8.9;9.0+PTX",
                },
                {
                    "candidate": "torch 2.5.1 cu120",
                    "detail": "its arch list is 5.0;6.0;6.1;7.0;7.5;8.0;8.6;8.9;9.0+PTX",
                },
                {
                    "candidate": "torch 2.5.1 cu118",
                    "detail": "its arch list is 3.5;5.0;6.0;6.1;7.0;7.5;8.0;8.6;8.9+PTX",
                },
            ],
        }
    ], doc


def test_a_refusal_with_no_rejected_build_has_an_empty_list_in_json() -> None:
    result, doc = explain(["--gpu", "gh200", "--gpu", "h100"])
    assert result.exit_code == 1 and doc["error"]["kind"] == "conflict", result.stderr
    assert doc["error"]["rejected"] == [], doc


def test_tegra_and_sbsa_builds_of_one_version_have_different_names(kb: KnowledgeBase) -> None:
    """Before CUDA 13 an Arm server build (sbsa) and a Jetson build (tegra) share version, CUDA and build string:
    a refusal that rejects both must still name each one once."""
    options = Options(gpus=("gh200",), torch="2.12.1", driver="550.54.14", driver_compat="full")
    target = build_target(options, kb).target
    with pytest.raises(ConflictError) as info:
        resolve(target, kb)
    names = [candidate for candidate, _ in info.value.rejected]
    assert "torch 2.12.1 cu129 tegra" in names and len(names) == len(set(names)), info.value.rejected


def test_builds_are_grouped_by_reason_then_by_variant_and_detail() -> None:
    """Interleaved variants (the order builds are tried in) come out together, each build once."""
    refused = [
        Refused("2.5.1", "cu121", "reason A", "its arch list is 9.0"),
        Refused("2.5.1", "cu118", "reason A", "its arch list is 8.0"),
        Refused("2.4.1", "cu121", "reason A", "its arch list is 9.0"),
        Refused("2.4.1", "cu118", "reason B"),
        Refused("2.4.0", "cu121", "reason A", "its arch list is 9.0"),
    ]
    assert refusals.listing(refused) == (
        "  - torch 2.5.1, 2.4.1, 2.4.0 cu121 (its arch list is 9.0), torch 2.5.1 cu118 (its arch list is 8.0): "
        "reason A\n"
        "  - torch 2.4.1 cu118: reason B"
    )
    assert [g.to_json() for g in refusals.by_reason(refused)] == [
        {
            "because": "reason A",
            "candidates": [
                {"candidate": "torch 2.5.1 cu121", "detail": "its arch list is 9.0"},
                {"candidate": "torch 2.5.1 cu118", "detail": "its arch list is 8.0"},
                {"candidate": "torch 2.4.1 cu121", "detail": "its arch list is 9.0"},
                {"candidate": "torch 2.4.0 cu121", "detail": "its arch list is 9.0"},
            ],
        },
        {"because": "reason B", "candidates": [{"candidate": "torch 2.4.1 cu118", "detail": None}]},
    ]
    assert [r.because for r in refused[:2]] == ["reason A (its arch list is 9.0)", "reason A (its arch list is 8.0)"]


# --- the sweep ---------------------------------------------------------------------------------------------------

SWEEP = list(itertools.product(GPUS, DRIVERS, ("conda-forge", "pytorch"), TORCHES))
FIXED_SEED = 22
FRESH_SEED = int(os.environ.get("ENVSOLVER_SWEEP_SEED") or random.SystemRandom().randrange(2**32))
SAMPLED = 30  # targets per seed in the default run (a few seconds); `-m sweep` runs all of SWEEP
RUN = re.compile(
    r"torch (?P<versions>[^ ,:()]+(?:, [^ ,:()]+)*) (?P<variant>cu\d+(?: tegra)?(?: \(pytorch channel\))?)"
)


def _args(gpu: str, driver: str | None, source: str, torch: str | None) -> list[str]:
    return [
        "--gpu",
        gpu,
        "--source",
        source,
        *(["--driver", driver] if driver else []),
        *(["--torch", torch] if torch else []),
    ]


def named(line: str) -> list[str]:
    """The builds a bullet's list names, as candidate labels: 'torch 2.5.1, 2.4.1 cu118 (...)' -> 'torch 2.5.1
    cu118', 'torch 2.4.1 cu118'."""
    builds = line.split(": ", 1)[0]
    return [f"torch {v} {m['variant']}" for m in RUN.finditer(builds) for v in m["versions"].split(", ")]


def check_refusal(args: list[str], kb: KnowledgeBase, seed: str) -> None:
    """On a refusal: the text and the JSON name each rejected build once, under its reason; each reason once."""
    result, doc = explain(args)
    if result.exit_code == 0:
        return
    where = f"explain {' '.join(args)} ({seed})\n{result.stderr}"
    given = dict(zip(args[::2], args[1::2], strict=True))
    options = Options(
        gpus=(given["--gpu"],), source=given["--source"], driver=given.get("--driver"), torch=given.get("--torch")
    )
    with pytest.raises(ConflictError) as info:
        resolve(build_target(options, kb).target, kb)
    rejected = dict(info.value.rejected)
    assert len(rejected) == len(info.value.rejected), f"a build named twice among the rejected: {where}"
    groups = doc["error"]["rejected"]
    in_json = {c["candidate"]: (g["because"], c["detail"]) for g in groups for c in g["candidates"]}
    assert sum(len(g["candidates"]) for g in groups) == len(in_json), f"JSON names a build twice: {where}"
    assert len({g["because"] for g in groups}) == len(groups), f"JSON gives a reason twice: {where}"
    full = {c: f"{b} ({d})" if d else b for c, (b, d) in in_json.items()}
    assert full == rejected, f"JSON's rejected builds differ from the refusal's: {where}"
    # The last line ends the sentence (the way out follows on the next line).
    bullets = [line[4:].removesuffix(".") for line in result.stderr.splitlines() if line.startswith("  - ")]
    assert len(bullets) == len(groups), f"one line per reason expected: {where}"
    for line, group in zip(bullets, groups, strict=True):
        assert line.endswith(": " + group["because"]), f"line {line!r} is not about {group['because']!r}: {where}"
        builds = named(line)
        assert len(builds) == len(set(builds)), f"line {line!r} names a build twice: {where}"
        assert sorted(builds) == sorted(c["candidate"] for c in group["candidates"]), f"{line!r} names: {where}"
    for because in {g["because"] for g in groups}:
        assert result.stderr.count(because) == 1, f"{because!r} said more than once: {where}"


@pytest.mark.parametrize("seed", [FIXED_SEED, FRESH_SEED], ids=["fixed-seed", "fresh-seed"])
def test_sampled_refusals_name_each_rejected_build_once(seed: int, kb: KnowledgeBase) -> None:
    for combo in random.Random(seed).sample(SWEEP, SAMPLED):
        check_refusal(_args(*combo), kb, f"seed {seed}: ENVSOLVER_SWEEP_SEED={seed} runs this sample again")


@pytest.mark.sweep
@pytest.mark.parametrize("combo", SWEEP, ids=[" ".join(_args(*c)) for c in SWEEP])
def test_every_refusal_names_each_rejected_build_once(
    combo: tuple[str, str | None, str, str | None], kb: KnowledgeBase
) -> None:
    check_refusal(_args(*combo), kb, "the full sweep")
