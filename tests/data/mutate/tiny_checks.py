"""The checks of tiny.py, given to pytest by name (the file name keeps the main suite from collecting them)."""

from tiny import clamp, halve_until, is_adult


def test_is_adult() -> None:
    assert is_adult(30)
    assert not is_adult(5)


def test_clamp() -> None:
    assert clamp(3, 10) == 3
    assert clamp(12, 10) == 10


def test_halve_until() -> None:
    assert halve_until(40, 6) == 5
    assert halve_until(3, 6) == 3
    assert halve_until(12, 6) == 6
