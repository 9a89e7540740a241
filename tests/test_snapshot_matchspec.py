"""lock/snapshot/matchspec: conda's version order and the version part of a dependency, on the forms the
snapshot's CUDA ties use (samples from its records), and None (never a refusal) for what it does not read."""

from __future__ import annotations

import pytest

from envsolver.lock.snapshot import matchspec


@pytest.mark.parametrize(
    ("version", "spec", "expected"),
    [
        # cudnn 9.x: cuda-version >=12,<13.0a0 (13.0a0 sorts below 13.0)
        ("12.9", ">=12,<13.0a0", True),
        ("12.0", ">=12,<13.0a0", True),
        ("13.0", ">=12,<13.0a0", False),
        ("11.8", ">=12,<13.0a0", False),
        # nccl 2.28.9: >=12.2a.0 admits 12.2 itself, not 12.1
        ("12.2", ">=12.2a.0,<13.0a0", True),
        ("12.1", ">=12.2a.0,<13.0a0", False),
        # libcublas-dev 12.9: a minor's own window, 12.10 above 12.9
        ("12.9", ">=12.9,<12.10.0a0", True),
        ("12.10", ">=12.9,<12.10.0a0", False),
        ("13.0", ">=13.0,<14", True),
        # cudnn 7.6.5: cudatoolkit 10.1|10.1.*; the bare version is exact (10.1 == 10.1.0)
        ("10.1.243", "10.1|10.1.*", True),
        ("10.1.0", "10.1", True),
        ("10.1.243", "10.1", False),
        ("11.8.0", "10.1|10.1.*", False),
        ("11.5.2", "11.*", True),
        ("13.0.1", "13.0|13.0.*", True),
        ("12.0.1", "13.0|13.0.*", False),
        ("1.10", "1.1.*", False),  # components, not characters
        ("2.0", "!=2.0", False),
        ("2.0", "<=2", True),
        ("2.0", "", True),
        ("2.0", "*", True),
    ],
    ids=lambda v: repr(v),
)
def test_matches(version: str, spec: str, expected: bool) -> None:
    assert matchspec.matches(version, spec) is expected, (version, spec)


@pytest.mark.parametrize(
    ("version", "spec"),
    [("1!2.0", ">=1"), ("2.0", "~=2.0"), ("2.0", ">=1.0.dev0"), ("2.0", "^2.*$"), ("2.0", ">2.*")],
    ids=lambda v: repr(v),
)
def test_what_it_does_not_read_is_unknown_not_refused(version: str, spec: str) -> None:
    assert matchspec.matches(version, spec) is None, (version, spec)


def test_an_unknown_term_does_not_hide_a_refusal_in_the_same_alternative() -> None:
    assert matchspec.matches("13.0", "~=12.0,<13.0a0") is False
    assert matchspec.matches("13.0", "~=12.0|13.0") is True


def _key(version: str) -> matchspec.Key:
    found = matchspec.key(version)
    assert found is not None, version
    return found


@pytest.mark.parametrize(
    ("lower", "higher"),
    [("12.2a.0", "12.2"), ("12.2", "12.2.0.1"), ("12.2.0.1", "12.10"), ("12.10", "13.0a0"), ("13.0a0", "13.0")],
)
def test_conda_order(lower: str, higher: str) -> None:
    """A letter run sorts below a number, a missing part counts as 0, components compare as numbers."""
    assert matchspec._compare(_key(lower), _key(higher)) == -1, (lower, higher)
    assert matchspec._compare(_key(higher), _key(lower)) == 1, (lower, higher)


def test_a_missing_part_is_zero() -> None:
    assert matchspec._compare(_key("12.2"), _key("12.2.0")) == 0
