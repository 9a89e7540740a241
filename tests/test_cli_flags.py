"""Issue 13's conventions: -h everywhere, -V, install -n NAME, make's -c/-o/-n, -v/-q, make --dry-run, the
check list in verify --help, and exit codes in --help that are each produced by some input and never exceeded."""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from envsolver import __version__
from envsolver.cli import hook as cli_hook
from envsolver.cli import verify as cli_verify
from envsolver.cli.main import main
from envsolver.core.errors import BadInputError, Terminated
from envsolver.install import envsdir
from envsolver.install import run as installer
from envsolver.lock import run as lock_module
from envsolver.verify import checks as verify_checks

ENV = {"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None}


def invoke(args: list[str], **env: str | None) -> Result:
    return CliRunner().invoke(main, args, env={**ENV, **env})


def _paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            out += _paths(command, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


COMMANDS = _paths(main)


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "main" for p in COMMANDS])
def test_dash_h_is_help_on_every_command(path: tuple[str, ...]) -> None:
    short, long = invoke([*path, "-h"]), invoke([*path, "--help"])
    assert short.exit_code == 0 and long.exit_code == 0, short.output
    assert short.stdout == long.stdout and "Usage:" in short.stdout and "-h, --help" in short.stdout


def test_dash_capital_v_is_the_version() -> None:
    short, long = invoke(["-V"]), invoke(["--version"])
    assert short.exit_code == 0 and short.stdout == long.stdout == f"envsolver, version {__version__}\n"


# --- install -n NAME -------------------------------------------------------------------------------------------


def test_envs_dir_follows_conda(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    assert envsdir.envs_dir({"HOME": home})[0] == Path(home) / ".conda" / "envs"
    first, second = tmp_path / "a", tmp_path / "b"
    for var in envsdir.VARIABLES:
        found, origin = envsdir.envs_dir({"HOME": home, var: f"{first}:{second}"})
        assert found == first and var in origin
    assert envsdir.envs_dir({"HOME": home, "CONDA_ENVS_DIRS": ":$SCRATCH/envs", "SCRATCH": str(tmp_path)})[0] == (
        tmp_path / "envs"
    )
    assert envsdir.envs_dir({"HOME": home, "CONDA_ENVS_DIRS": "~/e"})[0] == Path("~/e").expanduser()
    with pytest.raises(BadInputError, match="Unset one of them"):
        envsdir.envs_dir({"CONDA_ENVS_DIRS": str(first), "CONDA_ENVS_PATH": str(second)})
    assert envsdir.envs_dir({"CONDA_ENVS_DIRS": str(first), "CONDA_ENVS_PATH": str(first)})[0] == first


@pytest.mark.parametrize("bad", ["base", "root", "a/b", "a b", "-x", "", ".", "..", "x:y", "x#y", "a\nb"])
def test_names_conda_refuses_are_refused_with_a_name_that_works(bad: str, tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path)}
    with pytest.raises(BadInputError) as caught:
        envsdir.prefix_for(bad, environ)
    suggested = str(caught.value).split("Pass -n ", 1)[1].split(",")[0]
    assert envsdir.prefix_for(suggested.strip("'"), environ).parent == tmp_path / ".conda" / "envs"


def test_install_dash_n_installs_into_the_envs_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[Path] = []

    def fake(lock: Path, prefix: Path, *rest: Any) -> Any:
        seen.append(prefix)
        raise BadInputError("stop here. Run it again.")

    monkeypatch.setattr(installer, "install", fake)
    result = invoke(["install", "-n", "train"], CONDA_ENVS_DIRS=str(tmp_path / "envs"), CONDA_ENVS_PATH=None)
    assert result.exit_code == 2 and seen == [tmp_path / "envs" / "train"], result.output
    result = invoke(["install", "--name", "base"], CONDA_ENVS_DIRS=str(tmp_path / "envs"))
    assert result.exit_code == 2 and "conda reserves it" in result.stderr and len(seen) == 1, result.output


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["install", "-n", "a", "-p", "b"], "-n/--name and -p/--prefix exclude each other"),
        (["install"], "Missing option '-p' / '--prefix' (or '-n' / '--name')"),
    ],
)
def test_install_needs_exactly_one_of_n_and_p(args: list[str], phrase: str) -> None:
    result = invoke(args)
    assert result.exit_code == 2 and phrase in result.stderr, result.output
    doc = json.loads(invoke([*args, "--json"]).stdout)
    assert doc["error"]["kind"] == "usage" and phrase in doc["error"]["message"]


