"""Whether a conda version matches the version part of a dependency, as conda orders versions. Pure.

Only what the snapshot's CUDA ties use, read the way conda reads them (conda/models/version.py; the match-spec
grammar: https://docs.conda.io/projects/conda-build/en/stable/resources/package-spec.html#package-match-specifications).
Samples from conda-forge records:
    "cuda-version >=12,<13.0a0"   "cuda-version >=12.2a.0,<13.0a0"   "cudatoolkit 10.1|10.1.*"   "cudatoolkit 11.*"
`|` is or, `,` is and (and binds tighter); a bare version is exact (`1.8` matches 1.8 and 1.8.0, not 1.8.1);
`X.Y.*` (or `X.Y*`) matches what starts with X.Y. Versions compare component by component (`.` and `_`
separate them); inside one, numbers and letters alternate, a letter run sorts below any number ('13.0a0' <
'13.0'), a missing part counts as 0. What this module does not read (an epoch, a local part, `~=`, a regex, `dev`
and `post`) gives None: the caller must then treat the dependency as met, never as refused.
"""

from __future__ import annotations

import re
from functools import lru_cache

_PART = re.compile(r"[0-9]+|[a-z]+")
_VERSION = re.compile(r"[0-9][0-9a-z._]*")
_OPERATORS = (">=", "<=", "==", "!=", ">", "<")

Element = int | str
Key = tuple[tuple[Element, ...], ...]


@lru_cache(maxsize=4096)
def key(version: str) -> Key | None:
    """conda's order of `version` as a comparable key; None where it holds what this module does not read."""
    text = version.strip().lower()
    if not _VERSION.fullmatch(text) or "dev" in text or "post" in text:
        return None
    out = []
    for component in text.replace("_", ".").split("."):
        if not component:
            return None
        parts: list[Element] = [int(p) if p.isdigit() else p for p in _PART.findall(component)]
        if isinstance(parts[0], str):
            parts.insert(0, 0)
        out.append(tuple(parts))
    return tuple(out)


def _compare(a: Key, b: Key) -> int:
    """-1, 0 or 1 as conda orders a and b: a missing component or element is 0, a letter run below a number."""
    for i in range(max(len(a), len(b))):
        x, y = a[i] if i < len(a) else (0,), b[i] if i < len(b) else (0,)
        for j in range(max(len(x), len(y))):
            p, q = x[j] if j < len(x) else 0, y[j] if j < len(y) else 0
            if p == q:
                continue
            if isinstance(p, int) != isinstance(q, int):
                return 1 if isinstance(p, int) else -1
            return 1 if p > q else -1  # type: ignore[operator]  # both int or both str here
    return 0


def _starts_with(value: Key, prefix: Key) -> bool:
    """Whether `value`'s leading components are `prefix`'s (its last one as a leading run of elements)."""
    if len(value) < len(prefix):
        value = value + ((0,),) * (len(prefix) - len(value))
    head, last = prefix[:-1], prefix[-1]
    return value[: len(head)] == head and value[len(head)][: len(last)] == last


def _term(value: Key, term: str) -> bool | None:
    op = next((o for o in _OPERATORS if term.startswith(o)), "")
    text = term[len(op) :]
    if text.endswith("*"):
        if op not in ("", "=="):
            return None
        prefix = key(text.rstrip("*").rstrip("."))
        return None if prefix is None else _starts_with(value, prefix)
    bound = key(text)
    if bound is None:
        return None
    order = _compare(value, bound)
    return {
        "": order == 0,
        "==": order == 0,
        "!=": order != 0,
        ">=": order >= 0,
        "<=": order <= 0,
        ">": order > 0,
        "<": order < 0,
    }[op]


@lru_cache(maxsize=4096)
def matches(version: str, spec: str) -> bool | None:
    """Whether `version` matches `spec` (the version part of a dependency: '>=12,<13.0a0', '10.1|10.1.*');
    True for an empty spec or '*'; None where either holds what this module does not read."""
    value = key(version)
    if value is None:
        return None
    spec = spec.strip()
    if spec in ("", "*"):
        return True
    unknown = False
    for alternative in spec.split("|"):
        results = [_term(value, term.strip()) for term in alternative.split(",")]
        if any(r is False for r in results):
            continue
        if all(r is True for r in results):
            return True
        unknown = True
    return None if unknown else False
