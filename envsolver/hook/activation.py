"""Activation scripts for a conda prefix: set the build environment on activate, restore it exactly on
deactivate. Pure rendering; `write` puts them in PREFIX/etc/conda/{activate,deactivate}.d/envsolver.sh.

CUDA_HOME and CPATH point into the prefix only when the probe found the CUDA toolkit there (nvcc and the op
headers: `toolkit`); otherwise the scripts leave both as they are, and deactivate restores only what activate set.

Every activation sources these scripts, so no input text is ever pasted into them: the arch list is parsed and
rebuilt in its canonical form (envsolver.core.archlist), and every literal is single-quoted (shlex.quote), so the
shell expands nothing but the fixed `${CONDA_PREFIX}` and `${CPATH}` references written here.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envsolver.core.archlist import canonical
from envsolver.lock.writers import files

VARIABLES = ("CUDA_HOME", "CPATH", "TORCH_CUDA_ARCH_LIST", "DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR")
TOOLKIT_VARIABLES = ("CUDA_HOME", "CPATH")  # set only for a prefix that holds the toolkit
_UNSET = "__envsolver_unset__"


@dataclass(frozen=True)
class Ref:
    """A reference to a variable: `${NAME}`, or with `append`, `${NAME:+:${NAME}}` (':' and its old value when set)."""

    name: str
    append: bool = False


Part = str | Ref  # a str is a literal, never expanded


def settings(arch_list: str, target: str, toolkit: bool = True) -> dict[str, tuple[Part, ...]]:
    """Each variable as literal parts and references; CUDA_HOME and CPATH only with `toolkit` (the prefix holds
    nvcc and the headers). Raises ValueError on a malformed arch list."""
    out: dict[str, tuple[Part, ...]] = {
        "CUDA_HOME": (Ref("CONDA_PREFIX"),),
        "CPATH": (Ref("CONDA_PREFIX"), f"/targets/{target}/include", Ref("CPATH", append=True)),
        "TORCH_CUDA_ARCH_LIST": (canonical(arch_list),),
        "DS_ACCELERATOR": ("cuda",),
        "TORCH_EXTENSIONS_DIR": (Ref("CONDA_PREFIX"), "/var/cache/torch_extensions"),
    }
    return out if toolkit else {k: v for k, v in out.items() if k not in TOOLKIT_VARIABLES}


def _shell(parts: tuple[Part, ...], known: Mapping[str, str]) -> str:
    """One shell word: literals single-quoted, references double-quoted (or filled in from `known`, quoted)."""
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(shlex.quote(part))
        elif part.name in known and not part.append:
            out.append(shlex.quote(known[part.name]))
        elif part.append:
            out.append(f'"${{{part.name}:+:${{{part.name}}}}}"')
        else:
            out.append(f'"${{{part.name}}}"')
    return "".join(out)


def resolve(parts: tuple[Part, ...], environ: Mapping[str, str]) -> str:
    """The value the shell would give these parts in `environ` (for builds run without a shell)."""
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif part.append:
            out.append(f":{environ[part.name]}" if environ.get(part.name) else "")
        else:
            out.append(environ.get(part.name, ""))
    return "".join(out)


def activate(arch_list: str, target: str, toolkit: bool = True) -> str:
    lines = [
        "# Written by envsolver hook: the build environment for CUDA extensions (DeepSpeed ops).",
        "# deactivate.d/envsolver.sh restores every variable to what it was before.",
    ]
    if not toolkit:
        lines.append(
            "# The prefix held no CUDA toolkit (nvcc and the headers) when the hook ran: CUDA_HOME and CPATH are "
            "left as they are."
        )
    for name, parts in settings(arch_list, target, toolkit).items():
        saved = f"_ENVSOLVER_SAVED_{name}"
        lines.append(f'export {saved}="${{{name}-{_UNSET}}}"')
        lines.append(f"export {name}={_shell(parts, {})}")
    return "\n".join(lines) + "\n"


def deactivate(toolkit: bool = True) -> str:
    lines = ["# Written by envsolver hook: undo activate.d/envsolver.sh."]
    for name in (v for v in VARIABLES if toolkit or v not in TOOLKIT_VARIABLES):
        saved = f"_ENVSOLVER_SAVED_{name}"
        lines.append(
            f'if [ "${{{saved}-{_UNSET}}}" = "{_UNSET}" ]; then unset {name}; else export {name}="${{{saved}}}"; fi'
        )
        lines.append(f"unset {saved}")
    return "\n".join(lines) + "\n"


def exports(prefix: Path, arch_list: str, target: str, toolkit: bool = True) -> str:
    """`export` lines for shells that do not activate (--print-env), with the prefix filled in."""
    known = {"CONDA_PREFIX": str(prefix)}
    out = [f"export CONDA_PREFIX={shlex.quote(str(prefix))}"]
    for name, parts in settings(arch_list, target, toolkit).items():
        out.append(f"export {name}={_shell(parts, known)}")
    return "\n".join(out) + "\n"


def write(
    prefix: Path, arch_list: str, target: str, force: bool = False, toolkit: bool = True
) -> dict[Path, files.Outcome]:
    """Write both scripts. Raises ValueError on a malformed arch list, before anything is written."""
    on_text, off_text = activate(arch_list, target, toolkit), deactivate(toolkit)
    on = prefix / "etc" / "conda" / "activate.d" / "envsolver.sh"
    off = prefix / "etc" / "conda" / "deactivate.d" / "envsolver.sh"
    return {on: files.write(on, on_text, force=force), off: files.write(off, off_text, force=force)}
