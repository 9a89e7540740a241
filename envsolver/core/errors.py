"""The few error classes envsolver raises; each carries its exit code and its kind.

Exit codes (documented in the README):
  0    ok
  1    no consistent stack exists for the target (a conflict), or a check, a pre-flight or an op build failed
  2    bad input: unknown GPU, malformed version, unreadable profile, invalid knowledge base; or the command
       could not run
  130  interrupted (Ctrl-C)
  1    also, with nothing printed, when the reader closed stdout first (`| head -1`: cli_base.STDOUT_CLOSED_EXIT)
  143  terminated by SIGTERM, 129 by SIGHUP (install: envsolver.core.interrupts), cleaned up as after Ctrl-C

Kinds: with --json every failure is `{"ok": false, "exit_code": N, "error": {"kind", "message", "fix"}}`, and
`kind` is one of KINDS (a conflict's error also holds `rejected`: each reason with the builds it rejects,
RejectedBuilds.to_json; [] when no build was rejected one by one):
  bad_input       a value given on the command line, in a profile or in a lock cannot be used (2)
  unknown_gpu     a GPU name the knowledge base does not know (2)
  detection       --gpu auto found nothing to detect (2)
  knowledge_base  the knowledge base files are invalid (2)
  conflict        no consistent stack exists for the target (1)
  solve_failed    the solver found no solution in the channels (1)
  fetch           a channel, a package or a netrc file could not be fetched or read (2)
  integrity       an archive does not match the lock's hash (2)
  archive         an archive cannot be read, or linking it would be unsafe (2)
  verify          verify could not run: no such prefix or python, or the probe crashed (2)
  failed          the command could not complete (another envsolver holds the prefix, rattler failed) (2)
  io              a file or directory could not be read or written (2)
  usage           the command line itself is wrong: a missing option, an unknown choice (2)
  internal        a bug in envsolver (2)
  interrupted     Ctrl-C (130), SIGTERM (143), SIGHUP (129)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

Kind = Literal[
    "bad_input",
    "unknown_gpu",
    "detection",
    "knowledge_base",
    "conflict",
    "solve_failed",
    "fetch",
    "integrity",
    "archive",
    "verify",
    "failed",
    "io",
    "usage",
    "internal",
    "interrupted",
]
KINDS: tuple[Kind, ...] = get_args(Kind)
INTERRUPTED = "interrupted (Ctrl-C)."
INTERRUPTED_FIX = "Run the same command again."
INTERRUPTED_EXIT = 130


class Terminated(KeyboardInterrupt):
    """A signal that ends a command as Ctrl-C does (SIGTERM, SIGHUP: envsolver.core.interrupts), so every cleanup that
    runs for Ctrl-C runs for it too; the command exits 128 + its number."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.signum, self.name = signum, name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def failure(
    exit_code: int, kind: Kind, message: str, fix: str | None, rejected: list[dict[str, object]] | None = None
) -> dict[str, object]:
    """The document `--json` prints for a failure; `rejected` (a conflict's builds by reason) when given."""
    error: dict[str, object] = {"kind": kind, "message": message, "fix": fix}
    if rejected is not None:
        error["rejected"] = rejected
    return {"ok": False, "exit_code": exit_code, "error": error}


class EnvsolverError(Exception):
    """Base class. The message is one short paragraph that ends with the fix."""

    exit_code = 2
    kind: Kind = "failed"


class BadInputError(EnvsolverError):
    """The user gave a value we cannot use (exit 2)."""

    exit_code = 2
    kind: Kind = "bad_input"


class UnknownGpuError(BadInputError):
    """A GPU name that is not in the knowledge base (exit 2)."""

    kind: Kind = "unknown_gpu"

    def __init__(self, name: str, closest: list[str], why: str = "") -> None:
        hint = ", ".join(repr(c) for c in closest) if closest else "none"
        super().__init__(
            f"unknown GPU {name!r}{f' ({why})' if why else ''}. Closest known names: {hint}. "
            "Run `envsolver gpus` for the full table and pass one of its names or aliases to --gpu."
        )
        self.name = name  # as given
        self.closest = closest


class KnowledgeBaseError(EnvsolverError):
    """The knowledge base files are invalid; every problem is listed at once (exit 2)."""

    kind: Kind = "knowledge_base"

    def __init__(self, problems: list[str]) -> None:
        body = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"the knowledge base has {len(problems)} invalid row(s):\n{body}\n"
            "Fix the rows above in envsolver/kb/data/ (every row needs its keys and a known source id)."
        )
        self.problems = problems


