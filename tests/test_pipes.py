"""envsolver/core/pipes.py's read_line: one line of a child that goes on running (a rattler worker that waits for
its next request), bounded in size and time. collect and stop are tested with Slurm's output
(tests/cluster/test_slurm_output.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from envsolver.core import pipes


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)


def test_the_first_line_comes_back_while_the_child_goes_on() -> None:
    proc = _child("import sys, time; sys.stdout.write('one\\n'); sys.stdout.flush(); time.sleep(60)")
    try:
        assert pipes.read_line(proc, 60, pipes.Bound(100)) == b"one\n"
        assert proc.poll() is None, "read_line must not wait for the child to end"
    finally:
        pipes.stop(proc)


def test_a_line_past_the_bound_is_refused_as_it_arrives() -> None:
    proc = _child("import sys, time; sys.stdout.write('x' * (1 << 20)); sys.stdout.flush(); time.sleep(60)")
    try:
        with pytest.raises(pipes.TooLarge):
            pipes.read_line(proc, 60, pipes.Bound(1000))
    finally:
        pipes.stop(proc)


def test_no_line_within_the_time_is_a_timeout() -> None:
    proc = _child("import time; time.sleep(60)")
    started = time.monotonic()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            pipes.read_line(proc, 0.5, pipes.Bound(100))
        assert time.monotonic() - started < 30, "the deadline must hold"
    finally:
        pipes.stop(proc)


def test_a_stream_that_ends_before_its_newline_gives_what_came() -> None:
    proc = _child("import sys; sys.stdout.write('cut')")
    try:
        assert pipes.read_line(proc, 60, pipes.Bound(100)) == b"cut"
    finally:
        pipes.stop(proc)
