"""The Slurm commands envsolver has running (every one starts in slurm.run, which registers it here), and how
to end them so that no step is left running: on Ctrl-C, SIGTERM or SIGHUP (envsolver.core.interrupts runs end_all),
and for a command past its timeout (end).

How srun ends its step (Slurm 22.05, `man srun`, and what the lab shows):
  - SIGINT to an srun started with --quit-on-interrupt ends its step at once (the tasks are killed); without
    that option one SIGINT only prints the tasks' status, so it is sent only where the option was given.
  - SIGTERM (or SIGHUP) to srun makes it force the step's termination ("srun: forcing job termination": the
    tasks get SIGKILL), and a pending allocation is revoked.
  - SIGKILL ends srun alone and leaves its step running until it ends by itself, so it is sent only after the
    step was cancelled by id.
So: each command gets its signal; then up to END_WAIT_S for them to exit; for an srun still there, its step
is found by the srun's pid (`scontrol show step`: SrunHost:Pid) and cancelled by id with scancel: inside an
existing allocation (SLURM_JOB_ID set) only the step JOB.STEP, never the user's job; outside one, the job that
srun itself made. Then up to CANCEL_WAIT_S more, and SIGKILL for what is still there.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from envsolver.core import interrupts, pipes

END_WAIT_S = 8.0  # srun ends its step within a second or two in the lab (it waits up to KillWait for the tasks)
CANCEL_WAIT_S = 5.0
QUERY_TIMEOUT_S = 10.0  # scontrol and scancel while ending: the controller answers in well under a second
MAX_QUERY = 16 << 20  # bytes kept of `scontrol show step` (about 400 bytes a step)
READ = 1 << 16
# `scontrol --oneliner show step`, one line per step (the lab, Slurm 22.05):
#   StepId=18204.0 UserId=0 StartTime=... State=RUNNING Partition=a100 NodeList=gpu02 ... SrunHost:Pid=vm:4023 ...
_STEP = re.compile(r"(?:^|\s)StepId=([0-9]+)\.([0-9]+)(?=\s)")
_SRUN = re.compile(r"(?:^|\s)SrunHost:Pid=([^\s:]+):([0-9]+)(?=\s|$)")


class Closing(Exception):
    """A command was to start while envsolver is ending its commands (an interrupt came)."""


@dataclass
class Started:
    """One command: its process and argv, the thread that reads its output, and whether it runs inside an
    existing allocation (SLURM_JOB_ID set: its step is the user's job's, so only the step may be cancelled)."""

    proc: subprocess.Popen[bytes]
    argv: tuple[str, ...]
    thread: int
    in_allocation: bool
    cancelled: list[str] = field(default_factory=list)  # the ids scancel was asked to cancel

    @property
    def stop_signal(self) -> signal.Signals:
        return signal.SIGINT if "--quit-on-interrupt" in self.argv else signal.SIGTERM


@dataclass(frozen=True)
class Ended:
    """What end_all did: the commands it ended, and the Slurm ids it cancelled with scancel (the backstop)."""

    commands: int = 0
    cancelled: tuple[str, ...] = ()

    def notes(self) -> tuple[str, ...]:
        if not self.cancelled:
            return ()
        shown = ", ".join(self.cancelled)
        return (f"cancelled Slurm {shown} by id (scancel): its srun did not end its step when asked",)


class Registry:
    """The commands running now. Thread-safe: the steps of verify --cluster start and end in worker threads,
    an interrupt ends them from the main thread. Once end_all has begun, the threads that were running then
    (but the main thread) start no new command: they belong to the interrupted command, which is ending;
    threads started later (another command in the same process: tests) may."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, Started] = {}
        self._ending: weakref.WeakSet[threading.Thread] = weakref.WeakSet()

    def start(
        self,
        argv: Sequence[str],
        popen: Callable[[], subprocess.Popen[bytes]],
        environ: Mapping[str, str] = os.environ,
    ) -> Started:
        """Start the command with `popen` (with `environ`, whose SLURM_JOB_ID says whether it runs inside an
        allocation) and register it, as one step: an interrupt that ends everything cannot miss a command that
        was starting. Raises Closing in a thread of an interrupted command, and what popen raises."""
        inside = "SLURM_JOB_ID" in environ
        with self._lock:
            if threading.current_thread() in self._ending:
                raise Closing(argv[0])
            proc = popen()
            started: Started | None = None
            try:
                started = Started(proc, tuple(argv), threading.get_ident(), inside)
            finally:  # registered even when an interrupt lands here
                self._running[proc.pid] = started or Started(proc, tuple(argv), threading.get_ident(), inside)
            return started

    def done(self, started: Started) -> None:
        with self._lock:
            self._running.pop(started.proc.pid, None)

    def running(self) -> tuple[Started, ...]:
        with self._lock:
            return tuple(self._running.values())

    def end_all(self) -> Ended:
        """End every command running; the threads running now (but the main thread) start none from now on."""
        with self._lock:
            main = threading.main_thread()
            self._ending.update(t for t in threading.enumerate() if t is not main)
            every = tuple(self._running.values())
        return end(every)


