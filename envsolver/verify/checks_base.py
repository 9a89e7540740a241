"""The types every check shares (Check, Context) and small readers of the probe's facts."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from envsolver.core.versions import DriverVersion
from envsolver.core.versions import driver as parse_driver
from envsolver.install import envkind
from envsolver.kb.model import KnowledgeBase
from envsolver.lock.lockfile import LockEntry
from envsolver.lock.pypi.record import PipRecord

Status = Literal["pass", "fail", "warn", "skip"]
# Every status, in the order the summary counts them.
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail", "skip")


@dataclass(frozen=True)
class Check:
    """One check's result: the one model the text line, the summary's count and the JSON all render."""

    id: str
    status: Status
    detail: str
    fix: str = ""

    @property
    def shown_fix(self) -> str | None:
        """The fix a report shows: a fail's or a warn's (what to do about it), else none (JSON null)."""
        return self.fix if self.fix and self.status in ("fail", "warn") else None


@dataclass(frozen=True)
class Context:
    facts: Mapping[str, Any]
    kb: KnowledgeBase
    lock_meta: Mapping[str, str] = field(default_factory=dict)
    lock_entries: tuple[LockEntry, ...] = ()
    deepspeed_wanted: bool = False
    gpu_test: bool = False
    lock_pip: tuple[PipRecord, ...] = ()  # the lock's PyPI part
    # name -> (standing, why) of each file of the lock's PyPI part in the prefix (install/pypi.standing: "in place",
    # "unrecorded", "other"); empty when no prefix is known
    pip_files: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def driver_version(ctx: Context) -> DriverVersion | None:
    version = (ctx.facts.get("driver") or {}).get("version")
    try:
        return parse_driver(version) if version else None
    except ValueError:
        return None


def torch_facts(ctx: Context) -> dict[str, Any]:
    value = ctx.facts.get("torch")
    return value if isinstance(value, dict) else {}


def prefix_of(ctx: Context) -> str:
    """The environment's prefix as a fix command names it: shell-quoted, or PREFIX when unknown."""
    prefix = (ctx.facts.get("python") or {}).get("prefix")
    return shlex.quote(str(prefix)) if prefix else "PREFIX"


def conda_env(ctx: Context) -> bool:
    """Whether a fix may put conda packages into the environment: it is a conda environment, or the probe's facts
    do not say (an older probe's). A pip venv or a system python gets fixes that work there (new_env_fix)."""
    return envkind.of_facts(ctx.facts) in ("conda", None)


def new_env_fix(ctx: Context, what: str, remake: bool = False) -> str:
    """The fix for WHAT, which comes as conda packages, in an environment that is no conda environment: a conda
    environment in a new directory from the lock (made first when REMAKE), never conda packages into this one."""
    kind = envkind.of_facts(ctx.facts) or "other"
    make = "envsolver make --gpu <your GPU> && " if remake else ""
    return (
        f"{prefix_of(ctx)} is {envkind.NAMES[kind]}, which conda packages ({what}) cannot go into: make a conda "
        f"environment in a new directory: {make}envsolver install conda-lock.yml -p NEW_PREFIX"
    )


def host_toolkit_fix(ctx: Context, what: str, cuda: str) -> str:
    """new_env_fix for a CUDA toolkit (nvcc, headers), after the way that keeps this environment: a CUDA toolkit of
    the host, named by CUDA_HOME (torch's extension builder takes nvcc and the headers from there)."""
    return (
        f"point CUDA_HOME at a CUDA {cuda} toolkit installed on the host (export CUDA_HOME=DIR, where DIR/bin/nvcc "
        f"and DIR/include are), or: {new_env_fix(ctx, what)}"
    )


# platform.machine() -> the conda platform a lock is made for
_PLATFORMS = {"x86_64": "linux-64", "aarch64": "linux-aarch64", "ppc64le": "linux-ppc64le"}


def remake_fix(ctx: Context, wanted: str = "driver, glibc and GPUs") -> str:
    """The fix for a lock that does not fit this host. Outside a Slurm job: remake it here (`make --gpu auto`).
    Inside a job (SLURM_JOB_ID in the probe's environment: a compute node, where a lock made for this one node
    is not what the cluster's jobs need, and where the running job cannot be mended): leave the node out of
    the job, or, from a login node, record the cluster's nodes again and make the cluster's lock."""
    env = ctx.facts.get("env") or {}
    if not env.get("SLURM_JOB_ID"):
        return "remake the lock for this host: envsolver make --gpu auto"
    node = env.get("SLURMD_NODENAME")
    partition = env.get("SLURM_JOB_PARTITION")
    where = (f"node {node}" if node else "this job's node") + (f" of partition {partition}" if partition else "")
    machine = (ctx.facts.get("python") or {}).get("machine")
    platform = _PLATFORMS.get(str(machine), "PLATFORM")
    made = "the cluster's lock" if ctx.lock_meta.get("envsolver_cluster") else "the lock"
    leave_out = f"submit the job with sbatch --exclude={node}, or " if node else ""
    into = prefix_of(ctx) if conda_env(ctx) else "NEW_PREFIX (a new directory: this environment is no conda one)"
    return (
        f"{where} does not have the {wanted} {made} was made for: {leave_out}on a login node record the "
        f"cluster's nodes and remake the lock: envsolver cluster init, then envsolver make --cluster "
        f"cluster.yaml, then envsolver install {platform}/conda-lock.yml -p {into}"
    )
