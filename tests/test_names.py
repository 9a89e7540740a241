"""The environment-name grammar: conda's rule plus one safe token; every refusal names a fix that passes."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from envsolver.cli.main import main
from envsolver.core import names
from envsolver.core.errors import BadInputError
from envsolver.lock import lockfile
from envsolver.lock import run as lock

VALID = ["train", "envsolver-a100", "my_env.2", "a=b", "$HOME", "données", "日本語", "x" * 255, "...", "a-"]
INVALID = {
    "colon-space": ("a: b", "contains ' ', ':' (conda refuses '/', ' ', ':' and '#'; envsolver also refuses"),
    "colon": ("a:b", "contains ':'"),
    "space": ("a b", "contains ' '"),
    "slash": ("a/b", "contains '/'"),
    "hash": ("a#b", "contains '#'"),
    "newline-prefix": ("x\nprefix: /etc", "contains '\\n', ' ', '/', ':'"),
    "carriage-return": ("x\r", "contains '\\r'"),
    "tab": ("a\tb", "contains '\\t'"),
    "nul": ("a\x00b", "contains '\\x00'"),
    "del": ("a\x7f", "contains '\\x7f'"),
    "nel": ("a\x85b", "contains '\\x85'"),
    "line-separator": ("a\u2028b", "contains '\\u2028'"),
    "paragraph-separator": ("a\u2029b", "contains '\\u2029'"),
    "bom": ("\ufeffa", "contains '\\ufeff'"),
    "nbsp": ("a\xa0b", "contains '\\xa0'"),
    "surrogate": ("a\ud800", "contains '\\ud800'"),
    "empty": ("", "it is empty"),
    "base": ("base", "reserves it"),
    "root": ("root", "reserves it"),
    "dot": (".", "envs directory"),
    "dotdot": ("..", "envs directory"),
    "dash": ("-x", "starts with '-'"),
    "too-long": ("é" * 128, "longer than 255 bytes"),
}


@pytest.mark.parametrize("name", VALID)
def test_valid_names_pass_unchanged(name: str) -> None:
    assert names.validate(name) == name


@pytest.mark.parametrize(("name", "why"), INVALID.values(), ids=list(INVALID))
def test_invalid_names_say_why_and_the_fix(name: str, why: str) -> None:
    with pytest.raises(BadInputError) as info:
        names.validate(name)
    message = str(info.value)
    assert f"environment name {name!r} cannot be used" in message
    assert why in message
    assert message.endswith(", or leave --name out for envsolver-<gpus>.")
    assert "\n" not in message
    fix = message.split("Pass --name ", 1)[1].split(", or leave", 1)[0]
    assert names.problem(shlex.split(fix)[0]) is None


@pytest.mark.parametrize(
    ("name", "suggestion"), [("a: b", "a-b"), ("x\nprefix: /etc", "x-prefix-etc"), ("-x", "x"), ("base", "train")]
)
def test_suggestion_replaces_refused_characters(name: str, suggestion: str) -> None:
    assert names.suggest(name) == suggestion


@given(st.text() | st.text(alphabet=" /:#-.\n\r\t\x00\x7f\x85\u2028\u2029\ufeffab", max_size=8))
def test_any_text_is_accepted_unchanged_or_refused_with_a_valid_suggestion(name: str) -> None:
    try:
        assert names.validate(name) == name
    except BadInputError as exc:
        assert repr(name) in str(exc)
        assert names.problem(names.suggest(name)) is None
    else:
        assert shlex.split(shlex.quote(name)) == [name]
        assert all(ch.isprintable() and not ch.isspace() for ch in name)


@pytest.mark.parametrize("name", ["a: b", "x\nprefix: /etc", "x\u2028y", "base", ""])
def test_make_refuses_a_bad_name_before_solving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    def no_solve(*_: object) -> None:
        raise AssertionError("make solved before it validated --name")

    monkeypatch.setattr(lock, "lock", no_solve)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["make", "--gpu", "a100", "--offline", "--name", name, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"error: environment name {name!r} cannot be used" in result.output
    assert not out.exists()


@pytest.mark.parametrize("name", ["it's;$(touch${IFS}x)`y`", "données", "a=b&c|d"])
def test_make_writes_a_valid_name_that_reads_back_everywhere(tmp_path: Path, name: str) -> None:
    result = CliRunner().invoke(main, ["make", "--gpu", "a100", "--offline", "--name", name, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    env = (tmp_path / "environment.yml").read_text(encoding="utf-8")
    assert set(yaml.safe_load(env)) == {"name", "channels", "dependencies", "variables"}
    assert yaml.safe_load(env)["name"] == name
    written = ("environment.yml", "conda-lock.yml", "virtual-packages.yml", "conda-linux-64.lock")
    for path in (tmp_path / name for name in written):
        command = next(line for line in path.read_text(encoding="utf-8").splitlines() if "envsolver make" in line)
        command = "envsolver make" + command.split("envsolver make", 1)[1]
        words = shlex.split(command)
        assert words[words.index("--name") + 1] == name
        assert shlex.join(words) == command  # every word is quoted as a POSIX shell needs
    for path in (tmp_path / "conda-lock.yml", tmp_path / "conda-linux-64.lock"):
        assert any(e.name == "pytorch" for e in lockfile.read(path, None).entries)
