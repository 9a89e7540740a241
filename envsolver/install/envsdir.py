"""`install -n NAME`: the prefix conda's `-n NAME` names, a directory NAME under the first envs directory;
`hook -n NAME`: an existing environment NAME, wherever conda, mamba or envsolver made it.

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

from envsolver.core import boundedread, names
from envsolver.core.errors import BadInputError
from envsolver.install import envkind

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


MAX_ENVIRONMENTS_TXT = 1 << 20  # conda's registry of environments: one path per line


def _check(name: str) -> None:
    why = names.problem(name)
    if why is not None:
        raise BadInputError(
            f"environment name {name!r} cannot be used: {why}. Pass -n {shlex.quote(names.suggest(name))}, or "
            "-p PREFIX for an environment directory of your choice."
        )


def candidates(name: str, environ: Mapping[str, str]) -> list[Path]:
    """Where an existing environment NAME may be, in conda's order of envs directories: every CONDA_ENVS_DIRS
    (CONDA_ENVS_PATH) entry, the root prefix's envs (CONDA_ROOT, MAMBA_ROOT_PREFIX, or CONDA_EXE's
    installation), ~/.conda/envs, then any path ending in /NAME that conda recorded in ~/.conda/environments.txt
    (conda and mamba add every environment they create there)."""
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    dirs = [
        Path(os.path.expanduser(_expandvars(entry, environ))).absolute()
        for var in VARIABLES
        for entry in _entries(environ.get(var, ""))
    ]
    roots = [environ.get("CONDA_ROOT", ""), environ.get("MAMBA_ROOT_PREFIX", "")]
    exe = environ.get("CONDA_EXE", "")
    if exe:
        roots.append(str(Path(exe).parent.parent))
    dirs += [Path(r) / "envs" for r in roots if r]
    dirs.append(home / ".conda" / "envs")
    found = [d / name for d in dirs]
    try:  # a regular file only: a FIFO there is skipped at once (core.boundedread)
        listed = boundedread.read_head(home / ".conda" / "environments.txt", MAX_ENVIRONMENTS_TXT)
    except (OSError, boundedread.Refused):
        listed = b""
    names = listed.decode("utf-8", "replace").splitlines()
    found += [Path(line.strip()) for line in names if line.strip().startswith("/") and Path(line.strip()).name == name]
    return list(dict.fromkeys(found))


def existing(name: str, environ: Mapping[str, str]) -> Path:
    """The prefix of the existing environment NAME (one with conda-meta/), found where conda would create it
    (candidates). Raises BadInputError naming where it looked when there is none."""
    _check(name)
    places = candidates(name, environ)
    for place in places:
        if envkind.of_path(place) == "conda":
            return place
    shown = ", ".join(str(p) for p in places[:6])
    raise BadInputError(
        f"no environment named {name!r} (looked in {shown}). Pass -p PREFIX with the environment's directory "
        "(`conda env list` shows it), or create it first."
    )


def prefix_for(name: str, environ: Mapping[str, str]) -> Path:
    """ENVS_DIR/NAME for a valid conda environment name. Raises BadInputError with a fix for a name conda would
    refuse (names.problem: '/', ' ', ':', '#', 'base', 'root', a leading '-', ...)."""
    _check(name)
    directory, _ = envs_dir(environ)
    return directory / name
