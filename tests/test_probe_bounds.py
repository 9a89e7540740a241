"""verify's probe reads its children (nvidia-smi, nvcc, the compiler, torch's child) within a time and a size: a
tool that hangs or prints without end cannot hang the probe or fill its memory (the trust rule on untrusted
reads; the probe runs in the environment's python with the standard library only, so it has its own reader)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envsolver.verify import probe


def _tool(tmp_path: Path, name: str, script: str) -> Path:
    path = tmp_path / name
    path.write_text(script)
    path.chmod(0o755)
    return path


def test_a_tool_that_prints_without_end_is_stopped_at_the_bound(tmp_path: Path) -> None:
    floods = _tool(tmp_path, "nvidia-smi", '#!/bin/sh\nexec yes "NVIDIA H200, 0x233510DE, 9.0, 143771 MiB, 580"\n')
    start = time.monotonic()
    code, text = probe._run([str(floods)], timeout=20)
    took = time.monotonic() - start
    assert code == probe.EXIT_TOO_MUCH, f"exit {code} after {took:.1f} s: {text[:200]!r}"
    assert "more than" in text and len(text) < 200, text[:200]
    assert took < 10, f"an endless answer was read for {took:.1f} s"


def test_a_tool_that_hangs_is_stopped_at_its_deadline_and_reaped(tmp_path: Path) -> None:
    hangs = _tool(tmp_path, "nvcc", f"#!/bin/sh\necho $$ > {tmp_path}/pid\nexec sleep 60\n")
    start = time.monotonic()
    code, text = probe._run([str(hangs), "--version"], timeout=0.5)
    took = time.monotonic() - start
    assert (code, text) == (probe.EXIT_TIMED_OUT, "timed out after 0.5s"), (code, text)
    assert took < 5, f"waited {took:.1f} s for a 0.5 s deadline"
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped: no such process left
        os.kill(pid, 0)


def test_a_tool_that_closes_its_output_and_lives_on_is_stopped_too(tmp_path: Path) -> None:
    lingers = _tool(tmp_path, "c++", "#!/bin/sh\necho 'c++ (GCC) 13.2.0'\nexec sleep 60 >&- 2>&-\n")
    start = time.monotonic()
    code, _ = probe._run([str(lingers), "--version"], timeout=0.5)
    assert code == probe.EXIT_TIMED_OUT, code
    assert time.monotonic() - start < 5


def test_both_streams_are_read_and_any_byte_decodes(tmp_path: Path) -> None:
    tool = _tool(tmp_path, "tool", "#!/bin/sh\nprintf 'out \\377\\n'\nprintf 'err\\n' >&2\nexit 3\n")
    code, text = probe._run([str(tool)])
    assert code == 3, (code, text)
    assert text == "out \ufffd\nerr\n", repr(text)


def test_a_tool_that_cannot_start_says_why() -> None:
    code, text = probe._run(["/nonexistent/nvidia-smi"])
    assert code == probe.EXIT_NOT_STARTED and "No such file" in text, (code, text)


def test_a_python_child_that_floods_is_an_error_not_a_hang() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    start = time.monotonic()
    said = probe._finish(child, timeout=20)
    assert said == {"error": f"printed more than {probe.MAX_OUTPUT} bytes, so it was stopped"}, said
    assert child.returncode is not None, "the child was not reaped"
    assert time.monotonic() - start < 10
