"""How long a download may take: an overall deadline where the caller sets one, and a minimum rate for every
download, held by a watchdog that shuts the download's sockets when either is broken.

A read timeout alone bounds no download: a server that sends one byte every 5 s never lets a 20 s read time
out (an index page that trickled kept `make` 290 s, and would have kept it for days at 16 MiB). Sockets are
watched from the moment they connect, so a server that trickles its status line and headers is cut too, and a
blocked read returns as soon as its socket is shut (from the watchdog's thread: shutdown(2) wakes a recv(2)
blocked in another thread at once).

- The deadline (`Pace.deadline_s`) covers the whole download: every try, redirect and wait between tries. Past it
  the download fails and is not tried again. Index pages have one (envsolver.net.pypi_index: 30 s, or
  $ENVSOLVER_INDEX_DEADLINE), so an index that answers too slowly ends in the bundled snapshot's fallback.
- The minimum rate (`Pace.stall_bytes` in every `Pace.stall_s`, by default 64 KiB a minute, about 1 KiB/s) holds
  every download, archives included, whose size rules out a fixed deadline (1.65 GB for the largest conda
  archive): an attempt that brings less has stalled, and is tried again (resuming with a Range) as a timeout is.
  Measured in docs/downloads.md.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

STALL_S = 60.0  # the read timeout of an archive's download (net/http.TIMEOUT_S), and conda's own (60 s)
STALL_BYTES = 64 << 10


@dataclass(frozen=True)
class Pace:
    """A deadline for the whole download (None: none) with the fix a message gives when it passes, and the
    minimum rate of each attempt: STALL_BYTES bytes in every STALL_S seconds."""

    deadline_s: float | None = None
    deadline_fix: str = "Check that the server answers at a usual speed, or fetch from another with --mirror FROM=TO."
    stall_s: float = STALL_S
    stall_bytes: int = STALL_BYTES


class Watchdog:
    """Holds one download to its Pace (module docstring). `watch` each socket as it connects, `received` each
    body chunk, `attempt` before each new try; `expired` (past the deadline) and `stalled` (this attempt brought
    too little) say why a read failed or ended early. A context manager: its thread ends with the block, and
    the duplicate descriptors it holds are closed then."""

    def __init__(self, pace: Pace, clock: Callable[[], float] = time.monotonic) -> None:
        self.pace, self._clock = pace, clock
        self._cond = threading.Condition()
        self._sockets: list[socket.socket] = []  # dup()s: shutdown(2) on one shuts the connection they share
        self._done = False
        self.expired = False
        self.stalled = False
        begun = clock()
        self._deadline = None if pace.deadline_s is None else begun + pace.deadline_s
        self._window, self._window_bytes = begun, 0
        self._thread = threading.Thread(target=self._run, name="envsolver-download-pace", daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        with self._cond:
            self._done = True
            self._cond.notify()
        self._thread.join()
        for sock in self._sockets:
            sock.close()

    def watch(self, sock: socket.socket) -> None:
        """Cut SOCK with the rest when the pace is broken (at once where it already is)."""
        try:
            held = sock.dup()
        except OSError:
            return
        with self._cond:
            self._sockets.append(held)
            if self.expired or self.stalled:
                _shut(held)

    def received(self, count: int) -> None:
        with self._cond:
            self._window_bytes += count
            if self._window_bytes >= self.pace.stall_bytes:
                self._window, self._window_bytes = self._clock(), 0

    def attempt(self) -> None:
        """A new try begins: its rate is measured from now."""
        with self._cond:
            self.stalled = False
            self._window, self._window_bytes = self._clock(), 0
            self._cond.notify()

    def remaining(self) -> float | None:
        """Seconds to the deadline (0 past it); None without one."""
        return None if self._deadline is None else max(self._deadline - self._clock(), 0.0)

    def _run(self) -> None:
        with self._cond:
            while not self._done:
                now = self._clock()
                if self._deadline is not None and now >= self._deadline and not self.expired:
                    self.expired = True
                    self._shut_all()
                if not self.stalled and now - self._window >= self.pace.stall_s:
                    self.stalled = True
                    self._shut_all()
                wakes = [] if self.stalled else [self._window + self.pace.stall_s]
                if self._deadline is not None and not self.expired:
                    wakes.append(self._deadline)
                self._cond.wait(max(min(wakes) - now, 0.001) if wakes else None)

    def _shut_all(self) -> None:
        for sock in self._sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # closed already, or never connected
        sock.shutdown(socket.SHUT_RDWR)
