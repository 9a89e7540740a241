"""The step outputs captured in the Slurm lab (tests/data/cluster-verify/, see its README) and the judge that
reads them as `verify --cluster` does: verify's checks (envsolver/verify/run.checks_of) over a node's facts, the
captured prefix's lock metadata (DATA/env) on the login side."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envsolver.cluster import step
from envsolver.kb import KnowledgeBase
from envsolver.verify import run
from envsolver.verify.checks_base import Check

DATA = Path(__file__).resolve().parents[1] / "data" / "cluster-verify"
ENV = DATA / "env"  # the captured prefix's lock metadata, as `envsolver install` keeps it
PREFIX = "/tmp/cv-lab/work/env"  # the prefix as the nodes saw it
# The checks the lab's stand-in python answers (as tests/cluster/test_verify_cluster.py asks for them).
ONLY = (
    "driver",
    "gpus",
    "torch_import",
    "torch_cuda_build",
    "driver_supports_torch_cuda",
    "cuda_available",
    "arch_coverage",
    "host_vs_lock",
)


def captured(name: str) -> str:
    return (DATA / f"step-{name}.txt").read_text()


def judge(kb: KnowledgeBase, only: tuple[str, ...] = ONLY) -> step.Judge:
    def checks(facts: Mapping[str, Any]) -> list[Check]:
        return run.checks_of(facts, kb, ENV, None, False, only)

    return checks


def read(kb: KnowledgeBase, text: str) -> step.Reply:
    return step.read(text, PREFIX, judge(kb))
