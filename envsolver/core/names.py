"""The environment name given to `make --name`: conda's rule, plus what keeps it one safe token everywhere.

The name is written into environment.yml (`name:`), into the "Regenerate with" command of every file's
header, and onto command lines the user copies; conda later makes it a directory under its envs dirs.
"""

from __future__ import annotations

import re
import shlex

from envsolver.core.errors import BadInputError

# conda's rule, conda 25.x: conda/base/constants.py PREFIX_NAME_DISALLOWED_CHARS = {"/", " ", ":", "#"} and
# RESERVED_ENV_NAMES = ("base", "root"), checked by PrefixData.validate_name in conda/core/prefix_data.py
# ("Environment names cannot contain any of these characters"; "'base' is a reserved environment name");
# conda/base/context.py locate_prefix_by_name: "'name' cannot be empty."
# https://github.com/conda/conda/blob/main/conda/core/prefix_data.py
CONDA_DISALLOWED = frozenset("/ :#")
CONDA_RESERVED = ("base", "root")
# envsolver's additions, so the name stays one line of YAML and of a `#` comment, one shell word and one
# directory name: no whitespace, line break, control or format character (str.isprintable, which also
# refuses U+0085, U+2028/2029, U+FEFF, surrogates and unassigned code points); not '.' or '..' (the envs
# directory itself or its parent); no leading '-' (conda and conda-lock would read it as an option); at
# most 255 bytes in UTF-8 (NAME_MAX, the longest directory name Linux file systems take).
NAME_MAX_BYTES = 255
FALLBACK = "train"


def problem(name: str) -> str | None:
    """Why `name` is not a usable environment name, or None when it is one."""
    if not name:
        return "it is empty"
    if name in CONDA_RESERVED:
        return "conda reserves it for its base environment"
    if name in (".", ".."):
        return "it would name the envs directory itself or its parent"
    bad = sorted({ch for ch in name if ch in CONDA_DISALLOWED or ch.isspace() or not ch.isprintable()})
    if bad:
        return (
            f"it contains {', '.join(repr(ch) for ch in bad)} (conda refuses '/', ' ', ':' and '#'; "
            "envsolver also refuses whitespace, line breaks and other non-printable characters)"
        )
    if name.startswith("-"):
        return "it starts with '-', which conda would read as an option"
    if len(name.encode("utf-8")) > NAME_MAX_BYTES:
        return f"it is longer than {NAME_MAX_BYTES} bytes in UTF-8, the longest directory name Linux allows"
    return None


def suggest(name: str) -> str:
    """A valid name close to `name`: every refused character becomes '-', then trimmed; FALLBACK otherwise."""
    text = "".join("-" if ch in CONDA_DISALLOWED or ch.isspace() or not ch.isprintable() else ch for ch in name)
    text = re.sub(r"-{2,}", "-", text).strip("-")
    while len(text.encode("utf-8")) > NAME_MAX_BYTES:
        text = text[:-1].rstrip("-")
    return text if problem(text) is None else FALLBACK


def validate(name: str) -> str:
    """`name` unchanged when it is a valid environment name. Raises BadInputError (exit 2) with a fix."""
    why = problem(name)
    if why is None:
        return name
    raise BadInputError(
        f"environment name {name!r} cannot be used: {why}. Expected a name such as 'train' or "
        f"'envsolver-a100'. Pass --name {shlex.quote(suggest(name))}, or leave --name out for envsolver-<gpus>."
    )
