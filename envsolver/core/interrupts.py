"""SIGTERM and SIGHUP end a command as Ctrl-C does: the signal becomes an exception (errors.Terminated, a
KeyboardInterrupt) in the main thread, so every cleanup that runs for Ctrl-C runs for it (install: downloads
cancelled and their partial files removed, the staging directory and the install lock file removed); the
command then exits 128 + the signal's number with one line.

A signal that the process inherited ignored (`nohup` ignores SIGHUP) stays ignored. After the first signal,
further ones are ignored until the block ends, so a second SIGTERM does not cut the cleanup short (SIGKILL
still ends it; the next install removes what it left, as pkgcache.staging_dir and dirlock say).

What runs outside the process (a Slurm step: envsolver.cluster.running) is ended by a cleanup registered with
on_interrupt: clean_up runs them all, whichever signal came, before the command exits (the CLI calls it for
every interrupt; a command may call it sooner); Ctrl-C, SIGTERM and SIGHUP are held off meanwhile.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import ParamSpec, TypeVar

from envsolver.core.errors import Terminated

SIGNALS = (signal.SIGTERM, signal.SIGHUP)
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
P = ParamSpec("P")
R = TypeVar("R")
Cleanup = Callable[[], Sequence[str]]  # ends what it started; returns notes for the user (may be none)
_cleanups: list[Cleanup] = []
_lock = threading.Lock()


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


def ends_like_ctrl_c(function: Callable[P, R]) -> Callable[P, R]:
    """`function` run within like_ctrl_c() (a decorator for the commands that start work outside the process)."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with like_ctrl_c():
            return function(*args, **kwargs)

    return wrapper


def on_interrupt(cleanup: Cleanup) -> None:
    """Run `cleanup` when a command is interrupted (clean_up). Registered once per module, at import."""
    with _lock:
        _cleanups.append(cleanup)


def clean_up() -> list[str]:
    """Run every registered cleanup, with Ctrl-C, SIGTERM and SIGHUP held off (ignored) meanwhile where they
    have a handler, so a second Ctrl-C does not cut it short; the notes they return. A cleanup that raises is
    skipped (the others still run)."""
    with _lock:
        cleanups = tuple(_cleanups)
    notes: list[str] = []
    with _held():
        for cleanup in cleanups:
            try:
                notes.extend(cleanup())
            except Exception as exc:  # one cleanup's failure must not stop the next
                notes.append(f"a cleanup failed ({type(exc).__name__}: {exc})")
    return notes


@contextlib.contextmanager
def _held() -> Iterator[None]:
    """HELD signals that have a handler (not SIG_IGN: it stays so) ignored within the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in HELD}
    changed = [sig for sig, was in previous.items() if was not in (signal.SIG_IGN, None)]
    for sig in changed:
        signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig in changed:
            signal.signal(sig, previous[sig])
