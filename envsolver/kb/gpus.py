"""GPU name lookup: case, spaces, dashes and underscores are ignored; unknown names get the 3 closest."""

from __future__ import annotations

import difflib
import re

from envsolver.errors import UnknownGpuError
from envsolver.kb.model import Gpu, KnowledgeBase

# Vendor words nvidia-smi puts before a model name ("NVIDIA GeForce RTX 4090", "Tesla T4").
_VENDOR_WORDS = ("nvidia", "geforce", "tesla", "quadro")


def normalize(name: str) -> str:
    return re.sub(r"[\s\-_]+", "", name.strip().lower())


def _without_vendor(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for word in _VENDOR_WORDS:
            if key.startswith(word) and len(key) > len(word):
                key = key[len(word) :]
                changed = True
    return key


def index(kb: KnowledgeBase) -> dict[str, Gpu]:
    table: dict[str, Gpu] = {}
    for gpu in kb.gpus:
        for name in gpu.all_names:
            table.setdefault(normalize(name), gpu)
    return table


def lookup(kb: KnowledgeBase, name: str) -> Gpu:
    """The GPU for a key, alias or nvidia-smi name. Raises UnknownGpuError with the 3 closest names."""
    table = index(kb)
    key = normalize(name)
    for attempt in (key, _without_vendor(key)):
        if attempt in table:
            return table[attempt]
    raise UnknownGpuError(name, closest(kb, name))


def closest(kb: KnowledgeBase, name: str, n: int = 3) -> list[str]:
    """The n known names (keys and aliases, as written in the KB) nearest to `name`."""
    spelled = {normalize(alias): alias for gpu in kb.gpus for alias in (gpu.key, *gpu.aliases)}
    key = _without_vendor(normalize(name))
    matches = difflib.get_close_matches(key, list(spelled), n=n, cutoff=0.0)
    return [spelled[m] for m in matches]
