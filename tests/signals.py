"""For tests that signal a child envsolver: the child's dispositions as a terminal gives them."""

from __future__ import annotations

import signal


def default_dispositions() -> None:
    """(a preexec_fn) SIGINT, SIGTERM and SIGHUP at their defaults in the child, even when the test runner inherited
    one ignored (nohup, a background job of a non-interactive shell): an ignored signal stays ignored across exec,
    and envsolver keeps it so (`nohup envsolver ...` outlives the terminal, as asked)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
