"""Small value types for the versions envsolver compares: CUDA, compute capability, driver, Python.

Each parser raises BadInputError with the expected form and an example. Components are ASCII digits, at most
MAX_DIGITS of them: int() refuses more than 4300 digits (a traceback), and accepts digits such as '١٢' that no
version of ours is written in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envsolver.core.errors import BadInputError

MAX_DIGITS = 9
_N = f"([0-9]{{1,{MAX_DIGITS}}})"
_MAJOR_MINOR = re.compile(rf"{_N}\.{_N}(?:\.[0-9]{{1,{MAX_DIGITS}}})?")
_LEADING_MAJOR_MINOR = re.compile(rf"\s*{_N}\.{_N}(?![0-9])")
_DRIVER = re.compile(rf"{_N}(?:\.{_N})?(?:\.{_N})?")


@dataclass(frozen=True, order=True)
class MajorMinor:
    """A `major.minor` pair: a CUDA release (12.8), a compute capability (8.6) or a Python (3.11). Ordered as
    (major, minor): the dataclass's own comparisons, one call each (the resolver compares millions of them)."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

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


@dataclass(frozen=True)
class DriverVersion:
    """An NVIDIA driver version such as 535.104.05, compared component by component (each comparison written
    out, not derived by functools.total_ordering: one call each, where the resolver makes hundreds of
    thousands)."""

    parts: tuple[int, ...]
    text: str

    def __str__(self) -> str:
        return self.text

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return _padded(self.parts) < _padded(other.parts)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return _padded(self.parts) <= _padded(other.parts)

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return _padded(self.parts) > _padded(other.parts)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return _padded(self.parts) >= _padded(other.parts)

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


# The version options, one rule (README: "Versions on the command line"). Every option takes 1 to 3
# dot-separated components of ASCII digits. What a component fewer or more than the option's own form means
# depends on what the option says:
#   a wish (--cuda, --python; form MAJOR.MINOR): MAJOR alone is a range, narrowed to one release the knowledge
#       base knows (newest first), with a warning that names it; a patch is dropped, with a warning, since
#       conda-forge's cuda-version and python pins are MAJOR.MINOR.
#   a fact about the nodes (--driver, form MAJOR.MINOR[.PATCH]; --glibc, form MAJOR.MINOR): the plan must hold
#       on every node the value may stand for, so a driver branch alone (535) is its oldest release (535.0.0 is
#       below every 535.x), with a warning; a glibc MAJOR alone stands for every 2.x and has no usable floor,
#       so it is refused with the form to pass; a glibc patch is dropped, with a warning.
_COMPONENTS = re.compile(rf"{_N}(?:\.{_N})?(?:\.{_N})?")


def components(text: str, what: str, example: str, flag: str, partial: str) -> tuple[int, ...]:
    """1 to 3 dot-separated components of ASCII digits. Raises BadInputError naming the form; `partial` says
    what a shorter value means for this option."""
    match = _COMPONENTS.fullmatch(str(text).strip())
    if not match:
        raise BadInputError(f"malformed {what} {text!r}: expected {partial}. Pass {flag} {example}.")
    return tuple(int(g) for g in match.groups() if g is not None)


def wish(
    text: str, what: str, example: str, flag: str, known: tuple[MajorMinor, ...]
) -> tuple[MajorMinor | None, str | None]:
    """(the release a --cuda or --python value asks for, a warning or None). MAJOR alone: None (no narrowing)
    when every release in `known` has that major (the option then narrows nothing), else the newest known
    MAJOR.x. Raises BadInputError for a malformed value, or a MAJOR that no known release has."""
    form = f"MAJOR.MINOR such as {example!r}, or a MAJOR alone for its newest release the knowledge base knows"
    parts = components(text, f"{what} version", example, flag, form)
    if len(parts) >= 2:
        chosen = MajorMinor(parts[0], parts[1])
        if len(parts) == 2:
            return chosen, None
        return chosen, (
            f"{flag} {text.strip()}: {what} versions are chosen by MAJOR.MINOR, so the plan is for {chosen} (the patch "
            f"release is whichever the channel has). Pass {flag} {chosen} to say so."
        )
    major = parts[0]
    same = sorted(v for v in set(known) if v.major == major)
    if not same:
        majors = ", ".join(str(m) for m in sorted({v.major for v in known})) or "none"
        newest = max(known) if known else MajorMinor(*(int(p) for p in example.split(".")))
        raise BadInputError(
            f"{flag} {text.strip()}: the knowledge base knows no {what} {major}.x (it knows majors {majors}). "
            f"Pass {flag} {newest}, or leave {flag} out to let envsolver choose."
        )
    if len(same) == len(set(known)):
        return None, (
            f"{flag} {major} covers every {what} the knowledge base knows ({same[0]} to {same[-1]}), so it narrows "
            f"nothing: planned as without {flag}. Pass {flag} {same[-1]} (or another MAJOR.MINOR) to choose one."
        )
    return same[-1], (
        f"{flag} {major} names a major version only: planned for {same[-1]}, the newest {what} {major}.x the "
        f"knowledge base knows ({', '.join(str(v) for v in same)}). Pass {flag} {same[-1]} to say so."
    )


