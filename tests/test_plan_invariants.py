"""Properties every plan must have, checked for every GPU in the KB under several drivers and sources.

These are the guides' failure modes turned into invariants: a CPU-only torch (every plan pins a CUDA build),
an arch list with an arch nvcc cannot build (`nvcc fatal: Unsupported gpu architecture 'compute_70'`), and
the unsatisfiable `cudatoolkit-dev=12.x`.
"""

from __future__ import annotations

import pytest
import rattler

from envsolver.core.archlist import parse_arch_list
from envsolver.core.errors import ConflictError
from envsolver.kb import KnowledgeBase, default_kb
from envsolver.resolve.archs import cc_for_toolkit
from envsolver.resolve.plan import Plan
from tests.conftest import plan_for

TARGETS = [
    pytest.param(gpu.key, driver, source, id=f"{gpu.key}-{driver or 'current'}-{source}")
    for gpu in default_kb().gpus
    for driver in (None, "535.104.05", "580.65.06")
    for source in ("conda-forge", "pytorch")
]


def _plans(kb: KnowledgeBase, gpu: str, driver: str | None, source: str) -> Plan | None:
    options: dict[str, object] = {"gpus": (gpu,), "source": source}
    if driver:
        options["driver"] = driver
    try:
        return plan_for(kb, **options)
    except ConflictError:
        return None


@pytest.mark.parametrize(("gpu", "driver", "source"), TARGETS)
def test_invariants(kb: KnowledgeBase, gpu: str, driver: str | None, source: str) -> None:
    plan = _plans(kb, gpu, driver, source)
    if plan is None:
        return  # conflicts are covered by test_resolve; here only plans that exist are checked
    toolkit = kb.toolkit(plan.cuda_version)
    assert toolkit is not None and toolkit.sm is not None
    # The arch list only names archs this nvcc can build, and covers every target GPU.
    archs = parse_arch_list(plan.torch_cuda_arch_list)
    assert all(a.cc.sm in toolkit.sm for a in archs)
    assert archs[-1].ptx and not any(a.ptx for a in archs[:-1])
    for g in plan.gpus:
        assert cc_for_toolkit(kb, g.compute_capability, toolkit.version) in [a.cc for a in archs]
    # torch is pinned to a CUDA build string: a CPU build can never be chosen.
    torch_spec = next(s for s in plan.specs if s.name == "pytorch")
    assert torch_spec.build is not None and "cuda" in torch_spec.build and "cpu" not in torch_spec.build
    assert torch_spec.version == f"=={plan.torch_version}"
    # nvcc and every header package are in, cudatoolkit-dev never is.
    names = {s.name for s in plan.specs}
    assert {h.package for h in kb.op_headers} | {"cuda-nvcc", "ninja"} <= names
    assert {lib.package for lib in kb.op_libraries} <= names  # the -dev packages with the libraries ops link
    assert "cudatoolkit-dev" not in names and "cudatoolkit" not in names
    # The driver, when given, runs the plan's CUDA (fully, or through minor-version compatibility).
    if plan.driver is not None:
        major = kb.cuda_major(plan.cuda_version.major)
        assert major is not None and plan.driver >= major.mvc_driver
        assert (plan.compatibility == "full") == (toolkit.driver is not None and plan.driver >= toolkit.driver)
    else:
        # No --driver: the solve assumes a driver that fully supports the plan's own CUDA, no newer one.
        assert plan.virtual_packages["__cuda"] == str(plan.cuda_version)
    assert plan.virtual_packages["__cuda_arch"] == str(min(g.compute_capability for g in plan.gpus))
    assert plan.source == source
    # The channels the records really come from: pytorch-channel torch runs on nvidia-channel CUDA packages.
    assert plan.channels == (("conda-forge",) if source == "conda-forge" else ("pytorch", "nvidia", "conda-forge"))
    # Every spec parses as the solve call's own (strict) parser reads it; strict mode rejects a build glob
    # with a dot, such as '*cuda12.1*' (InvalidMatchSpecError in every legacy make before this test).
    for spec in plan.specs:
        rattler.MatchSpec(str(spec), strict=True)


def test_every_kb_gpu_has_a_plan_with_a_current_driver(kb: KnowledgeBase) -> None:
    """With a current driver and conda-forge, every GPU has a stack except the old Jetsons: sm_62 and sm_72
    need a CUDA 12 tegra build, and conda-forge's tegra builds target only sm_87 and newer."""
    missing = [g.key for g in kb.gpus if _plans(kb, g.key, "580.65.06", "conda-forge") is None]
    assert missing == ["jetson-tx2", "jetson-xavier"]
