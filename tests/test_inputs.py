"""The regenerate command: every value validated and shell-quoted, so that copying it runs exactly that command."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from envsolver.cli.base import CONTEXT
from envsolver.cli.main import main
from envsolver.core import names
from envsolver.core.errors import BadInputError
from envsolver.core.redact import redact
from envsolver.kb import KnowledgeBase
from envsolver.resolve.inputs import Options, build_target, canonical_command, make_command


def parse_make(command: str) -> dict[str, Any]:
    """The options `envsolver make` receives when the command is pasted into a POSIX shell."""
    words = shlex.split(command)
    assert words[:2] == ["envsolver", "make"]
    assert shlex.join(words) == command  # every word is quoted as a POSIX shell needs
    make = main.commands["make"]
    # With the group's context settings: click keeps the first help option it builds on the command, so a context
    # made without them would leave `make -h` unknown for every later test in this process.
    return make.make_context("make", words[2:], **CONTEXT).params


@pytest.mark.parametrize(
    ("torch", "expected"),
    [
        ("2.5", "--torch 2.5"),
        ("2.3.1", "--torch 2.3.1"),
        (">=2.4,<2.6", "--torch '>=2.4,<2.6'"),
        (" 2.5", "--torch ' 2.5'"),
        ("2.5 ", "--torch '2.5 '"),
        ("==2.5.*", "--torch '==2.5.*'"),
        ("!=2.4.1", "--torch '!=2.4.1'"),
    ],
)
def test_torch_is_shell_quoted(kb: KnowledgeBase, torch: str, expected: str) -> None:
    command = build_target(Options(gpus=("a100",), torch=torch), kb).command
    assert command == f"envsolver make --gpu a100 {expected}"
    assert parse_make(command)["torch"] == torch


def test_ordinary_commands_are_unchanged(kb: KnowledgeBase) -> None:
    options = Options(gpus=("v100", "a100"), driver="535.104.05", python="3.11", torch="2.3.1", source="pytorch")
    target = build_target(options, kb).target
    assert make_command(target, name="train", offline=True) == (
        "envsolver make --gpu v100 --gpu a100 --driver 535.104.05 --python 3.11 --torch 2.3.1 --source pytorch "
        "--name train --offline"
    )
    assert canonical_command("explain", target).startswith("envsolver explain --gpu v100")


@pytest.mark.parametrize("torch", ["", " ", "\t"])
def test_blank_torch_is_bad_input(kb: KnowledgeBase, torch: str) -> None:
    with pytest.raises(BadInputError, match=r"--torch .* is empty.*Pass --torch 2\.5, or leave --torch out"):
        build_target(Options(gpus=("a100",), torch=torch), kb)


@pytest.mark.parametrize("command", ["explain", "make"])
def test_cli_blank_torch_exits_2_without_a_traceback(command: str, tmp_path: Any) -> None:
    args = [command, "--gpu", "a100", "--torch", ""] + (
        ["--no-lock", "--out", str(tmp_path)] if command == "make" else []
    )
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "error: --torch '' is empty" in result.output
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "torch", [">=2.4\n", ">=2.4,\n<2.6", "2.5\r", ">=2.4\x85", "\u2028>=2.4", ">=2.4\x00", "2.5\u2029", "\ufeff2.5"]
)
def test_torch_with_a_line_break_or_control_is_refused_with_a_working_fix(kb: KnowledgeBase, torch: str) -> None:
    with pytest.raises(BadInputError) as info:
        build_target(Options(gpus=("a100",), torch=torch), kb)
    message = str(info.value)
    assert repr(torch) in message and "\n" not in message
    fix = shlex.split(message.rsplit("Pass ", 1)[1].rstrip("."))
    assert fix[0] == "--torch"
    assert build_target(Options(gpus=("a100",), torch=fix[1]), kb).target.torch is not None


@pytest.mark.parametrize(
    "channel",
    ["file:///srv/conda\n--offline", "https://u:SECRET@h/c\r", "https://h/t/SECRET/\x1b[31mred", "file:///a\u2028b"],
)
def test_channel_with_a_line_break_or_control_is_refused(kb: KnowledgeBase, channel: str) -> None:
    target = build_target(Options(gpus=("a100",)), kb).target
    with pytest.raises(BadInputError, match=r"^--channel .* holds .*Pass --channel ") as info:
        make_command(target, channels=(channel,))
    assert "SECRET" not in str(info.value) and "\n" not in str(info.value)


def test_make_command_validates_the_name(kb: KnowledgeBase) -> None:
    target = build_target(Options(gpus=("a100",)), kb).target
    with pytest.raises(BadInputError, match=r"environment name 'a: b' cannot be used"):
        make_command(target, name="a: b")


# Characters the shell gives meaning to, and URL text.
SHELLISH = st.text(alphabet=st.sampled_from(list("abc019.-_/:$`\"'\\;&|*?~!#%()<>{}[] =,^@+")), min_size=1, max_size=16)
TORCH = st.sampled_from(["2.5", "2.3.1", ">=2.4,<2.6", " 2.5", "2.5 ", "==2.5.*", "<2.6", "~=2.4", ">=2.4, <2.6"])
NAME = st.text(
    alphabet=st.characters(
        exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"), exclude_characters="/:#"
    ),
    min_size=1,
    max_size=12,
).filter(lambda n: n not in ("base", "root", ".", "..") and not n.startswith("-"))


@settings(deadline=None)
@given(
    gpus=st.lists(st.sampled_from(["a100", "v100", "h100", "t4"]), min_size=1, max_size=3, unique=True),
    torch=st.none() | TORCH,
    name=st.none() | NAME | SHELLISH.filter(lambda n: names.problem(n) is None),
    channels=st.lists(st.builds(lambda tail: f"file:///srv/{tail}", SHELLISH), max_size=2),
    offline=st.booleans(),
    no_lock=st.booleans(),
)
def test_the_regenerate_command_parses_back_to_its_values(
    kb: KnowledgeBase,
    gpus: list[str],
    torch: str | None,
    name: str | None,
    channels: list[str],
    offline: bool,
    no_lock: bool,
) -> None:
    if name is not None and name.startswith("-"):
        name = "x" + name
    target = build_target(Options(gpus=tuple(gpus), torch=torch), kb).target
    command = make_command(target, name=name, offline=offline, channels=tuple(channels), no_lock=no_lock)
    assert command.isprintable()
    params = parse_make(command)
    assert params["gpus"] == tuple(gpus)
    assert params["torch"] == torch
    assert params["name"] == name
    assert params["channels"] == tuple(redact(c) for c in channels)
    assert (params["offline"], params["no_lock"]) == (offline, no_lock)
