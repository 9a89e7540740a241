"""envsolver/core/printable.py: every control character from outside is spelled out, a newline only where the caller
allows one, and everything else (a backslash, accents, CJK, emoji, a right-to-left script) stays as it is."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envsolver.core.printable import printable
from tests.hostile import HOSTILE, RAW, SHOWN


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param(HOSTILE, SHOWN, id="title-clear-csi-markup"),
        pytest.param("\x1b]0;pwned\x07", r"\x1b]0;pwned\x07", id="title-set"),
        pytest.param("\x1b[2J\x1b[H", r"\x1b[2J\x1b[H", id="clear-screen"),
        pytest.param("\x9b2J", r"\x9b2J", id="8-bit-csi"),
        pytest.param("\x9d0;t\x9c", r"\x9d0;t\x9c", id="8-bit-osc-st"),
        pytest.param("a\x00b\x08c\x7f", r"a\x00b\x08c\x7f", id="nul-backspace-del"),
        pytest.param("ok\rFAIL", r"ok\rFAIL", id="carriage-return"),
        pytest.param("a\tb", r"a\tb", id="tab"),
        pytest.param("x\u202egnp.exe", r"x\u202egnp.exe", id="bidi-override"),
        pytest.param("x\u2066y\u2069", r"x\u2066y\u2069", id="bidi-isolate"),
        pytest.param("a\u2028b\u2029c", r"a\u2028b\u2029c", id="line-separators"),
        pytest.param("lone \udc9b", r"lone \udc9b", id="lone-surrogate"),
        pytest.param("one\ntwo", r"one\ntwo", id="newline-in-a-line"),
        pytest.param(r"C:\x1b literal \n", r"C:\x1b literal \n", id="backslashes-stay"),
        pytest.param("Tesla V100 é 中文 😀 שלום [red]", "Tesla V100 é 中文 😀 שלום [red]", id="plain-text-stays"),
        pytest.param("", "", id="empty"),
    ],
)
def test_control_characters_are_spelled_out(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_a_message_of_several_lines_keeps_its_newlines_only() -> None:
    assert printable("error: a\n  - b\x1b[2J\r\n", newlines=True) == "error: a\n  - b\\x1b[2J\\r\n"


# Besides C0, DEL and C1: the line and paragraph separators, the bidi embeddings, overrides and isolates, surrogates.
OTHER = re.compile("[\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


@given(st.text(), st.booleans())
def test_nothing_raw_is_left_and_clean_text_is_unchanged(text: str, newlines: bool) -> None:
    shown = printable(text, newlines=newlines)
    assert RAW.findall(shown) == [] and OTHER.findall(shown) == [], (text, shown)
    assert newlines or "\n" not in shown, (text, shown)
    assert printable(shown, newlines=newlines) == shown  # spelled out once: nothing left to spell
    if not RAW.search(text) and not OTHER.search(text) and (newlines or "\n" not in text):
        assert shown == text