class DetectionError(BadInputError):
    """Nothing could be detected where detection was asked for (exit 2)."""

    kind: Kind = "detection"


class WorkerCrashed(EnvsolverError):
    """rattler's child process ended without a readable answer (exit 2). Raised by envsolver.lock.worker_call, which
    imports this module only when a call needs it, so that `make` starts its worker before it imports typing and
    dataclasses."""

    kind: Kind = "failed"


@dataclass(frozen=True)
class RejectedBuilds:
    """One reason and the builds it rejects, in the order they were tried: (candidate, detail), where the detail
    is what the reason says about that build alone ('its arch list is 8.0;9.0'), or None."""

    because: str
    candidates: tuple[tuple[str, str | None], ...]

    def to_json(self) -> dict[str, object]:
        return {"because": self.because, "candidates": [{"candidate": c, "detail": d} for c, d in self.candidates]}


class ConflictError(EnvsolverError):
    """No consistent stack exists for the target (exit 1).

    The message names the clashing facts and the way out; `rejected` keeps (candidate, why) pairs, and `by_reason`
    the same builds under each reason (what --json shows).
    """

    exit_code = 1
    kind: Kind = "conflict"

    def __init__(
        self, message: str, rejected: list[tuple[str, str]] | None = None, by_reason: tuple[RejectedBuilds, ...] = ()
    ) -> None:
        super().__init__(message)
        self.rejected = rejected or []
        self.by_reason = by_reason


# The words envsolver's fixes begin with, as a sentence ("... Pass --driver 535.104.05.", "...\nFix the rows
# above ...") or, lower case, as the clause after a colon or semicolon ("...: upgrade the driver to 570.26 or
# newer.", "...; regenerate it with envsolver make ...").
FIX_SENTENCE_WORDS = frozenset(
    {
        "pass", "run", "fix", "check", "regenerate", "move", "lock", "use", "wait", "install", "look", "point",
        "make", "name", "fetch", "if", "put", "rewrite", "remove", "leave", "choose", "upgrade", "set", "give",
        "try", "report",
    }
)  # fmt: skip
FIX_CLAUSE_WORDS = frozenset({"pass", "run", "fix", "regenerate", "upgrade", "choose", "drop", "write"})
_BOUNDARY = re.compile(r"(?P<after>[.:;])[ \t]+(?P<word>[A-Za-z]+)|(?P<line>\n)[ \t]*(?P<first>[A-Za-z]+)")


def _fix_start(match: re.Match[str]) -> tuple[int, bool]:
    """Where the sentence or clause after this boundary starts, and whether it starts a fix."""
    if match.group("line"):
        word = match.group("first")
        return match.start("first"), word[0].isupper() and word.lower() in FIX_SENTENCE_WORDS
    word = match.group("word")
    if match.group("after") == ".":
        return match.start("word"), word[0].isupper() and word.lower() in FIX_SENTENCE_WORDS
    return match.start("word"), word in FIX_CLAUSE_WORDS


# Conflict messages name their ways out with a label: "... Fix: upgrade the driver to 570.26 or newer (...)." or
# "... Ways out: `--torch 2.10.0` gives torch 2.10.0 cu129 with CUDA 12.9." (envsolver/resolve/ways_out.py).
_LABEL = re.compile(r"(?:(?<=[.;:]) |\n|^)(?:Fix|Ways out): ")


def split_fix(text: str) -> tuple[str, str | None]:
    """(message, fix) of an error text that ends with its fix. A labelled fix ("Fix: ...", "Ways out: ...")
    starts after its last label. Otherwise the fix starts at the last sentence or clause that begins with a fix
    word, extended back over the fix sentences just before it ("Check the path exists. If the channel moved,
    rewrite ..."), and runs to the end. No text is lost but a label: the message is everything before the fix,
    less the colon or semicolon that led into it. (text, None) when no fix is found."""
    labels = [m for m in _LABEL.finditer(text) if text[m.end() :].strip()]
    if labels:
        return text[: labels[-1].start()].rstrip(), text[labels[-1].end() :]
    boundaries = [_fix_start(m) for m in _BOUNDARY.finditer(text)]
    fixes = [i for i, (_, is_fix) in enumerate(boundaries) if is_fix]
    if not fixes:
        return text, None
    first = fixes[-1]
    while first > 0 and boundaries[first - 1][1]:
        first -= 1
    start = boundaries[first][0]
    message = text[:start].rstrip()
    if message.endswith((":", ";")):
        message = message[:-1].rstrip()
    return message, text[start:]
