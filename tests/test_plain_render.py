"""render.Plain (issue 13): off a terminal, explain's and make's output is printed without rich, and it is the
very text rich printed there (rich shows no style off a terminal), values with brackets included."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from rich.console import Console

from envsolver.cli import render
from envsolver.kb import default_kb
from envsolver.resolve.inputs import Options, build_target
from envsolver.resolve.plan import Plan
from envsolver.resolve.run import resolve


def _rich() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    console = Console(file=buffer, soft_wrap=True, force_terminal=False)
    console.width = render.UNLIMITED
    return console, buffer


def _plan(gpu: str, **options: object) -> Plan:
    kb = default_kb()
    return resolve(build_target(Options(gpus=(gpu,), **options), kb).target, kb)  # type: ignore[arg-type]


ODD = "x[red]y [/] [bold]z\\\\"


@pytest.mark.parametrize(
    "plan",
    [
        pytest.param(lambda: _plan("a100"), id="a100"),
        pytest.param(lambda: _plan("v100", driver="580.65.06", torch="2.3.1"), id="v100-old-torch"),
        pytest.param(lambda: _plan("h100", source="pytorch"), id="pytorch-channel"),
        pytest.param(
            lambda: dataclasses.replace(_plan("a100"), torch_cuda_arch_list=ODD, channels=(ODD,), pip=(ODD,)),
            id="markup-in-values",
        ),
    ],
)
def test_plain_prints_what_rich_prints_off_a_terminal(plan: object) -> None:
    p = plan()  # type: ignore[operator]
    detected = {"driver 550.54.14": "nvidia-smi", ODD: ODD}
    console, expected = _rich()
    plain_buffer = io.StringIO()
    plain = render.Plain(plain_buffer)
    for out in (console, plain):
        render.plan(out, p, detected)
        render.warnings(out, [*p.warnings, ODD])
        render.text(out, ODD)
    assert plain_buffer.getvalue() == expected.getvalue()
    assert ODD in plain_buffer.getvalue()


def test_made_prints_the_same_on_plain_and_rich(tmp_path: Path) -> None:
    from envsolver.lock.writers.files import Outcome

    p = _plan("a100")
    written = {tmp_path / "environment.yml": Outcome.WRITTEN}
    console, expected = _rich()
    buffer = io.StringIO()
    render.made(console, written, p, None, tmp_path, "my[env]")
    render.made(render.Plain(buffer), written, p, None, tmp_path, "my[env]")
    assert buffer.getvalue() == expected.getvalue() != ""


@pytest.mark.parametrize(
    ("environ", "tty", "terminal"),
    [
        ({}, False, False),
        ({}, True, True),
        ({"FORCE_COLOR": "1"}, False, True),
        ({"FORCE_COLOR": ""}, True, False),
        ({"TTY_COMPATIBLE": "1"}, False, True),
        ({"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"}, True, False),
    ],
)
def test_is_terminal_decides_as_rich_does(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], tty: bool, terminal: bool
) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)

    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    stream = Stream()
    assert render.is_terminal(stream) is terminal
    assert Console(file=stream).is_terminal is terminal
