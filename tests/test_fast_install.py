"""The no-op `envsolver install` answered before click is imported (cli/fast.py): it takes only the plainest command
lines, takes them as install_command parses them, and prints what the click command prints for them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from envsolver import __main__ as entry
from envsolver import __version__
from envsolver.cli import fast, install_report
from envsolver.cli.install import install_command
from envsolver.cli.main import main
from envsolver.core.errors import Terminated
from envsolver.core.printable import printable
from envsolver.install import installstate
from tests.test_closed_stdout import _run as run_on_closed_stdout
from tests.test_install import write_lock
from tests.test_install_noop import (  # noqa: F401  (the fixtures)
    _install,
    _shared_install,
    channel_lock,
    installed,
    installed_once,
    tiny_channel,
)
from tests.test_startup import modules_at_exit


def _option(opt: str) -> click.Option:
    found = [p for p in install_command.params if isinstance(p, click.Option) and opt in p.opts + p.secondary_opts]
    assert len(found) == 1, f"install_command has no option {opt!r}"
    return found[0]


def test_the_options_taken_are_install_commands_own() -> None:
    for opt in fast.FLAGS:
        assert _option(opt).is_flag, f"{opt} is taken as a flag but install_command's takes a value"
    for opt in fast.VALUED:
        option = _option(opt)
        assert not option.is_flag and option.nargs == 1, f"{opt} is taken with one value; install_command's is not"
    assert _option("--mirror").multiple and not _option("--prefix").multiple and not _option("--platform").multiple
    platform = _option("--platform").type
    assert isinstance(platform, click.Choice) and tuple(platform.choices) == fast.PLATFORMS
    (lock,) = [p for p in install_command.params if isinstance(p, click.Argument)]
    assert str(lock.default) == fast.LOCK_DEFAULT


def test_every_variable_that_gives_an_option_a_value_is_left_to_click() -> None:
    envvars = {str(p.envvar) for p in install_command.params if p.envvar}
    assert envvars and envvars <= set(fast.ENVIRON), f"{envvars - set(fast.ENVIRON)} would be missed"
    assert "_ENVSOLVER_COMPLETE" in fast.ENVIRON  # click's completion variable for the `envsolver` program


def test_every_other_option_is_left_to_click() -> None:
    taken = {*fast.FLAGS, *fast.VALUED}
    others = [o for p in install_command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
    others += ["-h", "--help"]
    assert set(others) - taken, "the check below would check nothing"
    for opt in set(others) - taken:
        assert fast.parse(["-p", "env", opt], {}) is None, f"{opt} was taken"
        assert fast.parse(["-p", "env", opt, "value"], {}) is None, f"{opt} value was taken"


TAKEN = {
    "lock and -p": (["l.yml", "-p", "env"], ("l.yml", "env", None, [], False, False)),
    "default lock": (["-p", "env"], (None, "env", None, [], False, False)),
    "--prefix=": (["--prefix=env", "l.yml"], ("l.yml", "env", None, [], False, False)),
    "options first": (["--no-hook", "--json", "-p", "env", "l.yml"], ("l.yml", "env", None, [], True, True)),
    "-q": (["-q", "-p", "env", "--quiet"], (None, "env", None, [], False, False)),
    "--platform": (["-p", "env", "--platform", "linux-aarch64"], (None, "env", "linux-aarch64", [], False, False)),
    "--mirror twice": (
        ["-p", "env", "--mirror", "a=b", "--mirror=c=d"],
        (None, "env", None, ["a=b", "c=d"], False, False),
    ),
}


@pytest.mark.parametrize(("words", "expected"), TAKEN.values(), ids=TAKEN.keys())
def test_plain_command_lines_are_taken(words: list[str], expected: tuple[object, ...]) -> None:
    asked = fast.parse(words, {})
    assert asked is not None, f"{words} was not taken"
    got = (asked.lock, asked.prefix, asked.platform, asked.mirrors, asked.no_hook, asked.as_json)
    assert got == expected


LEFT = {
    "no prefix": ["l.yml"],
    "-n": ["-n", "train"],
    "two locks": ["a.yml", "b.yml", "-p", "env"],
    "-p twice": ["-p", "a", "-p", "b"],
    "-pVALUE": ["-penv"],
    "-p=VALUE": ["-p=env"],
    "-p at the end": ["l.yml", "-p"],
    "empty prefix": ["-p", ""],
    "value like an option": ["-p", "--json"],
    "lock '-'": ["-", "-p", "env"],
    "--": ["-p", "env", "--", "l.yml"],
    "unknown platform": ["-p", "env", "--platform", "win-64"],
    "--platform twice": ["-p", "env", "--platform", "linux-64", "--platform", "linux-64"],
    "-v": ["-p", "env", "-v"],
    "-qv": ["-p", "env", "-qv"],
    "--dry-run": ["-p", "env", "--dry-run"],
    "--json=1": ["-p", "env", "--json=1"],
    "--help": ["-p", "env", "--help"],
}


@pytest.mark.parametrize("words", LEFT.values(), ids=LEFT.keys())
def test_other_command_lines_are_left_to_click(words: list[str]) -> None:
    assert fast.parse(words, {}) is None, f"{words} was taken"


@pytest.mark.parametrize("name", fast.ENVIRON)
def test_a_variable_click_reads_leaves_the_command_to_click(name: str) -> None:
    assert fast.parse(["-p", "env"], {name: ""}) is None


FORMS = {
    "text": ["--no-hook"],
    "json": ["--no-hook", "--json"],
    "quiet, options first": ["-q", "--no-hook"],
    "no metadata, hook skipped": [],
}


@pytest.mark.parametrize("extra", FORMS.values(), ids=FORMS.keys())
@pytest.mark.parametrize("terminal", ["0", "1"], ids=["pipe", "terminal"])
def test_the_fast_answer_is_the_click_commands(
    installed_once: tuple[Path, Path],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    extra: list[str],
    terminal: str,
) -> None:
    """Byte for byte, on a pipe (render.Plain) and on a terminal (rich: TTY_COMPATIBLE=1)."""
    lock, prefix = installed_once
    monkeypatch.setenv("TTY_COMPATIBLE", terminal)
    words = [str(lock), "-p", str(prefix), *extra]
    assert fast.install(words, {}) == 0, "the recorded prefix was not answered"
    answered = capsys.readouterr()
    clicked = CliRunner().invoke(main, ["install", *words])
    assert clicked.exit_code == 0, clicked.output
    assert answered.out == clicked.stdout and answered.err == "" == clicked.stderr
    if "--json" in extra:
        doc = json.loads(answered.out)
        assert (doc["ok"], doc["changed"], doc["packages"]) == (True, False, 3), answered.out
    else:
        assert "already up to date (3 packages for linux-64, 0 fetched and verified)" in answered.out


def test_nothing_is_printed_when_the_prefix_is_not_up_to_date(
    installed: tuple[Path, Path],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    lock, prefix = installed
    os.utime(next((prefix / "conda-meta").glob("tiny-lib-*.json")), ns=(1, 1))
    assert fast.install([str(lock), "-p", str(prefix), "--no-hook"], {}) is None
    assert capsys.readouterr() == ("", "")


def test_a_lock_whose_hook_runs_is_left_to_click(
    tmp_path: Path,
    tiny_channel: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    custom = {"envsolver_torch_cuda_arch_list": "8.0"}
    lock, prefix = _install(tmp_path, write_lock(tiny_channel, tmp_path, custom=custom))
    recorded = installstate.unchanged(prefix, installstate.request(lock, None, (), __version__))
    assert recorded is not None and recorded.hook, "the lock's hook metadata was not recorded"
    assert fast.install([str(lock), "-p", str(prefix)], {}) is None, "the hook's run was answered as a no-op"
    assert capsys.readouterr() == ("", "")
    assert fast.install([str(lock), "-p", str(prefix), "--no-hook"], {}) == 0
    assert "post-install hook: not run (--no-hook)" in capsys.readouterr().out


def test_the_whole_process_imports_neither_click_nor_the_cli(
    installed_once: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    lock, prefix = installed_once
    loaded = modules_at_exit(tmp_path, "install", str(lock), "-p", str(prefix), "--no-hook")
    slow = {"click", "envsolver.cli.main", "envsolver.cli.base", "envsolver.core.errors", "dataclasses", "typing"}
    slow |= {"envsolver.core.printable", "platform", "inspect"}  # a line of printable ASCII needs no regex
    # what the interpreter loads before envsolver runs (a site .pth may import typing) is not the no-op's doing
    slow -= _at_startup()
    assert loaded & slow == set(), "the no-op imported click, the CLI or their slower modules"
    # A command line left to click is still answered from the record, by the click command.
    loaded = modules_at_exit(tmp_path, "install", str(lock), "--prefix", str(prefix), "--no-hook", "-v")
    assert "envsolver.cli.main" in loaded and "envsolver.install.run" not in loaded


def _at_startup() -> set[str]:
    """The modules a bare `python -c` of this interpreter has loaded (site and its .pth files)."""
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout))


def test_a_closed_stdout_ends_quietly(installed_once: tuple[Path, Path]) -> None:  # noqa: F811
    lock, prefix = installed_once
    code, err = run_on_closed_stdout(["install", str(lock), "-p", str(prefix), "--no-hook"], read_first_line=False)
    assert (code, err) == (1, ""), f"exit {code}, stderr:\n{err}"


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_sigterm_before_the_cli_ends_as_the_cli_ends_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    monkeypatch.setattr("sys.argv", ["envsolver", "install", "-p", "env", *(["--json"] if as_json else [])])
    assert entry._interrupted(Terminated(signal.SIGTERM, "SIGTERM")) == 128 + signal.SIGTERM
    out, err = capsys.readouterr()
    assert err == "error: terminated (SIGTERM). Run the same command again.\n"
    if as_json:
        doc = json.loads(out)
        assert doc["exit_code"] == 143 and doc["error"]["kind"] == "interrupted", out
        assert doc["error"]["message"] == "terminated (SIGTERM)." and doc["error"]["fix"].startswith("Run the same")
    else:
        assert out == ""


@pytest.mark.parametrize("line", ["env: already up to date", "caf\u00e9 \u2028", "a\tb", "\x1b[31m", "\x7f", ""])
def test_the_report_spells_out_what_printable_spells_out(line: str) -> None:
    """plain() leaves printable ASCII as it is without importing core.printable: every such character is one
    printable() leaves alone too, and any other line goes through printable()."""
    ascii_printable = "".join(chr(c) for c in range(128) if chr(c).isprintable())
    assert printable(ascii_printable) == ascii_printable and len(ascii_printable) == 95
    assert install_report.plain([line, ascii_printable]) == f"{printable(line)}\n{ascii_printable}\n"


def _process(args: list[bytes], cwd: Path) -> tuple[int, str]:
    """`python -m envsolver ARGS` with each word as bytes (what a shell's $'\\xff' passes), exit status and output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVSOLVER_")}
    env["ENVSOLVER_CACHE_DIR"] = str(cwd / "cache")
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"envsolver", *args], capture_output=True, cwd=cwd, env=env, timeout=120
    )
    return done.returncode, (done.stdout + done.stderr).decode("utf-8", "replace")


