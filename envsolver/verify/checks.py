"""Checks: small pure functions over the probe's facts (and the KB, and the lock when given).

Each returns a Check with a stable id, a status (pass, fail, warn, skip), a detail and, for fail and warn,
the exact fix. A failed prerequisite makes its dependents skip. The hook's pre-flight is the subset BUILD, run
over the same probe's facts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from envsolver.verify.checks_base import Check, Context
from envsolver.verify.checks_deepspeed import check_deepspeed_ops, check_op_libraries
from envsolver.verify.checks_host import (
    check_driver,
    check_gpus,
    check_headers,
    check_host_compiler,
    check_nvcc,
    check_pip_conda_mix,
    check_prefix_toolkit,
    check_shm,
    check_torch_cuda_arch_list,
)
from envsolver.verify.checks_lock import check_host_vs_lock, check_lock_drift
from envsolver.verify.checks_torch import (
    check_arch_coverage,
    check_cuda_available,
    check_cuda_version_match,
    check_cudnn,
    check_driver_supports_torch_cuda,
    check_extensions_cache,
    check_libcudart,
    check_nccl,
    check_torch_cuda_build,
    check_torch_import,
)

__all__ = ["BUILD", "CHECKS", "HOST_ONLY", "IDS", "LATE_FACTS", "Check", "Context", "run"]

# id, function, prerequisites (ids that must pass or warn)
CHECKS: tuple[tuple[str, Callable[[Context], Check], tuple[str, ...]], ...] = (
    ("driver", check_driver, ()),
    ("gpus", check_gpus, ("driver",)),
    ("torch_import", check_torch_import, ()),
    ("torch_cuda_build", check_torch_cuda_build, ("torch_import",)),
    ("driver_supports_torch_cuda", check_driver_supports_torch_cuda, ("driver", "torch_cuda_build")),
    ("cuda_available", check_cuda_available, ("driver", "torch_cuda_build")),
    ("arch_coverage", check_arch_coverage, ("cuda_available",)),
    ("prefix_toolkit", check_prefix_toolkit, ()),
    ("nvcc", check_nvcc, ()),
    ("cuda_version_match", check_cuda_version_match, ("nvcc", "torch_cuda_build")),
    ("headers", check_headers, ()),
    ("op_libraries", check_op_libraries, ()),
    ("libcudart", check_libcudart, ("torch_cuda_build",)),
    ("cudnn", check_cudnn, ("torch_cuda_build",)),
    ("nccl", check_nccl, ("torch_cuda_build",)),
    ("host_compiler", check_host_compiler, ()),
    ("torch_cuda_arch_list", check_torch_cuda_arch_list, ()),
    ("deepspeed_ops", check_deepspeed_ops, ("torch_import",)),
    ("extensions_cache", check_extensions_cache, ()),
    ("pip_conda_mix", check_pip_conda_mix, ()),
    ("lock_drift", check_lock_drift, ()),
    ("host_vs_lock", check_host_vs_lock, ()),
    ("shm", check_shm, ()),
)
IDS = tuple(c[0] for c in CHECKS)
# Checks that read only host facts (no torch, no DeepSpeed): they can run before torch has imported. run() hands
# them the facts without LATE_FACTS, so what they say on the probe's first line is what they say on its last.
# (Not among them: torch_cuda_arch_list, which reads DeepSpeed's version when the list is unset; nvcc and
# prefix_toolkit, whose fixes pin torch's CUDA.)
HOST_ONLY = (
    "driver",
    "gpus",
    "headers",
    "host_compiler",
    "pip_conda_mix",
    "lock_drift",
    "host_vs_lock",
    "shm",
)
# What the probe learns after its first (--stream) line: torch's and DeepSpeed's facts, the GPU test.
LATE_FACTS = ("torch", "deepspeed", "gpu_test")

# The checks an op build depends on: the hook's pre-flight, before any compiler runs.
BUILD = (
    "torch_import",
    "torch_cuda_build",
    "prefix_toolkit",
    "nvcc",
    "cuda_version_match",
    "headers",
    "op_libraries",
    "host_compiler",
    "torch_cuda_arch_list",
)


def run(ctx: Context, only: tuple[str, ...] | None = None) -> list[Check]:
    """Every check in order, or only the named ones (an empty tuple names none); a failed or skipped
    prerequisite skips its dependents."""
    results: dict[str, Check] = {}
    host = replace(ctx, facts={k: v for k, v in ctx.facts.items() if k not in LATE_FACTS})
    for check_id, function, needs in CHECKS:
        blocked = [n for n in needs if n in results and results[n].status in ("fail", "skip")]
        if blocked:
            results[check_id] = Check(check_id, "skip", f"skipped: {', '.join(blocked)} did not pass")
            continue
        try:
            results[check_id] = function(host if check_id in HOST_ONLY else ctx)
        except Exception as exc:  # a check must never take verify down; say what broke instead
            results[check_id] = Check(
                check_id,
                "fail",
                f"the check itself failed on these facts: {type(exc).__name__}: {exc}",
                "report it with `envsolver verify --json` output attached",
            )
    return [results[i] for i in IDS if only is None or i in only]
