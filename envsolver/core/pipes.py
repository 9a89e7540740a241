"""Read a child process's output incrementally, bounded in size and in time, with memory that stays flat.

`collect` reads the child's stdout and stderr pipes as bytes arrive (one thread, a selector), until both end
and the child exits, or the deadline passes. Each stream has a Bound: its first `head` bytes are kept; past
them, either its last `tail` bytes are kept and the bytes between are counted and dropped (a node that prints
700 MB costs head + tail bytes, whatever it prints), or, with no tail, the stream is refused the moment it
passes `head` (TooLarge), without reading the rest. `read_line` reads one line of a child that goes on running (an
answer of a worker that then waits for its next request), bounded the same way. `stop` ends a child, dropping what
it has left unkept. Used by envsolver.cluster.slurm (Slurm's commands and the steps on compute nodes),
envsolver.lock.worker_call (the rattler worker's answers) and envsolver.resolve.detect (nvidia-smi on this host).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field

READ = 1 << 16
STOP_WAIT_S = 5.0


@dataclass(frozen=True)
class Bound:
    """Keep the first `head` bytes; then the last `tail` bytes, or refuse the stream (TooLarge) when tail is
    None."""

    head: int
    tail: int | None = None


class TooLarge(Exception):
    """A stream passed the head of a Bound that keeps no tail; the child is still running (stop it)."""

    def __init__(self, name: str, bound: Bound) -> None:
        super().__init__(f"{name} passed {bound.head} bytes")
        self.name, self.bound = name, bound


@dataclass
class Kept:
    """What was kept of one stream: its head, its tail, and how many bytes between them were dropped."""

    bound: Bound
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    @property
    def total(self) -> int:
        return len(self.head) + self.dropped + len(self.tail)

    def add(self, data: bytes, name: str) -> None:
        room = self.bound.head - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        if self.bound.tail is None:
            raise TooLarge(name, self.bound)
        self.tail += data
        if len(self.tail) > 2 * self.bound.tail:  # trimmed in batches, so each byte is moved about twice
            cut = len(self.tail) - self.bound.tail
            self.dropped += cut
            del self.tail[:cut]

    def bytes(self) -> bytes:
        """The head, then (when bytes were left out) a line saying how many, then the tail from its first whole
        line."""
        tail = bytes(self.tail)
        dropped = self.dropped
        if self.bound.tail is not None and len(tail) > self.bound.tail:
            dropped += len(tail) - self.bound.tail
            tail = tail[-self.bound.tail :]
        if not dropped:
            return bytes(self.head) + tail
        newline = tail.find(b"\n")
        if newline >= 0:
            dropped += newline + 1
            tail = tail[newline + 1 :]
        return bytes(self.head) + f"\n[... {dropped} bytes left out ...]\n".encode() + tail

    def text(self) -> str:
        return self.bytes().decode("utf-8", errors="replace")


def collect(
    proc: subprocess.Popen[bytes], timeout: float, stdout: Bound | None, stderr: Bound | None = None
) -> tuple[Kept, Kept]:
    """Read the child's stdout and stderr (each where it is a pipe and has a Bound) until both end, then wait
    for the child; all within `timeout` seconds. Raises subprocess.TimeoutExpired when the deadline passes,
    TooLarge when a stream without a tail passes its head; the child is left running then (call stop)."""
    deadline = time.monotonic() + timeout
    kept = (Kept(stdout or Bound(0, 0)), Kept(stderr or Bound(0, 0)))
    with selectors.DefaultSelector() as selector:
        streams = (("stdout", proc.stdout, stdout, kept[0]), ("stderr", proc.stderr, stderr, kept[1]))
        for name, stream, bound, into in streams:
            if stream is not None and bound is not None:
                selector.register(stream.fileno(), selectors.EVENT_READ, (name, into))
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            for key, _ in selector.select(left):
                name, into = key.data
                data = os.read(key.fd, READ)
                if data:
                    into.add(data, name)
                else:
                    selector.unregister(key.fd)
    proc.wait(max(deadline - time.monotonic(), 0.0))
    return kept


def read_line(proc: subprocess.Popen[bytes], timeout: float, bound: Bound) -> bytes:
    """Read the child's stdout up to the end of its first line, or of the stream, within `timeout` seconds; the
    child is not waited for. Returns what was read: it ends in the newline unless the stream ended first (bytes the
    child wrote past the newline in the same burst come with it). Raises subprocess.TimeoutExpired when the
    deadline passes, TooLarge as soon as more than `bound.head` bytes came (the Bound's tail is not used); the
    child is left running then (call stop)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    kept = Kept(Bound(bound.head))
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout.fileno(), selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            if not selector.select(left):
                continue
            data = os.read(proc.stdout.fileno(), READ)
            kept.add(data, "stdout")
            if not data or b"\n" in data:
                return kept.bytes()


def stop(proc: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM) -> None:
    """End the child: `sig` first (srun cancels its step on SIGTERM, and must not die of a closed pipe before it
    can), then what its pipes still carry read and dropped for up to STOP_WAIT_S, then the pipes closed and
    SIGKILL if it is still there; reaped."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.send_signal(sig)
    deadline = time.monotonic() + STOP_WAIT_S
    streams = [s for s in (proc.stdout, proc.stderr) if s is not None and not s.closed]
    with selectors.DefaultSelector() as selector:
        for stream in streams:
            selector.register(stream.fileno(), selectors.EVENT_READ)
        while selector.get_map() and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                if not os.read(key.fd, READ):
                    selector.unregister(key.fd)
    for stream in streams:
        with contextlib.suppress(OSError):
            stream.close()
    try:
        proc.wait(max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
