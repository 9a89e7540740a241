"""Exact grammars for the Slurm values envsolver passes on: partition and account names, `--gres`, `--gpus`
and `--constraint`. These values reach srun's argv and sbatch scripts (a shell), so a value is used only when
the whole of it matches; anything else is refused with the expected form. Every pattern has bounded repeats.

Each checker returns the value unchanged or raises GrammarError (a ValueError) saying what was expected.
"""

from __future__ import annotations

import re

MAX_NAME = 128


class GrammarError(ValueError):
    """A value outside its grammar; the message gives the expected form and an example."""


# Partition, account and cluster names, and envsolver's own partition labels: a letter or digit, then letters,
# digits, '_', '.', '-'. (Slurm accepts more, but nothing here needs quoting, ',' or a space.)
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.\-]{{0,{MAX_NAME - 1}}}")
# Source: Slurm's srun(1) and gres.conf(5): --gres=<name>[[:type]:count] (comma-separated list); --gpus=
# [type:]<number>. A GRES name is `gpu` or a site's word; a type is the site's word for the model (`a100`,
# `1g.10gb`, `nvidia_h100_80gb_hbm3`), never all digits (Slurm reads those as the count); a count is a
# positive number.
_WORD = r"[A-Za-z][A-Za-z0-9_]{0,31}"
_TYPE = r"(?![0-9]{1,64}(?![A-Za-z0-9_.\-]))[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}"
_COUNT = r"[1-9][0-9]{0,3}"
_GRES = re.compile(rf"{_WORD}(?::{_TYPE})?(?::{_COUNT})?(?:,{_WORD}(?::{_TYPE})?(?::{_COUNT})?){{0,7}}")
_GPUS = re.compile(rf"(?:{_TYPE}:)?{_COUNT}")
TYPE = re.compile(_TYPE)
# Source: Slurm's srun(1) --constraint: features joined by & (AND), | (OR); a node count `*N` after a feature;
# [ ] for matching OR and multiple counts; ( ) to group. Feature names: letters, digits, '_', '.', '-', ':'.
_FEATURE = re.compile(rf"[A-Za-z0-9_.:\-]{{1,64}}(?:\*{_COUNT})?")
MAX_CONSTRAINT = 256
MAX_DEPTH = 8


def name(text: str, what: str = "partition name") -> str:
    if not isinstance(text, str) or not _NAME.fullmatch(text):
        raise GrammarError(
            f"expected a {what}: a letter or digit, then up to {MAX_NAME - 1} letters, digits, '_', '.' or '-' "
            "(such as 'a100' or 'gpu-h100')"
        )
    return text


def gres(text: str) -> str:
    if not isinstance(text, str) or not _GRES.fullmatch(text):
        raise GrammarError("expected a --gres value NAME[:TYPE][:COUNT], comma-separated (such as 'gpu:a100:1')")
    return text


def gpus(text: str) -> str:
    if not isinstance(text, str) or not _GPUS.fullmatch(text):
        raise GrammarError("expected a --gpus value [TYPE:]COUNT (such as 'a100:1' or '1')")
    return text


def constraint(text: str) -> str:
    """A --constraint expression: features, `*N` counts, `&`, `|`, `[...]` and `(...)`, brackets balanced."""
    if not isinstance(text, str) or not 0 < len(text) <= MAX_CONSTRAINT or not _Constraint(text).parse():
        raise GrammarError(
            "expected a --constraint expression of feature names joined by '&' or '|', with optional '*COUNT', "
            "'[...]' and '(...)' (such as 'a100&ib' or '[rack1|rack2]')"
        )
    return text


class _Constraint:
    """expr := term (('&' | '|') term)*; term := FEATURE | '(' expr ')' | '[' expr ']' (nested at most MAX_DEPTH)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def parse(self) -> bool:
        return self._expr(0) and self.at == len(self.text)

    def _expr(self, depth: int) -> bool:
        if not self._term(depth):
            return False
        while self.at < len(self.text) and self.text[self.at] in "&|":
            self.at += 1
            if not self._term(depth):
                return False
        return True

    def _term(self, depth: int) -> bool:
        if self.at >= len(self.text):
            return False
        opening = self.text[self.at]
        if opening in "([":
            if depth >= MAX_DEPTH:
                return False
            self.at += 1
            if not self._expr(depth + 1):
                return False
            closing = ")" if opening == "(" else "]"
            if self.at >= len(self.text) or self.text[self.at] != closing:
                return False
            self.at += 1
            return True
        match = _FEATURE.match(self.text, self.at)
        if not match:
            return False
        self.at = match.end()
        return True
