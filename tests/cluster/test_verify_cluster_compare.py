"""The cross-partition checks of `verify --cluster` (envsolver/cluster/compare.py): a partition of the cluster
file, the prefix's lock metadata and what one of its nodes showed, compared. The nodes' facts are real probes
captured in the lab (tests/data/slurm/probe-*.txt), edited where a case needs another driver, glibc or GPU; the
metadata is what `make --cluster tests/data/cluster/mixed.yaml --offline` recorded (linux-64)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envsolver.cluster import compare
from envsolver.cluster.file import load
from envsolver.cluster.model import Cluster
from envsolver.cluster.parse import Probe, parse_probe
from envsolver.kb import KnowledgeBase, default_kb
from envsolver.verify.checks_base import Check

DATA = Path(__file__).resolve().parents[1] / "data"
MIXED = DATA / "cluster" / "mixed.yaml"

# custom_metadata of the linux-64 lock that `envsolver make --cluster tests/data/cluster/mixed.yaml --offline`
# wrote (2026-11-30), less the per-partition sentences.
META = {
    "envsolver_cluster": "mixed",
    "envsolver_cluster_partitions": "v100;a100;h100",
    "envsolver_compatibility": "minor",
    "envsolver_compute_capabilities": "7.0;8.0;9.0",
    "envsolver_cuda_version": "12.9",
    "envsolver_driver": "535.104.05",
    "envsolver_driver_min_full": "575.51.03",
    "envsolver_driver_min_minor_compat": "525.60.13",
    "envsolver_gpus": "NVIDIA V100 (7.0); NVIDIA A100 (8.0); NVIDIA H100 (9.0)",
    "envsolver_torch": "2.10.0 (CUDA 12.9 build cuda129*)",
    "envsolver_torch_cuda_arch_list": "7.0;8.0;9.0+PTX",
    "envsolver_virtual_linux-64_cuda": "12.2",
    "envsolver_virtual_linux-64_glibc": "2.28",
}


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return default_kb()


@pytest.fixture(scope="module")
def cluster(kb: KnowledgeBase) -> Cluster:
    return load(MIXED, kb)


def probe(name: str, *edits: tuple[str, str]) -> Probe:
    text = (DATA / "slurm" / f"probe-{name}.txt").read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    return parse_probe(text)


def scope(cluster: Cluster, meta: dict[str, str] | None = None) -> compare.Scope:
    return compare.Scope(cluster, "cluster.yaml", "/shared/envs/train", META if meta is None else meta)


def run(
    kb: KnowledgeBase, cluster: Cluster, partition: str, node: Probe, meta: dict[str, str] | None = None
) -> dict[str, Check]:
    part = cluster.partition(partition)
    assert part is not None
    checks = compare.compare(kb, scope(cluster, meta), part, node)
    assert [c.id for c in checks] == list(compare.IDS)
    return {c.id: c for c in checks}


def test_a_node_that_matches_its_partition_and_the_lock_passes_every_check(kb: KnowledgeBase, cluster: Cluster) -> None:
    checks = run(kb, cluster, "v100", probe("v100-gpu01"))
    assert {i: c.status for i, c in checks.items()} == dict.fromkeys(compare.IDS, "pass")
    assert "gpu01" in checks["lock_driver"].detail and "535.104.05" in checks["lock_driver"].detail
    assert "7.0" in checks["lock_arch"].detail and "sm_70" not in checks["lock_arch"].detail


OLD_DRIVER = ("535.104.05", "450.80.02")


# (case id, partition, probe, its edits, metadata change, check id, status, phrases in the detail, phrases in the fix)
CASES = [
    (
        "driver below the lock's floor",
        "v100",
        "v100-gpu01",
        [OLD_DRIVER],
        {},
        "lock_driver",
        "fail",
        ["gpu01", "450.80.02 is older than the lock's floor 525.60.13"],
        ["upgrade the driver on gpu01", "envsolver make --cluster cluster.yaml"],
    ),
    (
        "driver above the floor but below the CUDA the lock was solved for",
        "v100",
        "v100-gpu01",
        [("535.104.05", "530.30.02")],
        {},
        "lock_driver",
        "fail",
        ["__cuda=12.2", "530.30.02 fully supports CUDA <= 12.1"],
        ["upgrade the driver on gpu01"],
    ),
    (
        "a node older than the file says",
        "v100",
        "v100-gpu01",
        [OLD_DRIVER],
        {},
        "cluster_file",
        "warn",
        ["driver 450.80.02", "older than the 535.104.05 cluster.yaml records for v100"],
        ["envsolver cluster init --out cluster.yaml --force", "envsolver make --cluster cluster.yaml"],
    ),
    (
        "glibc older than the lock's",
        "v100",
        "v100-gpu01",
        [("GLIBC 2.36-9+deb12u14) 2.36", "GLIBC 2.17) 2.17")],
        {},
        "lock_glibc",
        "fail",
        ["glibc 2.17 is older than the lock's 2.28"],
        ["envsolver make --cluster cluster.yaml"],
    ),
    (
        "glibc older than the file says",
        "v100",
        "v100-gpu01",
        [("GLIBC 2.36-9+deb12u14) 2.36", "GLIBC 2.17) 2.17")],
        {},
        "cluster_file",
        "warn",
        ["glibc 2.17", "older than the 2.28"],
        ["--force"],
    ),
    (
        "a GPU the lock's arch list has no kernel for",
        "v100",
        "v100-gpu01",
        [],
        {"envsolver_torch_cuda_arch_list": "8.0;9.0+PTX"},
        "lock_arch",
        "fail",
        ["Tesla V100-SXM2-16GB (CC 7.0)", "8.0;9.0+PTX"],
        ["envsolver make --cluster cluster.yaml", "envsolver install"],
    ),
    (
        "a GPU of the same major and a higher minor runs the lower one's kernels",
        "a100",
        "a100-gpu02",
        [("NVIDIA A100-SXM4-80GB, 550.54.15, 8.0", "NVIDIA A40, 550.54.15, 8.6")],
        {},
        "lock_arch",
        "pass",
        ["NVIDIA A40 (CC 8.6): kernels built for 8.0"],
        [],
    ),
    (
        "a GPU only the +PTX entry covers (JIT at first launch)",
        "h100",
        "h100-gpu03",
        [("NVIDIA H100 80GB HBM3, 570.133.20, 9.0", "NVIDIA B200, 570.133.20, 10.0")],
        {},
        "lock_arch",
        "warn",
        ["NVIDIA B200 (CC 10.0)", "PTX of 9.0", "JIT"],
        ["envsolver make --cluster cluster.yaml"],
    ),
    (
        "an arch-specific entry runs on its own CC only",
        "h100",
        "h100-gpu03",
        [("NVIDIA H100 80GB HBM3, 570.133.20, 9.0", "NVIDIA B200, 570.133.20, 10.0")],
        {"envsolver_torch_cuda_arch_list": "9.0a;10.0a"},
        "lock_arch",
        "pass",
        ["kernels built for 10.0a"],
        [],
    ),
    (
        "a GPU the file does not list for the partition",
        "h100",
        "h100-gpu03",
        [("NVIDIA H100 80GB HBM3, 570.133.20, 9.0", "NVIDIA B200, 570.133.20, 10.0")],
        {},
        "cluster_file",
        "warn",
        ["NVIDIA B200", "cluster.yaml lists h100 for h100"],
        ["edit partition h100 in cluster.yaml"],
    ),
    (
        "a node of another architecture",
        "v100",
        "v100-gpu01",
        [("== envsolver-probe: uname -m\nx86_64", "== envsolver-probe: uname -m\naarch64")],
        {},
        "cluster_file",
        "warn",
        ["aarch64", "linux-64"],
        ["--force"],
    ),
    (
        "a node that shows no GPU",
        "v100",
        "cpu-cpu01",
        [],
        {},
        "cluster_file",
        "warn",
        ["cpu01 shows no GPU", "nvidia-smi is not installed"],
        ["--force"],
    ),
    (
        "a partition the lock was not made for",
        "v100",
        "v100-gpu01",
        [],
        {"envsolver_cluster_partitions": "a100;h100"},
        "lock_partition",
        "warn",
        ["not for v100", "a100, h100"],
        ["envsolver make --cluster cluster.yaml --out", "envsolver install", "-p /shared/envs/train"],
    ),
    (
        "a lock made for another cluster",
        "v100",
        "v100-gpu01",
        [],
        {"envsolver_cluster": "other"},
        "lock_partition",
        "warn",
        ["cluster 'other'", "not for cluster 'mixed'"],
        ["envsolver make --cluster cluster.yaml"],
    ),
    (
        "a lock made without a cluster file",
        "v100",
        "v100-gpu01",
        [],
        {"envsolver_cluster": "", "envsolver_cluster_partitions": ""},
        "lock_partition",
        "warn",
        ["not made for a cluster", "NVIDIA V100 (7.0); NVIDIA A100 (8.0); NVIDIA H100 (9.0)"],
        ["envsolver make --cluster cluster.yaml"],
    ),
]


@pytest.mark.parametrize(
    ("partition", "node", "edits", "meta", "check_id", "status", "details", "fixes"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_cross_checks(
    kb: KnowledgeBase,
    cluster: Cluster,
    partition: str,
    node: str,
    edits: list[tuple[str, str]],
    meta: dict[str, str],
    check_id: str,
    status: str,
    details: list[str],
    fixes: list[str],
) -> None:
    changed = {k: v for k, v in {**META, **meta}.items() if v}
    check = run(kb, cluster, partition, probe(node, *edits), changed)[check_id]
    assert check.status == status, check
    for phrase in details:
        assert phrase in check.detail, (phrase, check.detail)
    for phrase in fixes:
        assert phrase in check.fix, (phrase, check.fix)
    assert bool(check.fix) == (status in ("warn", "fail"))


def test_without_lock_metadata_the_lock_checks_skip_and_say_why(kb: KnowledgeBase, cluster: Cluster) -> None:
    checks = run(kb, cluster, "v100", probe("v100-gpu01"), {})
    for check_id in ("lock_partition", "lock_driver", "lock_glibc", "lock_arch"):
        assert checks[check_id].status == "skip"
        assert "no lock metadata" in checks[check_id].detail and "--lock" in checks[check_id].detail
    assert checks["cluster_file"].status == "pass"


def test_facts_the_node_did_not_give_skip_their_checks(kb: KnowledgeBase, cluster: Cluster) -> None:
    checks = run(kb, cluster, "v100", probe("cpu-cpu01", ("GLIBC 2.36-9+deb12u14) 2.36", "nothing")))
    assert checks["lock_driver"].status == "skip" and "no driver" in checks["lock_driver"].detail
    assert checks["lock_arch"].status == "skip" and "no GPU" in checks["lock_arch"].detail
    assert checks["lock_glibc"].status == "skip" and "glibc" in checks["lock_glibc"].detail


def test_a_lock_without_glibc_or_cuda_skips_saying_only_that(kb: KnowledgeBase, cluster: Cluster) -> None:
    """lock_glibc and lock_driver ask host_vs_lock about one fact each: a lock that records none of it is a skip
    naming that, not host_vs_lock's list of what it was not given (the node's GPUs, its driver)."""
    meta = {k: v for k, v in META.items() if not k.endswith(("_glibc", "_cuda"))}
    checks = run(kb, cluster, "v100", probe("v100-gpu01"), meta)
    for check_id, fact in (("lock_glibc", "glibc"), ("lock_driver", "__cuda")):
        check = checks[check_id]
        assert check.status == "skip" and f"the lock records no {fact}" in check.detail, check
        assert "none visible" not in check.detail and "none found" not in check.detail and not check.fix, check


def test_a_file_that_does_not_know_the_driver_or_glibc_is_a_warning(kb: KnowledgeBase) -> None:
    from envsolver.cluster.file import parse

    unknown = parse(
        "cluster: mixed\npartitions:\n  - {name: v100, gpus: [v100], driver: null, platform: linux-64, glibc: null}\n",
        kb,
        "cluster.yaml",
    )
    check = run(kb, unknown, "v100", probe("v100-gpu01"))["cluster_file"]
    assert check.status == "warn"
    assert "does not record the driver (gpu01 has 535.104.05)" in check.detail
    assert "nor glibc (gpu01 has 2.36)" in check.detail


def test_the_sass_and_ptx_rules(kb: KnowledgeBase) -> None:
    from envsolver.core.archlist import parse_arch_list
    from envsolver.core.versions import MajorMinor

    archs = parse_arch_list("7.0;8.0;9.0a;10.0f;12.0+PTX")
    assert compare.covering(archs, MajorMinor(7, 5)) == ("sass", "7.0")
    assert compare.covering(archs, MajorMinor(8, 9)) == ("sass", "8.0")
    assert compare.covering(archs, MajorMinor(9, 0)) == ("sass", "9.0a")
    assert compare.covering(archs, MajorMinor(10, 3)) == ("sass", "10.0f")
    assert compare.covering(archs, MajorMinor(12, 1)) == ("sass", "12.0+PTX")
    assert compare.covering(archs, MajorMinor(13, 0)) == ("ptx", "12.0+PTX")
    assert compare.covering(archs, MajorMinor(6, 1)) is None
    assert compare.covering(parse_arch_list("9.0a+PTX"), MajorMinor(10, 0)) is None  # arch-specific PTX stays put


# Issue 24: a node on a driver too old for compute_cap (the probe asked again without it) or printing [N/A]: its
# GPU's CC is the knowledge base's, found by name, else by PCI device ID; unknown, the arch check says so.
A100_OLD = ("NVIDIA A100-SXM4-80GB, 550.54.15, 8.0", "name, pci.device_id, driver_version\nX, 0x20B210DE, 550.54.15")


@pytest.mark.parametrize(
    ("name", "device", "status", "said"),
    [
        ("NVIDIA A100-SXM4-80GB", "[N/A]", "pass", "NVIDIA A100-SXM4-80GB (CC 8.0): kernels built for 8.0"),
        ("NVIDIA A100 Mystery Edition", "0x20B210DE", "pass", "NVIDIA A100 Mystery Edition (CC 8.0)"),
        ("NVIDIA Mystery 9000", "0x000110DE", "warn", "the compute capability of NVIDIA Mystery 9000 is unknown"),
    ],
    ids=["by-name", "by-device-id", "unknown"],
)
def test_a_gpu_whose_driver_reports_no_cc_is_checked_at_the_kbs(
    kb: KnowledgeBase, cluster: Cluster, name: str, device: str, status: str, said: str
) -> None:
    row = A100_OLD[1].replace("X, 0x20B210DE", f"{name}, {device}")
    checks = run(kb, cluster, "a100", probe("a100-gpu02", (A100_OLD[0], row)))
    assert checks["lock_arch"].status == status and said in checks["lock_arch"].detail, checks["lock_arch"]
    # the cluster file's check finds the GPU the same way: listed for a100, or unknown to envsolver
    known = checks["cluster_file"].status == "pass"
    assert known == (status == "pass"), checks["cluster_file"]