# --- make's short options and --dry-run ------------------------------------------------------------------------


def test_make_short_options_are_the_long_ones(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke(["make", "--gpu", "a100", "--no-lock", "-o", str(out), "-n", "myenv"])
    assert result.exit_code == 0, result.output
    assert "name: myenv" in (out / "environment.yml").read_text()
    clash = invoke(["make", "--gpu", "a100", "--offline", "-c", "file:///nowhere"])
    assert clash.exit_code == 2 and "--offline and --channel exclude each other" in clash.stderr, clash.output


def _dry(out: Path, *extra: str) -> Result:
    return invoke(["make", "--gpu", "a100", "--offline", "-o", str(out), "--dry-run", *extra])


def test_dry_run_writes_nothing_and_says_what_would_be_written(tmp_path: Path) -> None:
    out = tmp_path / "new" / "dir"
    result = _dry(out)
    assert result.exit_code == 0, result.output
    assert not out.exists() and not out.parent.exists()
    # The a100's offline plan (torch 2.12.0 cu129) takes DeepSpeed from PyPI: the explicit lock's pip companion too.
    names = [
        "environment.yml",
        "conda-lock.yml",
        "virtual-packages.yml",
        "conda-linux-64.lock",
        "conda-linux-64.pip.txt",
    ]
    for name in names:
        assert f"create     {out / name}" in result.stdout
    assert "nothing was written" in result.stdout
    doc = json.loads(_dry(out, "--json").stdout)
    assert doc["dry_run"] is True and doc["would_write"] is True
    assert doc["files"] == {str(out / n): "create" for n in names} and doc["plan"]["torch_version"]


def test_dry_run_matches_what_a_real_run_then_does(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert invoke(["make", "--gpu", "a100", "--offline", "-o", str(out)]).exit_code == 0
    doc = json.loads(_dry(out, "--json").stdout)
    assert set(doc["files"].values()) == {"unchanged"}
    # another target over the same files: overwritten
    other = json.loads(invoke(["make", "--gpu", "h100", "--offline", "-o", str(out), "--dry-run", "--json"]).stdout)
    assert "overwrite" in other["files"].values()
    (out / "environment.yml").write_text("name: mine\n")  # a hand edit
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    refused_json = _dry(out, "--json")
    refused = json.loads(refused_json.stdout)
    assert refused["would_write"] is False and refused["files"][str(out / "environment.yml")] == "refused"
    # Issue 22: the dry run exited 0 where the real run refuses; it fails as the real run does (exit 2, the same
    # reason and fix), text and JSON alike.
    assert refused_json.exit_code == 2 and refused["ok"] is False and refused["exit_code"] == 2, refused_json.output
    assert "edited by hand" in refused["error"]["message"] and "--force" in refused["error"]["fix"], refused
    text = _dry(out)
    assert text.exit_code == 2 and f"refused    {out / 'environment.yml'}" in text.stdout, text.output
    real = invoke(["make", "--gpu", "a100", "--offline", "-o", str(out)])
    assert real.exit_code == 2 and "edited by hand" in real.stderr, real.output  # the real run agrees
    reason = next(line for line in real.stderr.splitlines() if line.startswith("error: "))[len("error: ") :]
    assert f"error: dry run: a real run would refuse: {reason}" in text.stderr.splitlines(), (text.stderr, reason)
    forced = json.loads(_dry(out, "--json", "--force").stdout)
    assert forced["would_write"] is True and forced["files"][str(out / "environment.yml")] == "overwrite"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_dry_run_reports_a_stale_lock_as_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert invoke(["make", "--gpu", "a100", "--offline", "-o", str(out)]).exit_code == 0
    doc = json.loads(invoke(["make", "--gpu", "a100", "--no-lock", "-o", str(out), "--dry-run", "--json"]).stdout)
    assert doc["files"][str(out / "conda-lock.yml")] == "remove"
    assert doc["files"][str(out / "conda-linux-64.lock")] == "remove"
    assert doc["files"][str(out / "environment.yml")] == "overwrite"
    real = json.loads(invoke(["make", "--gpu", "a100", "--no-lock", "-o", str(out), "--json"]).stdout)
    assert real["files"][str(out / "conda-lock.yml")] == "removed"


# --- -v and -q ---------------------------------------------------------------------------------------------------

DETAIL = re.compile(r"^\[\s*\d+\.\d\ds\] ", re.MULTILINE)


def test_verbose_prints_the_solve_on_stderr_and_leaves_json_alone(tmp_path: Path) -> None:
    base = ["make", "--gpu", "a100", "--offline", "-o", str(tmp_path), "--dry-run", "--json"]
    plain, loud, quiet = invoke(base), invoke([*base, "-v"]), invoke([*base, "-q"])
    assert plain.exit_code == loud.exit_code == quiet.exit_code == 0, (plain.output, loud.output, quiet.output)
    assert plain.stdout == loud.stdout == quiet.stdout
    assert DETAIL.search(loud.stderr) and "specs: " in loud.stderr and "virtual packages for linux-64" in loud.stderr
    assert not DETAIL.search(plain.stderr) and not DETAIL.search(quiet.stderr)


def test_a_step_from_a_commands_thread_prints_as_every_step_and_a_fleeting_one_does_not() -> None:
    """-v's steps have one printer (cli/base.with_detail): a step told from a thread of the command (a download,
    an op build, torchrun's reader; click's context is per thread) prints as one from the command's own thread,
    timestamped, its credentials masked, its control characters spelled out; a Fleeting message (the bytes of a
    download as they arrive) only updates the status line."""
    import threading

    from envsolver.cli import base as cli_base
    from envsolver.net.progress import Fleeting

    shown: list[str] = []

    @click.command()
    @cli_base.verbosity_of("the steps")
    def probe() -> None:
        step = cli_base.with_detail(cli_base.err_out(), shown.append)
        for message in ("fetched \x1b]0;owned\x07 https://alice:pw-S3CRET@example.org/x", Fleeting("1 KiB of 9")):
            thread = threading.Thread(target=step, args=(message,))
            thread.start()
            thread.join()

    loud, plain = CliRunner().invoke(probe, ["-v"]), CliRunner().invoke(probe, [])
    assert loud.exit_code == plain.exit_code == 0, (loud.output, plain.output)
    assert len(shown) == 4, shown  # the status line sees every message, with or without -v
    lines = loud.stderr.splitlines()
    assert len(lines) == 1 and DETAIL.match(lines[0]), loud.stderr
    assert "fetched \\x1b]0;owned\\x07 https://" in lines[0] and "\x1b" not in loud.stderr, loud.stderr
    assert "pw-S3CRET" not in loud.stderr and "1 KiB of 9" not in loud.stderr, loud.stderr
    assert plain.stderr == "", plain.stderr


def test_quiet_keeps_warnings_and_errors() -> None:
    warned = invoke(["explain", "--gpu", "a100", "-q"])  # no --driver: a warning
    assert warned.exit_code == 0 and "warning: no --driver given" in warned.stderr, warned.output
    failed = invoke(["explain", "--gpu", "a1000", "-q"])
    assert failed.exit_code == 2 and "error: unknown GPU" in failed.stderr, failed.output


def test_quiet_silences_the_progress_console() -> None:
    from envsolver.cli import base as cli_base

    @click.command()
    @cli_base.verbosity
    def probe() -> None:
        click.echo(f"{cli_base.diagnostics().quiet} {cli_base.level()}")

    runner = CliRunner()
    assert runner.invoke(probe, ["-q"]).stdout == "True -1\n"
    assert runner.invoke(probe, []).stdout == "False 0\n"
    assert runner.invoke(probe, ["--verbose"]).stdout == "False 1\n"
    both = runner.invoke(probe, ["-q", "-v"])
    assert both.exit_code == 2 and "exclude each other" in both.output, both.output


# --- verify --help's checks -------------------------------------------------------------------------------------


def test_verify_help_lists_each_check_on_its_own_line() -> None:
    text = invoke(["verify", "--help"]).stdout
    assert set(cli_verify.CHECK_MEANINGS) == set(verify_checks.IDS)
    for check in verify_checks.IDS:
        line = next(line for line in text.splitlines() if line.split()[:1] == [check])
        assert cli_verify.CHECK_MEANINGS[check] in line
    assert "|".join(verify_checks.IDS[:3]) not in text  # not click's one-line [a|b|c...] any more


# --- exit codes in --help: each documented code is produced by some input, and no input gives another -------

EXIT_CODES = re.compile(r"(?:Exit codes:|;)\s+(\d+)\s")


def documented(command: str) -> set[int]:
    text = " ".join(invoke([command, "--help"]).stdout.split())
    section = text.split("Exit codes:", 1)[1]
    return {int(code) for code in EXIT_CODES.findall("Exit codes: " + section.split(".", 1)[0] + ";")}


def _interrupt(*_: Any, **__: Any) -> Any:
    raise KeyboardInterrupt


def _terminate(sig: signal.Signals) -> Any:
    def raising(*_: Any, **__: Any) -> Any:
        raise Terminated(sig, sig.name)  # what core.interrupts raises (tests/test_install_signals.py: real ones)

    return raising


@pytest.fixture
def installed(tmp_path: Path) -> tuple[Path, Path, dict[str, str | None]]:
    """A lock of tiny synthetic packages (with envsolver's arch-list metadata) installed without the hook."""
    from tests.test_install import build_channel, write_lock

    lock = write_lock(build_channel(tmp_path), tmp_path, custom={"envsolver_torch_cuda_arch_list": "8.0"})
    prefix = tmp_path / "env"
    env: dict[str, str | None] = {"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
    assert invoke(["install", str(lock), "-p", str(prefix), "--no-hook"], **env).exit_code == 0
    return lock, prefix, env


def test_each_documented_exit_code_happens_and_no_other(
    installed: tuple[Path, Path, dict[str, str | None]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envsolver.cli import main as cli_module
    from envsolver.verify.checks_base import Check

    lock, prefix, env = installed
    out = str(tmp_path / "out")
    target = ["--gpu", "a100", "--driver", "580.65.06"]
    conflict = ["--gpu", "rtx5090", "--driver", "550.54.14"]
    broken = tmp_path / "python"  # a python the hook's probe cannot run
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)

    def checks(status: str) -> Any:
        chosen = SimpleNamespace(python=Path(sys.executable), prefix=prefix)
        return lambda *a, **k: (chosen, {}, [Check("driver", status, "x")])

    runs: dict[str, list[tuple[list[str], Any]]] = {
        "explain": [
            (["explain", *target], None),
            (["explain", *conflict], None),
            (["explain", "--gpu", "a1000"], None),
            (["explain", "--gpu", "a100", "--bogus"], None),
            (["explain", *target], (cli_module, "resolve", _interrupt)),
        ],
        "make": [
            (["make", *target, "--offline", "-o", out], None),
            (["make", *conflict, "--offline", "-o", out], None),
            (["make", "--gpu", "a100", "--cuda", "12.x"], None),
            (["make", *target, "--offline", "-o", out], (lock_module, "lock", _interrupt)),
        ],
        "install": [
            (["install", str(lock), "-p", str(prefix), "--no-hook"], None),
            (["install", str(lock), "-p", str(prefix)], None),  # the hook's pre-flight fails: no torch here
            (["install", str(tmp_path / "missing.yml"), "-p", str(prefix)], None),
            # a new prefix each: on the installed one the recorded no-op never reaches the installer
            (["install", str(lock), "-p", str(tmp_path / "i1")], (installer, "install", _interrupt)),
            (["install", str(lock), "-p", str(tmp_path / "i2")], (installer, "install", _terminate(signal.SIGTERM))),
            (["install", str(lock), "-p", str(tmp_path / "i3")], (installer, "install", _terminate(signal.SIGHUP))),
        ],
        "hook": [
            (["hook", "-p", str(prefix), "--print-env"], None),
            (["hook", "-p", str(prefix)], None),  # refused: the test channel's env holds no python
            (["hook", "-p", str(prefix), "--python", str(broken)], None),  # the pre-flight fails
            (["hook", "-p", str(prefix), "--ops", "nope"], None),
            (["hook", "-p", str(prefix)], (cli_hook.hook_run, "hook", _interrupt)),
        ],
        "verify": [
            (["verify", "-p", str(prefix)], (cli_verify.verify_run, "verify", checks("pass"))),
            (["verify", "--python", sys.executable], None),  # real checks fail: no driver here
            (["verify", "-p", str(tmp_path / "none")], None),
            (["verify", "-p", str(prefix)], (cli_verify.verify_run, "verify", _interrupt)),
        ],
    }
    for command, cases in runs.items():
        seen = set()
        for args, patch in cases:
            with monkeypatch.context() as m:
                if patch is not None:
                    m.setattr(*patch)
                result = invoke(args, **env)
            assert result.exit_code in documented(command), (args, result.exit_code, result.output)
            seen.add(result.exit_code)
        expected = {0, 1, 2, 130} | ({143, 129} if command == "install" else set())
        assert seen == documented(command) == expected, command
