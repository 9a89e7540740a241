"""Text from outside never reaches the terminal raw (issue 20, finding 4): a GPU name from nvidia-smi in verify's
report, what a crashing probe printed in verify's error, a server's reason phrase in install's error, a progress
message, the hook's report, the plan's values; on a pipe and on a terminal (rich's styled output), where rich
markup and emoji codes print literally too. --json keeps the text as it came (JSON spells control characters
out on its own). The cluster paths (verify --cluster, cluster init) are tested in tests/cluster/ against the
Slurm lab."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from envsolver.cli import render
from envsolver.cli.main import main
from envsolver.hook import build
from envsolver.hook import render as hook_render
from envsolver.hook.run import HookReport
from envsolver.lock.writers.files import Outcome
from envsolver.verify.checks_base import Check
from tests.conda_packages import build_channel
from tests.dist import python_without_torch
from tests.hostile import HOSTILE, SHOWN, assert_shown
from tests.httplab import Faults, serve, write_lock

TERMINAL = pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])


def _invoke(args: list[str], env: dict[str, str | None], terminal: bool = False) -> Result:
    """The command as a user runs it: on a pipe, or on a terminal (rich styles its output: TTY_COMPATIBLE=1)."""
    tty = {"TTY_COMPATIBLE": "1" if terminal else "0", "FORCE_COLOR": None, "COLUMNS": "200"}
    return CliRunner().invoke(main, args, env={**env, **tty})


def _tool(bin_dir: Path, name: str, script: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def _smi_path(tmp_path: Path) -> str:
    """A PATH whose nvidia-smi answers verify's query (name, pci.device_id, compute_cap, memory.total,
    driver_version) with one GPU named HOSTILE and no device ID (printf's %s prints it as is)."""
    row = f"{HOSTILE}, [N/A], 9.0, 81559 MiB, 570.133.20"
    _tool(tmp_path / "bin", "nvidia-smi", f"printf '%s\\n' {shlex.quote(row)}\n")
    return f"{tmp_path / 'bin'}:/usr/bin:/bin"


# verify's GPU names come from nvidia-smi, read by the probe in the target python: one without torch (tests/dist.py)
# runs the same probe and checks without the torch import, which these tests do not look at.


@TERMINAL
def test_verify_shows_a_gpu_name_from_nvidia_smi_escaped(tmp_path: Path, terminal: bool) -> None:
    env = {"PATH": _smi_path(tmp_path)}
    python = str(python_without_torch(tmp_path / "env"))
    result = _invoke(["verify", "--python", python, "--check", "gpus"], env, terminal)
    assert result.exit_code == 0, result.output
    assert_shown(result.stdout + result.stderr, result.output, styled=terminal)
    assert f"warn gpus: {SHOWN} (CC 9.0, not in the knowledge base)" in render_plain(result.stdout, terminal)


def render_plain(text: str, styled: bool) -> str:
    from tests.hostile import STYLE

    return STYLE.sub("", text) if styled else text


def test_verify_json_keeps_the_gpu_name_as_nvidia_smi_said_it(tmp_path: Path) -> None:
    python = str(python_without_torch(tmp_path / "env"))
    result = _invoke(["verify", "--python", python, "--check", "gpus", "--json"], {"PATH": _smi_path(tmp_path)})
    assert result.exit_code == 0, result.output
    (gpus,) = json.loads(result.stdout)["checks"]
    assert gpus["detail"].startswith(f"{HOSTILE} (CC 9.0"), gpus


@TERMINAL
def test_a_crashing_probes_words_are_escaped_in_the_error(tmp_path: Path, terminal: bool) -> None:
    python = _tool(tmp_path / "bin", "python", f"printf '%s' {shlex.quote(HOSTILE)} >&2\nexit 3\n")
    result = _invoke(["verify", "--python", str(python)], {}, terminal)
    assert result.exit_code == 2, result.output
    assert_shown(result.stderr, result.output, styled=terminal)
    assert f"error: the probe crashed in {python} (exit 3): {SHOWN}. Check" in result.stderr
    as_json = _invoke(["verify", "--python", str(python), "--json"], {}, terminal)
    assert as_json.exit_code == 2, as_json.output
    assert HOSTILE in json.loads(as_json.stdout)["error"]["message"]
    assert_shown(as_json.stderr, as_json.output, styled=terminal)


def test_a_servers_reason_phrase_is_escaped_in_installs_error(tmp_path: Path) -> None:
    channel = build_channel(tmp_path)
    lock = write_lock(channel, tmp_path)
    with serve(channel, Faults(fail=9, status=404, reason=HOSTILE)) as lab:
        argv = [
            "install",
            str(lock),
            "-p",
            str(tmp_path / "env"),
            "--no-hook",
            "--mirror",
            f"{channel.as_uri()}={lab.url}",
        ]
        env = {"HOME": str(tmp_path), "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
        result = _invoke(argv, env)
        as_json = _invoke([*argv, "--json"], env)
    assert result.exit_code == 2, result.output
    assert_shown(result.stderr, result.output)
    assert f"HTTP 404 {SHOWN}" in result.stderr
    assert as_json.exit_code == 2, as_json.output
    assert f"HTTP 404 {HOSTILE}" in json.loads(as_json.stdout)["error"]["message"]
    assert_shown(as_json.stderr, as_json.output)


def test_explain_gpu_auto_names_an_unknown_detected_gpu_escaped(tmp_path: Path) -> None:
    _tool(tmp_path / "bin", "nvidia-smi", f"printf 'name, driver_version\\n%s, 570.133.20\\n' {shlex.quote(HOSTILE)}\n")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None}
    result = _invoke(["explain", "--gpu", "auto"], env)
    assert result.exit_code == 2, result.output
    assert_shown(result.stderr, result.output)


class _Status:
    """What rich's Status is told: the last update."""

    shown: object = None

    def update(self, message: object) -> None:
        self.shown = message


def test_a_progress_message_is_escaped() -> None:
    status = _Status()
    render.progress(status)(f"fetching {HOSTILE}")  # type: ignore[arg-type]
    assert str(status.shown) == f"fetching {SHOWN}"


@TERMINAL
def test_every_printer_of_render_escapes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1" if terminal else "0")
    out = render.out()
    render.text(out, HOSTILE)
    render.warnings(out, [HOSTILE])
    render.text(render.console(), HOSTILE)
    render.warnings(render.console(), [HOSTILE])
    printed = capsys.readouterr().out
    assert_shown(printed, styled=terminal)
    lines = render_plain(printed, terminal).splitlines()
    assert lines == [SHOWN, f"warning: {SHOWN}"] * 2


@TERMINAL
def test_the_hook_report_is_escaped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, terminal: bool, tmp_path: Path
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1" if terminal else "0")
    failed = build.OpResult(op="fused_adam", ok=False, seconds=1.0, file=None, error=HOSTILE)
    report = HookReport(
        tmp_path,
        "8.0",
        {tmp_path / HOSTILE: Outcome.WRITTEN},
        [Check("host_compiler", "fail", HOSTILE, HOSTILE)],
        [failed],
        notes=[HOSTILE],
    )
    hook_render.show(render.console(), report)
    printed = render_plain(capsys.readouterr().out, terminal)
    assert_shown(printed)
    assert printed.count(SHOWN) == 5, printed
    assert hook_render.as_json(report)["ops"][0]["error"] == HOSTILE  # --json shows it as it came


@pytest.mark.parametrize(
    "args",
    [["explain", "--gpu", "a100", HOSTILE], [f"--{HOSTILE}"], ["explain", f"--{HOSTILE}"]],
    ids=["extra-argument", "group-option", "command-option"],
)
def test_clicks_own_usage_errors_quote_the_command_line_escaped(args: list[str]) -> None:
    """A word pasted into the command line from elsewhere: click's message quotes it spelled out too (click
    itself spells out an unknown option of the group, not an extra argument or a command's unknown option)."""
    result = _invoke(args, {})
    assert result.exit_code == 2, result.output
    assert_shown(result.stderr, result.output)
    if args[0] == "explain":
        as_json = _invoke([*args, "--json"], {})
        assert as_json.exit_code == 2, as_json.output
        assert json.loads(as_json.stdout)["error"]["kind"] == "usage"
        assert_shown(as_json.stderr, as_json.output)
