"""The parent's side of rattler's worker process (envsolver/lock/rattler_worker.py, the child): start it, send it
one request, read its answer within bounds, keep it for the next call or end it. envsolver/lock/solve.py builds
the requests and reads the answers' records.

Every call runs in a child process of the same Python: py-rattler's Rust threads outlive the call that started
them, and when they reach the interpreter while it shuts down the process aborts or panics (the worker's docstring
says how). Here a rattler error comes back as an answer, a child that dies becomes WorkerCrashed (exit 2), and a
KeyboardInterrupt kills and reaps the child before it goes on, so an interrupted call never returns a result and
nothing of it runs on.

One worker serves the calls of a process while they succeed: a worker whose solve succeeded waits for the next
request, and is kept (the spare) for the next call from the same Python, working directory and environment; after
any other answer (a failure, an install, an index), a timeout, an oversized answer, a crash or an interrupt, a
worker is never used again. The spare is killed and reaped when this process exits (atexit), and leaves by itself
when its stdin closes (this process is gone); one that died while it waited is replaced by a new one.

Each answer is one line, bounded (envsolver.core.pipes): an answer past MAX_ANSWER bytes is refused as it arrives,
unread, and a worker that has not answered within its time (LIMITS_S for its op, or $ENVSOLVER_RATTLER_TIMEOUT
seconds, counted for each request) is killed; both are WorkerCrashed (exit 2) with a message. Of its stderr only the
last ERRORS_TAIL bytes are read.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping

# What prestart needs is imported here, what a call needs in the call (json, core.pipes, the error classes): `python -m
# envsolver make` imports this module first and starts its worker right away (envsolver/__main__.py), before its
# own imports. typing is for mypy alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any

WORKER = os.path.join(os.path.dirname(__file__), "rattler_worker.py")
# The worker runs by path, without the '' (the working directory) that -c puts on sys.path: nothing there can
# stand in for a standard module or for rattler.
_BOOT = (
    "import sys; sys.path[:] = filter(None, sys.path); import runpy; runpy.run_path(sys.argv[1], run_name='__main__')"
)
MAX_ANSWER = 32 << 20  # bytes; a solve of a whole CUDA training stack answers about 1 MB
ERRORS_TAIL = 64 << 10  # bytes read of the end of a dead worker's stderr
TIMEOUT_ENV = "ENVSOLVER_RATTLER_TIMEOUT"
# Seconds a worker may take before it is killed: a solve fetches the channels' repodata first (conda-forge's is
# hundreds of MB over a slow link) and then solves within its own timeout_s; an install extracts and links a
# CUDA stack of several GB, on a shared filesystem; an index reads a local channel (tests).
LIMITS_S = {"solve": 1800.0, "install": 3600.0, "index": 600.0}


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}" if code else "its answer was not readable"


def worker_command() -> list[str]:
    """The command that starts a worker: this Python, running envsolver/lock/rattler_worker.py by path."""
    return _started()[0]


def _started() -> tuple[list[str], dict[str, str]]:
    """The worker's command and environment (core/pystart): not -I, since this process's PYTHONPATH must reach it
    (it imports envsolver and rattler as this process does); PYTHONSAFEPATH=1 and _BOOT keep the working directory
    off its sys.path. It runs in the caller's working directory, which a request's relative path names."""
    from envsolver.core import pystart

    return pystart.keeping_environment(sys.executable, os.environ, "-c", _BOOT, WORKER)


def _cause(errors: bytes) -> str:
    """The line of a dead worker's stderr that says why: Python's fatal error or a Rust panic, else the last."""
    from envsolver.core.redact import redact_text

    lines = [line.strip() for line in errors.decode("utf-8", "replace").splitlines() if line.strip()]
    telling = [line for line in lines if line.startswith("Fatal Python error") or "panicked at" in line]
    line = (telling or lines[-1:] or [""])[0]
    return f": {redact_text(line)[:300]}" if line else ""


def read_answer(raw: bytes) -> dict[str, Any] | None:
    """The worker's answer: a JSON object with a boolean `ok` on one line, else None (a child that died)."""
    import json

    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("ok"), bool) else None


# Work the next call does while its worker solves (meanwhile).
_meanwhile: list[Callable[[], object]] = []


def meanwhile(work: Callable[[], object]) -> None:
    """Have the next call run `work` once, after it has sent its request and before it reads the answer, so that
    what a command needs only after the answer (make imports its writers) is done while rattler solves instead of
    before. Best effort: an Exception from `work` is dropped (what it prepared is done again where it is needed,
    and fails there); an interrupt stops the call as any other does. Forgotten when a command ends (discard_spare).
    """
    _meanwhile.append(work)


