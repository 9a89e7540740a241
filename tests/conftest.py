from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envsolver.errors import EnvsolverError
from envsolver.inputs import Options, build_target
from envsolver.kb import KnowledgeBase, default_kb
from envsolver.plan import Plan
from envsolver.resolve import resolve

DATA = Path(__file__).parent / "data"
KB_DATA = Path(__file__).parent.parent / "envsolver" / "kb" / "data"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """GPU tests run only where an NVIDIA driver answers (the GPU machine)."""
    if shutil.which("nvidia-smi") and Path("/proc/driver/nvidia/version").exists():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kb() -> KnowledgeBase:
    return default_kb()


def plan_for(kb: KnowledgeBase, **options: object) -> Plan:
    inputs = build_target(Options(**options), kb)  # type: ignore[arg-type]
    return resolve(inputs.target, kb)


def error_for(kb: KnowledgeBase, **options: object) -> EnvsolverError:
    with pytest.raises(EnvsolverError) as info:
        plan_for(kb, **options)
    return info.value
