"""Activation scripts for a conda prefix: set the build environment on activate, restore it exactly on
deactivate. Pure rendering; `write` puts them in PREFIX/etc/conda/{activate,deactivate}.d/envsolver.sh."""

from __future__ import annotations

import shlex
from pathlib import Path

from envsolver.writers import files

VARIABLES = ("CUDA_HOME", "CPATH", "TORCH_CUDA_ARCH_LIST", "DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR")
_UNSET = "__envsolver_unset__"


def settings(arch_list: str, target: str) -> dict[str, str]:
    """The variables and their values, with $CONDA_PREFIX left for the shell to expand."""
    return {
        "CUDA_HOME": "${CONDA_PREFIX}",
        "CPATH": f"${{CONDA_PREFIX}}/targets/{target}/include${{CPATH:+:${{CPATH}}}}",
        "TORCH_CUDA_ARCH_LIST": arch_list,
        "DS_ACCELERATOR": "cuda",
        "TORCH_EXTENSIONS_DIR": "${CONDA_PREFIX}/var/cache/torch_extensions",
    }


def _value(text: str) -> str:
    """Double-quote for the shell, keeping ${...} expansions; arch lists hold ';' and '+'."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'


def activate(arch_list: str, target: str) -> str:
    lines = [
        "# Written by envsolver hook: the build environment for CUDA extensions (DeepSpeed ops).",
        "# deactivate.d/envsolver.sh restores every variable to what it was before.",
    ]
    for name, value in settings(arch_list, target).items():
        saved = f"_ENVSOLVER_SAVED_{name}"
        lines.append(f'export {saved}="${{{name}-{_UNSET}}}"')
        lines.append(f"export {name}={_value(value)}")
    return "\n".join(lines) + "\n"


def deactivate() -> str:
    lines = ["# Written by envsolver hook: undo activate.d/envsolver.sh."]
    for name in VARIABLES:
        saved = f"_ENVSOLVER_SAVED_{name}"
        lines.append(
            f'if [ "${{{saved}-{_UNSET}}}" = "{_UNSET}" ]; then unset {name}; else export {name}="${{{saved}}}"; fi'
        )
        lines.append(f"unset {saved}")
    return "\n".join(lines) + "\n"


def exports(prefix: Path, arch_list: str, target: str) -> str:
    """`export` lines for shells that do not activate (--print-env), with the prefix filled in."""
    root = shlex.quote(str(prefix))
    out = [f"export CONDA_PREFIX={root}"]
    for name, value in settings(arch_list, target).items():
        out.append(f"export {name}={_value(value)}")
    return "\n".join(out) + "\n"


def write(prefix: Path, arch_list: str, target: str, force: bool = False) -> dict[Path, files.Outcome]:
    on = prefix / "etc" / "conda" / "activate.d" / "envsolver.sh"
    off = prefix / "etc" / "conda" / "deactivate.d" / "envsolver.sh"
    return {
        on: files.write(on, activate(arch_list, target), force=force),
        off: files.write(off, deactivate(), force=force),
    }