# Variables of the environment that may differ between the calls one worker serves: pytest names in this one the
# test it is running (it changes with every test and phase), and nothing the worker runs reads it.
_IGNORED_ENV = frozenset({"PYTEST_CURRENT_TEST"})


def _circumstances() -> tuple[str, str, dict[str, str]] | None:
    """What a worker inherits when it starts, which a call must share to be served by it: this Python, the working
    directory (a relative path in a request) and the environment (PYTHONPATH, rattler's and the proxies'
    settings). None where the working directory cannot be read (it was removed): then no worker fits."""
    try:
        where = os.getcwd()
    except OSError:
        return None
    return sys.executable, where, {k: v for k, v in os.environ.items() if k not in _IGNORED_ENV}


class _Worker:
    """A worker process: the child, the temporary file its stderr goes to, what it started with (_circumstances),
    and whether it has answered a request (it waits for the next one then, kept as the spare)."""

    def __init__(
        self, child: subprocess.Popen[bytes], errors: IO[bytes], started_with: tuple[str, str, dict[str, str]] | None
    ) -> None:
        self.child = child
        self.errors = errors
        self.started_with = started_with
        self.served = False

    def fits(self) -> bool:
        """Whether it still runs and a call from here may use it."""
        here = _circumstances()
        return here is not None and here == self.started_with and self.child.poll() is None

    def send(self, line: bytes) -> bool:
        """Write a request line to it; False where it is gone (its stdin is closed): then it never read it. Whatever
        else stops the write (KeyboardInterrupt) ends it first."""
        assert self.child.stdin is not None
        try:
            self.child.stdin.write(line)
            self.child.stdin.flush()
        except BrokenPipeError:
            return False
        except BaseException:
            self.end()
            raise
        return True

    def end(self) -> None:
        """Kill and reap the child where it still runs; close its pipes and its stderr file."""
        self.child.kill()
        self.child.wait()
        for stream in (self.child.stdin, self.child.stdout, self.errors):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


# The worker the next call takes: one started ahead of its request (prestart), or one that answered a solve and
# waits for its next request.
_spare: _Worker | None = None
_ends_at_exit = False


def _start() -> _Worker:
    """A new worker process, waiting for its request on stdin; its stderr goes to a temporary file."""
    errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by _Worker.end)
    started_with = _circumstances()
    try:
        argv, env = _started()
        child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env)
    except BaseException:
        errors.close()
        raise
    return _Worker(child, errors, started_with)


def _hold(worker: _Worker) -> None:
    """Keep `worker` for the next call; it is killed and reaped when this process exits (atexit)."""
    global _spare, _ends_at_exit
    _spare = worker
    if not _ends_at_exit:
        atexit.register(discard_spare)
        _ends_at_exit = True


def prestart() -> None:
    """Start the next call's worker now, so that its Python start and rattler's import run while this process
    does its own work (imports, the knowledge base, the plan); a spare that fits already is enough. The next call
    takes it; a worker never taken is killed and reaped when the command ends (end_of_command) or this process
    exits (atexit), and it leaves by itself when its stdin closes. Best effort: a worker that cannot be started
    here is started (and its failure reported) by the call."""
    if _spare is not None and _spare.fits():
        return
    _drop_spare()
    try:
        worker = _start()
    except OSError:
        return
    _hold(worker)


def _drop_spare() -> None:
    """Kill and reap the spare worker, if there is one."""
    global _spare
    worker, _spare = _spare, None
    if worker is not None:
        worker.end()


def discard_spare() -> None:
    """Kill and reap the spare worker, whether it has served or not, and forget the work meant for the next call:
    at this process's exit (atexit), and wherever no worker may be left (tests)."""
    _meanwhile.clear()
    _drop_spare()


def end_of_command() -> None:
    """What a command leaves when it ends (cli.base.Group), also in-process (tests, a caller of `main`): the work
    meant for its next call is forgotten, and a worker it started ahead that no call took is killed and reaped. A
    worker that has answered a solve stays for this process's next call, as between two solves of one command:
    it ends with the process (atexit), or by itself when the process is gone (its stdin closes)."""
    _meanwhile.clear()
    if _spare is not None and not _spare.served:
        _drop_spare()


def _take_spare() -> _Worker | None:
    """The spare worker, if there is one that still runs and was started with this Python, this working directory
    and this environment (else it is ended, and the call starts a new one: a changed PYTHONPATH must reach the
    worker)."""
    global _spare
    worker = _spare
    if worker is None:
        return None
    if not worker.fits():
        _drop_spare()
        return None
    _spare = None
    if worker.served:  # what its stderr holds so far came with answers: a crash is told by what follows
        worker.errors.seek(0)
        worker.errors.truncate()
    return worker


