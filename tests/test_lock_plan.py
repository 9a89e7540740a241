"""The lock is the plan (issue 19, item 4).

Where the bundled snapshot cannot lock the build `explain` shows, `make` says so in one plain sentence (which
build, why the snapshot cannot lock it) and offers ways out that each work: every suggested command is run here.
The solver's own text is for -v. A lock holds one CUDA runtime (lockcheck.coherence): the legacy road, whose
snapshot holds only the nvidia channel's nvcc 12.6 beside pytorch-cuda 12.1's CUDA 12.1 runtime, is refused
saying why, whether the solve ran against the snapshot, the live channels or --channel mirrors.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.kb import KnowledgeBase
from envsolver.lock import lockcheck, outputs, snapshot
from envsolver.lock import run as lock
from envsolver.lock.solve import SolveFailed, solve
from envsolver.resolve.inputs import Options, build_target
from envsolver.resolve.run import resolve

ENV = {"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None}
SUGGESTION = re.compile(r"`([^`]*)`")
FLAGS = {"--no-lock", "--offline", "--no-deepspeed"}
RAW = ("cannot be installed", "No candidates were found", "viable options", "├─", "└─", "Cannot solve the request")

ADA_25 = ["--gpu", "rtx4090", "--driver", "550.54.15", "--torch", "2.5"]
LEGACY = ["--gpu", "rtx4090", "--driver", "550.54.15", "--torch", "2.3", "--source", "pytorch", "--python", "3.10"]
DATE = snapshot.date()


@pytest.fixture
def closed_live(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock, "LIVE_LOCATION", "https://127.0.0.1:9")  # nothing listens on loopback port 9


def run(args: list[str]) -> Result:
    return CliRunner(env=ENV).invoke(main, args)


def apply(args: list[str], suggestion: str) -> list[str]:
    """The command with the suggested options in place of the same options (as a user edits it)."""
    words = shlex.split(suggestion)
    assert words and words[0].startswith("--"), f"not a set of options: {suggestion!r}"
    new: dict[str, str | None] = {}
    while words:
        flag = words.pop(0)
        new[flag] = None if flag in FLAGS else words.pop(0)
    kept, rest = [], list(args)
    while rest:
        flag = rest.pop(0)
        value = None if flag in FLAGS else rest.pop(0)
        if flag not in new:
            kept += [flag] if value is None else [flag, value]
    return kept + [w for f, v in new.items() for w in ([f] if v is None else [f, v])]


def stack_line(args: list[str]) -> str:
    explained = run(["explain", *args])
    assert explained.exit_code == 0, explained.output
    return next(line for line in explained.stdout.splitlines() if line.startswith("Stack: "))


def check_ways_out(message: str, args: list[str], out: Path) -> list[str]:
    """Run every backticked suggestion of `message` as the user would; each must exit 0. Returns them."""
    suggestions = SUGGESTION.findall(message)
    assert suggestions, message
    for i, suggestion in enumerate(suggestions):
        fixed = apply(args, suggestion)
        again = run(["make", *fixed, "--out", str(out / str(i))])
        assert again.exit_code == 0, f"`{suggestion}` from\n{message}\ndoes not work: {fixed}\n{again.output}"
    return suggestions


def test_4090_torch_2_5_without_network_says_in_plain_words_why_and_each_way_out_works(
    closed_live: None, tmp_path: Path
) -> None:
    assert stack_line(ADA_25).startswith("Stack: torch 2.5.1 (CUDA 12.0 build) + CUDA 12.0 toolkit")
    made = run(["make", *ADA_25, "--out", str(tmp_path / "made")])
    assert made.exit_code == 1, made.output
    assert made.stderr == (
        f"error: the live channels could not be reached, and the bundled snapshot of {DATE} cannot lock the build "
        "explain shows, torch 2.5.1 cu120 with CUDA 12.0: the snapshot holds no torch 2.5.1 cu120 build; for torch "
        f"2.5.1 cu126, the bundled snapshot ({DATE}) holds no conda-forge-channel cuda-profiler-api for CUDA 12.6 on "
        "linux-64 (its cuda-profiler-api: CUDA 12.8, 12.9, 13.0, 13.1, 13.2, 13.3). Ways out: `--no-lock` writes "
        "environment.yml for torch 2.5.1 cu120 with CUDA 12.0, to lock where the live channels or a site mirror "
        "can be reached; `--torch 2.7.1` locks torch 2.7.1 cu129 with CUDA 12.9 within the snapshot; `--torch "
        "2.12.0` locks torch 2.12.0 cu129 with CUDA 12.9 within the snapshot.\n"
    )
    assert not (tmp_path / "made").exists()
    assert check_ways_out(made.stderr, ADA_25, tmp_path) == ["--no-lock", "--torch 2.7.1", "--torch 2.12.0"]
    # --no-lock wrote the plan explain shows; --torch 2.7.1 (the release nearest to 2.5 that locks) and --torch
    # 2.12.0 (the newest) locked what they say.
    env = yaml.safe_load((tmp_path / "0" / "environment.yml").read_text())
    assert "pytorch ==2.5.1 cuda120*" in env["dependencies"] and "cuda-version 12.0.*" in env["dependencies"]
    for i, version in ((1, "2.7.1"), (2, "2.12.0")):
        locked = yaml.safe_load((tmp_path / str(i) / "conda-lock.yml").read_text())
        torch = next(p for p in locked["package"] if p["name"] == "pytorch")
        assert torch["version"] == version and torch["build"].startswith("cuda129"), (version, torch)


def test_the_solvers_own_text_is_for_verbose(closed_live: None, tmp_path: Path) -> None:
    quiet = run(["make", *ADA_25, "--out", str(tmp_path)])
    assert not [raw for raw in RAW if raw in quiet.output], quiet.output
    verbose = run(["make", *ADA_25, "--out", str(tmp_path), "-v"])
    assert verbose.exit_code == 1
    # torch 2.5.1 cu126 is passed over before any solve (the snapshot holds no cuda-profiler-api for CUDA 12.6),
    # so the solver's own text is that of the build explain shows.
    assert "No candidates were found for pytorch ==2.5.1 cuda120*" in verbose.stderr


LEGACY_WHY = (
    "cuda-cudart 12.1.105 (required through pytorch-cuda 12.1) and cuda-cudart_linux-64 12.6.77 (required "
    "through cuda-nvcc 12.6.20) would be two CUDA runtimes, 12.1 and 12.6, in one prefix"
)


def test_the_legacy_road_without_network_is_refused_saying_why(closed_live: None, tmp_path: Path) -> None:
    assert stack_line(LEGACY).startswith("Stack: torch 2.3.1 (CUDA 12.1 build) + CUDA 12.1 toolkit")
    made = run(["make", *LEGACY, "--out", str(tmp_path / "made")])
    assert made.exit_code == 1, made.output
    first = made.stderr.split(" Ways out: ")[0]
    assert first == (
        f"error: the live channels could not be reached, and the bundled snapshot of {DATE} cannot lock the build "
        "explain shows, torch 2.3.1 cu121 (pytorch channel) with CUDA 12.1: the snapshot holds no torch 2.3.1 cu121 "
        f"(pytorch channel) build; for torch 2.3.1 cu118 (pytorch channel), the bundled snapshot ({DATE}) holds no "
        "nvidia-channel nvcc 11.8 for linux-64 (its nvidia nvcc: 12.6); for torch 2.3.0 cu118 (pytorch channel), the "
        f"bundled snapshot ({DATE}) holds no nvidia-channel nvcc 11.8 for linux-64 (its nvidia nvcc: 12.6); for torch "
        f"2.3.0 cu121 (pytorch channel), {LEGACY_WHY}."
    )
    assert not [raw for raw in RAW if raw in made.stderr], made.stderr
    assert "`--no-lock`" in made.stderr
    check_ways_out(made.stderr, LEGACY, tmp_path)


def test_the_legacy_road_offline_is_refused_saying_why(tmp_path: Path) -> None:
    made = run(["make", *LEGACY, "--offline", "--out", str(tmp_path / "made")])
    assert made.exit_code == 1, made.output
    assert made.stderr.startswith(
        f"error: the bundled snapshot ({DATE}) could not lock torch 2.3.0 cu121 (pytorch channel) ({LEGACY_WHY})"
    ), made.stderr
    assert not (tmp_path / "made").exists()
    check_ways_out(made.stderr, [*LEGACY, "--offline"], tmp_path)


def _snapshot_solution(kb: KnowledgeBase, plan_options: dict[str, object], tmp: Path) -> tuple[object, list]:  # type: ignore[type-arg]
    """The plan for these options within the snapshot, and its real records as the snapshot solves them."""
    target = build_target(Options(**plan_options), kb).target  # type: ignore[arg-type]
    from envsolver.resolve.run import choose

    plan = choose(target, lock.snapshot_kb(kb))
    specs = [str(s) for s in plan.specs]
    records = solve(specs, lock._snapshot(plan), plan.platform, lock.virtual_packages(kb, plan), tmp)
    return plan, records


def test_coherence_finds_two_runtimes_in_the_legacy_solution_and_none_in_a_conda_forge_one(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    legacy, records = _snapshot_solution(
        kb, dict(gpus=("rtx4090",), driver="550.54.15", torch="2.3", source="pytorch", python="3.10"), tmp_path
    )
    versions = {r.name: r.version for r in records}
    assert (versions["cuda-cudart"], versions["cuda-cudart_linux-64"], versions["cuda-version"]) == (
        "12.1.105",
        "12.6.77",
        "12.6",
    )
    assert lockcheck.coherence(legacy, kb, records) == [LEGACY_WHY]  # type: ignore[arg-type]
    assert LEGACY_WHY in lockcheck.problems(legacy, kb, records)  # type: ignore[arg-type]
    a100, good = _snapshot_solution(kb, dict(gpus=("a100",), deepspeed_from="conda-forge"), tmp_path)
    assert lockcheck.coherence(a100, kb, good) == []  # type: ignore[arg-type]
    assert lockcheck.problems(a100, kb, good) == []  # type: ignore[arg-type]
    # Without cuda-cudart_linux-64 the pair is gone, and cuda-version 12.6 no longer matches the 12.1 runtime.
    alone = [r for r in records if not r.name.endswith("_linux-64") and r.name != "cuda-cudart-static"]
    assert lockcheck.coherence(legacy, kb, alone) == [  # type: ignore[arg-type]
        "cuda-version 12.6 does not match the CUDA 12.1 runtime (cuda-cudart 12.1.105)"
    ]


def _mirrors() -> list[str]:
    """The snapshot's channels as file:// URLs: what a site mirror of pytorch, nvidia and conda-forge is."""
    local = snapshot.channels()
    return [local[f"https://conda.anaconda.org/{c}"] for c in ("pytorch", "nvidia", "conda-forge")]


