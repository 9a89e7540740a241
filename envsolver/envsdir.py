"""`install -n NAME`: the prefix conda's `-n NAME` names, a directory NAME under the first envs directory.

The envs directory is chosen as conda chooses it where that is cheap and safe: the first entry of
CONDA_ENVS_DIRS (or its alias CONDA_ENVS_PATH), a list separated by os.pathsep whose entries may hold `~` and
$VARIABLES (conda/base/context.py: `_envs_dirs = ParameterLoader(SequenceParameter(...,
string_delimiter=os.pathsep), aliases=("envs_dirs", "envs_path"), expandvars=True)`); else `~/.conda/envs`,
the user envs directory conda falls back to. conda would first try ROOT_PREFIX/envs; envsolver does not read
conda's configuration files, so pass -p PREFIX for another place. Pure: the environment is passed in.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from envsolver import names
from envsolver.errors import BadInputError

VARIABLES = ("CONDA_ENVS_DIRS", "CONDA_ENVS_PATH")
_VAR = re.compile(r"\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})")


def _entries(value: str) -> list[str]:
    return [entry.strip() for entry in value.split(os.pathsep) if entry.strip()]


def envs_dir(environ: Mapping[str, str]) -> tuple[Path, str]:
    """(the envs directory, where that came from). Raises BadInputError when CONDA_ENVS_DIRS and
    CONDA_ENVS_PATH are both set to different lists (conda refuses that too)."""
    given = {var: _entries(environ.get(var, "")) for var in VARIABLES}
    both = [var for var in VARIABLES if given[var]]
    if len(both) == 2 and given[both[0]] != given[both[1]]:
        raise BadInputError(
            "CONDA_ENVS_DIRS and CONDA_ENVS_PATH are both set, to different directories, so the envs directory "
            "is ambiguous. Unset one of them (`unset CONDA_ENVS_PATH`), or pass -p PREFIX instead of -n NAME."
        )
    for var in both[:1]:
        first = given[var][0]
        expanded = os.path.expanduser(_expandvars(first, environ))
        return Path(expanded).absolute(), f"{var} (first entry)"
    home = environ.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".conda" / "envs", "the default, ~/.conda/envs"


def _expandvars(text: str, environ: Mapping[str, str]) -> str:
    """$VAR and ${VAR} from `environ` (os.path.expandvars reads os.environ); unknown ones stay as they are."""
    return _VAR.sub(lambda m: environ.get(m.group(1) or m.group(2), m.group(0)), text)


def prefix_for(name: str, environ: Mapping[str, str]) -> Path:
    """ENVS_DIR/NAME for a valid conda environment name. Raises BadInputError with a fix for a name conda would
    refuse (names.problem: '/', ' ', ':', '#', 'base', 'root', a leading '-', ...)."""
    why = names.problem(name)
    if why is not None:
        raise BadInputError(
            f"environment name {name!r} cannot be used: {why}. Pass -n {shlex.quote(names.suggest(name))}, or "
            "-p PREFIX for an environment directory of your choice."
        )
    directory, _ = envs_dir(environ)
    return directory / name
