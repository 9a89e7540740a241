"""A project whose conda packages cannot live with the stack (lock/clash.py): refused (exit 1) naming the package,
the stack package it clashes with and the record it would need, with ways out that each lock when run. Within the
bundled snapshot (real conda-forge records) and through --channel against a local copy of them (the live path)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from tests.snapshot_channels import channel_without


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    for name in ("ENVSOLVER_GPUS", "ENVSOLVER_DRIVER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ENVSOLVER_CACHE_DIR", str(tmp_path / "cache"))
    return CliRunner()


def _explain(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(main, ["explain", "--gpu", "a100", *args])


def _ways(message: str) -> list[list[str]]:
    """The option changes a refusal offers (`--no-deepspeed --python 3.12`), as argument lists."""
    return [shlex.split(w) for w in re.findall(r"`(--[^`]+)` locks", message)]


def test_a_package_that_needs_another_torch_names_the_torch_it_installs_beside(runner: CliRunner) -> None:
    """conda-forge's transformers records in the snapshot pull datasets and pyarrow, whose builds need an older
    libabseil than every torch the snapshot can lock: only pytorch 2.1.2 (CUDA 12.0) installs beside them."""
    result = _explain(runner, "--offline", "--add", "transformers")
    assert result.exit_code == 1, result.output
    message = result.output
    assert message.startswith("error: transformers (from --add) cannot be installed with the stack's pytorch =="), (
        message
    )
    assert re.search(r"it installs only beside pytorch 2\.1\.2 \(cuda120_\w+\)", message), message
    assert "without it, the stack (torch " in message and "on linux-64)" in message, message
    assert "drop `--add transformers`" in message, message
    assert _explain(runner, "--offline").exit_code == 0, "the way out (leave it out) plans"


def test_ways_out_that_keep_the_project_each_lock_when_run(runner: CliRunner) -> None:
    """A package built for another Python than the stack's: the way out changes options and keeps the package."""
    result = _explain(runner, "--offline", "--python", "3.11", "--add", "python_abi 3.12.*")
    assert result.exit_code == 1, result.output
    assert "python_abi 3.12.* (from --add) cannot be installed with the stack" in result.output, result.output
    ways = _ways(result.output)
    assert ways, f"no way out that keeps the project: {result.output}"
    for way in ways:  # the command with the way's options in place of the same options
        kept = [] if "--python" in way else ["--python", "3.11"]
        again = _explain(runner, "--offline", "--add", "python_abi 3.12.*", *kept, *way)
        assert again.exit_code == 0, f"the way out {way} does not plan: {again.output}"


def test_a_package_no_python_of_the_stack_has_is_left_out_as_the_way_out(runner: CliRunner) -> None:
    result = _explain(runner, "--offline", "--add", "tensorboard", "--add", "jupyterlab")
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: tensorboard (from --add) cannot be installed"), result.output
    assert "jupyterlab" not in result.output.split("Ways out")[0], "jupyterlab installs: it is not named"
    assert "drop `--add tensorboard` (the rest locks" in result.output, result.output
    assert _explain(runner, "--offline", "--add", "jupyterlab").exit_code == 0, "the way out plans"


def test_a_project_that_fits_is_no_refusal(runner: CliRunner) -> None:
    result = _explain(runner, "--offline", "--add", "jupyterlab", "--add", "scipy", "--add", "pandas")
    assert result.exit_code == 0, result.output


def test_through_channel_urls_the_clash_names_them(runner: CliRunner, tmp_path: Path) -> None:
    """The live path (a solve against channels, no candidate loop): a site mirror with the snapshot's records."""
    channel = channel_without(tmp_path / "mirror").as_uri()
    out = tmp_path / "out"
    stack = [
        "--torch",
        "2.12.0",
        "--cuda",
        "12.9",
        "--python",
        "3.11",
        "--no-deepspeed",
    ]  # a stack the snapshot's records hold
    alone = runner.invoke(main, ["make", "--gpu", "a100", "-c", channel, *stack, "-o", str(tmp_path / "alone")])
    assert alone.exit_code == 0, f"the stack alone locks from the mirror: {alone.output}"
    result = runner.invoke(
        main, ["make", "--gpu", "a100", "-c", channel, *stack, "--add", "transformers", "-o", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert "transformers (from --add) cannot be installed with the stack's pytorch ==" in result.output, result.output
    assert "from the --channel URLs" in result.output, result.output
    assert not out.exists(), "nothing written"
