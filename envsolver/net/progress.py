"""Byte progress of parallel downloads, as one line: `downloading 3/12 · 45.2 MiB / 120.0 MiB · 12.3 MiB/s`.

The meter only counts and formats; where the line goes is the caller's (install passes it to the CLI's status
line, which rich draws on a terminal and leaves out on a pipe). Thread-safe: the downloads report from their
own threads. A line is sent at most every `every_s` seconds, and once more when a file finishes; the lines in
between are Fleeting (the status line shows them, -v's step lines leave them out).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

Show = Callable[[str], None]
WINDOW_S = 3.0  # the rate is the bytes received over about the last three seconds

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


class Fleeting(str):
    """A progress message that the next one replaces (the bytes of a download as they arrive): a status line
    shows it; -v, which keeps each step on a line of its own (cli/base.with_detail), leaves it out."""

    __slots__ = ()


def size(n: float) -> str:
    """1536 -> '1.5 KiB'; whole bytes below 1 KiB."""
    unit = 0
    while n >= 1024 and unit < len(_UNITS) - 1:
        n /= 1024
        unit += 1
    return f"{int(n)} B" if unit == 0 else f"{n:.1f} {_UNITS[unit]}"


def line(done: int, files: int, received: int, total: int, unknown: int, rate: float | None) -> str:
    """The progress line. `total` sums the sizes known so far; `unknown` counts files whose size is not."""
    of = f" / {size(total)}" + ("+" if unknown else "") if total else ""
    speed = f" · {size(rate)}/s" if rate is not None else ""
    return f"downloading {done}/{files} · {size(received)}{of}{speed}"


class Meter:
    """Counts FILES downloads: their sizes as they become known, the bytes as they arrive, the files done."""

    def __init__(
        self, files: int, show: Show, every_s: float = 0.1, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.files = files
        self.show = show
        self.every_s = every_s
        self.clock = clock
        self.done = 0
        self.received = 0
        self.sizes: dict[str, int] = {}
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, int]] = deque([(clock(), 0)])
        self._shown_at = float("-inf")

    def expect(self, key: str, total: int) -> None:
        """The download KEY will be TOTAL bytes in all."""
        with self._lock:
            self.sizes[key] = total

    def add(self, count: int) -> None:
        """COUNT bytes arrived (negative when a download restarts from zero and its bytes are counted again)."""
        with self._lock:
            self.received += count
            self._sample(force=False)

    def cached(self) -> None:
        """One of the FILES was in the cache after all: it is not downloaded."""
        with self._lock:
            self.files -= 1

    def finish(self) -> None:
        """One download is complete (fetched or taken from the cache)."""
        with self._lock:
            self.done += 1
            self._sample(force=True)

    def rate(self) -> float | None:
        """Bytes per second over the last WINDOW_S seconds; None until some time has passed."""
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 - t0 >= 0.2 else None

    def text(self) -> str:
        unknown = self.files - len(self.sizes)
        return line(self.done, self.files, self.received, sum(self.sizes.values()), unknown, self.rate())

    def _sample(self, force: bool) -> None:
        now = self.clock()
        self._samples.append((now, self.received))
        while len(self._samples) > 2 and now - self._samples[1][0] >= WINDOW_S:
            self._samples.popleft()
        if force or now - self._shown_at >= self.every_s:
            self._shown_at = now
            self.show(self.text() if force else Fleeting(self.text()))
