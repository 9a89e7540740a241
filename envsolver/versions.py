"""Small value types for the versions envsolver compares: CUDA, compute capability, driver, Python.

Each parser raises BadInputError with the expected form and an example. Components are ASCII digits, at most
MAX_DIGITS of them: int() refuses more than 4300 digits (a traceback), and accepts digits such as '١٢' that no
version of ours is written in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

from envsolver.errors import BadInputError

MAX_DIGITS = 9
_N = f"([0-9]{{1,{MAX_DIGITS}}})"
_MAJOR_MINOR = re.compile(rf"{_N}\.{_N}(?:\.[0-9]{{1,{MAX_DIGITS}}})?")
_LEADING_MAJOR_MINOR = re.compile(rf"\s*{_N}\.{_N}(?![0-9])")
_DRIVER = re.compile(rf"{_N}(?:\.{_N})?(?:\.{_N})?")


@total_ordering
@dataclass(frozen=True)
class MajorMinor:
    """A `major.minor` pair: a CUDA release (12.8), a compute capability (8.6) or a Python (3.11)."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MajorMinor):
            return NotImplemented
        return (self.major, self.minor) < (other.major, other.minor)

    @property
    def sm(self) -> int:
        """The integer nvcc uses: 8.6 -> 86, 12.0 -> 120."""
        return self.major * 10 + self.minor

    @property
    def nodot(self) -> str:
        """12.9 -> '129' (conda-forge build strings), 3.11 -> '311'."""
        return f"{self.major}{self.minor}"


def parse_major_minor(text: str, what: str, example: str, flag: str) -> MajorMinor:
    """Parse `12.4` (or `12.4.1`, whose patch is dropped). Raises BadInputError."""
    match = _MAJOR_MINOR.fullmatch(str(text).strip())
    if not match:
        raise BadInputError(
            f"malformed {what} {text!r}: expected MAJOR.MINOR such as {example!r}. Pass {flag} {example}."
        )
    return MajorMinor(int(match.group(1)), int(match.group(2)))


def cuda(text: str) -> MajorMinor:
    return parse_major_minor(text, "CUDA version", "12.4", "--cuda")


def python(text: str) -> MajorMinor:
    return parse_major_minor(text, "Python version", "3.11", "--python")


def cc(text: str) -> MajorMinor:
    return parse_major_minor(text, "compute capability", "8.0", "--gpu")


def leading_major_minor(text: object) -> MajorMinor | None:
    """The `major.minor` a reported version starts with (`12.4.131` -> 12.4), or None. For facts read from a
    machine (nvcc, torch.version.cuda), where a malformed value is unknown rather than bad input."""
    match = _LEADING_MAJOR_MINOR.match(str(text or "")[:200])
    return MajorMinor(int(match.group(1)), int(match.group(2))) if match else None


def sm_to_cc(sm: int) -> MajorMinor:
    """86 -> 8.6, 120 -> 12.0."""
    return MajorMinor(sm // 10, sm % 10)


@total_ordering
@dataclass(frozen=True)
class DriverVersion:
    """An NVIDIA driver version such as 535.104.05, compared component by component."""

    parts: tuple[int, ...]
    text: str

    def __str__(self) -> str:
        return self.text

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return _padded(self.parts) < _padded(other.parts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return _padded(self.parts) == _padded(other.parts)

    def __hash__(self) -> int:
        return hash(_padded(self.parts))

    @property
    def branch(self) -> int:
        return self.parts[0]


def _padded(parts: tuple[int, ...]) -> tuple[int, ...]:
    return parts + (0,) * (3 - len(parts))


def driver(text: str) -> DriverVersion:
    """Parse `535.104.05`, `570.26` or a bare branch `580`. Raises BadInputError."""
    value = str(text).strip()
    match = _DRIVER.fullmatch(value)
    if not match:
        raise BadInputError(
            f"malformed driver version {text!r}: expected the form nvidia-smi prints, such as "
            "'535.104.05'. Pass --driver 535.104.05 (or --gpu auto on a GPU node)."
        )
    parts = tuple(int(g) for g in match.groups() if g is not None)
    return DriverVersion(parts, value)
