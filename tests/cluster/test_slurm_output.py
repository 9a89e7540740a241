"""What a Slurm command or a compute node prints is read as it arrives and bounded (envsolver.core.pipes through
envsolver.cluster.slurm.run, which `cluster init`'s probes and `verify --cluster`'s steps go through): 700 MB of
output keeps the reading process under 200 MB of memory (its own VmHWM, read from /proc), and what was kept
is the start and the end, with a line saying how much was left out.

The runs are separate processes, so that the peak measured is the peak of this reading alone."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envsolver.core import pipes

FLOOD = 700_000_000
MAX_RSS_KB = 200 * 1024
# The reader: slurm.run on a command that prints FLOOD bytes between two marked lines, in a fresh process that
# then prints what it kept (its start, its end, its size) and its own peak RSS (VmHWM, in kB).
READER = """
import json, sys
from envsolver.cluster import slurm
outcome = {}
try:
    text = slurm.run(("sh", "-c", sys.argv[1]), 300, "a flood")
    outcome = {"start": text[:40], "end": text[-80:], "length": len(text), "left_out": "bytes left out" in text}
except slurm.SlurmError as exc:
    outcome = {"error": str(exc)}
status = open("/proc/self/status").read()
outcome["vmhwm_kb"] = int(status.split("VmHWM:")[1].split()[0])
print(json.dumps(outcome))
"""


def _read_flood(script: str) -> tuple[dict[str, object], str]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", READER, script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    outcome: dict[str, object] = json.loads(done.stdout)
    return outcome, f"{outcome} after {time.monotonic() - started:.1f} s; stderr: {done.stderr}"


def test_700_mb_on_stdout_keeps_memory_flat_and_keeps_both_ends() -> None:
    outcome, said = _read_flood(f"echo first line; head -c {FLOOD} /dev/zero | tr '\\0' x; echo; echo last line")
    assert int(str(outcome["vmhwm_kb"])) < MAX_RSS_KB, said
    assert str(outcome["start"]).startswith("first line\n"), said
    assert str(outcome["end"]).endswith("bytes left out ...]\nlast line\n"), said
    assert outcome["left_out"] is True and int(str(outcome["length"])) < 6 << 20, said


def test_700_mb_on_stderr_of_a_failing_command_keeps_memory_flat() -> None:
    outcome, said = _read_flood(f"head -c {FLOOD} /dev/zero | tr '\\0' y >&2; echo >&2; echo the cause >&2; exit 3")
    assert int(str(outcome["vmhwm_kb"])) < MAX_RSS_KB, said
    said_by_sh = str(outcome["error"]).split("refused a flood (exit 3:")[1].split("Check the same request")[0]
    assert "bytes left out ...] / the cause)" in said_by_sh, said


def _child(script: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_head_and_tail_are_kept_with_the_count_between() -> None:
    proc = _child("printf 'a\\nb\\n'; head -c 100000 /dev/zero | tr '\\0' z; printf '\\nend\\n'")
    out, err = pipes.collect(proc, 60, pipes.Bound(4, 10), pipes.Bound(10, 10))
    assert out.text() == f"a\nb\n\n[... {100_000 + 1} bytes left out ...]\nend\n"
    assert out.total == 4 + 100_000 + 5 and err.text() == "" and proc.returncode == 0


def test_a_stream_without_a_tail_is_refused_past_its_head_without_reading_the_rest() -> None:
    proc = _child(f"head -c {FLOOD} /dev/zero")
    started = time.monotonic()
    with pytest.raises(pipes.TooLarge):
        pipes.collect(proc, 60, pipes.Bound(1 << 20), pipes.Bound(10, 10))
    pipes.stop(proc)
    assert time.monotonic() - started < 10 and proc.returncode is not None


def test_a_child_that_prints_nothing_and_never_ends_is_stopped_at_the_deadline(tmp_path: Path) -> None:
    proc = _child("exec sleep 60")  # the child itself: a `sleep` forked by sh would hold the pipes past sh
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        pipes.collect(proc, 1, pipes.Bound(10, 10), pipes.Bound(10, 10))
    pipes.stop(proc)
    assert time.monotonic() - started < 10 and proc.returncode is not None
