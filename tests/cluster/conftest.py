"""The Slurm lab (tests/slurmlab.py) as a session fixture: started once, stopped by PID at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slurmlab import SlurmLab, missing_binaries, running


@pytest.fixture(scope="session")
def slurm_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmLab]:
    missing = missing_binaries()
    if missing:
        pytest.skip(
            f"Slurm is not installed here (missing {', '.join(missing)}); as root, scripts/install_system_deps.sh "
            "installs it"
        )
    with running(lambda: tmp_path_factory.mktemp("slurmlab")) as lab:
        yield lab


@pytest.fixture
def lab(slurm_lab: SlurmLab, monkeypatch: pytest.MonkeyPatch) -> SlurmLab:
    """The lab, with SLURM_CONF pointing at it for this test (so envsolver's own sinfo/srun reach it)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_lab.conf))
    return slurm_lab


@pytest.fixture(autouse=True)
def _settled_lab(request: pytest.FixtureRequest) -> None:
    """A test of the lab starts with every node usable (SlurmLab.settle): a node a test before it took down, or
    one its slurmd has not re-registered yet, would otherwise fail a test that has nothing to do with it."""
    if "slurm_lab" in request.fixturenames:
        request.getfixturevalue("slurm_lab").settle()
