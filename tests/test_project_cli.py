"""A project through the command line (make/explain -f, --add, --add-pypi): the files make writes say where each
package came from, the user's file is never written, and every refusal's fix works when run."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from envsolver.cli.main import main

PROJECT = """\
channels: [conda-forge]
dependencies:
  - python=3.12
  - numpy <3
  - jupyterlab
  - pip:
    - accelerate
    - peft>=0.10
"""


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("ENVSOLVER_GPUS", "ENVSOLVER_DRIVER"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def _run(runner: CliRunner, args: list[str]) -> Result:
    return runner.invoke(main, args)


def test_make_writes_the_projects_packages_with_their_origin_and_leaves_the_file_alone(
    runner: CliRunner, tmp_path: Path
) -> None:
    project = tmp_path / "project.yml"
    project.write_text(PROJECT)
    before = hashlib.sha256(project.read_bytes()).hexdigest()
    out = tmp_path / "out"
    result = _run(runner, ["make", "--gpu", "a100", "-f", str(project), "--no-lock", "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = (out / "environment.yml").read_text()
    doc = yaml.safe_load(text)
    assert "jupyterlab" in doc["dependencies"] and "numpy <3" in doc["dependencies"], doc["dependencies"]
    assert {"pip": ["deepspeed==0.19.8", "accelerate", "peft>=0.10"]} in doc["dependencies"], doc["dependencies"]
    assert f"  - jupyterlab  # from {project}" in text, text
    assert f"    - accelerate  # from {project}" in text, text
    assert f"-f {project}" in text.splitlines()[1], "the regenerate command names the project file"
    assert "python 3.12.*" in doc["dependencies"], "python=3.12 of the project plans Python 3.12"
    assert hashlib.sha256(project.read_bytes()).hexdigest() == before, "make wrote the user's file"


def test_explain_shows_the_plan_make_writes(runner: CliRunner, tmp_path: Path) -> None:
    project = tmp_path / "project.yml"
    project.write_text(PROJECT)
    explained = _run(runner, ["explain", "--gpu", "a100", "-f", str(project), "--json"])
    made = _run(runner, ["make", "--gpu", "a100", "-f", str(project), "--no-lock", "-o", str(tmp_path), "--json"])
    assert explained.exit_code == 0 and made.exit_code == 0, explained.output + made.output
    plan, written = json.loads(explained.stdout), json.loads(made.stdout)["plan"]
    for key in ("torch_version", "cuda_version", "python_version", "specs", "pip", "channels", "project"):
        assert plan[key] == written[key], key
    assert plan["project"]["pip"] == [
        {"requirement": "accelerate", "from": str(project)},
        {"requirement": "peft>=0.10", "from": str(project)},
    ]
    human = _run(runner, ["explain", "--gpu", "a100", "-f", str(project)])
    assert f"Project conda: python 3.12.* ({project})" in human.output, human.output
    assert "Project pip: accelerate" in human.output, human.output


def test_an_out_directory_that_holds_the_input_is_refused_and_the_fix_runs(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("environment.yml").write_text(PROJECT)
    result = _run(runner, ["make", "--gpu", "a100", "-f", "environment.yml", "--no-lock"])
    assert result.exit_code == 2, result.output
    assert "never overwrites a file it reads" in result.output, result.output
    assert Path("environment.yml").read_text() == PROJECT
    fix = result.output.split("`")[1]
    again = _run(runner, shlex.split(fix)[1:])
    assert again.exit_code == 0, f"the suggested fix {fix!r} failed: {again.output}"
    assert Path("envsolver-out/environment.yml").is_file() and Path("environment.yml").read_text() == PROJECT


def test_a_hand_edit_of_the_written_file_gets_the_command_that_keeps_it(runner: CliRunner, tmp_path: Path) -> None:
    """The issue's first finding: a package appended to the environment.yml make wrote was refused, and --force
    dropped it. Now the refusal gives the make command that keeps it as the project's, and that command works."""
    args = ["make", "--gpu", "a100", "--no-lock", "-o", str(tmp_path)]
    assert _run(runner, args).exit_code == 0
    path = tmp_path / "environment.yml"
    path.write_text(path.read_text().replace("dependencies:\n", "dependencies:\n  - jupyterlab\n  - pip: [wandb]\n"))
    refused = _run(runner, args)
    assert refused.exit_code == 2 and "edited by hand" in refused.output, refused.output
    fix = refused.output.split("`")[1]
    assert "--add jupyterlab" in fix and "--add-pypi wandb" in fix and fix.endswith("--force"), fix
    again = _run(runner, [*shlex.split(fix)[1:], "-o", str(tmp_path)])
    assert again.exit_code == 0, f"the suggested fix {fix!r} failed: {again.output}"
    text = path.read_text()
    assert "  - jupyterlab  # from --add" in text and "    - wandb  # from --add-pypi" in text, text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--add-pypi", "torch"], "would install torch from PyPI"),
        (["--add", "torch"], "its conda name is 'pytorch'"),
        (["--add", "conda-forge::numpy"], "names a channel"),
        (["--add-pypi", "x @ https://example.org/x.tar.gz"], "direct reference"),
    ],
)
def test_bad_project_input_is_exit_2_with_json_too(runner: CliRunner, args: list[str], message: str) -> None:
    result = _run(runner, ["explain", "--gpu", "a100", *args])
    assert result.exit_code == 2 and message in result.output, result.output
    doc = json.loads(_run(runner, ["explain", "--gpu", "a100", *args, "--json"]).stdout)
    assert doc["ok"] is False and message in json.dumps(doc["error"]), doc


def test_a_project_file_asking_for_a_torch_the_gpu_cannot_run_names_both_and_ways_out_that_plan(
    runner: CliRunner, tmp_path: Path
) -> None:
    """The issue's example through a file: `pytorch<2.4` for a B200 (sm_100 needs torch 2.7+)."""
    project = tmp_path / "env.yml"
    project.write_text("dependencies:\n  - pytorch<2.4\n  - jupyterlab\n")
    result = _run(runner, ["explain", "--gpu", "b200", "-f", str(project)])
    assert result.exit_code == 1, result.output
    assert f"pytorch <2.4 from {project}: no conda-forge torch build fits NVIDIA B200" in result.output, result.output
    ways = [w.split() for w in result.output.split("Ways out:")[1].split("`")[1::2]]
    assert ways, result.output
    for way in ways:
        again = _run(runner, ["explain", "--gpu", "b200", "-f", str(project), *way])
        assert again.exit_code == 0, f"the way out {way} does not plan: {again.output}"
        assert f"replaces pytorch <2.4 from {project}" in again.output, "the command line replaces the file's spec"
