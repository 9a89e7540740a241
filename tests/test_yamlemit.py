"""The YAML emitter round-trips through yaml.safe_load: every lock in locks/ and a table of tricky strings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from envsolver.writers import yamlemit

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
]


@pytest.mark.parametrize("text", TRICKY)
def test_scalars_round_trip(text: str) -> None:
    doc = {"k": text, text: [text, {"n": text}]}
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
