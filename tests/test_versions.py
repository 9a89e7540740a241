from __future__ import annotations

import pytest

from envsolver.core import versions
from envsolver.core.errors import BadInputError
from envsolver.resolve.target import torch_specifier


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


@pytest.mark.parametrize(
    ("bad", "fix"),
    [
        ("latest", "Pass --torch 2.5."),
        (">=two", "Pass --torch 2.5."),
        # Issue 22: a value that still names a release is answered with that release, not the example.
        ("2.x", "Pass --torch 2 (any 2.x release)."),
        ("2.4.*", "Pass --torch 2.4 (any 2.4.x release)."),
        (" = 2.4 ", "Pass --torch 2.4 (any 2.4.x release)."),
    ],
)
def test_bad_torch(bad: str, fix: str) -> None:
    with pytest.raises(BadInputError) as info:
        torch_specifier(bad)
    assert str(info.value).endswith(fix), info.value
    named = fix.removeprefix("Pass --torch ").split(" ")[0].rstrip(".")
    assert torch_specifier(named) is not None  # the value the fix names parses


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


# --- ordering both ways, and what the parsers refuse word for word (issue 14: mutants the tests above missed) --


@pytest.mark.parametrize(
    ("lower", "higher"),
    [("12.4", "12.10"), ("11.8", "12.0"), ("12.9", "13.0")],
)
def test_major_minor_orders_both_ways_and_is_not_below_itself(lower: str, higher: str) -> None:
    a, b = versions.cuda(lower), versions.cuda(higher)
    assert a < b and not b < a
    assert b > a and not a > b
    assert a <= a and not a < a and a >= a and not a > a


@pytest.mark.parametrize(("older", "newer"), [("570.26", "570.124.06"), ("535.104.05", "550.54.14"), ("580", "580.1")])
def test_driver_orders_both_ways_and_is_not_below_itself(older: str, newer: str) -> None:
    a, b = versions.driver(older), versions.driver(newer)
    assert a < b and not b < a
    assert b > a and not a > b
    assert not a < versions.driver(older) and a <= versions.driver(older)
    assert not versions.driver("580") < versions.driver("580.0.0")


def test_versions_refuse_comparison_with_other_types() -> None:
    with pytest.raises(TypeError):
        _ = versions.cuda("12.4") < "12.5"  # type: ignore[operator]
    with pytest.raises(TypeError):
        _ = versions.driver("535.104.05") < "550"  # type: ignore[operator]
    assert (versions.driver("535") == "535") is False
    assert (versions.driver("535") != "535") is True


def test_equal_drivers_hash_alike() -> None:
    assert hash(versions.driver("580")) == hash(versions.driver("580.0.0"))
    assert len({versions.driver("580"), versions.driver("580.0"), versions.driver("580.0.0")}) == 1
    assert str(versions.driver(" 580.65.06 ")) == "580.65.06"


def test_each_parser_gives_its_value() -> None:
    assert versions.python("3.11") == versions.MajorMinor(3, 11)
    assert versions.cuda("12.4.1") == versions.MajorMinor(12, 4)
    assert versions.cc("9.0") == versions.MajorMinor(9, 0)
    assert versions.driver("535.104.05").parts == (535, 104, 5)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (versions.cuda, "12", "malformed CUDA version '12': expected MAJOR.MINOR such as '12.4'. Pass --cuda 12.4."),
        (
            versions.python,
            "3",
            "malformed Python version '3': expected MAJOR.MINOR such as '3.11'. Pass --python 3.11.",
        ),
        (
            versions.cc,
            "sm_80",
            "malformed compute capability 'sm_80': expected MAJOR.MINOR such as '8.0'. Pass --gpu 8.0.",
        ),
    ],
)
def test_a_malformed_major_minor_is_refused_word_for_word(parse: object, text: str, message: str) -> None:
    with pytest.raises(BadInputError) as info:
        parse(text)  # type: ignore[operator]
    assert str(info.value) == message


def test_components_have_at_most_max_digits() -> None:
    nine = "1" * 9  # MAX_DIGITS
    assert versions.cuda(f"{nine}.{nine}") == versions.MajorMinor(int(nine), int(nine))
    assert versions.driver(f"{nine}.{nine}.{nine}").parts == (int(nine),) * 3
    with pytest.raises(BadInputError):
        versions.cuda(f"1{nine}.0")
    with pytest.raises(BadInputError):
        versions.driver(f"535.1{nine}")
    assert versions.leading_major_minor(f"{nine}.1") == versions.MajorMinor(int(nine), 1)
    assert versions.leading_major_minor(f"1{nine}.1") is None


def test_leading_major_minor_reads_the_first_200_characters() -> None:
    assert versions.leading_major_minor(" " * 196 + "12.4") == versions.MajorMinor(12, 4)
    assert versions.leading_major_minor(" " * 197 + "12.4") is None
