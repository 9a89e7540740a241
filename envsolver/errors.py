"""The few error classes envsolver raises; each carries its exit code.

Exit codes (documented in the README):
  0  ok
  1  no consistent stack exists for the target (a conflict)
  2  bad input: unknown GPU, malformed version, unreadable profile, invalid knowledge base
"""

from __future__ import annotations


class EnvsolverError(Exception):
    """Base class. The message is one short paragraph that ends with the fix."""

    exit_code = 2


class BadInputError(EnvsolverError):
    """The user gave a value we cannot use (exit 2)."""

    exit_code = 2


class UnknownGpuError(BadInputError):
    """A GPU name that is not in the knowledge base (exit 2)."""

    def __init__(self, name: str, closest: list[str]) -> None:
        hint = ", ".join(repr(c) for c in closest) if closest else "none"
        super().__init__(
            f"unknown GPU {name!r}. Closest known names: {hint}. "
            "Run `envsolver gpus` for the full table and pass one of its names or aliases to --gpu."
        )
        self.name = name
        self.closest = closest


class KnowledgeBaseError(EnvsolverError):
    """The knowledge base files are invalid; every problem is listed at once (exit 2)."""

    def __init__(self, problems: list[str]) -> None:
        body = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"the knowledge base has {len(problems)} invalid row(s):\n{body}\n"
            "Fix the rows above in envsolver/kb/data/ (every row needs its keys and a known source id)."
        )
        self.problems = problems


class DetectionError(BadInputError):
    """Nothing could be detected where detection was asked for (exit 2)."""


class ConflictError(EnvsolverError):
    """No consistent stack exists for the target (exit 1).

    The message names the clashing facts and the way out; `rejected` keeps (candidate, why) pairs.
    """

    exit_code = 1

    def __init__(self, message: str, rejected: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.rejected = rejected or []
