"""Issue 21 item 6: inside a Slurm job (a compute node) a lock that does not fit the node is not mended with
`envsolver make --gpu auto` (a lock for that one node): the fix leaves the node out of the job, or remakes the
cluster's lock from a login node. Outside a job the fix stays as it was. (The lab test runs the suggestion:
tests/cluster/test_fixes_lab.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from envsolver.kb import KnowledgeBase
from tests.test_verify import FLOOR_META, REMAKE, edit, healthy, result

IN_JOB = {"SLURM_JOB_ID": "4711", "SLURMD_NODENAME": "gpu07", "SLURM_JOB_PARTITION": "h200"}


def in_job(doc: dict[str, Any], **env: str) -> dict[str, Any]:
    return edit("env", {**doc["env"], **env})(doc)


def test_outside_a_job_the_fix_remakes_the_lock_here(kb: KnowledgeBase) -> None:
    check = result(kb, "host_vs_lock", edit("driver.version", "575.51.02")(healthy()), lock_meta=FLOOR_META)
    assert (check.status, check.fix) == ("fail", REMAKE), check


@pytest.mark.parametrize("cluster", [True, False], ids=["cluster-lock", "host-lock"])
def test_inside_a_job_the_fix_is_made_from_a_login_node(kb: KnowledgeBase, cluster: bool) -> None:
    meta = {**FLOOR_META, "envsolver_cluster": "lab"} if cluster else FLOOR_META
    doc = in_job(edit("driver.version", "575.51.02")(healthy()), **IN_JOB)
    check = result(kb, "host_vs_lock", doc, lock_meta=meta)
    assert check.status == "fail", check
    assert "make --gpu auto" not in check.fix, check.fix
    assert check.fix.startswith("node gpu07 of partition h200 does not have the driver, glibc and GPUs"), check.fix
    assert ("the cluster's lock was made for" in check.fix) is cluster, check.fix
    assert "sbatch --exclude=gpu07" in check.fix, check.fix
    prefix = doc["python"]["prefix"]
    assert check.fix.endswith(
        "envsolver cluster init, then envsolver make --cluster cluster.yaml, then envsolver install "
        f"linux-64/conda-lock.yml -p {prefix}"
    ), check.fix


def test_inside_a_job_a_gpu_torch_has_no_kernel_for_gets_the_same_way_out(kb: KnowledgeBase) -> None:
    doc = in_job(healthy(), **IN_JOB)
    doc["torch"]["arch_list"] = ["sm_80"]
    check = result(kb, "arch_coverage", doc)
    assert check.status == "fail", check
    assert "make --gpu auto" not in check.fix and "sbatch --exclude=gpu07" in check.fix, check.fix
    assert "does not have the GPUs the lock was made for" in check.fix, check.fix


def test_the_probe_reports_the_slurm_job() -> None:
    from envsolver.verify import probe

    assert {"SLURM_JOB_ID", "SLURMD_NODENAME", "SLURM_JOB_PARTITION"} <= set(probe.ENV_KEYS)
