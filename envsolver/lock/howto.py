"""The whole install path of what `make` writes, in one home: make's last lines, the header of each file it
writes and the README say the same.

Every path ends with the post-install hook: `envsolver install` runs it after linking (and after the PyPI part,
installed by its sha256); an environment made by conda-lock, conda or micromamba gets it from `envsolver hook
-n NAME`. Without the hook there is no TORCH_CUDA_ARCH_LIST, CUDA_HOME, CPATH or DS_ACCELERATOR, and no
DeepSpeed ops built for the target GPUs. Every word is shell-quoted, so a printed line runs as it reads.
"""

from __future__ import annotations

import shlex

# What pip is told for a lock's PyPI part: the locked files alone (no dependencies: the conda part holds them),
# each proven by its sha256, built in the env itself (its setuptools), with DeepSpeed's ops left to the hook.
PIP_FLAGS = ("--no-deps", "--require-hashes", "--no-build-isolation")


def _q(word: str) -> str:
    return shlex.quote(word)


def conda_lock_steps(lock: str, name: str) -> tuple[str, str]:
    """(envsolver's way, conda-lock's way) for a conda-lock.yml."""
    return (
        f"envsolver install {_q(lock)} -n {_q(name)}",
        f"conda-lock install -n {_q(name)} {_q(lock)} && envsolver hook -n {_q(name)}",
    )


def explicit_steps(lock: str, requirements: str | None, name: str) -> tuple[str, str]:
    """(envsolver's way, conda's way) for an explicit lock and its PyPI requirements file (None: it has none)."""
    conda = f"conda create -n {_q(name)} --file {_q(lock)}"
    if requirements is not None:
        conda += (
            f" && DS_BUILD_OPS=0 conda run -n {_q(name)} python -m pip install {' '.join(PIP_FLAGS)} "
            f"-r {_q(requirements)}"
        )
    return f"envsolver install {_q(lock)} -n {_q(name)}", f"{conda} && envsolver hook -n {_q(name)}"


def environment_steps(environment: str, name: str) -> str:
    """conda's way for an environment.yml (no lock: conda solves it at install)."""
    return f"conda env create -n {_q(name)} -f {_q(environment)} && envsolver hook -n {_q(name)}"


HOOK_WHY = "the hook sets TORCH_CUDA_ARCH_LIST, CUDA_HOME, CPATH, DS_ACCELERATOR and builds DeepSpeed's ops"
