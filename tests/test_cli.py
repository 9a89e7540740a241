"""The command line through click's runner: exit codes, --json, files written, the issue's done-when cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from envsolver.cli import main as cli
from envsolver.cli.main import main
from envsolver.core.errors import ConflictError

EXPLAIN_KEYS = {
    "gpus",
    "driver",
    "cuda_version",
    "torch_version",
    "python_version",
    "source",
    "channels",
    "specs",
    "virtual_packages",
    "torch_cuda_arch_list",
    "env",
    "compatibility",
    "reasons",
    "rejected",
    "warnings",
}


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("ENVSOLVER_GPUS", "ENVSOLVER_DRIVER"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def test_make_a100_writes_environment_yml(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["make", "--gpu", "a100", "--no-lock", "--out", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load((tmp_path / "x" / "environment.yml").read_text())
    assert doc["name"] == "envsolver-a100"
    assert "pytorch ==2.13.0 cuda130*" in doc["dependencies"]
    assert "written" in result.output
    again = runner.invoke(main, ["make", "--gpu", "a100", "--no-lock", "--out", str(tmp_path / "x")])
    assert again.exit_code == 0 and "unchanged" in again.output, again.output


def test_make_refuses_to_overwrite_hand_edits(runner: CliRunner, tmp_path: Path) -> None:
    assert runner.invoke(main, ["make", "--gpu", "a100", "--no-lock", "--out", str(tmp_path)]).exit_code == 0
    path = tmp_path / "environment.yml"
    path.write_text(path.read_text() + "  - jupyterlab\n")
    result = runner.invoke(main, ["make", "--gpu", "h100", "--no-lock", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "edited by hand" in result.output and "--force" in result.output
    assert "jupyterlab" in path.read_text()
    forced = runner.invoke(main, ["make", "--gpu", "h100", "--no-lock", "--out", str(tmp_path), "--force"])
    assert forced.exit_code == 0 and "jupyterlab" not in path.read_text(), forced.output


def test_make_json(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        main,
        [
            "make",
            "--profile",
            "v100",
            "--driver",
            "580.65.06",
            "--out",
            str(tmp_path),
            "--name",
            "train",
            "--offline",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    # The snapshot's newest torch for the V100 is 2.12.0 cu129, for which conda-forge builds no DeepSpeed: the plan
    # takes DeepSpeed from PyPI, so the pip companion is written too.
    names = (
        "environment.yml",
        "conda-lock.yml",
        "virtual-packages.yml",
        "conda-linux-64.lock",
        "conda-linux-64.pip.txt",
    )
    assert doc["files"] == {str(tmp_path / n): "written" for n in names}
    assert doc["plan"]["pip"] == ["deepspeed==0.19.8"], doc["plan"]
    assert doc["lock"]["used"] == "snapshot" and doc["lock"]["packages"]["linux-64"] > 100
    assert doc["plan"]["torch_cuda_arch_list"] == "7.0+PTX"
    assert yaml.safe_load((tmp_path / "environment.yml").read_text())["name"] == "train"
    assert "--name train" in (tmp_path / "environment.yml").read_text().splitlines()[1]


def test_explain_v100_driver_580_json(runner: CliRunner) -> None:
    """Done-when: a CUDA 12.x plan with 7.0 in torch_cuda_arch_list."""
    result = runner.invoke(main, ["explain", "--gpu", "v100", "--driver", "580.65.06", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert set(doc) >= EXPLAIN_KEYS
    assert doc["cuda_version"].startswith("12.")
    assert "7.0" in doc["torch_cuda_arch_list"].replace("+PTX", "").split(";")
    assert doc["gpus"] == [{"name": "NVIDIA V100", "compute_capability": "7.0"}]
    assert doc["compatibility"] == "full"
    assert all(set(r) == {"decision", "because", "source"} and r["source"] for r in doc["reasons"])
    assert all(set(r) == {"candidate", "because"} for r in doc["rejected"])
    assert any("no sm_70" in r["because"] for r in doc["rejected"])


def test_explain_rtx5090_old_driver_exits_1(runner: CliRunner) -> None:
    """Done-when: exits 1 and names the driver upgrade."""
    result = runner.invoke(main, ["explain", "--gpu", "rtx5090", "--driver", "550.54.14"])
    assert result.exit_code == 1, result.output
    assert "upgrade the driver to 570.26 or newer" in result.output
    assert "Traceback" not in result.output


def test_explain_a100_torch_2_3_1_has_no_cudatoolkit_dev(runner: CliRunner) -> None:
    """Done-when: the guide's `cudatoolkit-dev 12.1` becomes packages that exist, with a reason saying so."""
    result = runner.invoke(main, ["explain", "--gpu", "a100", "--torch", "2.3.1", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["torch_version"] == "2.3.1"
    assert doc["cuda_version"].startswith("12.")
    assert not any(s.startswith("cudatoolkit") for s in doc["specs"])
    assert {"cuda-nvcc", "cuda-cudart-dev", "libcusparse-dev", "libcublas-dev", "libcusolver-dev"} <= set(doc["specs"])
    assert any("cudatoolkit-dev is not used" in r["because"] for r in doc["reasons"])


def test_explain_human_output(runner: CliRunner) -> None:
    result = runner.invoke(main, ["explain", "--gpu", "a100", "--driver", "535.104.05"])
    assert result.exit_code == 0, result.output
    assert "compatibility minor" in result.output
    assert "Decisions" in result.output and "Rejected newer candidates" in result.output
    assert "warning" in result.output


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["explain", "--gpu", "a1000"], "Closest known names: 'a100', 'a6000', 'a5000'"),
        (["explain", "--gpu", "a100", "--driver", "x"], "malformed driver version"),
        (["explain", "--profile", "nope"], "unknown profile 'nope'"),
        (["explain"], "no target GPU"),
        (["explain", "--gpu", "a100", "--platform", "win-64"], "Invalid value for '--platform'"),
    ],
)
def test_bad_input_exits_2(runner: CliRunner, args: list[str], phrase: str) -> None:
    result = runner.invoke(main, args)
    assert result.exit_code == 2, result.output
    assert phrase in result.output
    assert "Traceback" not in result.output


