"""envsolver.core.textlines: the lines str.splitlines() gives, with their offsets, one at a time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from envsolver.core import textlines

_TEXT = st.text(st.sampled_from("ab \n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), max_size=30)


@given(_TEXT, st.integers(0, 30))
def test_the_lines_are_splitlines_and_the_offsets_point_at_them(text: str, start: int) -> None:
    start = min(start, len(text))
    found = list(textlines.lines(text, start))
    assert [line for _, line in found] == text[start:].splitlines(), repr(text)
    assert all(text.startswith(line, at) for at, line in found), repr(text)
