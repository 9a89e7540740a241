"""The lines of a text one at a time, with where each starts, as str.splitlines() splits them: for text from outside
(a node's output, up to slurm.MAX_OUTPUT + MAX_OUTPUT_TAIL bytes), where a list of every line costs tens of bytes
a line more than the text itself (5 MB of one-character lines: 1.3 million strings, 200 MB with what was kept of
each).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# str.splitlines()'s line boundaries (the Python docs, "str.splitlines"): \r\n first, then each one alone.
_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def lines(text: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """(offset in TEXT, line without its break) for each line of TEXT[START:], as TEXT[START:].splitlines() gives
    them, made as they are asked for."""
    at = start
    for found in _BREAK.finditer(text, start):
        yield at, text[at : found.start()]
        at = found.end()
    if at < len(text):
        yield at, text[at:]
