"""Property-based fuzzing of the target commands through click's runner (in-process): explain, make --no-lock,
gpus, --gpu auto with fuzzed detection, profiles, ENVSOLVER_* and raw argv. `make` never solves here
(--no-lock): a solve adds nothing to input validation and would reach for the network."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from envsolver.resolve import detect
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_cli, modes, run_property


@modes(40)
def test_explain(seed_value: int | None, count: int) -> None:
    tally = Tally("explain")
    run_property(
        st.tuples(fs.target_args, fs.envsolver_env),
        lambda v: check_cli(tally, ["explain", *v[0]], v[1]),
        count,
        seed_value,
    )
    tally.check()


@modes(20)
def test_make_no_lock(seed_value: int | None, count: int) -> None:
    tally = Tally("make --no-lock")
    extra = st.lists(
        st.one_of(st.tuples(st.just("--name"), fs.value(["train", "my-env"])).map(list), st.just(["--force"])),
        max_size=2,
    ).map(lambda parts: [x for p in parts for x in p])

    def check(value: tuple[list[str], list[str], dict[str, str]]) -> None:
        args, more, env = value
        with tempfile.TemporaryDirectory() as out:
            check_cli(tally, ["make", "--no-lock", "--out", out, *args, *more], env)

    run_property(st.tuples(fs.target_args, extra, fs.envsolver_env), check, count, seed_value)
    tally.check()


@modes(20)
def test_make_channels(seed_value: int | None, count: int) -> None:
    tally = Tally("make --channel --no-lock")

    def check(channels: list[str]) -> None:
        with tempfile.TemporaryDirectory() as out:
            flags = [x for c in channels for x in ("--channel", c)]
            check_cli(tally, ["make", "--no-lock", "--out", out, "--gpu", "a100", *flags])

    run_property(st.lists(fs.channel_urls, min_size=1, max_size=2), check, count, seed_value)
    tally.check()


@modes(30)
def test_profile_files(seed_value: int | None, count: int) -> None:
    tally = Tally("explain --profile FILE")

    def check(value: tuple[bytes, list[str]]) -> None:
        data, args = value
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "site.yaml"
            path.write_bytes(data)
            check_cli(tally, ["explain", "--profile", str(path), *args], example=value)

    run_property(st.tuples(fs.profile_bytes, fs.target_args), check, count, seed_value)
    tally.check()


@modes(40)
def test_gpu_auto_with_fuzzed_detection(seed_value: int | None, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--gpu auto` on a host whose nvidia-smi, /sys and /proc say anything at all."""
    tally = Tally("explain --gpu auto")
    probe: dict[str, Any] = {}
    real = detect.detect

    def fake(environ: Any) -> detect.HostFacts:
        return real(environ, run=lambda argv: probe["smi"], read=lambda path: probe["proc"], nvml=lambda: probe["nvml"])

    monkeypatch.setattr(detect, "detect", fake)
    nvml = st.one_of(st.none(), st.tuples(st.lists(st.one_of(st.sampled_from(fs.GPUS), fs.junk), max_size=2), fs.junk))

    def check(value: tuple[Any, ...]) -> None:
        probe["smi"], probe["proc"], probe["nvml"], env, args = value
        check_cli(tally, ["explain", "--gpu", "auto", *args], env)

    run_property(
        st.tuples(fs.detection_text, fs.detection_text, nvml, fs.envsolver_env, fs.target_args),
        check,
        count,
        seed_value,
    )
    tally.check()


_ARGV_WORDS = [
    "explain", "gpus", "make", "--help", "--version", "--json", "--gpu", "--driver", "--torch", "--profile",
    "--no-deepspeed", "--platform", "--source", "--driver-compat", "--bogus", "-", "--", "a100", "535.104.05",
]  # fmt: skip


@modes(40)
def test_raw_argv(seed_value: int | None, count: int) -> None:
    """Any token soup: usage errors are exit 2 with click's message. `make` always gets --no-lock and a temp --out."""
    tally = Tally("argv")

    def check(words: list[str]) -> None:
        if "make" in words:
            with tempfile.TemporaryDirectory() as out:
                check_cli(tally, [*words, "--no-lock", "--out", out])
        else:
            check_cli(tally, words)

    run_property(st.lists(st.one_of(st.sampled_from(_ARGV_WORDS), fs.junk), max_size=6), check, count, seed_value)
    tally.check()
