"""`python -m envsolver`. A Ctrl-C while the CLI is still loading ends like one during a command: exit 130, one
line on stderr, and with --json the failure document on stdout."""

from __future__ import annotations

import json
import sys

from envsolver.core.errors import INTERRUPTED, INTERRUPTED_EXIT, INTERRUPTED_FIX, failure


def _prestart(argv: list[str]) -> None:
    """`make` without --no-lock solves: its rattler worker is started before the CLI is imported, so that the
    worker's Python start and rattler's import run beside this process's imports (click, the CLI, the locker),
    which take about as long. A guess from the words alone, never a decision: a worker no command takes is killed
    at exit (solve.prestart), and a make this misses (an option before `make`) starts one where it did before."""
    if len(argv) > 1 and argv[1] == "make" and not {"--no-lock", "--help", "-h"} & set(argv[2:]):
        from envsolver.lock import solve

        solve.prestart()


def run() -> None:
    try:
        _prestart(sys.argv)
        from envsolver.cli.main import main
    except KeyboardInterrupt:
        print(f"error: {INTERRUPTED} {INTERRUPTED_FIX}", file=sys.stderr)
        if "--json" in sys.argv[1:]:
            print(json.dumps(failure(INTERRUPTED_EXIT, "interrupted", INTERRUPTED, INTERRUPTED_FIX), indent=2))
        sys.exit(INTERRUPTED_EXIT)
    main()


if __name__ == "__main__":
    run()
