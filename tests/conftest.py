from __future__ import annotations

import os
import shutil
import signal
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


def pytest_sessionstart(session: pytest.Session) -> None:
    """Tests never read PyPI's index through make: a closed port stands for it (every process the tests start
    inherits this), so a lock's PyPI part comes from the bundled snapshot, as on a machine without network.
    tests/test_pins.py serves a real simple page from a local index to test the live path."""
    os.environ.setdefault("ENVSOLVER_PYPI_INDEX", "http://127.0.0.1:9/simple")


def pytest_configure(config: pytest.Config) -> None:
    """The Ctrl-C tests send SIGINT to this process and to processes it starts. A runner started as a background
    job of a script (`pytest &`) inherits SIGINT ignored, and so would every process the tests start (an ignored
    signal stays ignored across exec), so none of them would be interrupted: give this process Python's handler
    back. Processes it starts then get the default disposition, and Python's handler, as from a terminal."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
