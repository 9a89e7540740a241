"""Results on stdout, diagnostics (warnings, progress, errors) on stderr; no line is wrapped when the output is
not a terminal (CliRunner's is not), and no value is read as rich markup."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.lock.pypi import pins
from envsolver.verify import run as verify_run
from tests.conda_packages import build_channel
from tests.test_install import write_lock
from tests.test_verify import healthy

LONG = "a-directory-name-long-enough-that-one-of-them-passes-eighty-columns"
LONG_GPU = "NVIDIA RTX PRO 6000 Blackwell (Workstation / Max-Q / Server Edition)"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("ENVSOLVER_GPUS", "ENVSOLVER_DRIVER", "ENVSOLVER_DEBUG", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ENVSOLVER_CACHE_DIR", str(tmp_path / "cache"))


def invoke(args: list[str]) -> Result:
    result = CliRunner().invoke(main, args)
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


def test_make_results_on_stdout_warnings_on_stderr_nothing_wrapped(tmp_path: Path) -> None:
    out = tmp_path / LONG / LONG
    result = invoke(["make", "--gpu", "a100", "--no-lock", "--out", str(out)])
    assert result.exit_code == 0, result.output
    env_yml = out / "environment.yml"
    assert result.stdout.splitlines() == [
        f"{env_yml}: written",
        "torch 2.13.0 (CUDA 13.0 build), CUDA 13.0, Python 3.13, TORCH_CUDA_ARCH_LIST=8.0+PTX",
        f"Create it with: conda env create -n envsolver-a100 -f {shlex.quote(str(env_yml))} && envsolver hook -n "
        "envsolver-a100",
        "  (the hook sets TORCH_CUDA_ARCH_LIST, CUDA_HOME, CPATH, DS_ACCELERATOR and builds DeepSpeed's ops)",
    ]
    assert result.stderr.splitlines() == [
        "warning: no --driver given: the plan assumes a driver that runs CUDA 13.0 (its lock records __cuda 13.0). "
        "This plan needs driver >= 580.65.06 (CUDA 13.0); "
        "pass --driver with the compute nodes' version, or use --gpu auto there."
    ]


def test_make_offline_lock_summary_is_whole(tmp_path: Path) -> None:
    out = tmp_path / LONG
    result = invoke(["make", "--profile", "v100", "--driver", "580.65.06", "--offline", "--out", str(out)])
    assert result.exit_code == 0, result.output
    lock = shlex.quote(str(out / "conda-lock.yml"))
    lines = result.stdout.splitlines()
    assert lines[-5].startswith("locked ") and lines[-5].endswith(" against the bundled snapshot of 2026-08-18")
    # The plan (torch 2.12.0 cu129, for which conda-forge builds no DeepSpeed) takes DeepSpeed from PyPI.
    fetched = json.loads((pins.snapshot_dir() / "deepspeed.json").read_text())["fetched"]
    assert lines[-4] == (
        f"and from PyPI (the bundled PyPI snapshot of {fetched}): deepspeed 0.19.8 (deepspeed-0.19.8.tar.gz, "
        "sha256 9e491abd0827…)"
    )
    assert lines[-3:] == [
        f"Create it with: envsolver install {lock} -n envsolver-v100",
        f"            or: conda-lock install -n envsolver-v100 {lock} && envsolver hook -n envsolver-v100",
        "  (the hook sets TORCH_CUDA_ARCH_LIST, CUDA_HOME, CPATH, DS_ACCELERATOR and builds DeepSpeed's ops)",
    ]
    assert result.stderr == ""


def test_explain_plan_on_stdout_warnings_on_stderr(tmp_path: Path) -> None:
    result = invoke(["explain", "--gpu", "a100", "--driver", "535.104.05"])
    assert result.exit_code == 0, result.output
    plan = json.loads(invoke(["explain", "--gpu", "a100", "--driver", "535.104.05", "--json"]).stdout)
    assert "Specs: " + "  ".join(plan["specs"]) in result.stdout.splitlines()
    assert "warning" not in result.stdout
    assert result.stderr.splitlines() == [f"warning: {w}" for w in plan["warnings"]] and plan["warnings"]


def test_gpu_table_is_not_squeezed() -> None:
    result = invoke(["gpus"])
    assert result.exit_code == 0 and result.stderr == "", result.output
    assert any(LONG_GPU in line for line in result.stdout.splitlines())


def test_errors_go_to_stderr_on_one_line() -> None:
    result = invoke(["explain", "--gpu", "a1000"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        "error: unknown GPU 'a1000'. Closest known names: 'a100', 'a6000', 'a5000'. Run `envsolver gpus` for the "
        "full table and pass one of its names or aliases to --gpu.\n"
    )


@pytest.mark.parametrize("odd", ["x[red]y", "x[/]y", "x[bold]y[/bold]"])
def test_paths_are_not_markup_and_the_printed_command_names_the_file(tmp_path: Path, odd: str) -> None:
    out = tmp_path / odd
    result = invoke(["make", "--gpu", "a100", "--no-lock", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"{out / 'environment.yml'}: written" in result.stdout.splitlines()
    command = next(line for line in result.stdout.splitlines() if line.startswith("Create it with: "))
    words = shlex.split(command.removeprefix("Create it with: "))
    assert words[:6] == ["conda", "env", "create", "-n", "envsolver-a100", "-f"] and Path(words[6]).is_file()
    assert words[7:] == ["&&", "envsolver", "hook", "-n", "envsolver-a100"]


def test_install_line_is_whole_and_literal(tmp_path: Path) -> None:
    lock = write_lock(build_channel(tmp_path), tmp_path)
    prefix = tmp_path / LONG / "env[red]"
    result = invoke(["install", str(lock), "-p", str(prefix), "--no-hook"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == (f"{prefix}: installed (3 packages for linux-64, 3 fetched and verified)")
    assert result.stderr == ""


def test_hook_report_lines_are_literal(tmp_path: Path) -> None:
    prefix = tmp_path / LONG / "env[bold]"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").write_text("#!/bin/sh\nexit 3\n")  # a python the probe cannot run: a FAIL line
    (prefix / "bin" / "python").chmod(0o755)
    result = invoke(["hook", "-p", str(prefix), "--arch-list", "8.0", "--no-build"])
    assert result.exit_code == 1, result.output
    activate = prefix / "etc" / "conda" / "activate.d" / "envsolver.sh"
    assert f"{activate}: written" in result.stdout.splitlines()
    assert any(line.startswith("FAIL ") for line in result.stdout.splitlines())
    assert result.stderr == ""


def test_verify_report_on_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = tmp_path / LONG / "py[red]thon"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    monkeypatch.setattr(verify_run, "probe", lambda *a, **k: healthy())
    result = invoke(["verify", "--python", str(python), "--check", "shm", "--check", "nvcc"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"verify {python} (given by --python)" and lines[-1] == "2 pass, 0 warn, 0 fail, 0 skip"
    assert result.stderr == ""


def test_progress_messages_are_not_markup(tmp_path: Path) -> None:
    """install's progress ("linking 3 packages into PREFIX") goes to the spinner on stderr as it is: a prefix
    with '[/]' in its name installs instead of ending in rich's MarkupError."""
    lock = write_lock(build_channel(tmp_path), tmp_path)
    prefix = tmp_path / "env[/]x"
    result = invoke(["install", str(lock), "-p", str(prefix), "--no-hook"])
    assert result.exit_code == 0, result.output
    assert (prefix / "bin" / "tiny-app").exists()
