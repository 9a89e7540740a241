"""TORCH_CUDA_ARCH_LIST: the one grammar for arch lists, wherever they come from (the knowledge base, a lock's
metadata, --arch-list, the environment). An arch list reaches shell scripts, so nothing outside this grammar is
accepted, and what is written is the canonical form rebuilt from the parsed archs, never the input text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envsolver.core.versions import MajorMinor


@dataclass(frozen=True)
class Arch:
    """One TORCH_CUDA_ARCH_LIST entry: 8.6, 9.0+PTX, or an arch-specific (9.0a) or family (10.0f) target."""

    cc: MajorMinor
    ptx: bool
    suffix: str = ""

    def __str__(self) -> str:
        return f"{self.cc}{self.suffix}" + ("+PTX" if self.ptx else "")


# torch.utils.cpp_extension reads entries separated by ';' or spaces: `8.0;8.6;9.0+PTX`; nvcc's arch-specific
# (`9.0a`) and family (`10.0f`) targets carry a one-letter suffix.
_ARCH = re.compile(r"^([0-9]{1,3})\.([0-9]{1,3})([af]?)(\+PTX)?$")
MAX_LENGTH = 1000


def parse_arch_list(text: str) -> tuple[Arch, ...]:
    """'5.0;8.6;9.0a;10.0f;12.0+PTX' (';' or spaces between) -> archs. Raises ValueError on anything else."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a string")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"an arch list of {len(text)} characters is longer than {MAX_LENGTH}")
    archs = []
    for item in re.split(r"[; ]", text):
        if not item:
            continue
        match = _ARCH.match(item)
        if not match:
            raise ValueError(f"{item!r} is not an arch such as 8.6, 9.0a or 9.0+PTX")
        cc = MajorMinor(int(match.group(1)), int(match.group(2)))
        archs.append(Arch(cc, bool(match.group(4)), match.group(3)))
    if not archs:
        raise ValueError("empty arch list")
    return tuple(archs)


def canonical(text: str) -> str:
    """The arch list rebuilt from its parsed entries, ';'-separated. Raises ValueError like parse_arch_list."""
    return ";".join(str(a) for a in parse_arch_list(text))
