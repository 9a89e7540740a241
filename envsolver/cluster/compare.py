"""The checks `verify --cluster` makes on the login node, across partitions: for each partition, what one of its
nodes showed (the probe of its verify step: nvidia-smi, ldd, uname) against the prefix's lock (its metadata)
and against the cluster file. Pure: every input is an argument.

Each rule has one home. The driver and glibc floors are verify's own `host_vs_lock` check, run on the node's
facts alone (so a node and the lock are judged as `envsolver verify` judges a host); which kernels run on a
GPU is `covering` below; GPU names are the knowledge base's lookup. What is new here is the cluster's view: the
fix names the node and the partition, and says how to remake the cluster's lock or correct its file.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from envsolver.cluster.model import Cluster, Partition
from envsolver.cluster.parse import Probe, SmiRow
from envsolver.core.archlist import Arch, parse_arch_list
from envsolver.core.errors import UnknownGpuError
from envsolver.core.versions import DriverVersion, MajorMinor, leading_major_minor
from envsolver.core.versions import driver as parse_driver
from envsolver.kb.gpus import identify
from envsolver.kb.model import Gpu, KnowledgeBase
from envsolver.lock.lockfile import ARCH_LIST_KEY
from envsolver.resolve import driver as driver_rules
from envsolver.verify import gate
from envsolver.verify.checks_base import Check, Context
from envsolver.verify.checks_lock import check_host_vs_lock

IDS = ("lock_partition", "lock_driver", "lock_glibc", "lock_arch", "cluster_file")
# uname -m -> the platform a cluster file names
MACHINES = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}
CLUSTER_KEY = "envsolver_cluster"
PARTITIONS_KEY = "envsolver_cluster_partitions"


@dataclass(frozen=True)
class Scope:
    """What every partition is compared with: the cluster file (and its path as the user gave it), the prefix
    (for the fixes), and the lock metadata the prefix was installed from ({} when it keeps none)."""

    cluster: Cluster
    file: str
    prefix: str
    meta: Mapping[str, str]


def compare(kb: KnowledgeBase, scope: Scope, partition: Partition, node: Probe) -> tuple[Check, ...]:
    """The checks of IDS, in that order."""
    return (
        _lock_partition(scope, partition),
        _lock_driver(kb, scope, partition, node),
        _lock_glibc(kb, scope, partition, node),
        _lock_arch(kb, scope, partition, node),
        _cluster_file(kb, scope, partition, node),
    )


# -- the rules of arch lists --------------------------------------------------------------------------------------
# Source: CUDA C++ Programming Guide, "Binary Compatibility" and "PTX Compatibility"
# (https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#binary-compatibility): a cubin for compute
# capability X.y runs on devices of CC X.z with z >= y; PTX for X.y is compiled at load time (JIT) for any CC >=
# X.y. Arch-specific targets (9.0a) run on their own CC only; family-specific ones (10.0f) on the same major
# with a minor >= theirs (NVIDIA, "NVIDIA Blackwell and NVIDIA CUDA 12.9 Introduce Family-Specific Architecture
# Features", https://developer.nvidia.com/blog/nvidia-blackwell-and-nvidia-cuda-12-9-introduce-family-specific-architecture-features/);
# the PTX of either is not portable to other CCs.
Covered = Literal["sass", "ptx"]


def covering(archs: Sequence[Arch], cc: MajorMinor) -> tuple[Covered, str] | None:
    """How a GPU of compute capability `cc` runs kernels built for `archs`: ('sass', the entry) when one of them
    is machine code for it, ('ptx', the entry) when only PTX is (compiled at first launch), None when neither
    (verify/gate.covering, the one rule)."""
    found = gate.covering([str(a) for a in archs], (cc.major, cc.minor))
    return None if found is None else ("sass" if found[0] == "sass" else "ptx", found[1])


# -- the checks ---------------------------------------------------------------------------------------------------


def _q(text: str) -> str:
    return shlex.quote(text)


def _remake(scope: Scope, partition: Partition) -> str:
    """The commands that make the cluster's lock again and install it into the prefix."""
    return (
        f"envsolver make --cluster {_q(scope.file)} --out envs, then envsolver install "
        f"envs/{partition.platform}/conda-lock.yml -p {_q(scope.prefix)}"
    )


def _no_meta(check_id: str) -> Check:
    return Check(
        check_id,
        "skip",
        "no lock metadata: the prefix was not installed with `envsolver install` (pass --lock conda-lock.yml)",
    )


def _listed(meta: Mapping[str, str]) -> list[str]:
    return [name for name in meta.get(PARTITIONS_KEY, "").split(";") if name]