@pytest.mark.parametrize(
    "words",
    [
        [b"install", b"--mirror", b"\xff", b"-p", b"PREFIX"],
        [b"install", b"LOCK", b"--mirror", b"https://a=\xff", b"-p", b"PREFIX"],
        [b"install", b"LOCK", b"-p", b"PREFIX", b"--platform", b"\xfe"],
        [b"install", b"\xff.yml", b"-p", b"PREFIX"],
    ],
    ids=["mirror", "mirror-url", "platform", "lock-path"],
)
def test_undecodable_bytes_in_argv_end_in_exit_2_with_a_message(
    installed_once: tuple[Path, Path],  # noqa: F811
    words: list[bytes],
) -> None:
    """Before, `install --mirror $'\\xff'` over a lock it could read ended in a traceback and exit 1: the no-op's
    request digest encoded argv as strict UTF-8. Each of these is refused by the CLI with its message."""
    lock, prefix = installed_once
    assert lock.name == fast.LOCK_DEFAULT, "the first case takes the lock of the directory it runs in"
    swap = {b"LOCK": os.fsencode(lock), b"PREFIX": os.fsencode(prefix)}
    code, output = _process([swap.get(w, w) for w in words], lock.parent)
    assert code == 2 and "Traceback" not in output and output.startswith("error: "), output


