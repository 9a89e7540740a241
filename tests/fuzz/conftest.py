from __future__ import annotations

import pytest

from tests.fuzz.harness import TALLIES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The figure the long run reports: cases per fuzz test, and every traceback and hang among them."""
    if not TALLIES:
        return
    write = terminalreporter.write_line
    terminalreporter.write_sep("-", "fuzz cases")
    for tally in TALLIES:
        exits = ", ".join(f"exit {code}: {n}" for code, n in sorted(tally.exits.items()))
        write(
            f"{tally.name:<40} {tally.cases:>7} cases  {tally.tracebacks} traceback(s)  {tally.hangs} hang(s)"
            + (f"  ({exits})" if exits else "")
        )
        for problem in sorted(tally.violations):
            write(f"    {problem}")
    cases = sum(t.cases for t in TALLIES)
    tracebacks = sum(t.tracebacks for t in TALLIES)
    hangs = sum(t.hangs for t in TALLIES)
    write(f"{'total':<40} {cases:>7} cases  {tracebacks} traceback(s)  {hangs} hang(s)")
