"""The fuzz harness can fail: a traceback, a hang and a silent non-zero exit are each recorded and reported."""

from __future__ import annotations

import time

import pytest

from envsolver.errors import BadInputError
from tests.fuzz.harness import ExternalTraceback, Tally, check_cli, check_function


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
    assert time.perf_counter() - started < 2
    assert tally.hangs == 1


def test_allowed_errors_and_clean_exits_pass() -> None:
    tally = Tally("t", summary=False)
    check_function(tally, "bad", lambda: (_ for _ in ()).throw(BadInputError("no. Fix it.")), (BadInputError,))
    assert check_cli(tally, ["explain", "--gpu", "nope"]).exit_code == 2
    assert check_cli(tally, ["gpus", "--json"]).exit_code == 0
    tally.check()


def test_only_external_causes_raise_external_traceback() -> None:
    tally = Tally("t", summary=False)
    tally.record("x", "KeyError at envsolver/hook/run.py:80 (hook)")
    with pytest.raises(ExternalTraceback):
        tally.check()
    tally.record("y", "ValueError at envsolver/versions.py:57 (parse_major_minor)")
    with pytest.raises(AssertionError) as info:
        tally.check()
    assert not isinstance(info.value, ExternalTraceback)
