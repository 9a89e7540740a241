"""Issue 22's conventions, held over every command of the group: one error style for click's usage errors and
envsolver's own (text and --json), one help layout, each command's own -v help, install's help true to the
hash each lock kind is checked by, the live channels' failure shown whole, and one meaning per short flag."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.install import pkgcache
from envsolver.lock import lockfile
from envsolver.lock import run as lock

ROOT = Path(__file__).resolve().parent.parent
ENV = {"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None, "ENVSOLVER_DEBUG": None}


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(main, args, env=ENV)


def _walk(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command of the group, groups included, lazy ones imported (list_commands names them all)."""
    ctx = click.Context(group)
    found: list[tuple[tuple[str, ...], click.Command]] = [(path, group)]
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, f"{name!r} is listed but cannot be looked up"
        if isinstance(command, click.Group):
            found += _walk(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


COMMANDS = _walk(main)
PATHS = [path for path, _ in COMMANDS]
IDS = [" ".join(path) or "main" for path in PATHS]
LEAVES = [(path, command) for path, command in COMMANDS if not isinstance(command, click.Group)]

# A value each command refuses: click's own check where the command has a typed option, else envsolver's.
BAD_VALUE: dict[tuple[str, ...], list[str]] = {
    (): ["no-such-command"],
    ("cluster",): ["no-such-command"],
    ("cluster", "init"): ["--wait", "-1"],
    ("cluster", "sbatch"): ["--nodes", "0", "python"],
    ("diff",): ["--platform", "win-64", "a", "b"],
    ("explain",): ["--platform", "win-64"],
    ("gpus",): ["no-such-gpu-zz"],
    ("hook",): ["--jobs", "many"],
    ("install",): ["--platform", "win-64"],
    ("make",): ["--driver-compat", "some"],
    ("module",): ["bad name", "--out", "modules"],
    ("verify",): ["--check", "no_such_check"],
}
# click's usage errors: `error: MESSAGE FIX` as envsolver's own errors, the fix naming the command's --help, then
# the command's usage on one line.
USAGE = re.compile(
    r"error: .*[.?)] Run `(?P<path>main(?: [a-z]+)*) --help` to see the options\.\nusage: (?P=path) \[OPTIONS\].*\n"
)


def test_every_command_has_a_bad_value() -> None:
    assert sorted(BAD_VALUE) == sorted(PATHS), "a command was added or removed: give it a row in BAD_VALUE"


def _with_json(path: tuple[str, ...], words: list[str]) -> list[str]:
    """--json where the command reads it: right after a command's name; after the words for a group (which has
    no --json of its own, and is then told by the word alone)."""
    command = dict(COMMANDS)[path]
    if isinstance(command, click.Group):
        return [*path, *words, "--json"]
    return [*path, "--json", *words]


def _assert_one_style(result: Result, path: tuple[str, ...]) -> None:
    err = result.stderr
    lines = err.splitlines()
    assert result.exit_code == 2, f"exit {result.exit_code}; stderr: {err!r}"
    assert lines and lines[0].startswith("error: "), f"the first line is not `error: ...`: {err!r}"
    assert "Error:" not in err and "Usage:" not in err, f"click's own style: {err!r}"
    if any(line.startswith("usage: ") for line in lines):
        assert USAGE.fullmatch(err), f"not `error: MESSAGE FIX` and one usage line: {err!r}"


@pytest.mark.parametrize("kind", ["option", "value"])
@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_error_has_one_style_exit_2_and_json(tmp_path: Path, path: tuple[str, ...], kind: str) -> None:
    words = ["--no-such-option"] if kind == "option" else [w.replace("modules", str(tmp_path)) for w in BAD_VALUE[path]]
    text = invoke([*path, *words])
    _assert_one_style(text, path)
    assert text.stdout == "", f"an error without --json printed on stdout: {text.stdout!r}"
    as_json = invoke(_with_json(path, words))
    _assert_one_style(as_json, path)
    assert as_json.stderr == text.stderr, (text.stderr, as_json.stderr)
    doc = json.loads(as_json.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2, doc
    error = doc["error"]
    assert text.stderr.startswith(f"error: {error['message']}"), (error, text.stderr)
    assert error["fix"] and error["fix"] in " ".join(text.stderr.split()), (error, text.stderr)
    if kind == "option":
        assert error["kind"] == "usage", error
        assert "--no-such-option" in error["message"], error


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_the_usage_hint_runs(path: tuple[str, ...]) -> None:
    shown = invoke([*path, "--no-such-option"])
    hint = shown.stderr.splitlines()[0]
    suggested = hint.split("`")[1].split()[1:]  # `main X --help`
    helped = invoke(suggested)
    assert helped.exit_code == 0 and helped.stdout.startswith("Usage: main"), (hint, helped.output)


# --- help layout ---------------------------------------------------------------------------------------------


def _heading(text: str, heading: str) -> int:
    found = re.search(rf"^ *{re.escape(heading)}", text, re.MULTILINE)
    return found.start() if found else -1


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_help_has_one_layout(path: tuple[str, ...]) -> None:
    """Usage, what the command does, Options (and a group's Commands), then Examples, then Exit codes."""
    result = invoke([*path, "--help"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    options, examples, codes = (_heading(text, h) for h in ("Options:", "Examples:", "Exit codes:"))
    assert text.startswith("Usage: ") and options > 0, text
    if not isinstance(dict(COMMANDS)[path], click.Group):
        assert examples > 0 and codes > 0, f"no Examples: or no Exit codes: paragraph:\n{text}"
    if examples >= 0:
        assert options < examples, f"examples before the options:\n{text}"
    if codes >= 0:
        assert max(options, examples) < codes, f"exit codes before the options or the examples:\n{text}"


def _verbose_help(command: click.Command) -> str:
    option = next(p for p in command.params if isinstance(p, click.Option) and "--verbose" in p.opts)
    return " ".join((option.help or "").split())


@pytest.mark.parametrize(("path", "command"), LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_verbose_help_speaks_of_its_own_command(path: tuple[str, ...], command: click.Command) -> None:
    said = _verbose_help(command)
    others = {name for p, _ in LEAVES for name in p if name not in path}
    assert said and not [name for name in others if f"`{name}`" in said or f" {name} " in said], said


def test_the_commands_that_print_steps_name_their_own() -> None:
    said = {path[-1]: _verbose_help(command) for path, command in LEAVES}
    steps = [said[name] for name in ("make", "install", "hook", "verify")]
    assert len(set(steps)) == len(steps), steps
    assert "specs" in said["make"] and "virtual packages" in said["make"], said["make"]
    assert "fetch" in said["install"] and "link" in said["install"], said["install"]
    assert "op" in said["hook"], said["hook"]
    assert "--nccl" in said["verify"], said["verify"]


def test_verbose_adds_the_done_line_where_the_help_says_only_that() -> None:
    result = invoke(["gpus", "4090", "-v"])
    assert result.exit_code == 0, result.output
    timed = [line for line in result.stderr.splitlines() if re.match(r"^\[\s*\d+\.\d\ds\] ", line)]
    assert [line.split("] ", 1)[1] for line in timed] == ["main gpus: done"], result.stderr
    assert "seconds" in _verbose_help(dict(COMMANDS)[("gpus",)])


# --- install's help: which hash checks which lock ----------------------------------------------------------------


def test_install_help_names_the_hash_each_lock_kind_is_checked_by() -> None:
    shown = " ".join(invoke(["install", "--help"]).stdout.split())
    explicit = lockfile.read(ROOT / "locks" / "a100" / "conda-linux-64.lock", None)
    yml = lockfile.read(ROOT / "locks" / "a100" / "conda-lock.yml", "linux-64")
    assert {pkgcache.expected_hash(e)[0] for e in explicit.entries} == {"md5"}
    assert {pkgcache.expected_hash(e)[0] for e in yml.entries} == {"sha256"}
    assert "Every archive is checked against the lock's sha256" not in shown, shown
    assert "conda-lock.yml" in shown and "md5" in shown and "explicit lock" in shown, shown
    said = shown[shown.index("Install a conda-lock.yml") : shown.index("Options:")]
    assert re.search(r"sha256[^.]*conda-lock\.yml|conda-lock\.yml[^.]*sha256", said), said
    assert re.search(r"md5[^.]*explicit lock|explicit lock[^.]*md5", said), said


# --- the live channels' failure: the whole cause -----------------------------------------------------------------

CHAIN = (
    "could not fetch repodata: error sending request for url "
    "(https://conda.anaconda.org/conda-forge/noarch/repodata_shards.msgpack.zst)\n"
    "Caused by: client error (Connect)\nCaused by: dns error\nCaused by: error resolving DNS\n"
    "Caused by: failed to lookup address information: Name or service not known"
)


def test_a_cause_chain_is_one_whole_line() -> None:
    from envsolver.core.printable import one_line

    line = one_line(CHAIN)
    assert "\n" not in line and "…" not in line, line
    assert line.endswith(
        "client error (Connect): dns error: error resolving DNS: failed to lookup address information: Name or "
        "service not known"
    ), line


def test_a_long_cause_is_bounded_at_a_word_and_printable() -> None:
    from envsolver.core.printable import one_line

    line = one_line("word " * 1000 + "\x1b[2J")
    assert len(line) <= 1000 and line.endswith("word …"), line[-40:]
    assert "\x1b" not in one_line("a\x1b[2Jb") and "\\x1b" in one_line("a\x1b[2Jb")


def test_the_live_channels_failure_names_its_whole_cause(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ENVSOLVER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(lock, "LIVE_LOCATION", "https://127.0.0.1:9")  # nothing listens on loopback port 9
    base = ["make", "--gpu", "a100", "--driver", "550.54.14", "-o", str(tmp_path / "out"), "--dry-run"]
    text, loud, as_json = invoke(base), invoke([*base, "-v"]), invoke([*base, "--json"])
    assert text.exit_code == loud.exit_code == as_json.exit_code == 0, (text.output, loud.output, as_json.output)
    warned = [w for w in json.loads(as_json.stdout)["lock"]["warnings"] if "could not be reached" in w]
    for said in (text.stderr, loud.stderr, *warned):
        cause = said.split("could not be reached (", 1)[1]
        assert "…" not in cause.split(")")[0] and "Connection refused" in cause, said
    assert warned and [line for line in loud.stderr.splitlines() if "Connection refused" in line], loud.stderr


# --- short flags -------------------------------------------------------------------------------------------------


def test_a_short_flag_means_one_long_option_everywhere() -> None:
    meanings: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    where: dict[str, list[str]] = defaultdict(list)
    for path, command in COMMANDS:
        for param in command.get_params(click.Context(command)):
            if not isinstance(param, click.Option):
                continue
            words = [*param.opts, *param.secondary_opts]
            longs = tuple(sorted(w for w in words if w.startswith("--")))
            for short in (w for w in words if not w.startswith("--")):
                meanings[short].add(longs)
                where[short].append(f"{' '.join(path) or 'main'}: {'/'.join(longs)}")
    assert meanings, "no short flag found: the walk is broken"
    clashes = {short: where[short] for short, longs in meanings.items() if len(longs) > 1}
    assert not clashes, clashes


def test_a_usage_error_masks_a_credential_it_quotes() -> None:
    """click quotes an extra argument as it is; a channel URL pasted there keeps its password out of the error."""
    for args in (
        ["explain", "https://alice:S3CRET@mirror.example.org/c"],
        ["explain", "--json", "https://alice:S3CRET@m/c"],
    ):
        result = invoke(args)
        assert result.exit_code == 2 and "S3CRET" not in result.output, result.output
        assert result.stderr.startswith("error: Got unexpected extra argument (https://***@"), result.stderr