def test_a_mirror_solve_that_mixes_runtimes_is_refused_and_nothing_written(tmp_path: Path) -> None:
    """A real solve against channels given with --channel: the plan (torch 2.3.0 cu121 with nvcc 12.6) solves,
    into two runtimes; make refuses it. Its ways out are searched against the same channels: none of up to three
    option changes locks there (the nearest needs four: another source, torch, Python and CUDA), and the
    message says so. (With conda-forge's mirror alone, that four-option change locks: the verdict is about
    these channels, whose nvidia copy takes priority for every CUDA package.)"""
    channels = [w for url in _mirrors() for w in ("--channel", url)]
    args = ["--gpu", "rtx4090", "--driver", "550.54.15", "--torch", "2.3.0", "--cuda", "12.6", "--source", "pytorch"]
    args += ["--python", "3.10", *channels]
    made = run(["make", *args, "--out", str(tmp_path / "made")])
    assert made.exit_code == 1, made.output
    assert made.stderr == (
        "error: the solution the channels give for torch 2.3.0 cu121 (pytorch channel) with CUDA 12.6 is not "
        f"coherent, so nothing was written: {LEGACY_WHY}. No change of up to three options plans this target "
        "within these channels.\n"
    ), made.stderr
    assert not (tmp_path / "made").exists()
    conda_forge = _mirrors()[2]
    four = apply(args, f"--source conda-forge --torch 2.10.0 --python 3.13 --cuda 12.9 --channel {conda_forge}")
    locked = run(["make", *four, "--out", str(tmp_path / "four")])
    assert locked.exit_code == 0, locked.output


