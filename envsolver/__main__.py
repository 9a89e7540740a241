"""`python -m envsolver`. A Ctrl-C while the CLI is still loading ends like one during a command: exit 130, one
line on stderr, and with --json the failure document on stdout."""

from __future__ import annotations

import json
import sys

from envsolver.core.errors import INTERRUPTED, INTERRUPTED_EXIT, INTERRUPTED_FIX, failure


def run() -> None:
    try:
        from envsolver.cli.main import main
    except KeyboardInterrupt:
        print(f"error: {INTERRUPTED} {INTERRUPTED_FIX}", file=sys.stderr)
        if "--json" in sys.argv[1:]:
            print(json.dumps(failure(INTERRUPTED_EXIT, "interrupted", INTERRUPTED, INTERRUPTED_FIX), indent=2))
        sys.exit(INTERRUPTED_EXIT)
    main()


if __name__ == "__main__":
    run()
