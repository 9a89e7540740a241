"""The `dist` extra's launchers (pyproject.toml): torch, whose torchrun runs verify --nccl's worker and the job
scripts' ranks (gloo on the CPU), and DeepSpeed, whose own launcher `cluster sbatch --launch deepspeed` runs. The
`test` extra leaves them out (PyPI's torch is its CUDA build, gigabytes); without them their tests skip, saying so.

Found without importing them (importing torch takes seconds, in every xdist worker). A test whose target python
need not have torch runs one without it (python_without_torch)."""

from __future__ import annotations

import importlib.util
import venv
from pathlib import Path

import pytest

INSTALL = "python3 -m pip install -e '.[dist]'"
HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None

needs_torch = pytest.mark.skipif(
    not HAS_TORCH, reason=f"torch is not installed in this python: `{INSTALL}` installs it (the dist extra)"
)
needs_deepspeed = pytest.mark.skipif(
    not HAS_DEEPSPEED,
    reason=f"DeepSpeed is not installed in this python: `{INSTALL}` installs it (the dist extra) for its launcher",
)


def python_without_torch(where: Path) -> Path:
    """An interpreter with the standard library only (a venv of the base interpreter without pip; this one's
    site-packages are not in it): a real target environment without torch, for the tests whose point is what the
    probe reads from the host (nvidia-smi), where the probe's torch child would only spend its import (1-2 s of
    CPU). It takes a few milliseconds."""
    venv.EnvBuilder(symlinks=True, with_pip=False).create(where)
    return where / "bin" / "python"
