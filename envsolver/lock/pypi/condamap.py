"""Which PyPI distributions the conda part of a lock provides, and at which version: what the PyPI part is
resolved around (held at those versions, never installed a second time).

The names come from prefix-dev/parselmouth's conda-forge mapping (data/condamap/, with its provenance and
license; scripts/build_conda_pypi_map.py copies it unchanged): conda name -> the PyPI names of the Python
distributions its packages install (`pytorch` -> `torch`, `hjson-py` -> `hjson`), or null for a package that
installs none (`libgcc`, `ninja`). Read only when a PyPI part is resolved (about 1 MB of JSON).

A record whose name maps to one PyPI name holds that name at the record's version. A name that maps to several
(`msgpack-python` -> msgpack, msgpack-python) holds the one the knowledge base's pypi_conda_names names for it
(msgpack), the others at no known version: their versions are the bundled distributions' own, which the mapping
does not give. A record the mapping does not know is never guessed. But every name the conda part occupies
without a held version (those, the unknown records' own names, a version that is not PEP 440) is `occupied`: a
PyPI file of that name would be a likely second copy, and is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envsolver.kb.model import KnowledgeBase


class Named(Protocol):
    """A conda record as far as this module reads it (lock.solve.Record, lock.snapshot.SnapshotRecord)."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...


@dataclass(frozen=True)
class CondaProvides:
    """held: PyPI name -> the exact version the conda part provides; occupied: a name (PyPI's normalized form)
    the conda part takes without a known PyPI version -> the conda package that takes it; by: PyPI name -> the
    conda package that provides it (held and occupied alike)."""

    held: dict[str, str]
    occupied: dict[str, str]
    by: dict[str, str]


def data_dir() -> Path:
    return Path(str(resources.files("envsolver.lock.pypi").joinpath("data").joinpath("condamap")))


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


def conda_provides(records: Sequence[Named], kb: KnowledgeBase) -> CondaProvides:
    """What the conda records provide to PyPI (see the module docstring)."""
    table = mapping()
    confirmed = {(row.conda, row.pypi) for row in kb.pypi_conda_names if row.provides_dist}
    held: dict[str, str] = {}
    occupied: dict[str, str] = {}
    by: dict[str, str] = {}
    for record in sorted(records, key=lambda r: (r.name, r.version)):
        names = table.get(record.name)
        try:
            version: str | None = str(Version(record.version))
        except InvalidVersion:
            version = None
        versioned: tuple[str, ...] = ()
        if names and version is not None:
            versioned = names if len(names) == 1 else tuple(n for n in names if (record.name, n) in confirmed)
        for name in versioned:
            held[name] = version or ""
            by[name] = record.name
        for name in (*(names or ()), str(canonicalize_name(record.name))):
            if name not in versioned:
                occupied.setdefault(name, record.name)
                by.setdefault(name, record.name)
    return CondaProvides(held, {n: c for n, c in occupied.items() if n not in held}, by)


def held_by_conda(records: Sequence[Named], kb: KnowledgeBase) -> dict[str, str]:
    """PyPI name -> the version the conda records provide (`pytorch 2.9.1` -> `torch: 2.9.1`)."""
    return conda_provides(records, kb).held
