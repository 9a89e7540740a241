"""The README's "Your project's packages" section, run: its project file written as shown, then each of its commands,
with --offline added to make and explain (no conda channel is reachable here: the bundled snapshots stand for
the live channels and PyPI), each exiting 0 and the files it names written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "<!-- README-PROJECT:"


def _section() -> tuple[str, list[str]]:
    """(the project file's text, the commands) of the README's section."""
    text = README.read_text(encoding="utf-8")
    after = text[text.index(MARKER) :]
    yaml_block = re.search(r"```yaml\n(.*?)```", after, re.S)
    bash_block = re.search(r"```bash\n(.*?)```", after, re.S)
    assert yaml_block and bash_block, "the README's project section lost its blocks"
    commands = [line.split("  #")[0].strip() for line in bash_block.group(1).splitlines() if line.strip()]
    return yaml_block.group(1), commands


def test_the_readme_shows_make_f_add_update_and_diff() -> None:
    _, commands = _section()
    joined = "\n".join(commands)
    for part in ("make --gpu a100 -f project.yml", "--add ", "--add-pypi ", "--update ", "envsolver diff "):
        assert part in joined, f"the README's project section shows no {part.strip()!r}"


def test_every_command_of_the_readmes_project_section_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project, commands = _section()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENVSOLVER_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "project.yml").write_text(project.split("\n", 1)[1])  # the block's first line names the file
    runner = CliRunner()
    for command in commands:
        words = shlex.split(command)
        assert words[0] == "envsolver", command
        args = words[1:] + (["--offline"] if words[1] in ("make", "explain") else [])
        result = runner.invoke(main, args)
        assert result.exit_code == 0, f"{command}: exit {result.exit_code}\n{result.output}"
        if "-o" in words:
            assert (tmp_path / words[words.index("-o") + 1] / "conda-lock.yml").is_file() or "--dry-run" in words
    assert "jupyterlab" in (tmp_path / "envs" / "a100" / "environment.yml").read_text()
