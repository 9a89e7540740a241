"""Which PyPI distributions a conda package provides: the one answer for verify's pip_conda_mix check, for install's
removal of PyPI copies over the conda part, and for whatever else must keep PyPI's torch out of a conda part.

Today it answers from the KB's pypi_conda_names rows (kb/data/conda.yaml, each with its source): the Python packages
the stack locks (pytorch -> torch, triton, numpy, DeepSpeed's requirements) and NVIDIA's CUDA library wheels beside
the conda-forge package of each library (libcublas -> nvidia-cublas-cu12, nvidia-cublas). A fuller conda -> PyPI
mapping (prefix-dev/parselmouth's) is meant to answer here, behind the same function.
"""

from __future__ import annotations

from dataclasses import dataclass

from envsolver.kb.model import KnowledgeBase


@dataclass(frozen=True)
class Provided:
    """A PyPI distribution (PEP 503 name) a conda package provides. own: the conda package installs that distribution
    itself (pytorch's files include torch-X.dist-info); False: it holds what the PyPI project carries, the library or
    program, without the project's distribution (libcublas and nvidia-cublas-cu12; conda-forge's ninja)."""

    pypi: str
    own: bool


def provided_by(kb: KnowledgeBase, conda: str) -> tuple[Provided, ...]:
    """The PyPI distributions the conda package CONDA provides, as far as the knowledge base knows (none: unknown)."""
    return tuple(Provided(row.pypi, row.provides_dist) for row in kb.pypi_conda_names if row.conda == conda)


def own_names(kb: KnowledgeBase) -> dict[str, str]:
    """conda name -> the PyPI distribution the conda package installs itself (pytorch -> torch), where the knowledge
    base knows one: what `envsolver diff` matches a conda package and a PyPI one by."""
    return {row.conda: row.pypi for row in kb.pypi_conda_names if row.provides_dist}
