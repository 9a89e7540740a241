"""The lazy `main` group (issue 13): a command's module is imported only when that command runs, and
`envsolver --help` still lists every command with the same line as if all were imported."""

from __future__ import annotations

import inspect
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from envsolver.cli import main as cli
from envsolver.cli.base import Group

LOADED = """\
import click, sys
from envsolver.cli.main import LAZY, main
for name in LAZY:
    main.get_command(click.Context(main), name)
assert set(LAZY) <= set(main.commands)
main(prog_name="envsolver")
"""


def _real(name: str) -> click.Command:
    import importlib

    module, _, attribute = cli.LAZY[name][0].partition(":")
    command = getattr(importlib.import_module(module), attribute)
    assert isinstance(command, click.Command)
    return command


@pytest.mark.parametrize("name", sorted(cli.LAZY))
def test_each_summary_is_the_first_paragraph_of_the_commands_help(name: str) -> None:
    command = _real(name)
    assert command.name == name
    assert cli.LAZY[name][1] == inspect.cleandoc(command.help or "").split("\n\n")[0]


@pytest.mark.parametrize("columns", ["40", "80", "200"])
def test_help_lists_the_same_lines_as_with_every_command_imported(columns: str) -> None:
    env = {"COLUMNS": columns, "PATH": "/usr/bin:/bin"}
    lazy = subprocess.run(
        [sys.executable, "-c", "from envsolver.cli.main import main; main(prog_name='envsolver')", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    loaded = subprocess.run(
        [sys.executable, "-c", LOADED, "--help"], capture_output=True, text=True, env=env, timeout=120
    )
    assert lazy.returncode == loaded.returncode == 0, lazy.stderr + loaded.stderr
    assert "install" in lazy.stdout and "Install a conda-lock.yml" in lazy.stdout
    assert lazy.stdout == loaded.stdout


@pytest.mark.parametrize("name", sorted(cli.LAZY))
def test_a_lazy_command_runs_when_named(name: str) -> None:
    result = CliRunner().invoke(cli.main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert f"Usage: main {name}" in result.output
    assert cli.main.commands[name] is _real(name)


def test_an_unknown_command_is_still_a_usage_error() -> None:
    result = CliRunner().invoke(cli.main, ["instal"])
    assert result.exit_code == 2, result.output
    assert "No such command 'instal'" in result.output


def test_a_group_without_lazy_commands_lists_its_own() -> None:
    group = Group(name="g")

    @group.command()
    def one() -> None:
        """The first."""

    assert group.list_commands(click.Context(group)) == ["one"]
    assert group.get_command(click.Context(group), "two") is None
