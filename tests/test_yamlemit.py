"""The YAML emitter round-trips through yaml.safe_load (and ruamel's YAML 1.2 loader, which conda uses): every
lock in locks/, a table of tricky strings, every character class, and arbitrary documents (hypothesis)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from envsolver.lock.writers import yamlemit

ROOT = Path(__file__).resolve().parent.parent
TRICKY = [
    "yes",
    "No",
    "ON",
    "off",
    "null",
    "~",
    "",
    "12.9",
    "8.0",
    "1e3",
    "0x10",
    "0o7",
    "1_000",
    "12:30",
    "-x",
    "- x",
    "#c",
    "a #b",
    "a: b",
    "x:y",
    "it's",
    '"q"',
    "é",
    "2.10.0",
    "*",
    "&a",
    "!t",
    "%p",
    "@x",
    "`b`",
    ">=2,<3",
    "a\nb",
    "tab\there",
    " lead",
    "trail ",
    "https://u:p@h/x?q=1",
    "file:///a b",
    "[x]",
    "{x}",
    "a,b",
    "?",
    "|",
    ">",
    "'",
    "=",
    "cuda129*",
    "*cuda12.1*",
    "py3.10_cuda11.8_cudnn8.7.0_0",
    "\\",
    "\x00",
    "0o7",
    "1_000",
    "0b101",
    "+1",
    ".5",
    ".inf",
    ".NaN",
    "2026-11-29",
    "2001-12-14t21:59:43.10-05:00",
    "1:20:30",
    "<<",
    "8.0+PTX",
    "7.0;8.0;9.0+PTX",
    "deepspeed==0.19.5",
    "0_cpu",
    "1e3p",
    "0xfg",
    "---",
    "...",
    "a: b: c",
    "x\ny: z",
]
# Every character class a YAML reader treats specially, one code point each (astral included).
CHARACTERS = {
    "nul": "\x00",
    "bell": "\x07",
    "backspace": "\x08",
    "tab": "\t",
    "newline": "\n",
    "vertical-tab": "\x0b",
    "form-feed": "\x0c",
    "carriage-return": "\r",
    "escape": "\x1b",
    "unit-separator": "\x1f",
    "del": "\x7f",
    "c1-padding": "\x80",
    "nel": "\x85",
    "c1-last": "\x9f",
    "nbsp": "\xa0",
    "soft-hyphen": "\xad",
    "zero-width-space": "\u200b",
    "line-separator": "\u2028",
    "paragraph-separator": "\u2029",
    "rtl-override": "\u202e",
    "lone-high-surrogate": "\ud800",
    "lone-low-surrogate": "\udfff",
    "private-use": "\ue000",
    "bom": "\ufeff",
    "replacement": "\ufffd",
    "noncharacter-fffe": "\ufffe",
    "noncharacter-ffff": "\uffff",
    "astral-emoji": "\U0001f600",
    "astral-private-use": "\U000f0000",
    "last-code-point": "\U0010ffff",
    "quote": '"',
    "backslash": "\\",
}


def ruamel_load(text: str) -> Any:
    """conda reads environment.yml with ruamel.yaml (YAML 1.2)."""
    return YAML(typ="safe", pure=True).load(text)


def written(text: str) -> str:
    """The text as a file holds it: encoded as UTF-8 (a lone surrogate would fail here) and read back."""
    return text.encode("utf-8").decode("utf-8")


@pytest.mark.parametrize("text", TRICKY)
def test_scalars_round_trip(text: str) -> None:
    doc = {"k": text, text: [text, {"n": text}]}
    assert yaml.safe_load(written(yamlemit.dump(doc))) == doc
    assert ruamel_load(yamlemit.dump(doc)) == doc


@pytest.mark.parametrize("char", CHARACTERS.values(), ids=list(CHARACTERS))
def test_every_character_class_round_trips(char: str) -> None:
    for text in (char, f"a{char}b", f"{char}x", f"x{char}", char * 3):
        doc = {text: text, "k": [text]}
        dumped = written(yamlemit.dump(doc))
        assert yaml.safe_load(dumped) == doc
        assert ruamel_load(dumped) == doc
        assert len(dumped.splitlines()) == 3  # one line per node: nothing the text holds broke a line


@pytest.mark.parametrize("length", [1000, 1021, 1022, 1030, 5000])
def test_long_keys_round_trip(length: str) -> None:
    """YAML limits an implicit key to 1024 characters; longer keys are written as explicit `? key` keys."""
    for key in ("k" * length, "\x00" * length, "é" * length):
        doc = {key: "v", "x": {key: [key, {key: {}}]}, "y": [{key: []}]}
        assert yaml.safe_load(yamlemit.dump(doc)) == doc
        assert ruamel_load(yamlemit.dump(doc)) == doc


def test_huge_integers_round_trip() -> None:
    """Integers past Python's 4300-digit str() limit are written in hex, which both readers accept."""
    for value in (10**5000, -(10**5000) - 7, sys.maxsize, -1, 0):
        doc = {"n": value, "l": [value]}
        assert yaml.safe_load(yamlemit.dump(doc)) == doc