def test_the_legacy_lock_records_its_recipes_own_driver_floor(kb: KnowledgeBase) -> None:
    """The plan the live channels lock (explain's) is coherent by construction: nvcc 12.1 beside pytorch-cuda
    12.1; its lock records CUDA 12.1's floor (530.30.02, NVIDIA's table), not 12.6's 560.28.03."""
    plan = resolve(
        build_target(
            Options(gpus=("rtx4090",), driver="550.54.15", torch="2.3", source="pytorch", python="3.10"), kb
        ).target,
        kb,
    )
    assert (str(plan.torch_cuda), str(plan.cuda_version)) == ("12.1", "12.1")
    result = lock.LockResult(
        plan, {plan.platform: ()}, (), "live", None, {plan.platform: lock.virtual_packages(kb, plan)}
    )
    meta = outputs.custom_metadata(result, kb)
    assert meta["envsolver_driver_min_full"] == "530.30.02"
    assert meta["envsolver_driver_min_full"] == str(kb.toolkit(plan.torch_cuda).driver)  # type: ignore[union-attr]


def test_a_solve_failure_is_named_in_plain_words_and_the_raw_text_kept_for_verbose(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    from envsolver.lock import unsolved

    target = build_target(Options(gpus=("rtx4090",), driver="550.54.15", torch="2.5"), kb).target
    live = resolve(target, kb)
    with pytest.raises(SolveFailed) as info:
        solve(
            [str(s) for s in live.specs], lock._snapshot(live), live.platform, lock.virtual_packages(kb, live), tmp_path
        )
    assert unsolved.plain(str(info.value), live) == "the snapshot holds no torch 2.5.1 cu120 build"
