"""SIGTERM and SIGHUP end a command as Ctrl-C does: the signal becomes an exception (errors.Terminated, a
KeyboardInterrupt) in the main thread, so every cleanup that runs for Ctrl-C runs for it (install: downloads
cancelled and their partial files removed, the staging directory and the install lock file removed); the
command then exits 128 + the signal's number with one line.

A signal that the process inherited ignored (`nohup` ignores SIGHUP) stays ignored. After the first signal,
further ones are ignored until the block ends, so a second SIGTERM does not cut the cleanup short (SIGKILL
still ends it; the next install removes what it left, as pkgcache.staging_dir and dirlock say).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from envsolver.errors import Terminated

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def like_ctrl_c(signals: tuple[signal.Signals, ...] = SIGNALS) -> Iterator[None]:
    """Within the block, each of `signals` (at its default disposition) raises Terminated in the main thread,
    once. Outside the main thread (where Python sets no handlers), it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if came:
            return
        came.append(signum)
        raise Terminated(signum, signal.Signals(signum).name)

    previous = {sig: signal.getsignal(sig) for sig in signals}
    for sig, was in previous.items():
        if was is signal.SIG_DFL:
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, was in previous.items():
            if was is signal.SIG_DFL:
                signal.signal(sig, was)
