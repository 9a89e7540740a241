"""A closed stdout ends quietly, as `ls | head` does: nothing on stderr, exit 1 (click's own status for a closed
pipe, within envsolver's 0, 1 or 2), never "error: Broken pipe" and exit 2. Real pipes through real processes:
the failure this guards against was timing-dependent (2 of 10 runs of `| head -1`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

COMMANDS = [
    ["explain", "--gpu", "a100", "--driver", "580.65.06"],
    ["explain", "--gpu", "a100", "--driver", "580.65.06", "--json"],
    ["gpus"],
    ["gpus", "--json"],
    ["make", "--gpu", "a100", "--driver", "580.65.06", "--no-lock", "--dry-run"],
    ["--help"],
]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVSOLVER_")}
    env["ENVSOLVER_DEBUG"] = ""
    return env


def _run(args: list[str], *, read_first_line: bool) -> tuple[int, str]:
    """Run envsolver with stdout on a pipe whose read end is closed at once (`| true`) or after one line
    (`| head -1`); its exit status and stderr."""
    read_end, write_end = os.pipe()
    if not read_first_line:
        os.close(read_end)  # closed before the child starts: its first write always finds no reader
    proc = subprocess.Popen(
        [sys.executable, "-m", "envsolver", *args],
        stdout=write_end,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=_env(),
    )
    os.close(write_end)
    if read_first_line:
        with os.fdopen(read_end, "rb") as reader:
            reader.readline()
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode(errors="replace")


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_stdout_closed_before_the_first_write_ends_quietly_with_exit_1(args: list[str]) -> None:
    for attempt in range(3):
        code, err = _run(args, read_first_line=False)
        assert err == "", f"run {attempt} of envsolver {' '.join(args)} | true printed on stderr:\n{err}"
        assert code == 1, f"run {attempt} of envsolver {' '.join(args)} | true exited {code}, not 1; stderr:\n{err}"


@pytest.mark.parametrize("args", COMMANDS[:3], ids=" ".join)
def test_head_dash_1_never_reports_the_pipe(args: list[str]) -> None:
    for attempt in range(4):
        code, err = _run(args, read_first_line=True)
        assert err == "", f"run {attempt} of envsolver {' '.join(args)} | head -1 printed on stderr:\n{err}"
        assert code in (0, 1), f"run {attempt} of envsolver {' '.join(args)} | head -1 exited {code}; stderr:\n{err}"


def test_only_a_closed_stdout_counts_as_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken pipe to a child process (the rattler worker's stdin) stays an error: the quiet end needs stdout's
    own reader gone."""
    from envsolver.cli import base as cli_base

    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as writer:
        monkeypatch.setattr(sys, "stdout", writer)
        assert not cli_base._stdout_closed(), "stdout counted as closed while its reader is open"
        os.close(read_end)
        assert cli_base._stdout_closed(), "stdout not counted as closed after its reader closed"
