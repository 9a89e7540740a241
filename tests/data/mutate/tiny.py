"""A tiny module for tests/test_mutate.py: mutants its checks kill, mutants they miss, one that changes nothing."""

LIMIT = 18


def is_adult(age: int) -> bool:
    """Its checks never try 18: the boundary mutant `>=` -> `>` survives."""
    return age >= LIMIT


def clamp(value: int, high: int) -> int:
    """`>=` -> `>` here is equivalent: at value == high both branches give the same number."""
    return high if value >= high else value


def halve_until(value: int, limit: int) -> int:
    """Deleting the halving, or halving by 1, loops for ever: those mutants end on the timeout. Each turn pauses,
    so that a mutant that loops waits for its timeout rather than spinning a CPU (deleting the pause is
    equivalent)."""
    import time

    while value > limit:
        value = value // 2
        time.sleep(0.01)
    return value


def describe(age: int) -> str:
    """No check calls it: its `return None` mutant survives, which the report flags on a public function."""
    return "adult" if is_adult(age) else "minor"