def test_structures_round_trip() -> None:
    doc = {
        "a": {},
        "b": [],
        "c": None,
        "d": True,
        "e": 3,
        "f": [{"x": [1, {"y": []}]}, [1, [2, 3]], {}],
        "g": {"h": {"i": ["j"]}},
    }
    assert yaml.safe_load(yamlemit.dump(doc)) == doc


@pytest.mark.parametrize("path", sorted((ROOT / "locks").glob("*/conda-lock.yml")), ids=lambda p: p.parent.name)
def test_written_locks_round_trip(path: Path) -> None:
    text = path.read_text()
    body = text[text.index("version: 1") :]
    doc = yaml.safe_load(body)
    assert yaml.safe_load(yamlemit.dump(doc)) == doc
    assert yamlemit.dump(doc) == body


# Text rich in what YAML reads specially: indicators, reserved words, digits, line breaks, controls.
YAMLISH = st.lists(
    st.sampled_from(
        [
            *"aynNoOtTfFlLuUeEbBxX0129.:-+_#&*!|>'\"%@`,?[]{} =;/~<\\\t\n\r",
            *["\x00", "\x7f", "\x85", "\u2028", "\u2029", "\ufeff", "\ud800", "\U0001f600", "PTX", "inf", "nan"],
        ]
    ),
    max_size=12,
).map("".join)
STRINGS = st.one_of(st.text(), YAMLISH, st.sampled_from(TRICKY), st.text(st.characters(exclude_categories=())))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), STRINGS)
DOCUMENTS = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(STRINGS, inner, max_size=4), max_leaves=20
)


@given(DOCUMENTS)
def test_any_document_round_trips(doc: Any) -> None:
    dumped = written(yamlemit.dump(doc))
    assert yaml.safe_load(dumped) == doc
    assert ruamel_load(dumped) == doc


@given(STRINGS)
def test_comment_text_stays_one_comment_line(text: str) -> None:
    line = "# " + yamlemit.comment(text)
    assert line.splitlines() == [line]
    assert all(ch.isprintable() for ch in line)
    assert yaml.safe_load(written(line + "\nk: v\n")) == {"k": "v"}
    assert ruamel_load(line + "\nk: v\n") == {"k": "v"}


@pytest.mark.parametrize("text", ["envsolver make --gpu a100", "--name 'données'", "a b  c", "it's $HOME"])
def test_comment_text_keeps_printable_text(text: str) -> None:
    assert yamlemit.comment(text) == text


@pytest.mark.parametrize(
    ("char", "escaped"),
    [
        ("\xad", "\\xad"),  # a soft hyphen (a format character): two hex digits below U+0100
        ("\u0378", "\\u0378"),  # unassigned: four digits from U+0100
        ("\uffff", "\\uffff"),  # the last code point with four digits (a noncharacter)
        ("\U000e0001", "\\U000e0001"),  # a tag character: eight digits from U+10000
    ],
)
def test_escapes_use_the_shortest_form_yaml_reads_back(char: str, escaped: str) -> None:
    assert yamlemit.escape(char) == escaped
    assert yaml.safe_load(f'"{escaped}"') == char
