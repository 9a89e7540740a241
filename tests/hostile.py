"""Hostile text as a compute node, a server, Slurm or nvidia-smi could send it, and the check that none of it
reaches the terminal raw: a title set (OSC 0, ended by BEL), a clear screen (CSI 2J), an 8-bit CSI (0x9b), DEL,
rich markup and a rich emoji code (both must print literally). No line separator (a carriage return, 0x1c-0x1e,
0x85): a parser that reads the text by lines would cut it. SHOWN is how envsolver/core/printable.py spells it,
written out by hand here."""

from __future__ import annotations

import re

HOSTILE = "n\x1b]0;pwned\x07\x1b[2J\x9b31m[bold]x[/bold]:warning:\x7f"
SHOWN = r"n\x1b]0;pwned\x07\x1b[2J\x9b31m[bold]x[/bold]:warning:\x7f"
# What must never reach a terminal from outside: C0 but the newline, DEL, C1.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


# rich's own styles on a terminal (SGR: ESC [ ... m); HOSTILE holds none (its CSI is 8-bit, its ESC [ is 2J).
STYLE = re.compile("\x1b\\[[0-9;]*m")


def raw_controls(text: str, styled: bool = False) -> list[str]:
    """The raw control characters in `text`, each with what surrounds it (empty: none); `styled`: rich's own
    styles (a terminal's output) are left out first."""
    text = STYLE.sub("", text) if styled else text
    return [repr(text[max(m.start() - 30, 0) : m.end() + 30]) for m in RAW.finditer(text)]


def assert_shown(text: str, context: object = "", styled: bool = False) -> None:
    """`text` (what a command printed) holds no raw control character, and the hostile text spelled out."""
    found = raw_controls(text, styled)
    assert found == [], (found, context)
    assert SHOWN in (STYLE.sub("", text) if styled else text), (text[-3000:], context)
