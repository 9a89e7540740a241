"""The inputs named in issue 8 that ended in a traceback: each is now bad input (exit 2) with a message that
quotes the value and ends with a fix. One line per input, through the library call that reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.core import versions
from envsolver.core.errors import BadInputError
from envsolver.resolve import detect, profile
from envsolver.resolve.target import torch_specifier

HUGE = "9" * 4400
MD5 = "0123456789abcdef" * 2
SHA = "0123456789abcdef" * 4
URL = "https://conda.anaconda.org/conda-forge/linux-64/tiny-lib-1.0-h0_0.tar.bz2"


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["explain", "--gpu", "a100", "--torch", ""], "--torch '' is empty"),
        (["explain", "--gpu", "a100", "--torch", " "], "--torch ' ' is empty"),
        (["explain", "--gpu", "a100", "--torch", "2." + HUGE], "malformed torch version"),
        (["explain", "--gpu", "a100", "--torch", ">=" + HUGE], "malformed torch version"),
        (["explain", "--gpu", "a100", "--torch", "===2.5.1'; echo"], "malformed torch version"),
        (["explain", "--gpu", "a100", "--driver", HUGE], "malformed driver version"),
        (["explain", "--gpu", "a100", "--driver", "５３５.１０４.０５"], "malformed driver version"),
        (["explain", "--gpu", "a100", "--python", "3." + HUGE], "malformed Python version"),
        (["explain", "--gpu", "a100", "--cuda", HUGE + ".1"], "malformed CUDA version"),
        (["explain", "--gpu", "a100", "--glibc", "2." + HUGE], "malformed glibc version"),
        (["explain", "--gpu", "a100", "--profile", "a" * 5000], "unknown profile"),
        (["explain", "--gpu", "a100", "--profile", "../profiles/a100"], "unknown profile"),
    ],
)
def test_cli_values(args: list[str], phrase: str) -> None:
    result = CliRunner().invoke(main, args, env={"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None})
    assert result.exit_code == 2, result.output
    assert phrase in result.output
    assert result.output.rstrip().endswith(".")


def test_versions_bound_digits_and_refuse_unicode_digits() -> None:
    assert versions.leading_major_minor("1." + HUGE) is None
    assert versions.leading_major_minor("١٢.٤") is None
    with pytest.raises(BadInputError, match=r"expected MAJOR\.MINOR"):
        versions.cuda("١٢.٤")
    assert str(versions.driver("535.104.05")) == "535.104.05"


def test_torch_specifier_keeps_its_forms() -> None:
    assert str(torch_specifier("2.5")) == "==2.5.*"
    assert str(torch_specifier(" 2.3.1 ")) == "==2.3.1"
    assert torch_specifier(">=2.4, <2.6").contains("2.5.1")
    assert torch_specifier("==2.7.*").contains("2.7.1")


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        ("gpus: [a100]\n1: x\ncolour: red\n", "unknown key(s) ['colour', 1]"),
        ("gpus: [a100]\npython: 3.10\n", "'python' must be a quoted string"),
        ("gpus: [a100]\ndeepspeed: 'no'\n", "'deepspeed' must be true or false"),
        ("gpus: [a100]\ndescription: [x]\n", "'description' must be a quoted string"),
        ("gpus: [a100]\ndriver: " + HUGE + "\n", "not valid YAML"),
        ("gpus: " + "[" * 200 + "]" * 200 + "\n", "nested deeper"),
        ("gpus: &a [*a]\n", "refers to itself"),
        ("gpus: [a100]\ndescription: \udcff\n", "not UTF-8"),
    ],
)
def test_profile_files(tmp_path: Path, content: str, phrase: str) -> None:
    path = tmp_path / "site.yaml"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(BadInputError) as info:
        profile.load(str(path))
    assert phrase in str(info.value)
    assert str(info.value).endswith("Fix the file.")


def test_profile_directory_and_huge_file(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="cannot read profile"):
        profile.load(str(tmp_path) + "/")
    big = tmp_path / "big.yaml"
    big.write_text("gpus: [a100]\n" + "# padding\n" * 10000)
    with pytest.raises(BadInputError, match="larger than"):
        profile.load(str(big))


def test_smi_csv_without_a_name_column() -> None:
    facts = detect.detect(
        {}, run=lambda argv: "driver_version\n580.159.04\n", read=lambda path: None, nvml=lambda: None
    )
    assert facts.gpus == ()
    assert facts.driver == detect.Found("580.159.04", "nvidia-smi")


def test_smi_parsers_are_linear_on_long_lines() -> None:
    import time

    started = time.perf_counter()
    detect.parse_proc_version("NVRM version: " + "1" * 200_000)
    detect.parse_smi_banner("Driver Version:" * 20_000)
    detect.parse_smi_list("GPU 0: " + "(UUID: " * 20_000)
    took = time.perf_counter() - started
    assert took < 10.0, f"took {took:.1f} s"  # quadratic, these take minutes; linear, milliseconds