def driver_given(
    text: str, known: tuple[DriverVersion, ...] = (), origin: str = "--driver"
) -> tuple[DriverVersion, str | None]:
    """(a driver value given by the user, a warning or None), `origin` naming where it came from (--driver, a
    profile's driver:, ENVSOLVER_DRIVER, a cluster file). The one grammar of a user's driver: the version
    nvidia-smi prints, MAJOR[.MINOR[.PATCH]] with a 3-digit branch (every NVIDIA Linux driver since R100; every
    driver the knowledge base records, 450.51.05 to 610.43.02, has one). A branch alone (535) is its oldest
    release, with a warning. `known`: the drivers the knowledge base records (cuda.yaml: toolkit and
    minor-version-compatibility minimums, each with its NVIDIA source): a branch older than the oldest is refused
    (no toolkit the knowledge base knows runs on it, and it is most likely a typo such as 300.1); a branch newer
    than the newest may be a driver released since, so it is planned as given, with a warning.
    Raises BadInputError with the fix (`--driver 550` where the digits of `5.50` spell a known branch)."""
    form = "the version nvidia-smi prints, such as '535.104.05' (a branch alone, 535, means its oldest release)"
    parts = components(text, "driver version", "535.104.05", "--driver", form)
    value = driver(text)
    branch_text = value.text.split(".")[0]
    oldest, newest = (min(known), max(known)) if known else (None, None)
    shape = len(branch_text) == 3 and not branch_text.startswith("0")
    if not shape or (oldest is not None and value.branch < oldest.branch):
        digits = "".join(value.text.split("."))
        guess = digits if _known_branch(digits, oldest, newest) else None
        hint = (
            f"Pass --driver {guess} (if branch {guess} was meant), or the version nvidia-smi prints"
            if guess
            else "Pass --driver 535.104.05, or the version nvidia-smi prints on the oldest node"
        )
        if not shape:
            raise BadInputError(
                f"{origin} {value.text!r} is not an NVIDIA driver version: its branch {branch_text!r} is not 3 "
                f"digits, as every NVIDIA Linux driver's is. Expected {form}. {hint}."
            )
        raise BadInputError(
            f"{origin} {value.text!r}: branch {value.branch} is older than every driver the knowledge base records "
            f"(the oldest is {oldest}, the minimum of the oldest CUDA toolkit it knows), so no toolkit envsolver "
            f"knows runs on it and nothing can be planned (a typo, or nodes that need a newer driver). {hint}."
        )
    if newest is not None and value.branch > newest.branch:
        return value, (
            f"{origin} {value.text}: branch {value.branch} is newer than every driver the knowledge base records "
            f"(the newest is {newest}); planned as given, as a driver at or above every minimum the knowledge base "
            "knows. If it is a typo, pass the version nvidia-smi prints."
        )
    if len(parts) > 1:
        return value, None
    return value, (
        f"{origin} {parts[0]} names a driver branch, not a release: planned for the oldest {parts[0]} driver "
        f"({parts[0]}.0.0 or newer), the safe floor for every node on that branch. Pass the version nvidia-smi "
        f"prints on the oldest node (e.g. --driver {parts[0]}.104.05) to plan for it exactly."
    )


def _known_branch(digits: str, oldest: DriverVersion | None, newest: DriverVersion | None) -> bool:
    """Whether `digits` (a value's digits run together: '5.50' -> '550') is a 3-digit branch within the known
    range (with no range given, any 3-digit branch)."""
    if len(digits) != 3 or digits.startswith("0"):
        return False
    branch = int(digits)
    return (oldest is None or branch >= oldest.branch) and (newest is None or branch <= newest.branch)


def glibc_given(text: str) -> tuple[MajorMinor, str | None]:
    """(--glibc's value, a warning or None): MAJOR.MINOR; a patch is dropped with a warning; a MAJOR alone is
    refused (it stands for every glibc 2.x, which has no usable floor)."""
    form = "MAJOR.MINOR as `ldd --version` prints it on the nodes, such as '2.28'"
    parts = components(text, "glibc version", "2.28", "--glibc", form)
    if len(parts) == 1:
        raise BadInputError(
            f"--glibc {parts[0]} names a major version only, which stands for every glibc {parts[0]}.x and says "
            f"nothing the plan can use: expected {form}. Pass --glibc 2.28."
        )
    chosen = MajorMinor(parts[0], parts[1])
    if len(parts) == 2:
        return chosen, None
    return chosen, f"--glibc {text.strip()}: glibc is compared by MAJOR.MINOR, so the plan is for glibc {chosen}."