REGISTRY = Registry()


def end(commands: Sequence[Started], environ: Mapping[str, str] = os.environ) -> Ended:
    """Each command its signal; an srun still running after END_WAIT_S has its step cancelled by id (scancel);
    SIGKILL for what is left after CANCEL_WAIT_S more. The calling thread's own commands have their output read
    and dropped meanwhile (nobody else reads it); they are reaped by the caller (slurm.run). Never raises."""
    if not commands:
        return Ended()
    for started in commands:
        _signal(started.proc, started.stop_signal)
    left = _wait(commands, END_WAIT_S)
    cancelled: list[str] = []
    if left:
        cancelled = _cancel([s for s in left if s.argv[0] == "srun"], environ)
        left = _wait(left, CANCEL_WAIT_S)
    for started in left:
        _signal(started.proc, signal.SIGKILL)
    _wait(left, 1.0)
    return Ended(len(commands), tuple(cancelled))


def stop(started: Started, environ: Mapping[str, str] = os.environ) -> None:
    """End one command of the calling thread (and its step: end), then close its pipes and reap it: what a
    caller does with a command past its deadline or interrupted (slurm.run; any other srun envsolver starts)."""
    end((started,), environ)
    for stream in (started.proc.stdout, started.proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        started.proc.wait(1.0)
    if started.proc.returncode is None:
        started.proc.kill()
        started.proc.wait()


def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if proc.returncode is None:
        with contextlib.suppress(OSError):
            proc.send_signal(sig)


def _exited(started: Started) -> bool:
    """poll() may reap it from here while its own thread waits for it: Popen allows that (the other wait then
    returns the same status)."""
    return started.proc.poll() is not None


def _wait(commands: Iterable[Started], seconds: float) -> list[Started]:
    """Wait up to `seconds` for the commands to exit, reading and dropping what the calling thread's own
    commands print (their pipes would otherwise fill and block them). Returns those still running."""
    deadline = time.monotonic() + seconds
    waiting = list(commands)
    me = threading.get_ident()
    with selectors.DefaultSelector() as selector:
        for started in waiting:
            if started.thread == me:
                for stream in (started.proc.stdout, started.proc.stderr):
                    if stream is not None and not stream.closed:
                        selector.register(stream.fileno(), selectors.EVENT_READ)
        while True:
            waiting = [s for s in waiting if not _exited(s)]
            left = deadline - time.monotonic()
            if not waiting or left <= 0:
                return waiting
            if selector.get_map():
                for key, _ in selector.select(min(left, 0.05)):
                    if not os.read(key.fd, READ):
                        selector.unregister(key.fd)
            else:
                time.sleep(min(left, 0.05))


def steps_of(text: str, pids: Collection[int], host: str) -> dict[int, tuple[str, str]]:
    """srun pid -> (job id, step id) from `scontrol --oneliner show step`, for the sruns of `pids` that run on
    `host` (SrunHost, compared by its first label). Pure."""
    found: dict[int, tuple[str, str]] = {}
    short = host.split(".")[0]
    for line in text.splitlines():
        step, srun = _STEP.search(line), _SRUN.search(line)
        if step is None or srun is None:
            continue
        pid = int(srun.group(2))
        if pid in pids and srun.group(1).split(".")[0] == short:
            found[pid] = (step.group(1), step.group(2))
    return found


def _cancel(sruns: Sequence[Started], environ: Mapping[str, str]) -> list[str]:
    """Cancel the steps of sruns that did not end by id; returns the ids scancel was given. Never raises."""
    if not sruns:
        return []
    text = _query(("scontrol", "--oneliner", "show", "step"), environ)
    ids = steps_of(text or "", {s.proc.pid for s in sruns}, socket.gethostname())
    names = []
    for started in sruns:
        if started.proc.pid not in ids:
            continue
        job, step = ids[started.proc.pid]
        name = f"{job}.{step}" if started.in_allocation else job  # never the user's own job
        started.cancelled.append(name)
        names.append(name)
    if names:
        _query(("scancel", *names), environ)
    return names


def _query(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """stdout of a short Slurm command (bounded: its first MAX_QUERY bytes), or None when it cannot run, fails
    or passes QUERY_TIMEOUT_S (ending goes on regardless)."""
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(environ)
        )
    except OSError:
        return None
    try:
        out, _ = pipes.collect(proc, QUERY_TIMEOUT_S, pipes.Bound(MAX_QUERY, 0), pipes.Bound(0, 0))
    except subprocess.TimeoutExpired:
        pipes.stop(proc)
        return None
    return out.text() if proc.returncode == 0 else None


interrupts.on_interrupt(lambda: REGISTRY.end_all().notes())
