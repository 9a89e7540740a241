"""envsolver.core.safeyaml: bounded, alias-safe YAML loading and bounded file reading."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings

from envsolver.core import safeyaml
from tests.fuzz import strategies as fs
from tests.fuzz.strategies import BOMB_LIST, BOMB_MERGE


def _no_nan(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isnan(value)
    if isinstance(value, list):
        return all(_no_nan(v) for v in value)
    if isinstance(value, dict):
        return all(_no_nan(k) and _no_nan(v) for k, v in value.items())
    return True


@settings(max_examples=150, deadline=None)
@given(fs.yaml_values.filter(_no_nan))
def test_loads_what_pyyaml_loads(value: Any) -> None:
    text = yaml.safe_dump(value)
    assert safeyaml.load(text) == yaml.safe_load(text)


@settings(max_examples=150, deadline=None)
@given(fs.profile_text)
def test_returns_or_raises_only_its_error(text: str) -> None:
    try:
        safeyaml.load(text)
    except safeyaml.SafeYamlError as exc:
        assert str(exc)


@pytest.mark.parametrize("bomb", [BOMB_LIST, BOMB_MERGE], ids=["aliases", "merge-keys"])
def test_alias_bombs_are_refused_before_they_expand(bomb: str) -> None:
    started = time.perf_counter()
    with pytest.raises(safeyaml.SafeYamlError, match="expand"):
        safeyaml.load(bomb)
    took = time.perf_counter() - started
    assert took < 10.0, f"took {took:.1f} s"  # expanded, a bomb takes minutes and gigabytes; quiet: milliseconds


def test_small_aliases_and_merges_still_load() -> None:
    doc = safeyaml.load("base: &b {x: 1}\nother: {<<: *b, y: 2}\nlist: &l [1, 2]\nagain: *l\n")
    assert doc == {"base": {"x": 1}, "other": {"x": 1, "y": 2}, "list": [1, 2], "again": [1, 2]}


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("a: &a [*a]\n", "refers to itself"),
        ("[" * 200 + "]" * 200, "nested deeper"),
        ("x: " + "9" * 5000 + "\n", "not valid YAML"),
        ("x: 2024-13-45\n", "not valid YAML"),
        ("x: [1\n", "not valid YAML"),
        ("x: !!python/object:os.system [1]\n", "not valid YAML"),
        ("a: [*nothing]\n", "not valid YAML"),
    ],
)
def test_refusals(text: str, phrase: str) -> None:
    with pytest.raises(safeyaml.SafeYamlError, match=phrase):
        safeyaml.load(text)


def test_size_limit() -> None:
    with pytest.raises(safeyaml.SafeYamlError, match="larger than"):
        safeyaml.load("x: 1\n" * 100, safeyaml.Limits(chars=100))


def test_read_text_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_text("x" * 1001)
    with pytest.raises(safeyaml.SafeYamlError, match="larger than 1000 bytes"):
        safeyaml.read_text(path, 1000)
    assert safeyaml.read_text(path, 2000) == "x" * 1001
    with pytest.raises(safeyaml.SafeYamlError, match="a character device"):
        safeyaml.read_text(Path("/dev/zero"), 1 << 20)  # refused at once, not read up to the limit


def test_read_text_refuses_a_fifo_at_once(tmp_path: Path) -> None:
    """A FIFO given as a file (a profile, a lock, a project's environment file) is refused without waiting for a
    writer: before, open() waited for ever."""
    import os
    import time

    path = tmp_path / "fifo.yml"
    os.mkfifo(path)
    started = time.monotonic()
    with pytest.raises(safeyaml.SafeYamlError, match="FIFO"):
        safeyaml.read_text(path, 1000)
    assert time.monotonic() - started < 5, "reading a FIFO waited for a writer"


def test_read_text_refuses_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin"
    path.write_bytes(b"gpus: \xff\n")
    with pytest.raises(safeyaml.SafeYamlError, match="UTF-8"):
        safeyaml.read_text(path, 1000)
