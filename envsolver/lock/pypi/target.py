"""The target a PyPI part is locked for, in PyPI's terms: its PEP 508 marker environment, the wheel tags it
accepts (CPython X.Y on Linux, manylinux up to its glibc), and uv's name for its platform. Pure: every value
comes from the plan (never from the host that runs make).

Sources: PEP 508 (marker variables), PEP 425 and packaging.tags (cpXY / abi3 / none tags, in the order an
installer prefers them), PEP 600 (manylinux_2_N_ARCH; a wheel built for glibc 2.N runs on 2.N and later) with
the legacy aliases of PEP 599 (manylinux2014 = 2.17), PEP 571 (manylinux2010 = 2.12) and PEP 513 (manylinux1 =
2.5), which exist for x86_64 only before 2014; uv's `--python-platform` values (`uv pip compile --help`, uv 0.13:
x86_64-manylinux_2_17, _2_28, _2_31 ... _2_40, the same for aarch64).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from packaging import tags as ptags
from packaging.markers import default_environment
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from envsolver.core.versions import MajorMinor

Platform = Literal["linux-64", "linux-aarch64"]
MACHINE: dict[str, str] = {"linux-64": "x86_64", "linux-aarch64": "aarch64"}
# uv's --python-platform glibc levels (uv 0.13.9), lowest first
UV_GLIBC = (17, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40)
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


@dataclass(frozen=True)
class Target:
    """CPython `python` on Linux `platform` with glibc `glibc`."""

    python: MajorMinor
    platform: Platform
    glibc: MajorMinor

    @property
    def machine(self) -> str:
        return MACHINE[self.platform]

    def environment(self) -> dict[str, str]:
        """The target's PEP 508 marker environment, for requirements such as `x; sys_platform == "linux"`."""
        return environment(self.python, self.platform)

    @cached_property
    def tags(self) -> tuple[ptags.Tag, ...]:
        """The wheel tags the target accepts, the most specific first (packaging.tags' order)."""
        version = (self.python.major, self.python.minor)
        platforms = self.platforms()
        return (
            *ptags.cpython_tags(version, None, platforms),
            *ptags.compatible_tags(version, f"cp{self.python.nodot}", platforms),
        )

    def platforms(self) -> list[str]:
        """manylinux_2_N_ARCH for N from the target's glibc down to 2.17 (aarch64) or 2.5 (x86_64), with the
        legacy aliases beside their level."""
        if self.glibc.major != 2:
            return []
        floor = 17 if self.machine == "aarch64" else 5
        out = []
        for minor in range(self.glibc.minor, floor - 1, -1):
            out.append(f"manylinux_2_{minor}_{self.machine}")
            legacy = _LEGACY.get(minor)
            if legacy and (minor == 17 or self.machine == "x86_64"):
                out.append(f"{legacy}_{self.machine}")
        return out

    def rank(self, filename: str) -> int | None:
        """Where the wheel's best tag stands among the target's (0 best); None when the target takes none of its
        tags, or it is not a wheel file name."""
        try:
            _, _, _, file_tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            return None
        order = self._order
        ranks = [order[t] for t in file_tags if t in order]
        return min(ranks) if ranks else None

    @cached_property
    def _order(self) -> dict[ptags.Tag, int]:
        return {tag: n for n, tag in reversed(list(enumerate(self.tags)))}

    def uv_platform(self) -> str | None:
        """uv's --python-platform for the target: the highest manylinux level uv knows that the target's glibc
        runs; None below glibc 2.17 (uv knows no lower level)."""
        levels = [n for n in UV_GLIBC if self.glibc.major == 2 and n <= self.glibc.minor]
        return f"{self.machine}-manylinux_2_{levels[-1]}" if levels else None


def environment(python: MajorMinor, platform: str) -> dict[str, str]:
    """The marker environment of CPython `python` on Linux `platform` (PEP 508)."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update(
        sys_platform="linux",
        platform_system="Linux",
        os_name="posix",
        platform_machine=MACHINE.get(platform, "x86_64"),
        python_version=str(python),
        python_full_version=f"{python}.0",
        implementation_name="cpython",
        implementation_version=f"{python}.0",
        platform_python_implementation="CPython",
        platform_release="",
        platform_version="",
    )
    return env
