"""The PyPI distributions that carry CUDA libraries (and triton) for PyPI's torch: what a lock's PyPI part never
holds beside the conda part's CUDA libraries. Data, written by scripts/build_pypi_snapshot.py from uv's resolve of
`torch==V` for Linux (data/cuda_wheels.json: torch's Requires-Dist marked for Linux and not macOS, and the nvidia-*
those require, per torch release); read only when a project's PyPI requirements are checked or resolved."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any


def path() -> Path:
    return Path(str(resources.files("envsolver.kb").joinpath("data").joinpath("cuda_wheels.json")))


@lru_cache(maxsize=1)
def names() -> dict[str, tuple[str, ...]]:
    """CUDA library wheel name (PEP 503) -> the torch releases whose Linux wheels pull it in."""
    doc: dict[str, Any] = json.loads(path().read_text(encoding="utf-8"))
    return {str(name): tuple(versions) for name, versions in doc["names"].items()}
