"""The fuzz harness can fail: a traceback, a hang and a silent non-zero exit are each recorded and reported."""

from __future__ import annotations

import time

import pytest

from envsolver.cli import main as cli
from envsolver.core.errors import BadInputError
from tests.fuzz.harness import Tally, check_cli, check_function


def test_a_traceback_is_recorded_with_its_cause() -> None:
    tally = Tally("t", summary=False)
    check_function(tally, "x", lambda: int("9" * 5000), (BadInputError,))
    check_function(tally, "y", lambda: None, (BadInputError,))
    assert tally.cases == 2 and tally.tracebacks == 1
    (problem,) = tally.violations
    assert problem.startswith("ValueError at ")
    with pytest.raises(AssertionError, match="1 traceback"):
        tally.check()


def test_a_hang_is_stopped_and_recorded() -> None:
    tally = Tally("t", summary=False)
    started = time.perf_counter()
    check_function(tally, "slow", lambda: time.sleep(5), (), limit_s=0.2)
    took = time.perf_counter() - started
    assert took < 4, f"took {took:.1f} s"  # stopped at 0.2 s, well before the 5 s sleep ends
    assert tally.hangs == 1


def test_allowed_errors_and_clean_exits_pass() -> None:
    tally = Tally("t", summary=False)
    check_function(tally, "bad", lambda: (_ for _ in ()).throw(BadInputError("no. Fix it.")), (BadInputError,))
    assert check_cli(tally, ["explain", "--gpu", "nope"]).exit_code == 2
    assert check_cli(tally, ["gpus", "--json"]).exit_code == 0
    tally.check()


def test_a_bug_behind_the_cli_handler_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI turns a bug into `error: internal error` and exit 2; the harness still counts it, with its line
    (ENVSOLVER_DEBUG=1, its default) or by the message (without it)."""

    def explode(*_: object, **__: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "resolve", explode)
    tally = Tally("t", summary=False)
    raised = check_cli(tally, ["explain", "--gpu", "a100"])
    assert raised.problem is not None and raised.problem.startswith("RuntimeError at envsolver/")
    hidden = check_cli(tally, ["explain", "--gpu", "a100"], env={"ENVSOLVER_DEBUG": None})  # type: ignore[dict-item]
    assert hidden.exit_code == 2 and hidden.problem == "an internal error reported"
    assert tally.tracebacks == 2