def test_undecodable_bytes_in_a_prefix_path_are_hashed_and_answered(
    installed_once: tuple[Path, Path],  # noqa: F811
) -> None:
    """A prefix named by bytes that are not UTF-8: the no-op's digest takes them as they are."""
    lock, prefix = installed_once
    odd = prefix.parent / "env-\udcff"
    assert installstate.prefix_digest(odd) is None  # no conda-meta there: no record, the full path decides
    assert installstate.request(lock, None, ["https://a=\udcff"], __version__) is not None


@pytest.mark.parametrize("where", ["lock", "record"])
def test_a_fifo_as_the_lock_or_the_record_ends_within_a_second(
    installed_once: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
    where: str,
) -> None:
    """The no-op opens neither without O_NONBLOCK: a FIFO is refused at once, and the CLI then says what it is."""
    import time

    lock, _ = installed_once
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    if where == "lock":
        asked = installstate.request(fifo, None, (), __version__)
        assert asked is None
    else:
        assert installstate.unchanged(tmp_path, "x") is None
        (tmp_path / installstate.STATE).parent.mkdir(parents=True)
        os.mkfifo(tmp_path / installstate.STATE)
        assert installstate.unchanged(tmp_path, installstate.request(lock, None, (), __version__)) is None
    assert time.monotonic() - started < 1
    if where == "lock":
        code, output = _process([b"install", os.fsencode(fifo), b"-p", os.fsencode(tmp_path / "env")], tmp_path)
        assert code == 2 and "FIFO" in output and time.monotonic() - started < 30, output
