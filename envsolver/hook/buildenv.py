"""The environment the hook builds and probes in: what `conda activate` and the hook's activation scripts set,
applied to a base environment, without a shell. Pure."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envsolver.hook import activation


def toolkit_found(facts: Mapping[str, Any]) -> bool:
    """Whether the probe found the CUDA toolkit in the prefix (nvcc and every op header): only then do the
    activation scripts set CUDA_HOME and CPATH."""
    toolkit = facts.get("prefix_toolkit")
    return isinstance(toolkit, dict) and toolkit.get("complete") is True


def environ_for_build(
    prefix: Path, arch_list: str, target: str, base: Mapping[str, str], toolkit: bool
) -> dict[str, str]:
    """`base` as the activated env sees it: CONDA_PREFIX and PREFIX/bin first on PATH (conda's activation), then
    the hook's settings (CUDA_HOME and CPATH only with `toolkit`). Raises ValueError on a malformed arch list."""
    env = dict(base)
    env["CONDA_PREFIX"] = str(prefix)
    env["PATH"] = f"{prefix / 'bin'}{os.pathsep}{env['PATH']}" if env.get("PATH") else str(prefix / "bin")
    for name, parts in activation.settings(arch_list, target, toolkit).items():
        env[name] = activation.resolve(parts, env)
    return env
