"""envsolver as a person uses it: typed into a shell in a tmux pane (`send-keys`), read back from the screen
(`capture-pane`). `make` writes its files; `install` draws a byte progress line while a throttled local server
sends a real package; Ctrl-C in the middle exits 130 with one line and leaves no prefix and no partial file;
running the same command again completes. Skipped, saying why, where tmux is not installed (.ci/run's apt line
installs it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.httplab import Faults, channel_with_big, serve, write_lock

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (apt-get install -y tmux); these tests drive a pane"
)
BIN = Path(sys.executable).parent


@dataclass
class Pane:
    socket: Path
    target: str = "t"

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", str(self.socket), *args], capture_output=True, text=True, check=True)
        return done.stdout

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", self.target, "-l", line)
        self.tmux("send-keys", "-t", self.target, "Enter")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", self.target, "-S", "-200")

    def wait_for(self, pattern: str, timeout_s: float = 60.0) -> re.Match[str]:
        """The first match of PATTERN on the screen, polling until it appears. Fails with the screen shown."""
        deadline = time.monotonic() + timeout_s
        while True:
            match = re.search(pattern, self.screen(), re.MULTILINE)
            if match:
                return match
            if time.monotonic() > deadline:
                pytest.fail(f"{pattern!r} never appeared; the screen:\n{self.screen()}")
            time.sleep(0.1)


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    """A bash in a detached 160x40 tmux session of its own server, with the venv's envsolver on PATH and a
    private cache."""
    socket = tmp_path / "tmux.sock"
    env = {
        "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp_path),
        "TERM": "xterm-256color",
        "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache"),
        "PS1": "$ ",
        "LANG": "C.UTF-8",
    }
    command = ["tmux", "-S", str(socket), "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "160", "-y", "40"]
    subprocess.run([*command, "env", "-i", *(f"{k}={v}" for k, v in env.items()), "bash", "--norc", "--noprofile"],
                   check=True)  # fmt: skip
    try:
        yield Pane(socket)
    finally:
        subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True)


def test_make_in_a_terminal_writes_its_files(pane: Pane, tmp_path: Path) -> None:
    out = tmp_path / "out"
    pane.type(f"envsolver make --gpu a100 --offline --out {out}; echo EXIT:$?")
    code = pane.wait_for(r"^EXIT:(\d+)$", timeout_s=120)
    assert code.group(1) == "0", pane.screen()
    assert {p.name for p in out.iterdir()} >= {"environment.yml", "conda-lock.yml", "conda-linux-64.lock"}
    assert "Traceback" not in pane.screen()


def test_install_shows_progress_and_ctrl_c_leaves_nothing_half_done(pane: Pane, tmp_path: Path) -> None:
    channel = channel_with_big(tmp_path, big_bytes=3_000_000)
    lock = write_lock(channel, tmp_path, ("tiny-app", "tiny-big"))
    prefix, cache = tmp_path / "env", tmp_path / "cache"
    with serve(channel, Faults(bytes_per_s=150_000)) as lab:
        command = f"envsolver install {lock} -p {prefix} --no-hook --mirror {channel.as_uri()}={lab.url}"
        pane.type(f"{command}; echo EXIT:$?")
        bar = pane.wait_for(r"downloading \d/4 · [\d.]+ [KM]iB / [\d.]+ [KM]iB\+? · [\d.]+ [KM]iB/s", timeout_s=60)
        assert "Traceback" not in pane.screen(), bar.group(0)
        pane.tmux("send-keys", "-t", pane.target, "C-c")
        pane.wait_for(r"^EXIT:\d+$", timeout_s=60)
        screen = pane.screen()
    typed = f"{command}; echo EXIT:$?"
    after = screen[screen.index(typed) + len(typed) :].split("EXIT:", 1)
    said = [line.strip() for line in after[0].splitlines() if line.strip() and "downloading" not in line]
    assert after[1].startswith("130\n"), screen
    assert said == ["error: interrupted (Ctrl-C). Run the same command again."], screen
    assert not prefix.exists()
    assert not list(cache.rglob("*.part")) and not list((cache / "staging").iterdir())
    with serve(channel) as lab:
        pane.tmux("send-keys", "-t", pane.target, "clear", "Enter")
        command = f"envsolver install {lock} -p {prefix} --no-hook --mirror {channel.as_uri()}={lab.url}"
        pane.type(f"{command}; echo EXIT:$?")
        code = pane.wait_for(r"^EXIT:(\d+)$", timeout_s=120)
    assert code.group(1) == "0", pane.screen()
    assert "installed (4 packages" in pane.screen()
    assert (prefix / "share" / "big.txt").exists() and (prefix / "bin" / "tiny-app").exists()
