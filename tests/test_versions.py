from __future__ import annotations

import pytest

from envsolver import versions
from envsolver.errors import BadInputError
from envsolver.target import torch_specifier


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("570.26", "570.124.06"),
        ("535.104.05", "550.54.14"),
        ("580", "580.65.06"),
        ("450.80.02", "525.60.13"),
    ],
)
def test_driver_order(older: str, newer: str) -> None:
    assert versions.driver(older) < versions.driver(newer)


def test_driver_branch_equality() -> None:
    assert versions.driver("580") == versions.driver("580.0.0")
    assert versions.driver("580.65.06").branch == 580


@pytest.mark.parametrize("bad", ["", "abc", "535.", "5.3.5.1", "v535"])
def test_bad_driver(bad: str) -> None:
    with pytest.raises(BadInputError, match=r"--driver 535\.104\.05"):
        versions.driver(bad)


def test_major_minor() -> None:
    assert str(versions.cuda("12.4.1")) == "12.4"
    assert versions.cc("12.0").sm == 120
    assert versions.sm_to_cc(86) == versions.cc("8.6")
    assert versions.cuda("12.10") > versions.cuda("12.9")
    assert versions.cuda("12.9").nodot == "129"


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        ("2.5", "2.5.1", "2.6.0"),
        ("2.3.1", "2.3.1", "2.3.0"),
        ("2", "2.13.0", "1.13.1"),
        (">=2.4,<2.6", "2.5.1", "2.6.0"),
    ],
)
def test_torch_specifier(text: str, inside: str, outside: str) -> None:
    spec = torch_specifier(text)
    assert spec.contains(inside) and not spec.contains(outside)


@pytest.mark.parametrize("bad", ["2.x", "latest", ">=two"])
def test_bad_torch(bad: str) -> None:
    with pytest.raises(BadInputError, match=r"--torch 2\.5"):
        torch_specifier(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("13.0", versions.MajorMinor(13, 0)),
        ("12.4.131", versions.MajorMinor(12, 4)),
        ("12.4.1.2", versions.MajorMinor(12, 4)),
        (" 9.0", versions.MajorMinor(9, 0)),
        ("2.39", versions.MajorMinor(2, 39)),
        (None, None),
        ("", None),
        ("unknown", None),
        ("13", None),
    ],
)
def test_leading_major_minor_reads_machine_facts(text: str | None, expected: versions.MajorMinor | None) -> None:
    assert versions.leading_major_minor(text) == expected
