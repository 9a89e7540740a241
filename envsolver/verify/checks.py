"""Checks: small pure functions over the probe's facts (and the KB, and the lock when given).

Each returns a Check with a stable id, a status (pass, fail, warn, skip), a detail and, for fail and warn,
the exact fix. A failed prerequisite makes its dependents skip. The hook's pre-flight is the subset BUILD, run
over the same probe's facts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from envsolver.verify.checks_base import Check, Context
from envsolver.verify.checks_deepspeed import check_deepspeed_ops, check_op_libraries
from envsolver.verify.checks_host import (
    check_driver,
    check_gpus,
    check_headers,
    check_host_compiler,
    check_nvcc,
    check_prefix_toolkit,
    check_shm,
    check_torch_cuda_arch_list,
)
from envsolver.verify.checks_lock import check_host_vs_lock, check_lock_drift
from envsolver.verify.checks_pypi import check_pip_conda_mix
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

__all__ = ["BUILD", "CHECKS", "HOST_ONLY", "IDS", "LATE_FACTS", "READS", "Check", "Context", "probe_needs", "run"]

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
# What the probe learns in its children (torch's, DeepSpeed's) and from the GPU test, after its first (--stream)
# line: each costs seconds (torch's import), and the probe starts none that no selected check reads (probe_needs).
LATE_FACTS = ("torch", "deepspeed", "gpu_test")
# The late facts each check reads (a fix's text counts: nvcc's and prefix_toolkit's pin torch's CUDA;
# torch_cuda_arch_list reads DeepSpeed's version when the list is unset). run() hands a check these and no other
# late fact (nor the probe's error beside one, `torch_error`), so a check that reads another sees none, as it
# would where the probe did not learn it; tests/test_verify_host_only.py holds each check to this list.
READS: dict[str, tuple[str, ...]] = {
    "driver": (),
    "gpus": (),
    "torch_import": ("torch",),
    "torch_cuda_build": ("torch",),
    "driver_supports_torch_cuda": ("torch",),
    "cuda_available": ("torch",),
    "arch_coverage": ("torch",),
    "prefix_toolkit": ("torch",),
    "nvcc": ("torch",),
    "cuda_version_match": ("torch",),
    "headers": (),
    "op_libraries": ("deepspeed",),
    "libcudart": ("torch",),
    "cudnn": ("torch",),
    "nccl": ("torch",),
    "host_compiler": (),
    "torch_cuda_arch_list": ("deepspeed",),
    "deepspeed_ops": ("torch", "deepspeed", "gpu_test"),
    "extensions_cache": ("torch",),
    "pip_conda_mix": (),
    "lock_drift": (),
    "host_vs_lock": (),
    "shm": (),
}
# Checks that read only host facts: they can run before torch has imported (what they say on the probe's first
# line is what they say on its last), and a selection of them alone needs no child of the probe at all.
HOST_ONLY = tuple(i for i in IDS if not READS[i])


def probe_needs(only: Iterable[str] | None = None) -> frozenset[str]:
    """The late facts the checks ONLY names (None: every check; an empty selection names none) read, with their
    prerequisites' (a failed prerequisite skips a check): what the probe must learn for them. An id that is no
    check's needs them all."""
    prerequisites = {check_id: needs for check_id, _, needs in CHECKS}
    todo = list(IDS if only is None else only)
    seen: set[str] = set()
    while todo:
        check_id = todo.pop()
        if check_id not in seen:
            seen.add(check_id)
            todo.extend(prerequisites.get(check_id, ()))
    return frozenset(fact for check_id in seen for fact in READS.get(check_id, LATE_FACTS))


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
    "pip_conda_mix",  # ops built against PyPI's torch where the lock put conda's would be built against the wrong one
)


def run(ctx: Context, only: tuple[str, ...] | None = None) -> list[Check]:
    """Every check in order, or only the named ones (an empty tuple names none); a failed or skipped
    prerequisite skips its dependents. Each check sees the late facts it READS and no other."""
    results: dict[str, Check] = {}
    views: dict[tuple[str, ...], Context] = {}  # the facts as a check that reads these late facts sees them
    for check_id, function, needs in CHECKS:
        blocked = [n for n in needs if n in results and results[n].status in ("fail", "skip")]
        if blocked:
            results[check_id] = Check(check_id, "skip", f"skipped: {', '.join(blocked)} did not pass")
            continue
        reads = READS.get(check_id, LATE_FACTS)
        if reads not in views:
            hidden = {f for fact in LATE_FACTS if fact not in reads for f in (fact, fact + "_error")}
            views[reads] = replace(ctx, facts={k: v for k, v in ctx.facts.items() if k not in hidden})
        try:
            results[check_id] = function(views[reads])
        except Exception as exc:  # a check must never take verify down; say what broke instead
            results[check_id] = Check(
                check_id,
                "fail",
                f"the check itself failed on these facts: {type(exc).__name__}: {exc}",
                "report it with `envsolver verify --json` output attached",
            )
    return [results[i] for i in IDS if only is None or i in only]
