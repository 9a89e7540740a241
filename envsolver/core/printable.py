"""Text from outside (a compute node, a server, a lock, nvidia-smi, Slurm) as a terminal may show it: every
control character spelled out as Python spells it in a string literal (`\\x1b`, `\\x07`, `\\x9b`, `\\n`), so no
escape sequence reaches the terminal (none sets its title, clears its screen or moves its cursor) and no line
can pretend to be another one. Every printer of text output uses this one rule (render.py and the renderers
built on it, the CLI's error and warning lines); --json needs none of it: JSON spells out control characters on
its own.

Shown escaped: C0 (0x00-0x1f) but a newline where the caller allows one, DEL (0x7f), C1 (0x80-0x9f: 0x9b is a
CSI on its own), the Unicode line and paragraph separators, the bidirectional embeddings, overrides and
isolates (which reorder what the terminal shows, as in "Trojan Source", CVE-2021-42574), and lone surrogates
(which no terminal encoding can write). Everything else, a backslash included, stays as it is.
"""

from __future__ import annotations

import re

# Sources: ECMA-48 (C0, DEL and C1 controls; ESC starts a sequence, 0x9b is CSI); Unicode's General Category
# Zl/Zp (U+2028, U+2029) and the Bidi_Control property (U+202A-U+202E, U+2066-U+2069; U+200E/U+200F and U+061C
# only mark direction and are harmless); surrogates U+D800-U+DFFF (Cs).
_CONTROLS = "\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE = re.compile(f"[{_CONTROLS}]")
_UNSAFE_LINES = re.compile(f"[\n{_CONTROLS}]")


def _spelled(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def has_controls(text: str) -> bool:
    """Whether `text` holds a character printable() would spell out (a newline included): what a value that must
    go into a file or a command line as it is (a job script's command word) may not hold."""
    return _UNSAFE_LINES.search(text) is not None


def printable(text: str, *, newlines: bool = False) -> str:
    """`text` with every control character spelled out (`\\x1b`); a newline stays one with `newlines=True`
    (a message of several lines), else it is spelled `\\n` too (a line, a table cell, a name). Never raises."""
    return (_UNSAFE if newlines else _UNSAFE_LINES).sub(_spelled, text)


# rattler's errors (and reqwest's under them) chain their causes on lines of their own:
#   error sending request for url (https://conda.anaconda.org/conda-forge/noarch/repodata_shards.msgpack.zst)
#   Caused by: client error (Connect)
#   Caused by: dns error
_CAUSED_BY = re.compile(r"\s*\n\s*Caused by:\s*")
ONE_LINE_LIMIT = 1000


def one_line(text: str, limit: int = ONE_LINE_LIMIT) -> str:
    """An error's text from outside, with each of its causes, as one printable line for a warning: the causes
    joined by ': ', each run of whitespace made one space, control characters spelled out (printable()); past
    `limit` characters it is cut after the last whole word that fits, and ends with '…'. Never raises."""
    line = printable(" ".join(_CAUSED_BY.sub(": ", text).split()))
    if len(line) <= limit:
        return line
    kept = line[: limit - 1]
    space = kept.rfind(" ")
    return (kept[: space + 1] if space > limit // 2 else kept) + "…"
