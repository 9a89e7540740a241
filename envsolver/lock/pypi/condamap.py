"""Which PyPI distributions the conda part of a lock provides, and at which version: what the PyPI part is
resolved around (held at those versions, never installed a second time).

The names come from prefix-dev/parselmouth's conda-forge mapping (kb/condamap, its one home): conda name -> the
PyPI names of the Python distributions its packages install (`pytorch` -> `torch`, `hjson-py` -> `hjson`), or
null for a package that installs none (`libgcc`, `ninja`).

A record whose name maps to one PyPI name holds that name at the record's version. A name that maps to several
(`msgpack-python` -> msgpack, msgpack-python) holds the one the knowledge base's pypi_conda_names names for it
(msgpack), the others at no known version: their versions are the bundled distributions' own, which the mapping
does not give. A record the mapping does not know is never guessed. But every name the conda part occupies
without a held version (those, the unknown records' own names, a version that is not PEP 440) is `occupied`: a
PyPI file of that name would be a likely second copy, and is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envsolver.kb import condamap as kb_condamap
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


def conda_provides(records: Sequence[Named], kb: KnowledgeBase) -> CondaProvides:
    """What the conda records provide to PyPI (see the module docstring)."""
    table = kb_condamap.mapping()
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