def _lock_partition(scope: Scope, partition: Partition) -> Check:
    meta = scope.meta
    if not meta:
        return _no_meta("lock_partition")
    made_for = meta.get(CLUSTER_KEY)
    fix = f"make the lock for every partition: {_remake(scope, partition)}"
    if not made_for:
        planned = meta.get("envsolver_gpus", "unknown GPUs")
        return Check(
            "lock_partition",
            "warn",
            f"the lock was not made for a cluster (envsolver make --cluster): it was planned for {planned}",
            fix,
        )
    if made_for != scope.cluster.name:
        return Check(
            "lock_partition",
            "warn",
            f"the lock was made for cluster {made_for!r}, not for cluster {scope.cluster.name!r}",
            fix,
        )
    listed = _listed(meta)
    if partition.name not in listed:
        return Check(
            "lock_partition",
            "warn",
            f"the lock was made for partitions {', '.join(listed) or 'none'} of cluster {made_for!r}, not for "
            f"{partition.name}",
            fix,
        )
    return Check("lock_partition", "pass", f"the lock was made for cluster {made_for!r}, {partition.name} among them")


def _driver_of(node: Probe) -> DriverVersion | None:
    """The node's driver (nvidia-smi prints it on every row; the oldest, should they differ)."""
    return min((row.driver for row in node.gpus), default=None)


def _node(node: Probe) -> str:
    return node.node or "the node"


def _lock_driver(kb: KnowledgeBase, scope: Scope, partition: Partition, node: Probe) -> Check:
    if not scope.meta:
        return _no_meta("lock_driver")
    version = _driver_of(node)
    if version is None:
        return Check("lock_driver", "skip", f"no driver seen on {_node(node)} ({node.smi_error})")
    judged = check_host_vs_lock(Context({"driver": {"version": str(version), "gpus": []}}, kb, scope.meta))
    floor = scope.meta.get("envsolver_driver_min_minor_compat", "unknown")
    solved = _solved_cuda(scope.meta)
    if judged.status == "pass":
        return Check(
            "lock_driver",
            "pass",
            f"driver {version} on {_node(node)} meets the lock's floor {floor}"
            + (f" and the CUDA {solved} it was solved for (__cuda)" if solved else ""),
        )
    if judged.status == "skip":  # what host_vs_lock could not compare: here only the driver was given it
        return Check(
            "lock_driver", "skip", f"the lock records no __cuda to compare driver {version} on {_node(node)} with"
        )
    return Check(
        "lock_driver",
        judged.status,
        f"{_node(node)}: {judged.detail}",
        f"upgrade the driver on {_node(node)} ({_needed(kb, scope.meta, version)}), or record the node's driver in "
        f"{_q(scope.file)} (partition {partition.name}: driver '{version}') and remake the lock for it: "
        f"{_remake(scope, partition)}",
    )


def _solved_cuda(meta: Mapping[str, str]) -> MajorMinor | None:
    key = next((k for k in meta if k.startswith("envsolver_virtual_") and k.endswith("_cuda")), None)
    return leading_major_minor(meta[key]) if key else None


def _needed(kb: KnowledgeBase, meta: Mapping[str, str], version: DriverVersion) -> str:
    floor = meta.get("envsolver_driver_min_minor_compat")
    try:
        if floor and version < parse_driver(floor):
            return f"driver >= {floor}"
    except ValueError:
        pass
    solved = _solved_cuda(meta)
    return driver_rules.full_driver_text(kb, solved) if solved else "a newer driver"


def _lock_glibc(kb: KnowledgeBase, scope: Scope, partition: Partition, node: Probe) -> Check:
    if not scope.meta:
        return _no_meta("lock_glibc")
    if node.glibc is None:
        return Check("lock_glibc", "skip", f"no glibc seen on {_node(node)} (ldd --version: {_line(node.ldd_text)})")
    key = next((k for k in scope.meta if k.startswith("envsolver_virtual_") and k.endswith("_glibc")), None)
    if key is None:
        return Check("lock_glibc", "skip", f"the lock records no glibc to compare {_node(node)}'s {node.glibc} with")
    judged = check_host_vs_lock(Context({"glibc": str(node.glibc)}, kb, scope.meta))
    if judged.status == "pass":
        return Check("lock_glibc", "pass", f"glibc {node.glibc} on {_node(node)} meets the lock's {scope.meta[key]}")
    return Check(
        "lock_glibc",
        judged.status,
        f"{_node(node)}: {judged.detail.replace('host glibc', 'glibc')}",
        f"record the node's glibc in {_q(scope.file)} (partition {partition.name}: glibc '{node.glibc}') and "
        f"remake the lock for it: {_remake(scope, partition)}",
    )


def _line(text: str) -> str:
    return " ".join(text.split())[:200] or "nothing"


def _gpu_label(row_name: str, cc: MajorMinor) -> str:
    return f"{row_name} (CC {cc})"


