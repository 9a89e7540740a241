"""conda-forge name -> the PyPI distributions its packages install: prefix-dev/parselmouth's conda-forge mapping
(data/condamap/compressed_mapping.json, copied unchanged with its provenance and license by
scripts/build_conda_pypi_map.py; `pytorch` -> `torch`, `hjson-py` -> `hjson`, null for a package that installs none,
such as `libgcc` or `ninja`). The one home of the mapping; the PyPI part's resolve (lock/pypi/condamap) reads it.
About 1 MB of JSON, read on first use only."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name


def data_dir() -> Path:
    return Path(str(resources.files("envsolver.kb").joinpath("data").joinpath("condamap")))


@lru_cache(maxsize=1)
def mapping() -> Mapping[str, tuple[str, ...] | None]:
    """conda-forge name -> the normalized PyPI names it installs (None: none). Raises OSError or ValueError for
    a bundled file that cannot be read (an envsolver bug: tests read it)."""
    doc: Any = json.loads((data_dir() / "compressed_mapping.json").read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("the bundled conda -> PyPI mapping is not a JSON object")
    out: dict[str, tuple[str, ...] | None] = {}
    for conda, names in doc.items():
        if names is None:
            out[conda] = None
        elif isinstance(names, list) and all(isinstance(n, str) for n in names):
            out[conda] = tuple(sorted({str(canonicalize_name(n)) for n in names}))
        else:
            raise ValueError(f"the bundled conda -> PyPI mapping's entry {conda[:80]!r} is not a list of names")
    return out


@lru_cache(maxsize=1)
def provenance() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((data_dir() / "provenance.json").read_text(encoding="utf-8"))
    return doc