def time_limit(default: float, environ: Mapping[str, str] = os.environ) -> float:
    """Seconds a worker may take: $ENVSOLVER_RATTLER_TIMEOUT when set, else `default`. Raises BadInputError
    (exit 2) for a value that is not a whole number of seconds from 1 to 604800 (a week)."""
    from envsolver.core.errors import BadInputError

    value = environ.get(TIMEOUT_ENV, "").strip()
    if not value:
        return default
    if not (value.isascii() and value.isdigit() and len(value) <= 6 and 1 <= int(value) <= 604800):
        defaults = ", ".join(f"{op} {seconds:g} s" for op, seconds in LIMITS_S.items())
        raise BadInputError(
            f"{TIMEOUT_ENV}={value!r} is not a number of seconds. Set it to a whole number from 1 to 604800 (e.g. "
            f"export {TIMEOUT_ENV}=3600), or unset it for the defaults ({defaults})."
        )
    return float(value)


def call(request: dict[str, Any], doing: str, fix: str, limit_s: float) -> dict[str, Any]:
    """Carry out one request in a worker process (the spare, else a new one) and return its answer (`ok` true or
    false). A spare that died while it waited is replaced by a new worker. A worker that answers a solve in full and
    says it waits for the next request is kept as the spare; any other is reaped (or killed). Whatever stops the
    wait (KeyboardInterrupt above all) kills and reaps the child before it goes on. Raises WorkerCrashed (exit 2)
    when the child dies without answering, answers more than MAX_ANSWER bytes or has not answered within
    `limit_s` seconds; `fix` ends the first message."""
    import json

    from envsolver.core import pipes
    from envsolver.core.errors import WorkerCrashed
    from envsolver.core.redact import redact_text

    line = json.dumps(request).encode("utf-8") + b"\n"
    worker = _take_spare()
    if worker is not None and not worker.send(line):
        worker.end()  # it died while it waited, before it could read the request: a new worker takes it
        worker = None
    if worker is None:
        try:
            worker = _start()
        except OSError as exc:
            raise WorkerCrashed(
                f"could not start a Python process for rattler while {doing} ({exc.strerror or exc}). {fix}"
            ) from None
        worker.send(line)  # a child gone already: its exit status says how
    child = worker.child
    try:
        while _meanwhile:
            with contextlib.suppress(Exception):
                _meanwhile.pop(0)()
        deadline = time.monotonic() + limit_s
        raw = pipes.read_line(child, limit_s, pipes.Bound(MAX_ANSWER))
        doc = read_answer(raw)
        waits = raw.endswith(b"\n") and doc is not None and doc["ok"] is True and doc.get("next") is True
        if not waits:  # it exits after this answer: read to the end, then its exit status
            rest, _ = pipes.collect(child, max(deadline - time.monotonic(), 0.0), pipes.Bound(MAX_ANSWER - len(raw)))
            code = child.wait()
            doc = read_answer(raw + rest.bytes()) if code == 0 else None
    except subprocess.TimeoutExpired:
        pipes.stop(child, signal.SIGKILL)
        worker.end()
        raise WorkerCrashed(
            f"rattler gave no answer within {limit_s:g} s while {doing}, so it was stopped. If it needs longer "
            f"(a slow channel, a large environment), export {TIMEOUT_ENV}=SECONDS and run the same command "
            "again; else run it again as it is."
        ) from None
    except pipes.TooLarge:
        pipes.stop(child, signal.SIGKILL)
        worker.end()
        raise WorkerCrashed(
            f"rattler's answer while {doing} is larger than {MAX_ANSWER >> 20} MiB, so it was not read and the "
            "worker was stopped. Run the same command again; if it stops the same way, report it."
        ) from None
    except BaseException:
        worker.end()
        raise
    if waits:
        worker.served = True
        if _spare is None:
            _hold(worker)
        else:  # a worker was started ahead meanwhile: one spare at a time
            worker.end()
    elif doc is None:
        cause = _cause(_end_of(worker.errors))
        worker.end()
        raise WorkerCrashed(f"rattler stopped without an answer while {doing} ({_how(code)}){cause}. {fix}")
    else:
        worker.end()
    assert doc is not None
    said = doc.get("warnings")
    for text in said if isinstance(said, list) else ():
        warnings.warn(redact_text(str(text)), RuntimeWarning, stacklevel=3)
    return doc


def _end_of(errors: IO[bytes]) -> bytes:
    """The last ERRORS_TAIL bytes of the worker's stderr file."""
    size = errors.seek(0, os.SEEK_END)
    errors.seek(max(size - ERRORS_TAIL, 0))
    return errors.read(ERRORS_TAIL)
