"""The fuzz invariant and the machinery around it.

Every run of an entry point ends in exit 0, 1 or 2 with a message, never a traceback, within a time bound, and
prints no raw control character (what it quotes from its inputs is spelled out, tests/hostile.py).
Outcomes are tallied per test instead of failing at the first bad example, so one run reports every distinct
cause (exception type and the envsolver line that raised it) with the shortest input that showed it.
"""

from __future__ import annotations

import os
import re
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import envsolver
from envsolver.cli.main import INTERNAL, main
from tests.hostile import RAW

FIXED_SEED = 20261129
# Per-example bounds: hypothesis' deadline reports a slow example; the hard limit stops a hung one.
DEADLINE = timedelta(seconds=5)
HARD_LIMIT_S = 20.0
# The long run (`pytest -m fuzz`) multiplies every test's example count by this (ENVSOLVER_FUZZ_SCALE).
LONG_SCALE = int(os.environ.get("ENVSOLVER_FUZZ_SCALE", "40"))

ENVSOLVER_DIR = str(Path(envsolver.__file__).resolve().parent)


class Hang(Exception):
    """An example ran past HARD_LIMIT_S."""


@contextmanager
def hard_limit(seconds: float = HARD_LIMIT_S) -> Iterator[None]:
    """Raise Hang in the main thread once `seconds` have passed (SIGALRM; pytest runs tests in the main thread)."""

    def _alarm(signum: int, frame: object) -> None:
        raise Hang(f"ran past {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cause(exc: BaseException) -> str:
    """'KeyError at envsolver/resolve/detect.py:151 (detect)': the type and the innermost envsolver frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f.filename.startswith(ENVSOLVER_DIR)]
    where = ours[-1] if ours else (frames[-1] if frames else None)
    if where is None:
        return type(exc).__name__
    name = where.filename
    if name.startswith(ENVSOLVER_DIR):
        name = "envsolver" + name[len(ENVSOLVER_DIR) :]
    return f"{type(exc).__name__} at {name}:{where.lineno} ({where.name})"


@dataclass
class Tally:
    """Outcomes of one test's examples: counts by exit code, and each distinct violation's shortest input."""

    name: str
    cases: int = 0
    exits: dict[int, int] = field(default_factory=dict)
    violations: dict[str, str] = field(default_factory=dict)
    hangs: int = 0
    tracebacks: int = 0
    summary: bool = True  # shown in the session's "fuzz cases" table

    def record(self, example: object, problem: str | None, exit_code: int | None = None) -> None:
        self.cases += 1
        if exit_code is not None:
            self.exits[exit_code] = self.exits.get(exit_code, 0) + 1
        if problem is None:
            return
        if problem.startswith("Hang"):
            self.hangs += 1
        else:
            self.tracebacks += 1
        shown = _compress(repr(example))
        if problem not in self.violations or len(shown) < len(self.violations[problem]):
            self.violations[problem] = shown[:600]

    def check(self) -> None:
        """Raise when any example broke the invariant, listing every distinct cause once."""
        if self.summary:
            TALLIES.append(self)
        if not self.violations:
            return
        lines = [f"{self.name}: {self.tracebacks} traceback(s), {self.hangs} hang(s) in {self.cases} cases"]
        lines += [f"  {problem}\n      shortest input: {shown}" for problem, shown in sorted(self.violations.items())]
        raise AssertionError("\n".join(lines))


TALLIES: list[Tally] = []


def _compress(text: str) -> str:
    """Long runs of one character shown as ⟨'9'×4300⟩, so a reported input stays readable."""
    return re.sub(r"(.)\1{15,}", lambda m: f"⟨{m.group(1)!r}×{len(m.group(0))}⟩", text)


def check_function(
    tally: Tally,
    example: object,
    call: Callable[[], object],
    allowed: tuple[type, ...],
    limit_s: float = HARD_LIMIT_S,
) -> None:
    """Call a library function; it may return or raise one of `allowed`, nothing else, within the bound."""
    try:
        with hard_limit(limit_s):
            call()
    except allowed:
        tally.record(example, None)
        return
    except Exception as exc:  # the invariant is "nothing else", so everything else is recorded
        tally.record(example, cause(exc))
        return
    tally.record(example, None)


@dataclass(frozen=True)
class Outcome:
    exit_code: int | None
    output: str
    problem: str | None


def invoke(args: Sequence[str], env: Mapping[str, str] | None = None) -> Outcome:
    """Run `envsolver ARGS` in-process; any exception other than SystemExit(0|1|2) is a traceback. The CLI turns
    a bug into `error: internal error (...)` and exit 2 for users; ENVSOLVER_DEBUG=1 makes it raise instead, so
    the cause is recorded here with its line."""
    with tempfile.TemporaryDirectory() as cache:
        full_env = {
            "ENVSOLVER_GPUS": None,
            "ENVSOLVER_DRIVER": None,
            "ENVSOLVER_CACHE_DIR": cache,
            "ENVSOLVER_DEBUG": "1",
            **(env or {}),
        }
        started = time.perf_counter()
        try:
            with hard_limit():
                result = CliRunner().invoke(main, list(args), env=full_env, catch_exceptions=True)
        except Hang as exc:  # raised outside click's own handler
            return Outcome(None, "", f"Hang: {exc}")
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # click catches Exception only; a Rust panic (pyo3) is a BaseException
            return Outcome(None, "", cause(exc))
        elapsed = time.perf_counter() - started
    output = result.output or ""
    exc = result.exception
    if isinstance(exc, Hang):
        return Outcome(None, output, f"Hang: {exc} ({elapsed:.1f} s)")
    if exc is not None and not isinstance(exc, SystemExit):
        return Outcome(result.exit_code, output, cause(exc))
    if result.exit_code not in (0, 1, 2):
        return Outcome(result.exit_code, output, f"exit code {result.exit_code}")
    if result.exit_code != 0 and not output.strip():
        return Outcome(result.exit_code, output, f"exit {result.exit_code} without a message")
    if "Traceback (most recent call last)" in output:
        return Outcome(result.exit_code, output, "a traceback printed in the output")
    if f"error: {INTERNAL}" in output:
        return Outcome(result.exit_code, output, f"an {INTERNAL} reported")
    raw = RAW.search(output)
    if raw is not None:  # JSON spells control characters out, text output must too (envsolver/core/printable.py)
        return Outcome(result.exit_code, output, f"a raw control character ({raw.group()!r}) in the output")
    return Outcome(result.exit_code, output, None)


def invoke_entry(args: Sequence[str], env: Mapping[str, str] | None = None) -> Outcome:
    """As `envsolver ARGS` runs them (envsolver/__main__.py): an `install` goes to the no-op first (cli/fast.py,
    outside click and the CLI's error handler, where a traceback reaches the user as it is), then to the CLI."""
    if list(args[:1]) == ["install"]:
        import contextlib
        import io

        from envsolver.cli import fast

        out = io.StringIO()
        try:
            with hard_limit(), contextlib.redirect_stdout(out):
                code = fast.install(list(args[1:]), {**os.environ, **(env or {})})
        except Hang as exc:
            return Outcome(None, "", f"Hang: {exc} (the no-op)")
        except Exception as exc:  # __main__ lets the CLI decide then, but the no-op must not raise
            return Outcome(None, "", f"the no-op raised {cause(exc)}")
        if code is not None:
            output = out.getvalue()
            problem = None if code in (0, 1) and output.strip() else f"the no-op's exit {code} with {output!r}"
            return Outcome(code, output, problem)
    return invoke(args, env)


def check_cli(
    tally: Tally, args: Sequence[str], env: Mapping[str, str] | None = None, example: object = None
) -> Outcome:
    """Invoke as the `envsolver` program does (invoke_entry) and record; `example` (default: the argv and env) is
    what a report shows, e.g. a file's content."""
    outcome = invoke_entry(args, env)
    shown = example if example is not None else (list(args), dict(env or {}))
    tally.record(shown, outcome.problem, outcome.exit_code)
    return outcome


def run_property(
    strategy: st.SearchStrategy[Any], check: Callable[[Any], None], examples: int, seed_value: int | None
) -> None:
    """Run `check` on `examples` values drawn from `strategy`, with a fixed seed or (None) a fresh one."""

    @settings(
        max_examples=examples,
        deadline=DEADLINE,
        database=None,
        derandomize=False,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(strategy)
    def prop(value: Any) -> None:
        check(value)

    if seed_value is not None:
        prop = seed(seed_value)(prop)
    prop()


def modes(default: int) -> Any:
    """Parametrize a fuzz test: a fixed seed and a fresh one in the default run; a long run under `-m fuzz`."""
    import pytest

    return pytest.mark.parametrize(
        ("seed_value", "count"),
        [
            pytest.param(FIXED_SEED, default, id="fixed-seed"),
            pytest.param(None, default, id="fresh-seed"),
            pytest.param(None, default * LONG_SCALE, id="long", marks=pytest.mark.fuzz),
        ],
    )
