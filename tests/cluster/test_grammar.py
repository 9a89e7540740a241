"""The Slurm value grammars: what reaches srun's argv and sbatch scripts is exactly what they accept."""

from __future__ import annotations

import shlex
from collections.abc import Callable

import pytest

from envsolver.cluster import grammar

GOOD: list[tuple[Callable[[str], str], str]] = [
    (grammar.name, "a100"),
    (grammar.name, "gpu-h100.long_name"),
    (grammar.name, "0debug"),
    (grammar.gres, "gpu:a100:1"),
    (grammar.gres, "gpu:1"),
    (grammar.gres, "gpu:a100"),
    (grammar.gres, "gpu:1g.10gb:2"),
    (grammar.gres, "gpu:nvidia_h100_80gb_hbm3:8"),
    (grammar.gres, "gpu:a100:1,nvme:1"),
    (grammar.gpus, "1"),
    (grammar.gpus, "a100:4"),
    (grammar.constraint, "a100"),
    (grammar.constraint, "a100&ib"),
    (grammar.constraint, "[rack1|rack2]"),
    (grammar.constraint, "[rack1*2&rack2*4]"),
    (grammar.constraint, "(a100|h100)&ib"),
    (grammar.constraint, "gpu_sku:V100"),
]
BAD: list[tuple[Callable[[str], str], str]] = [
    (grammar.name, ""),
    (grammar.name, "-a"),
    (grammar.name, "a b"),
    (grammar.name, "a,b"),
    (grammar.name, "a;id"),
    (grammar.name, "$(id)"),
    (grammar.name, "a\nb"),
    (grammar.name, "x" * 129),
    (grammar.gres, "gpu:0"),
    (grammar.gres, "gpu:a100:1 "),
    (grammar.gres, "gpu::1"),
    (grammar.gres, "gpu:a100:1;id"),
    (grammar.gres, ":1"),
    (grammar.gpus, "0"),
    (grammar.gpus, "a100:"),
    (grammar.gpus, "a100:1:2"),
    (grammar.constraint, ""),
    (grammar.constraint, "a&"),
    (grammar.constraint, "&a"),
    (grammar.constraint, "[a|b"),
    (grammar.constraint, "(a]"),
    (grammar.constraint, "a b"),
    (grammar.constraint, "a`id`"),
    (grammar.constraint, "(" * 9 + "a" + ")" * 9),
    (grammar.constraint, "a&" * 200 + "a"),
]


@pytest.mark.parametrize(("check", "text"), GOOD, ids=[f"{c.__name__}:{t}" for c, t in GOOD])
def test_accepted(check: Callable[[str], str], text: str) -> None:
    assert check(text) == text


@pytest.mark.parametrize(("check", "text"), BAD, ids=[f"{c.__name__}:{t!r}"[:60] for c, t in BAD])
def test_refused_with_the_expected_form(check: Callable[[str], str], text: str) -> None:
    with pytest.raises(grammar.GrammarError, match="expected"):
        check(text)


@pytest.mark.parametrize(("check", "text"), GOOD, ids=[f"{c.__name__}:{t}" for c, t in GOOD])
def test_accepted_values_are_one_shell_word_once_quoted(check: Callable[[str], str], text: str) -> None:
    assert shlex.split(shlex.quote(check(text))) == [text]
    assert "\n" not in text and " " not in text