def test_auto_uses_overrides(runner: CliRunner) -> None:
    result = runner.invoke(
        main,
        ["explain", "--gpu", "auto", "--json"],
        env={"ENVSOLVER_GPUS": "NVIDIA H200", "ENVSOLVER_DRIVER": "580.159.04"},
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["driver"] == "580.159.04"
    assert doc["detected"] == {"gpu NVIDIA H200": "ENVSOLVER_GPUS", "driver 580.159.04": "ENVSOLVER_DRIVER"}


def test_auto_without_gpu_is_an_error(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    from envsolver.resolve import detect

    monkeypatch.setattr(detect, "detect", lambda environ: detect.HostFacts((), None))
    result = runner.invoke(main, ["explain", "--gpu", "auto"])
    assert result.exit_code == 2, result.output
    assert "found no NVIDIA GPU" in result.output and "--gpu a100" in result.output


def test_gpus_json(runner: CliRunner) -> None:
    result = runner.invoke(main, ["gpus", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert all(
        set(r)
        == {"key", "name", "aliases", "compute_capability", "architecture", "memory_gb", "bf16", "fp8", "platform"}
        for r in rows
    )
    h200 = next(r for r in rows if r["name"] == "NVIDIA H200")
    assert h200["compute_capability"] == "9.0" and h200["bf16"] is True and h200["fp8"] is True
    assert "h200" in h200["aliases"] and "NVIDIA H200" in h200["aliases"]


def test_gpus_table(runner: CliRunner) -> None:
    result = runner.invoke(main, ["gpus"])
    assert result.exit_code == 0, result.output
    assert "h100" in result.output and "Hopper" in result.output


def test_help_has_examples(runner: CliRunner) -> None:
    for command in ("make", "explain", "gpus"):
        result = runner.invoke(main, [command, "--help"])
        assert result.exit_code == 0, result.output
        assert "Examples" in result.output


@pytest.mark.parametrize(
    ("raised", "code", "phrase"),
    [
        (RuntimeError("boom at http://alice:S3CRET@host/t/S3CRET/x"), 2, "internal error (RuntimeError: boom"),
        (PermissionError(13, "Permission denied", "/srv/t/x"), 2, "Permission denied ('/srv/t/x')"),
        (ConflictError("no stack, see https://bob:S3CRET@mirror/c"), 1, "no stack, see https://***@mirror/c"),
    ],
    ids=["bug", "oserror", "envsolver-error"],
)
def test_every_failure_is_a_message_and_an_exit_code(
    monkeypatch: pytest.MonkeyPatch, raised: Exception, code: int, phrase: str
) -> None:
    """The one handler in cli/base.py: whatever a command raises ends in `error: ...` on stderr and exit 1 or 2,
    never a traceback, and no credential in the message."""

    def explode(*_: object, **__: object) -> None:
        raise raised

    monkeypatch.setattr(cli, "resolve", explode)
    result = CliRunner().invoke(main, ["explain", "--gpu", "a100"])
    assert result.exit_code == code and isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("error: ") and phrase in result.stderr
    assert "S3CRET" not in result.stderr and "Traceback" not in result.stderr