def _lock_arch(kb: KnowledgeBase, scope: Scope, partition: Partition, node: Probe) -> Check:
    if not scope.meta:
        return _no_meta("lock_arch")
    text = scope.meta.get(ARCH_LIST_KEY)
    if not text:
        return Check("lock_arch", "skip", f"the lock records no arch list ({ARCH_LIST_KEY})")
    try:
        archs = parse_arch_list(text)
    except ValueError as exc:
        return Check(
            "lock_arch",
            "fail",
            f"the lock's arch list {text!r} is malformed ({exc})",
            f"make the lock again: {_remake(scope, partition)}",
        )
    if not node.gpus:
        return Check("lock_arch", "skip", f"no GPU seen on {_node(node)} ({node.smi_error})")
    runs, jit, none, unread = [], [], [], []
    for row in dict.fromkeys((row.name, _cc(kb, row)) for row in node.gpus):
        name, cc = row
        if cc is None:
            unread.append(name)
            continue
        how = covering(archs, cc)
        if how is None:
            none.append(_gpu_label(name, cc))
        elif how[0] == "ptx":
            jit.append(f"{_gpu_label(name, cc)} has no kernels built for it, only the PTX of {how[1].split('+')[0]}")
        else:
            runs.append(f"{_gpu_label(name, cc)}: kernels built for {how[1]}")
    fix = (
        f"list the node's GPU under partition {partition.name} in {_q(scope.file)} (gpus:) and remake the lock: "
        f"{_remake(scope, partition)}"
    )
    if none:
        return Check(
            "lock_arch",
            "fail",
            f"{_node(node)}: the lock's arch list {text} has no kernel for {', '.join(none)} ('no kernel image is "
            "available for execution on the device')",
            fix,
        )
    if unread:
        return Check(
            "lock_arch",
            "warn",
            f"{_node(node)}: the compute capability of {', '.join(unread)} is unknown (its driver does not report one "
            "and envsolver knows neither its name nor its PCI device ID), so the lock's arch list "
            f"{text} cannot be checked against it",
            fix,
        )
    if jit:
        return Check(
            "lock_arch",
            "warn",
            f"{_node(node)}: {'; '.join(jit)} (in {text}), which the driver compiles (JIT) at first launch: slow "
            "the first time, and it fails where the driver is older than the toolkit that built it",
            fix,
        )
    return Check("lock_arch", "pass", f"{_node(node)}: {'; '.join(runs)} (the lock's arch list {text})")


def _gpu_of(kb: KnowledgeBase, row: SmiRow) -> Gpu | None:
    """The GPU a node's nvidia-smi printed, identified as `--gpu auto` identifies one (name, PCI device ID, the
    compute capability it reports); None when none of them is known."""
    try:
        return identify(kb, row.name, row.device_id, str(row.compute_cap) if row.compute_cap else None)
    except UnknownGpuError:
        return None


def _cc(kb: KnowledgeBase, row: SmiRow) -> MajorMinor | None:
    """The compute capability the node reports, else its GPU's as the knowledge base knows it."""
    gpu = _gpu_of(kb, row) if row.compute_cap is None else None
    return row.compute_cap or (gpu.compute_capability if gpu else None)


def _cluster_file(kb: KnowledgeBase, scope: Scope, partition: Partition, node: Probe) -> Check:
    where = _node(node)
    file = _q(scope.file)
    problems: list[str] = []
    if not node.gpus:
        problems.append(f"{where} shows no GPU ({node.smi_error})")
    listed = {g.key for g in partition.gpus}
    for name, gpu in dict.fromkeys((row.name, _gpu_of(kb, row)) for row in node.gpus):
        key = gpu.key if gpu else None
        if key is None:
            problems.append(f"{where} has {name}, which envsolver does not know")
        elif key not in listed:
            problems.append(
                f"{where} has {name}; {scope.file} lists {', '.join(partition.gpu_names)} for {partition.name}"
            )
    version = _driver_of(node)
    unknown = []
    if version is not None and partition.driver is None:
        unknown.append(f"the driver ({where} has {version})")
    elif version is not None and partition.driver is not None and version < partition.driver:
        problems.append(
            f"{where} has driver {version}, older than the {partition.driver} {scope.file} records for "
            f"{partition.name} (its oldest)"
        )
    if node.glibc is not None and partition.glibc is None:
        unknown.append(f"glibc ({where} has {node.glibc})")
    elif node.glibc is not None and partition.glibc is not None and node.glibc < partition.glibc:
        problems.append(
            f"{where} has glibc {node.glibc}, older than the {partition.glibc} {scope.file} records for "
            f"{partition.name}"
        )
    platform = MACHINES.get(node.machine or "")
    if node.machine and platform != partition.platform:
        problems.append(f"{where} is {node.machine}, and {scope.file} says {partition.name} is {partition.platform}")
    if unknown:
        problems.append(f"{scope.file} does not record {' nor '.join(unknown)}")
    if problems:
        return Check(
            "cluster_file",
            "warn",
            "; ".join(problems),
            f"redraft the file from the nodes: envsolver cluster init --out {file} --force (or edit partition "
            f"{partition.name} in {file}: its gpus, driver, glibc, platform); then remake the lock: envsolver make "
            f"--cluster {file}",
        )
    return Check(
        "cluster_file",
        "pass",
        f"{where} matches {partition.name} in {scope.file}: {', '.join(partition.gpu_names)}, driver "
        f"{version} (file: {partition.driver}), glibc {node.glibc} (file: {partition.glibc}), {partition.platform}",
    )
