"""`python -m envsolver`, and the `envsolver` console script. A no-op `install` is answered before click and the CLI
are imported (cli/fast.py); everything else goes to the CLI. A Ctrl-C while the CLI is still loading (or SIGTERM or
SIGHUP during that no-op, which the CLI's install ends the same way) ends like one during a command: exit 130 (128 +
the signal's number), one line on stderr, and with --json the failure document on stdout. `make` starts its rattler
worker before the CLI is imported (_prestart)."""

from __future__ import annotations

import sys


def _prestart(argv: list[str]) -> None:
    """`make` without --no-lock solves: its rattler worker is started before the CLI is imported, so that the
    worker's Python start and rattler's import run beside this process's imports (click, the CLI, the locker),
    which take about as long. A guess from the words alone, never a decision: a worker no command takes is killed
    at exit (worker_call.prestart), and a make this misses (an option before `make`) starts one where it did before."""
    if len(argv) > 1 and argv[1] == "make" and not {"--no-lock", "--help", "-h"} & set(argv[2:]):
        from envsolver.lock import worker_call

        worker_call.prestart()


def run() -> None:
    _standard_streams()
    try:
        if sys.argv[1:2] == ["install"]:
            code = _fast_install()
            if code is not None:
                sys.exit(code)
        _prestart(sys.argv)
        from envsolver.cli.main import main
    except KeyboardInterrupt as exc:
        sys.exit(_interrupted(exc))
    else:
        main()


def _standard_streams() -> None:
    """A process started with stdin, stdout or stderr closed (`envsolver gpus >&-`) gets /dev/null in its place:
    else the first file envsolver opens takes that descriptor, and what is printed lands in it (a lock, a
    registry). Python leaves such a stream None; it becomes /dev/null's too, so the command runs as with
    `>/dev/null` and exits with its own status."""
    import os

    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        try:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            if getattr(sys, name) is None:  # the stream lives as long as the process, as sys.stdout does
                stream = open(fd, mode, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
                setattr(sys, name, stream)
        except OSError:
            return


def _fast_install() -> int | None:
    """cli/fast.py's answer, SIGTERM and SIGHUP ending it as Ctrl-C does (as the CLI's install does)."""
    import os
    import signal

    def handler(signum: int, frame: object) -> None:
        from envsolver.core.errors import Terminated

        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)  # once, as core.interrupts does
        raise Terminated(signum, signal.Signals(signum).name)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    previous = {sig: was for sig, was in previous.items() if was is signal.SIG_DFL}
    for sig in previous:
        signal.signal(sig, handler)
    try:
        from envsolver.cli import fast

        return fast.install(sys.argv[2:], os.environ)
    except Exception:  # the no-op is a shortcut: whatever stops it, the CLI decides the same install and reports it
        if os.environ.get("ENVSOLVER_DEBUG"):
            raise
        return None
    finally:
        for sig, was in previous.items():
            signal.signal(sig, was)


def _interrupted(exc: KeyboardInterrupt) -> int:
    """The exit code, after the message, of a Ctrl-C (or SIGTERM, SIGHUP) before a command ran."""
    import json

    from envsolver.core.errors import INTERRUPTED, INTERRUPTED_EXIT, INTERRUPTED_FIX, Terminated, failure

    code, message = INTERRUPTED_EXIT, INTERRUPTED
    if isinstance(exc, Terminated):
        code, message = exc.exit_code, f"terminated ({exc.name})."
    print(f"error: {message} {INTERRUPTED_FIX}", file=sys.stderr)
    if "--json" in sys.argv[1:]:
        print(json.dumps(failure(code, "interrupted", message, INTERRUPTED_FIX), indent=2))
    return code


if __name__ == "__main__":
    run()
