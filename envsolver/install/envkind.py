"""What kind of environment a directory is: the one home of that rule, for install's refusal and verify's fixes.

A conda environment is a directory with conda-meta/ (conda's own test: `conda install -p DIR` refuses an
existing DIR without it, "The target directory exists, but it is not a conda environment"). A Python virtual
environment is a directory with pyvenv.cfg (PEP 405). verify learns the same two facts from its probe, which
runs in the environment's python (probe.py reports them as python.conda_meta and python.pyvenv_cfg).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from envsolver.core.errors import BadInputError

# conda: conda-meta/ present; venv: pyvenv.cfg and no conda-meta/; other: neither (a system python, any directory)
Kind = Literal["conda", "venv", "other"]
# What each kind is called in a message.
NAMES: dict[Kind, str] = {
    "conda": "a conda environment",
    "venv": "a Python virtual environment (pyvenv.cfg, no conda-meta/)",
    "other": "not a conda environment (no conda-meta/)",
}


def kind(conda_meta: bool, pyvenv_cfg: bool) -> Kind:
    """The rule: conda-meta/ makes a conda environment (a conda env may hold a pyvenv.cfg too); else pyvenv.cfg a
    virtual environment; else neither."""
    if conda_meta:
        return "conda"
    return "venv" if pyvenv_cfg else "other"


def of_path(prefix: Path) -> Kind:
    """The kind of the directory PREFIX, read here."""
    return kind((prefix / "conda-meta").is_dir(), (prefix / "pyvenv.cfg").is_file())


def of_facts(facts: Mapping[str, Any]) -> Kind | None:
    """The kind of the environment verify's probe ran in (its sys.prefix), from the probe's facts; None when the
    facts do not say (a probe older than these facts)."""
    python = facts.get("python")
    if not isinstance(python, Mapping) or not isinstance(python.get("conda_meta"), bool):
        return None
    return kind(python["conda_meta"], python.get("pyvenv_cfg") is True)


def installable(prefix: Path, lock: Path) -> None:
    """Refuse to install a lock into PREFIX when PREFIX is a directory that holds something and is not a conda
    environment (a pip venv, a home directory): linking the lock's packages would overwrite its files, and conda
    refuses it too. A missing or empty directory, or a conda environment, is fine. Raises BadInputError (exit 2)
    naming why and a new prefix to use instead."""
    try:
        if not prefix.is_dir() or of_path(prefix) == "conda":
            return
        with os.scandir(prefix) as entries:
            if next(entries, None) is None:
                return
    except OSError:
        return  # unreadable: the install itself names that error
    raise BadInputError(
        f"{str(prefix)!r} is {NAMES[of_path(prefix)]} and is not empty: installing the lock into it would write "
        "conda packages over its files (conda refuses such a directory too); nothing was changed. Install into a "
        f"new directory instead: envsolver install {shlex.quote(str(lock))} -p NEW_PREFIX"
    )
